"""Points of ``weightonly``'s decoder grid on SmolLM2-135M-Instruct: size, perplexity and KL against the fp32 export.

Builds (or reuses) the fp32 export of ``benchmarks/gguf_carry.py`` in ``--work`` and scores each quantized model
on the same windows of gensim's ``lee_background.cor`` (prefill with an empty cache).  SmolLM2's fp32 weights are
dequantized Q4_1 values: an asymmetric 4-bit grid of blocks of 32 can land on them exactly, so these figures
flatter that scheme; a model whose weights were never quantized is the fair check of the general path.

    python benchmarks/decoder_grid.py [--work DIR] [--windows 4] [--window 256] [--threads 2] [--only TEXT]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from gguf_carry import build, compare, hf_folder, isa, score, size, windows  # noqa: E402

POINTS = (
    ("rtn sym b32 l4, int4 table (the builder's default)",
     {"bits": 4, "block_size": 32, "symmetric": True, "accuracy_level": 4, "gather": "int4"}),
    ("rtn asym b32 l4, int4 table", {"bits": 4, "block_size": 32, "symmetric": False, "accuracy_level": 4,
                                     "gather": "int4"}),
    ("rtn sym b128 l4, int4 table", {"bits": 4, "block_size": 128, "symmetric": True, "accuracy_level": 4,
                                     "gather": "int4"}),
    ("kquant b32 l4, int4 table", {"bits": 4, "algorithm": "kquant", "block_size": 32, "accuracy_level": 4,
                                   "gather": "int4"}),
    ("rtn sym b32 l4, lm_head int8 (shared table)",
     {"bits": 4, "block_size": 32, "symmetric": True, "accuracy_level": 4, "gather": "int4", "lm_head": "int8"}),
    ("rtn sym b32 l4, sensitive8=20, int4 table",
     {"bits": 4, "block_size": 32, "symmetric": True, "accuracy_level": 4, "gather": "int4", "sensitive8": 20}),
    ("rtn sym b32 l0, int4 table", {"bits": 4, "block_size": 32, "symmetric": True, "accuracy_level": 0,
                                    "gather": "int4"}),
    ("rtn sym b32 l0, sensitive8=20, int4 table",
     {"bits": 4, "block_size": 32, "symmetric": True, "accuracy_level": 0, "gather": "int4", "sensitive8": 20}),
    ("rtn 8-bit b128 l4, int8 table", {"bits": 8, "block_size": 128, "accuracy_level": 4, "gather": "int8"}),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "onnxlite" / "bench-gguf")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="", help="run only the schemes whose label contains this text")
    args = parser.parse_args()
    import onnxlite

    args.work.mkdir(parents=True, exist_ok=True)
    _, hf = hf_folder(args.work)
    fp32 = build(hf, args.work / "fp32")
    chunks = windows(hf, args.windows, args.window)
    ref = score(fp32, chunks, args.threads)
    print(f"ISA {isa()}, {args.threads} threads; {args.windows} windows of {args.window} tokens of "
          f"lee_background.cor; fp32 export {size(fp32) / 1e6:.1f} MB")
    print(f"{'scheme':<48} {'MB':>6} {'smaller':>7} {'ppl':>8} {'vs fp32':>8} {'KL':>8}")
    for index, (label, options) in enumerate(POINTS):
        if args.only not in label:
            continue
        out = args.work / f"grid{index}" / "model.onnx"
        start = time.perf_counter()
        onnxlite.quantize(fp32, out, strategy="weightonly", force=True, **options)
        took = time.perf_counter() - start
        f = compare(ref, score(out, chunks, args.threads), chunks)
        print(f"{label:<48} {size(out) / 1e6:6.1f} {size(fp32) / size(out):6.2f}x {f['ppl']:8.3f} "
              f"{100 * (f['ppl'] / f['ppl_ref'] - 1):+7.2f}% {f['kl']:8.4f}  ({took:.0f} s)", flush=True)
    print(f"fp32 perplexity {compare(ref, ref, chunks)['ppl']:.3f}")


if __name__ == "__main__":
    main()
