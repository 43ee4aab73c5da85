"""A decoder's trials are cached on the input model and the corpus (search.decoder_cache): a re-run of the same
``lighten`` takes every candidate's figures from the cache and picks the same winner."""

from __future__ import annotations

import json

import numpy as np
import pytest


@pytest.mark.unit
def test_source_and_corpus_keys_follow_what_decides_the_figures(tmp_path):
    from onnxlite.search.config import LightenConfig
    from onnxlite.search.decoder_cache import corpus_hash, source_hash

    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    config = LightenConfig()
    first = source_hash(folder, config)
    assert first == source_hash(folder, config) and first is not None
    assert source_hash(folder, LightenConfig(exporter="torchscript")) != first   # another export, another key
    (folder / "model.safetensors").write_bytes(b"other weights")
    assert source_hash(folder, config) != first
    assert source_hash("model.py:lm", config) is None   # built in code: the export's own keys stay

    def judge(records: float, ids: int):
        where = tmp_path / f"judge{records}-{ids}"
        where.mkdir()
        (where / "judge.json").write_text(json.dumps({"inputs": ["input_ids"], "outputs": ["text"]}))
        np.savez(where / "judge.npz", ref_0=np.full((2, 3), records), in_0=np.full((2, 4), ids, dtype=np.int64))
        return where

    # the reference's float records are not the corpus; its token windows are
    assert corpus_hash(judge(1.0, 5)) == corpus_hash(judge(1.0000001, 5)) != corpus_hash(judge(1.0, 6))


@pytest.mark.slow
def test_a_decoder_rerun_takes_every_candidate_from_the_cache_and_picks_the_same_winner(tmp_path):
    from decoder_models import word_corpus
    from llm_models import tiny_llama

    import onnxlite

    hf = tiny_llama(tmp_path / "hf")
    corpus = word_corpus(tmp_path / "corpus.txt", documents=24)
    cache = tmp_path / "cache"
    kwargs = {"data": str(corpus), "max_drop": "kl=0.02", "strategies": ["weightonly"], "objective": "size",
              "runs": 3, "workers": 2, "cache_dir": str(cache), "data_options": {"window": 32}}
    first = onnxlite.lighten(hf, tmp_path / "a", **kwargs)
    again = onnxlite.lighten(hf, tmp_path / "b", **kwargs)
    failed = [r.name for r in first.candidates if r.status == "failed"]   # a failure is tried again, never cached
    assert first.settings["trials"]["ran"] > len(failed)
    ran = again.settings["trials"]
    assert ran["ran"] == len(failed) and ran["cached"] == first.settings["trials"]["ran"] - len(failed), ran
    assert again.settings["cache"]["hits"] == ran["cached"]
    assert first.winner is not None and again.winner is not None, first.message
    assert again.winner.name == first.winner.name
    figures = {r.name: r.drops for r in first.candidates}
    assert {r.name: r.drops for r in again.candidates} == figures
