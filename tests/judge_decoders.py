"""Tiny ONNX decoders with their cache for the judge and bench tests, and a corpus their tokenizer reads.

The decoder is ``llm_models.tiny_llama`` (random weights, grouped-query attention) through onnxruntime-genai's
model builder at fp32, the graph the builder gives any LLaMA; a perturbed copy (noise on every MatMul weight)
plays a lightened candidate.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from llm_models import WORDS, tiny_llama


def builder_decoder(hf_folder: Path, out: Path) -> Path:
    """``python -m onnxruntime_genai.models.builder -p fp32 -e cpu`` of a transformers folder."""
    pytest.importorskip("onnxruntime_genai")
    done = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_folder), "-o",
                           str(out), "-p", "fp32", "-e", "cpu"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("generation_config.json", "config.json"):
        if (hf_folder / name).exists() and not (out / name).exists():
            shutil.copy(hf_folder / name, out / name)
    return out


def perturbed_copy(source: Path, target: Path, scale: float, seed: int = 0) -> Path:
    """``source``'s folder with Gaussian noise (``scale`` times each weight's mean magnitude) on its MatMul
    weights, saved with the weights inside the .onnx file."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.is_file() and not item.name.startswith("model.onnx"):
            shutil.copy(item, target / item.name)
    model = onnx.load(str(source / "model.onnx"))
    rng = np.random.default_rng(seed)
    for init in model.graph.initializer:
        if "MatMul" in init.name and init.data_type == onnx.TensorProto.FLOAT:
            w = numpy_helper.to_array(init)
            noisy = w + scale * np.abs(w).mean() * rng.standard_normal(w.shape).astype(w.dtype)
            init.CopyFrom(numpy_helper.from_array(noisy, init.name))
    onnx.save(model, str(target / "model.onnx"))
    return target


def word_corpus(path: Path, documents: int = 10, seed: int = 0, low: int = 30, high: int = 90) -> Path:
    """Documents of random words from the tiny tokenizer's vocabulary, blank lines between them."""
    rng = random.Random(seed)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))) for _ in range(documents)]
    path.write_text("\n\n".join(docs) + "\n")
    return path


def decoder_pair(root: Path) -> tuple[Path, Path, Path]:
    """(the fp32 decoder folder, a perturbed copy, the transformers folder they come from)."""
    hf = tiny_llama(root / "hf")
    fp32 = builder_decoder(hf, root / "fp32")
    noisy = perturbed_copy(fp32, root / "noisy", 0.3)
    return fp32, noisy, hf
