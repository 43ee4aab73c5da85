"""Shared test fixtures: an isolated plugin host and hand-built plugin distributions."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


#: int8 options whose integer math cannot saturate on any CPU (7-bit weights, ``reduce_range``): for tests about
#: something other than the CPU, so that onnxruntime's U8S8 kernels give the exact integer result on an AVX2-only
#: CPU (whose vpmaddubsw saturates) as on a VNNI one, and one bound holds on both (issue 22, onnxlite.hardware)
SATURATION_FREE = {"reduce_range": True}
#: the other saturation-free int8: uint8 weights (U8U8), a kernel that widens to int16 before multiplying; it
#: keeps 8-bit weights, so it loses less than 7-bit ones (all-MiniLM-L6-v2's smoothquant: 0.9965 mean pooled
#: cosine on held-out sentences with U8U8, 0.9952 with reduce_range, on either kind of CPU)
U8U8 = {"weight_type": "quint8"}


def other_cpu() -> str:
    """A ``--target-cpu`` whose int8 answers differ from this machine's (``avx2`` here on a VNNI or ARM CPU,
    ``avx512-vnni`` on an AVX2-only one).  A search for it tries only the grid points whose integer math
    cannot saturate, so it builds the same candidates, and they give the same answers, on either kind of
    CPU: for a whole-search test whose path must not hang on this CPU's int8 rounding."""
    from onnxlite.hardware import detect

    return "avx512-vnni" if detect().int8_saturates else "avx2"


def save_graph(graph, path: Path, opset: int = 17, ir_version: int = 8, *, external: bool = False) -> Path:
    """Wrap a hand-built ``onnx.GraphProto`` in a model at ``opset`` and write it to ``path``.

    ``external``: every weight goes to ``<name>.data`` beside it (external data, whatever the size).
    """
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    if external:
        onnx.save(model, str(path), save_as_external_data=True, location=f"{Path(path).name}.data", size_threshold=0)
    else:
        onnx.save(model, str(path))
    return Path(path)


def basic_optimized(path: Path, folder: Path, disabled=()):
    """A default CPU session of ``path`` and the graph it runs at the basic level (where WeightBiasQuantization
    runs), read back from onnxruntime's optimised model; ``disabled``: optimizers the session turns off."""
    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"],
                                   disabled_optimizers=list(disabled))
    return session, onnx.load(options.optimized_model_filepath)


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    """lighten's result cache in a folder of this session: never the user's, never a previous run's."""
    old = os.environ.get("ONNXLITE_CACHE_DIR")
    os.environ["ONNXLITE_CACHE_DIR"] = str(tmp_path_factory.mktemp("onnxlite-cache"))
    yield
    if old is None:
        os.environ.pop("ONNXLITE_CACHE_DIR", None)
    else:
        os.environ["ONNXLITE_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    """Each test its own result cache, so one test's candidates are never another's cache hits."""
    monkeypatch.setenv("ONNXLITE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def fresh_plugins(monkeypatch):
    """Forget cached plugins before and after a test that changes the environment."""
    import onnxlite.plugins

    onnxlite.plugins.reset()
    yield monkeypatch
    onnxlite.plugins.reset()


def make_plugin_dist(site: Path, dist: str, version: str, module: str, source: str,
                     entry_name: str | None = None) -> Path:
    """Write an installed-looking distribution (module + dist-info with an onnxlite entry point) into ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[onnxlite]\n{entry_name or module} = {module}\n")
    return site


def run_cli(*args: str, site: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``python -m onnxlite`` in a fresh process (so plugin discovery and imports are real)."""
    full_env = dict(os.environ)
    full_env.pop("ONNXLITE_DISABLE_PLUGIN_AUTOLOAD", None)
    if site is not None:
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), full_env.get("PYTHONPATH", "")]))
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "onnxlite", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A randomly initialised BERT saved like a hub folder (config.json + weights), no download."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    folder = tmp_path_factory.mktemp("tiny-bert") / "tiny-bert"
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=64)
    transformers.BertModel(config).eval().save_pretrained(folder)
    return folder


MLP_SOURCE = '''
import torch

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                       torch.nn.ReLU(), torch.nn.Linear(256, 10))

    def forward(self, x):
        return self.net(x)

model = MLP().eval()
'''


@pytest.fixture(scope="session")
def mlp_ref(tmp_path_factory) -> str:
    """A PyTorch MLP as a Python reference (file.py:model); its input is x:float32[batch,64]."""
    path = tmp_path_factory.mktemp("mlp") / "mlp.py"
    path.write_text(MLP_SOURCE)
    return f"{path}:model"


@pytest.fixture
def cli(capsys):
    """Run ``onnxlite ARGS`` in this process; returns (exit code, stdout, stderr)."""
    from onnxlite.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as done:
            main([str(a) for a in args])
        captured = capsys.readouterr()
        code = done.value.code
        return (0 if code is None else code), captured.out, captured.err

    return run
