"""`onnxlite compare` and the Judge API on small real models: a digits classifier, a tiny BERT, a PyTorch reference."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import make_plugin_dist, run_cli, save_graph


def _mlp_onnx(path: Path, weights: list[np.ndarray], biases: list[np.ndarray]) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    inits, nodes, current = [], [], "x"
    for i, (w, b) in enumerate(zip(weights, biases)):
        inits += [numpy_helper.from_array(w.astype(np.float32), f"W{i}"),
                  numpy_helper.from_array(b.astype(np.float32), f"b{i}")]
        out = "logits" if i == len(weights) - 1 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [current, f"W{i}", f"b{i}"], [out], name=f"fc{i}"))
        if out != "logits":
            nodes.append(helper.make_node("Relu", [out], [f"r{i}"], name=f"relu{i}"))
            current = f"r{i}"
    graph = helper.make_graph(nodes, "digits",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", weights[0].shape[0]])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    save_graph(graph, path, ir_version=9)
    return path


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> dict[str, Path]:
    """An sklearn-trained digits MLP as ONNX, its dynamic int8 version, a damaged copy, and held-out data with
    labels."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    clf = MLPClassifier((64,), max_iter=200, random_state=0).fit(x[:1200], y[:1200])
    folder = tmp_path_factory.mktemp("digits")
    fp32 = _mlp_onnx(folder / "digits.onnx", clf.coefs_, clf.intercepts_)
    int8 = folder / "digits_int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    noisy = [w + np.random.default_rng(1).standard_normal(w.shape) * np.std(w) * 1.5 for w in clf.coefs_]
    damaged = _mlp_onnx(folder / "damaged.onnx", noisy, clf.intercepts_)
    data = folder / "heldout.npz"
    np.savez(data, x=x[1200:], labels=y[1200:].astype(np.int64))
    return {"fp32": fp32, "int8": int8, "damaged": damaged, "data": data, "clf": clf, "x": x[1200:], "y": y[1200:]}


def _ort(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, {n: feeds[n] for n in names})


# -- the classifier ------------------------------------------------------------------------------------------

def test_classifier_metrics_against_labels_and_the_reference(digits):
    import onnxlite

    result = onnxlite.compare(digits["fp32"], [digits["int8"], digits["damaged"]], data=digits["data"])
    assert result.primary_metric == "logits.accuracy"
    assert set(result.metrics) == {"logits.accuracy", "logits.top1_agreement", "logits.top5_agreement",
                                   "logits.cosine_mean", "logits.cosine_min"}
    # The reference accuracy is the fp32 model's, checked here independently with sklearn's own predictions.
    sk_accuracy = float(np.mean(digits["clf"].predict(digits["x"]) == digits["y"]))
    assert result.reference_metrics["logits.accuracy"] == pytest.approx(sk_accuracy, abs=1e-9)
    int8, damaged = result.candidates
    cand_logits = _ort(digits["int8"], {"x": digits["x"]})[0]
    ref_logits = _ort(digits["fp32"], {"x": digits["x"]})[0]
    assert int8.metrics["logits.accuracy"] == pytest.approx(float(np.mean(cand_logits.argmax(1) == digits["y"])))
    assert int8.metrics["logits.top1_agreement"] == pytest.approx(
        float(np.mean(cand_logits.argmax(1) == ref_logits.argmax(1))))
    # Drops: reference minus candidate for accuracy, 1 - value for similarities and agreements.
    assert int8.drops["logits.accuracy"] == pytest.approx(
        result.reference_metrics["logits.accuracy"] - int8.metrics["logits.accuracy"])
    assert int8.drops["logits.cosine_min"] == pytest.approx(1 - int8.metrics["logits.cosine_min"])
    assert 0 < int8.drops["logits.cosine_min"] < 0.01  # int8 really changed the logits, a little
    assert damaged.drops["logits.accuracy"] > int8.drops["logits.accuracy"]
    assert damaged.metrics["logits.top1_agreement"] < int8.metrics["logits.top1_agreement"]
    assert int8.passed is None and result.passed is None  # no budget, no verdict
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["candidates"][0]["name"] == "digits_int8"
    assert payload["candidates"][0]["format"] == "qoperator"


def test_judge_scores_many_candidates_from_one_reference_run(digits):
    from onnxlite.evaluation.judge import Judge

    judge = Judge.from_reference(digits["fp32"], digits["data"], metrics=["top1_agreement", "cosine_min"],
                                 max_drop="1%")
    assert judge.primary == "logits.top1_agreement"
    assert judge.samples == len(digits["y"])
    same = judge.score(digits["fp32"])
    assert same["logits.top1_agreement"] == 1.0 and same["logits.cosine_min"] == pytest.approx(1.0)
    verdict = judge.evaluate(digits["damaged"])
    assert verdict.passed is False and "logits.top1_agreement" in verdict.failures[0]
    # The Judge also takes outputs computed elsewhere (lighten reuses it this way).  Same batches as the
    # judge: dynamic int8 picks activation scales per batch, so batching changes the numbers.
    x = judge.feeds["x"]
    outputs = {"logits": np.concatenate([_ort(digits["int8"], {"x": x[i:i + judge.batch_size]})[0]
                                         for i in range(0, len(x), judge.batch_size)])}
    assert judge.score_outputs(outputs) == pytest.approx(judge.score(digits["int8"]))


def test_cli_max_drop_pass_fail_exit_codes_json_and_report(digits, tmp_path):
    fp32, int8, damaged, data = (str(digits[k]) for k in ("fp32", "int8", "damaged", "data"))
    ok = run_cli("compare", fp32, int8, "--data", data, "--max-drop", "2%", "--json")
    assert ok.returncode == 0, ok.stderr
    payload = json.loads(ok.stdout)
    assert payload["passed"] is True and payload["candidates"][0]["budgets"] == {"logits.accuracy": 0.02}

    report = tmp_path / "report"
    bad = run_cli("compare", fp32, int8, damaged, "--data", data, "--max-drop", "0.02", "--report", str(report))
    assert bad.returncode == 1, bad.stderr
    assert "FAIL damaged" in bad.stderr and "FAIL digits_int8" not in bad.stderr
    assert "logits.accuracy" in bad.stdout  # the table
    saved = json.loads((report / "report.json").read_text())
    assert saved["kind"] == "compare" and saved["primary_metric"] == "logits.accuracy"
    assert [r["status"] for r in saved["rows"]] == ["reference", "ok", "failed"]
    assert (report / "report.html").stat().st_size > 0 and "Drops" in (report / "report.md").read_text()

    # A budget on one named metric: int8 logits are not bit-identical, so a zero budget on cosine_min fails.
    strict = run_cli("compare", fp32, int8, "--data", data, "--max-drop", "cosine_min=0", "--json")
    assert strict.returncode == 1
    assert json.loads(strict.stdout)["candidates"][0]["failures"][0].startswith("logits.cosine_min")


def test_cli_bad_input_is_one_line_and_exit_2(digits, tmp_path):
    fp32, int8 = str(digits["fp32"]), str(digits["int8"])
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, pixels=np.zeros((4, 64), np.float32))
    short = tmp_path / "short.npz"
    np.savez(short, x=np.zeros((4, 10), np.float32))
    unreadable = tmp_path / "broken.onnx"
    unreadable.write_bytes(b"not a model")
    cases = [
        (["--data", str(wrong)], "no entry for input 'x'"),
        (["--data", str(short)], "axis 1"),
        (["--metric", "top1_agreemnt"], "did you mean 'top1_agreement'"),
        (["--max-drop", "lots"], "--max-drop"),
        (["--metric", "pooled_cosine_mean"], "does not apply"),
    ]
    for extra, message in cases:
        result = run_cli("compare", fp32, int8, *extra)
        assert result.returncode == 2, (extra, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    result = run_cli("compare", fp32, str(unreadable))
    assert result.returncode == 2 and "broken.onnx: not a readable ONNX model" in result.stderr


# -- confidence: the interval of every drop, and budgets at its one-sided bound (issue 11) ----------------------

def test_accuracy_interval_matches_exact_binomial_bounds_on_the_lost_samples(digits):
    from scipy.stats import binomtest

    import onnxlite

    result = onnxlite.compare(digits["fp32"], [digits["damaged"]], data=digits["data"], confidence=0.9)
    damaged = result.candidates[0]
    # Every metric's drop has an interval, budget or not.
    assert set(damaged.intervals) == set(result.metrics) and result.confidence == 0.9
    # The reference computation, independent of onnxlite: the samples fp32 got right and the damaged model wrong.
    ref_right = _ort(digits["fp32"], {"x": digits["x"]})[0].argmax(1) == digits["y"]
    cand_right = _ort(digits["damaged"], {"x": digits["x"]})[0].argmax(1) == digits["y"]
    n, lost, gained = len(digits["y"]), int(np.sum(ref_right & ~cand_right)), int(np.sum(~ref_right & cand_right))
    assert lost > 10   # the damage is real
    interval = damaged.intervals["logits.accuracy"]
    assert interval["method"] == "exact" and interval["samples"] == n
    assert interval["estimate"] == pytest.approx((lost - gained) / n)
    upper = binomtest(lost, n, alternative="less").proportion_ci(confidence_level=0.9, method="exact").high
    two = binomtest(lost, n).proportion_ci(confidence_level=0.9, method="exact")
    assert interval["upper"] == pytest.approx(upper, abs=1e-9)
    assert interval["high"] == pytest.approx(two.high, abs=1e-9)
    assert interval["low"] == pytest.approx(two.low - gained / n, abs=1e-9)


def test_cli_budget_holds_at_the_one_sided_bound_and_confidence_moves_it(digits, tmp_path):
    import onnxlite

    fp32, int8, data = str(digits["fp32"]), str(digits["int8"]), str(digits["data"])
    key = "logits.cosine_mean"
    bounds = {c: onnxlite.compare(fp32, [int8], data=data, confidence=c).candidates[0].intervals[key]["upper"]
              for c in (0.6, 0.99)}
    drop = onnxlite.compare(fp32, [int8], data=data, confidence=None).candidates[0].drops[key]
    assert drop < bounds[0.6] < bounds[0.99]
    # A budget between the two bounds: above the measured drop, so the old rule passed it.
    budget = (bounds[0.6] + bounds[0.99]) / 2
    strict = run_cli("compare", fp32, int8, "--data", data, "--max-drop", f"cosine_mean={budget!r}",
                     "--confidence", "0.99", "--json")
    assert strict.returncode == 1, strict.stderr
    payload = json.loads(strict.stdout)
    assert payload["confidence"] == 0.99 and payload["passed"] is False
    cand = payload["candidates"][0]
    assert cand["intervals"][key]["upper"] == pytest.approx(bounds[0.99])
    assert cand["failures"] == [f"{key}: drop {drop:.4g}, 99% bound {bounds[0.99]:.4g} > max {budget:.4g}"]
    loose = run_cli("compare", fp32, int8, "--data", data, "--max-drop", f"cosine_mean={budget!r}",
                    "--confidence", "0.6", "--report", str(tmp_path / "r"))
    assert loose.returncode == 0, loose.stderr
    # The table shows the bound under each drop, in 80 columns; the report shows the two-sided interval too.
    assert f"≤{bounds[0.6]:.4f}" in loose.stdout
    drops_md = (tmp_path / "r" / "report.md").read_text()
    assert "60% interval" in drops_md and f"≤{bounds[0.6]:.4g} (max {budget:.4g})" in drops_md
    narrow = run_cli("compare", fp32, int8, str(digits["damaged"]), "--data", data, "--max-drop", "2%",
                     env={"COLUMNS": "80"})
    assert narrow.returncode == 1
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80, narrow.stdout
    bad = run_cli("compare", fp32, int8, "--confidence", "1.5")
    assert bad.returncode == 2 and "--confidence" in bad.stderr and "Traceback" not in bad.stderr


def test_a_budget_the_samples_cannot_resolve_is_said_and_held_to_the_measured_drop(digits):
    fp32, data = str(digits["fp32"]), str(digits["data"])
    # 20 samples: one is worth 5%, more than a 1% budget on agreement, and even no change cannot prove 1%.
    out = run_cli("compare", fp32, fp32, "--data", data, "--samples", "20", "--max-drop", "top1_agreement=1%")
    assert out.returncode == 0, out.stderr
    assert "cannot resolve the logits.top1_agreement budget" in out.stdout and "299 samples" in out.stdout
    payload = json.loads(run_cli("compare", fp32, fp32, "--data", data, "--samples", "20", "--max-drop",
                                 "top1_agreement=1%", "--json").stdout)
    found = payload["unresolved"]["logits.top1_agreement"]
    assert found["samples_needed"] == 299 and found["sample_worth"] == pytest.approx(0.05)
    # held to the measured drop (0 here), though its exact bound (about 14%) is far above the budget
    assert payload["passed"] is True and payload["candidates"][0]["intervals"]["logits.top1_agreement"]["upper"] > 0.1


# -- a tiny transformer -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> dict[str, Path]:
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    bert = BertModel(config).eval()

    class Wrapper(torch.nn.Module):  # transformers 5 moved positional arguments; name them
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
            return out.last_hidden_state, out.pooler_output

    model = Wrapper().eval()
    folder = tmp_path_factory.mktemp("bert")
    fp32 = folder / "bert.onnx"
    ids = torch.randint(0, 120, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.int64)
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "last_hidden_state": {0: "batch", 1: "seq"}, "pooler_output": {0: "batch"}}
    torch.onnx.export(model, (ids, mask), str(fp32), input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state", "pooler_output"], dynamic_axes=axes, opset_version=17,
                      dynamo=False)
    int8 = folder / "bert_int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8, per_channel=True)
    return {"fp32": fp32, "int8": int8}


def test_token_embeddings_use_pooled_cosine_over_real_tokens(tiny_bert):
    import onnxlite
    from onnxlite.evaluation.judge import Judge

    result = onnxlite.compare(tiny_bert["fp32"], [tiny_bert["int8"], tiny_bert["fp32"]], samples=16, batch_size=4)
    assert result.primary_metric == "last_hidden_state.pooled_cosine_mean"
    assert "last_hidden_state.cosine_mean" not in result.metrics  # token outputs are judged pooled
    int8, same = result.candidates
    assert same.metrics["last_hidden_state.pooled_cosine_min"] == pytest.approx(1.0, abs=1e-6)
    assert 0.9 < int8.metrics["last_hidden_state.pooled_cosine_mean"] < 1.0

    # The generated samples really are padded, and the pooled cosine ignores what sits on padding.
    judge = Judge.from_reference(tiny_bert["fp32"], None, samples=16, batch_size=4)
    mask = judge.feeds["attention_mask"]
    assert (mask == 0).any() and (mask.sum(axis=1) > 0).all()
    outputs = judge.run_candidate(tiny_bert["fp32"])
    scrambled = dict(outputs)
    scrambled["last_hidden_state"] = np.where(mask[..., None] == 0, 123.0,
                                              outputs["last_hidden_state"]).astype(np.float32)
    scores = judge.score_outputs(scrambled)
    assert scores["last_hidden_state.pooled_cosine_min"] == pytest.approx(1.0, abs=1e-6)
    # ... while changing a real token does count.
    touched = dict(outputs)
    hidden = outputs["last_hidden_state"].copy()
    hidden[0, 0] = -hidden[0, 0]
    touched["last_hidden_state"] = hidden
    assert judge.score_outputs(touched)["last_hidden_state.pooled_cosine_min"] < 0.999


# -- a PyTorch reference ------------------------------------------------------------------------------------------

def test_pytorch_module_is_the_reference(tmp_path):
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import onnxlite

    source = tmp_path / "net.py"
    source.write_text(textwrap.dedent("""
        import torch

        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(12, 48), torch.nn.ReLU(), torch.nn.Linear(48, 7)).eval()
    """))
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    fp32 = tmp_path / "net.onnx"
    torch.onnx.export(namespace["net"], (torch.zeros(2, 12),), str(fp32), input_names=["x"], output_names=["scores"],
                      dynamic_axes={"x": {0: "batch"}, "scores": {0: "batch"}}, dynamo=False)
    int8 = tmp_path / "net_int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)

    result = onnxlite.compare(f"{source}:net", [fp32, int8], samples=24)
    assert result.framework == "pytorch"
    exported, quantized = result.candidates
    assert exported.metrics["scores.cosine_min"] > 0.99999 and exported.metrics["scores.top1_agreement"] == 1.0
    assert quantized.drops["scores.cosine_mean"] > exported.drops["scores.cosine_mean"]
    cli = run_cli("compare", f"{source}:net", str(int8), "--json")
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["framework"] == "pytorch"


# -- a metric plugin ---------------------------------------------------------------------------------------------

def test_metric_plugin_from_a_distribution_is_discovered_and_used(digits, tmp_path):
    site = make_plugin_dist(tmp_path / "site", "onnxlite-sign-metric", "1.0", "onnxlite_sign_metric", """
        import numpy as np
        from onnxlite import MetricSpec, hookimpl

        class SignAgreement:
            def applies(self, reference, context):
                return np.issubdtype(reference.dtype, np.floating)

            def compute(self, reference, candidate, context):
                return float(np.mean(np.sign(reference) == np.sign(candidate)))

        @hookimpl
        def register_metrics():
            return [MetricSpec(name="sign_agreement", description="share of elements with the same sign",
                               factory=SignAgreement, default=False)]
    """)
    listed = run_cli("--list-plugins", "--json", site=site)
    row = next(r for r in json.loads(listed.stdout)["metrics"] if r["name"] == "sign_agreement")
    assert row["distribution"] == "onnxlite-sign-metric"
    plain = run_cli("compare", str(digits["fp32"]), str(digits["int8"]), "--json", site=site)
    assert "logits.sign_agreement" not in json.loads(plain.stdout)["metrics"]  # default=False: only when named
    result = run_cli("compare", str(digits["fp32"]), str(digits["damaged"]), "--data", str(digits["data"]),
                     "--metric", "sign_agreement", "--metric", "accuracy", "--json", site=site)
    assert result.returncode == 0, result.stderr
    payload = json.loads(result.stdout)
    assert payload["primary_metric"] == "logits.sign_agreement"
    ref = _ort(digits["fp32"], {"x": digits["x"]})[0]
    cand = _ort(digits["damaged"], {"x": digits["x"]})[0]
    expected = float(np.mean(np.sign(ref) == np.sign(cand)))
    assert payload["candidates"][0]["metrics"]["logits.sign_agreement"] == pytest.approx(expected)
    assert payload["candidates"][0]["drops"]["logits.sign_agreement"] == pytest.approx(1 - expected)


def test_generated_ids_stay_inside_a_small_vocabulary(tmp_path):
    """Ids for an ONNX model come from its embedding table's size, for every command that generates inputs."""
    from onnx import TensorProto, helper, numpy_helper

    import onnxlite
    from onnxlite.inputs import specs_from_onnx

    table = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["E", "input_ids"], ["h"], name="embed"),
         helper.make_node("ReduceMean", ["h"], ["y"], keepdims=0, axes=[1])], "embed",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [numpy_helper.from_array(table, "E")])
    path = tmp_path / "embed.onnx"
    save_graph(graph, path, opset=13, ir_version=9)
    assert specs_from_onnx(path)[0].value_range == (0, 50)
    result = onnxlite.compare(str(path), [str(path)], samples=64)   # default ids would reach 99
    assert result.candidates[0].metrics and all(np.isfinite(v) for v in result.candidates[0].metrics.values())
    assert onnxlite.bench([path], batch=4, runs=3).rows[0].status == "ok"


def test_an_fp16_model_with_float16_inputs_takes_the_same_samples(tmp_path):
    """float32 data goes to float16 inputs as float16, in compare as in quantize's own smoke check."""
    from onnx import TensorProto, helper, numpy_helper

    import onnxlite

    w = np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
                              [numpy_helper.from_array(w, "W")])
    path = tmp_path / "mlp.onnx"
    save_graph(graph, path, ir_version=9)
    half = onnxlite.quantize(path, tmp_path / "half.onnx", strategy="fp16", keep_io_types=False)
    assert half.details["check"]["ran"]
    result = onnxlite.compare(str(path), [str(half.path)], max_drop="1%")
    assert result.candidates[0].passed, result.candidates[0].to_dict()


# -- issue 25 §2: what compare says about its own inputs ---------------------------------------------------------

def test_compare_warns_on_a_budget_of_half_or_more(digits):
    import onnxlite

    for budget in ("1", "150%"):
        result = onnxlite.compare(digits["fp32"], digits["int8"], data=digits["data"], max_drop=budget)
        warned = [n for n in result.notes if "nearly any candidate passes" in n]
        assert len(warned) == 1 and "(1% is 0.01)" in warned[0], result.notes
    quiet = onnxlite.compare(digits["fp32"], digits["int8"], data=digits["data"], max_drop="2%")
    assert not [n for n in quiet.notes if "nearly any candidate passes" in n]


def test_compare_says_when_labels_fit_no_output(digits, tmp_path):
    import onnxlite

    data = tmp_path / "shifted.npz"
    np.savez(data, x=digits["x"], labels=(digits["y"] + 1).astype(np.int64))   # 1..10 for 10 classes
    result = onnxlite.compare(digits["fp32"], digits["int8"], data=data)
    assert "logits.accuracy" not in result.metrics
    assert any("labels range over [1, 10] but output 'logits' has 10 classes" in n for n in result.notes)
    fitting = onnxlite.compare(digits["fp32"], digits["int8"], data=digits["data"])
    assert not [n for n in fitting.notes if "labels range" in n]


def test_compare_says_the_two_models_take_different_inputs(digits, tmp_path):
    import onnx

    renamed = onnx.load(str(digits["int8"]))
    for node in renamed.graph.node:
        node.input[:] = ["img" if i == "x" else i for i in node.input]
    renamed.graph.input[0].name = "img"
    path = tmp_path / "img_int8.onnx"
    onnx.save(renamed, str(path))
    proc = run_cli("compare", str(digits["fp32"]), str(path), "--data", str(digits["data"]))
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "the reference and this candidate take different inputs" in last and "takes img" in last, last
    assert "Traceback" not in proc.stderr
