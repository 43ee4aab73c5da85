"""Decoder judges: perplexity, KL, next-token and greedy agreement on corpus windows, through compare."""

from __future__ import annotations

import json

import numpy as np
import pytest
from decoder_models import decoder_pair, word_corpus

from onnxlite.errors import UsageError

from conftest import run_cli

WINDOW, STRIDE = 48, 16


def hand_log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    fp32, noisy, hf = decoder_pair(root)
    corpus = word_corpus(root / "corpus.txt")
    return {"fp32": fp32, "noisy": noisy, "hf": hf, "corpus": corpus}


# -- the records against a hand computation (pure) -----------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("support", [64, 7])
def test_records_give_the_hand_perplexity_and_kl(support):
    from onnxlite.evaluation import decoder_records as records

    rng = np.random.default_rng(0)
    window, stride, vocab = 12, 4, 64
    ids = rng.integers(0, vocab, size=window)
    ref_logits = rng.normal(size=(window, vocab)) * 3
    cand_logits = ref_logits + rng.normal(size=(window, vocab))
    ref = records.next_token_record(ref_logits, ids, stride, support)
    cand = records.next_token_record(cand_logits, ids, stride, ref)

    positions = np.arange(stride - 1, window - 1)
    lr, lc = hand_log_softmax(ref_logits[positions]), hand_log_softmax(cand_logits[positions])
    targets = ids[positions + 1]
    assert ref.shape[0] == window - stride
    np.testing.assert_allclose(records.columns(cand).target, lc[np.arange(len(positions)), targets], rtol=1e-12)
    full_kl = np.sum(np.exp(lr) * (lr - lc), axis=-1)
    kl = records.kl_per_token(ref, cand)
    if support >= vocab:
        np.testing.assert_allclose(kl, full_kl, rtol=1e-10, atol=1e-12)
    else:   # the rest merged into one bucket: never more than the full KL, and not zero
        assert np.all(kl <= full_kl + 1e-12) and np.all(kl > 0)
    np.testing.assert_array_equal(records.columns(cand).top1, np.argmax(cand_logits[positions], axis=-1))
    np.testing.assert_allclose(records.kl_per_token(ref, ref), 0.0, atol=1e-15)


@pytest.mark.unit
def test_greedy_agreement_counts_tokens_to_the_first_difference():
    from onnxlite.evaluation import decoder_records as records
    from onnxlite.protocols import MetricContext
    from onnxlite_plugins.metrics.decoder import GreedyAgreement

    reference = records.greedy_record([[5, 6, 7, 8], [1, 2, 2], [9, 9, 9, 9]], 4)   # row 2 stopped after 3
    candidate = records.greedy_record([[5, 6, 0, 8], [1, 2, 2], [3, 9, 9, 9]], 4)
    np.testing.assert_array_equal(records.prefix_lengths(reference, candidate), [2, 4, 0])
    assert GreedyAgreement().compute(reference, candidate, MetricContext(output="greedy")) == pytest.approx(6 / 12)
    longer = records.greedy_record([[1, 2, 2, 4]], 4)     # the reference stopped, the candidate went on
    assert records.prefix_lengths(reference[1:2], longer)[0] == 3


# -- corpus windows ---------------------------------------------------------------------------------------------

@pytest.mark.unit
def test_windows_score_each_token_once_after_the_stride():
    from onnxlite.data.corpus import WindowPlan, cut_windows

    docs = [list(range(100, 130)), list(range(200, 240))]
    plan = WindowPlan(16, 6)
    ids = cut_windows(docs, plan, separator=7, where="corpus")
    stream = [*docs[0], 7, *docs[1]]
    assert ids.shape == ((len(stream) - 16) // 10 + 1, 16)
    scored = np.concatenate([w[plan.stride:] for w in ids])
    np.testing.assert_array_equal(scored, stream[plan.stride:plan.stride + scored.size])   # each token once
    with pytest.raises(UsageError, match="too short for one window of 80"):
        cut_windows(docs, WindowPlan(80, 8), separator=7, where="corpus")


@pytest.mark.unit
def test_documents_are_blank_line_blocks_or_lines_and_split_by_document(tmp_path):
    from onnxlite.data.corpus import plan_windows, read_documents, split_documents

    blocks = tmp_path / "blocks.txt"
    blocks.write_text("one two\nthree\n\n\nfour five\n  \nsix\n")
    assert read_documents(blocks) == ["one two three", "four five", "six"]
    lines = tmp_path / "lines.txt"
    lines.write_text("a b\nc d\ne\n")
    assert read_documents(lines) == ["a b", "c d", "e"]
    calibrate, held = split_documents(read_documents(blocks), 0.5)
    assert calibrate == ["one two three", "four five"] and held == ["six"]
    assert plan_windows(None, None, 256).window == 256 and plan_windows(None, None, 4096).stride == 256
    with pytest.raises(UsageError, match="stride=64"):
        plan_windows(64, 64, None)


def test_gensim_news_text_is_plain_documents():
    from onnxlite.data.gensim_text import documents, plain_wiki

    news = documents("news", 5)
    assert len(news) == 5 and all(len(d) > 200 and "\n" not in d for d in news)
    wiki = documents("wiki", 2)
    assert len(wiki) == 2 and wiki[0].startswith("Anarchism is a political philosophy")
    assert not any(mark in d for d in wiki for mark in ("'''", "[[", "==", "{{"))
    text = plain_wiki("== History ==\n'''Anarchism''' is a [[political philosophy]] that advocates "
                      "self-governed societies.\n{{cite web|url=x}}\n[[Category:Politics]]")
    assert text == "Anarchism is a political philosophy that advocates self-governed societies."


# -- decoders through compare --------------------------------------------------------------------------------

def _compare(models, *candidates, **kw):
    from onnxlite.evaluation.compare import compare

    return compare(str(models["fp32"]), [str(c) for c in candidates], data=str(models["corpus"]),
                   data_options={"window": WINDOW, "stride": STRIDE, "prompt_tokens": 8, "new_tokens": 12}, **kw)


def test_perplexity_and_kl_match_a_hand_computation_on_the_models_logits(models):
    from onnxlite.data.corpus import corpus_windows, plan_windows, read_documents
    from onnxlite.decoding import DecoderSession, load_tokenizer

    result = _compare(models, models["noisy"], metrics=["perplexity", "kl", "next_token_agreement"])
    windows = corpus_windows(read_documents(models["corpus"]), load_tokenizer(models["fp32"]),
                             plan_windows(WINDOW, STRIDE, None), "corpus")
    nll, kl, agree = [], [], []
    ref_session, cand_session = DecoderSession(models["fp32"]), DecoderSession(models["noisy"])
    for ids in windows.ids:
        row = ids[None]
        lr = hand_log_softmax(ref_session.forward(row, np.ones_like(row))[0][0])
        lc = hand_log_softmax(cand_session.forward(row, np.ones_like(row))[0][0])
        for p in range(STRIDE - 1, WINDOW - 1):
            nll.append(-lc[p, ids[p + 1]])
            kl.append(np.sum(np.exp(lr[p]) * (lr[p] - lc[p])))
            agree.append(np.argmax(lr[p]) == np.argmax(lc[p]))
    found = result.candidates[0].metrics
    assert len(nll) == windows.scored_tokens == result.settings["scored_tokens"]
    assert found["text.perplexity"] == pytest.approx(float(np.exp(np.mean(nll))), rel=1e-9)
    assert found["text.kl"] == pytest.approx(float(np.mean(kl)), rel=1e-6)   # exact: vocabulary <= support
    assert found["text.next_token_agreement"] == pytest.approx(float(np.mean(agree)))
    assert 0 < found["text.next_token_agreement"] < 1
    ref_ppl = result.reference_metrics["text.perplexity"]
    assert result.candidates[0].drops["text.perplexity"] == pytest.approx(found["text.perplexity"] / ref_ppl - 1)
    assert (result.settings["window"], result.settings["stride"]) == (WINDOW, STRIDE)


def test_identical_decoder_agrees_fully_and_a_perturbed_one_does_not(models):
    result = _compare(models, models["fp32"], models["noisy"], max_drop=["perplexity=5%", "kl=0.01",
                                                                        "top1_agreement=90%"])
    same, noisy = result.candidates
    # a classifier's top1_agreement, on a decoder, is its teacher-forced next-token agreement
    assert same.budgets["text.next_token_agreement"] == pytest.approx(0.9)
    assert same.metrics["text.next_token_agreement"] == 1.0 and same.metrics["greedy.greedy_agreement"] == 1.0
    assert same.metrics["text.kl"] == 0.0 and same.drops["text.perplexity"] == 0.0 and same.passed
    assert noisy.metrics["text.next_token_agreement"] < 1.0 and noisy.metrics["text.kl"] > 0
    assert noisy.metrics["greedy.greedy_agreement"] < 1.0
    assert any(n.startswith("greedy: ") and "of 12 new tokens" in n for n in noisy.notes)
    for c in (same, noisy):   # every budgeted drop has an interval over the windows
        assert {"text.perplexity", "text.kl"} <= set(c.intervals)
        assert c.intervals["text.kl"]["samples"] == result.samples
    # windows that all agree fully are means over tokens, not a rate of samples: no Clopper-Pearson slack
    assert same.intervals["text.next_token_agreement"]["upper"] == 0.0 and not result.unresolved


def test_greedy_agreement_matches_the_two_models_greedy_runs(models):
    from onnxlite.data.corpus import corpus_windows, plan_windows, read_documents
    from onnxlite.decoding import DecoderSession, generation_defaults, load_tokenizer

    result = _compare(models, models["noisy"], metrics=["greedy_agreement"])
    windows = corpus_windows(read_documents(models["corpus"]), load_tokenizer(models["fp32"]),
                             plan_windows(WINDOW, STRIDE, None), "corpus")
    defaults = generation_defaults(models["fp32"])
    prompts = windows.ids[:, :8].tolist()
    runs = [DecoderSession(models[k]).greedy(prompts, 12, eos_token_id=defaults.eos_token_id,
                                             pad_token_id=defaults.pad_token_id).tokens for k in ("fp32", "noisy")]
    prefixes = []
    for ref, cand in zip(*runs):
        n = 0
        while n < 12 and n < len(ref) and n < len(cand) and ref[n] == cand[n]:
            n += 1
        prefixes.append(12 if list(ref) == list(cand) else n)
    assert result.candidates[0].metrics["greedy.greedy_agreement"] == pytest.approx(np.mean(prefixes) / 12)


def test_transformers_folder_is_a_reference_too(models):
    from onnxlite.evaluation.compare import compare

    result = compare(str(models["hf"]), [str(models["fp32"])], data=str(models["corpus"]),
                     data_options={"window": WINDOW, "stride": STRIDE}, metrics=["perplexity", "kl"])
    assert result.framework == "pytorch"
    assert result.candidates[0].drops["text.perplexity"] == pytest.approx(0.0, abs=1e-4)
    assert result.candidates[0].metrics["text.kl"] < 1e-6


@pytest.fixture
def cli(capsys):
    from onnxlite.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as done:
            main([str(a) for a in args])
        return done.value.code or 0, capsys.readouterr().err

    return run


def test_cli_judges_decoders(models):
    done = run_cli("compare", str(models["fp32"]), str(models["noisy"]), "--data", str(models["corpus"]),
                   "--data-option", f"window={WINDOW}", "--data-option", f"stride={STRIDE}",
                   "--metric", "perplexity", "--metric", "kl", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["primary_metric"] == "text.perplexity" and payload["settings"]["window"] == WINDOW
    assert payload["candidates"][0]["metrics"]["text.kl"] > 0


def test_cli_refuses_an_output_metric_on_a_decoder_and_a_short_corpus(models, tmp_path, cli):
    base = ["compare", models["fp32"], models["noisy"], "--data-option", f"window={WINDOW}"]
    code, err = cli(*base, "--data", models["corpus"], "--max-drop", "pooled_cosine_mean=1%")
    assert code == 2 and "pooled_cosine_mean" in err and "decoder" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    code, err = cli(*base, "--data", models["corpus"], "--metric", "cosine_mean")
    assert code == 2 and "a decoder language model is judged by" in err
    short = tmp_path / "short.txt"
    short.write_text("the cat\n")
    code, err = cli(*base, "--data", short)
    assert code == 2 and "too short for one window" in err and len(err.strip().splitlines()) == 1


def test_decoder_metric_on_a_model_that_is_not_a_decoder_is_one_line(tmp_path, cli):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 3), dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logits"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])], [weight])
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    code, err = cli("compare", path, path, "--max-drop", "perplexity=5%")
    assert code == 2 and "perplexity" in err and "not one" in err
    code, err = cli("compare", path, path, "--metric", "kl")
    assert code == 2 and "decoder language models" in err
