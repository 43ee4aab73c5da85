"""A second check of lighten's general 4-bit path, on a language model whose weights were never quantized.

SmolLM2-135M's fp32 weights are dequantized Q4_1 values, so a 4-bit grid can look better or worse on it than on
a model trained in float.  This trains a tiny LLaMA (grouped-query attention) in float32 on gensim's news text
(``lee_background.cor``), with a byte-level BPE tokenizer trained on the same text, then:

1. ``lighten`` searches it with ``--data`` the news articles the training left out (they calibrate and select);
2. uniform 4-bit RTN at blocks of 128 (symmetric, level 4, int4 table) is the floor;
3. the search's best candidate other than the floor at a size within 5% of the floor's (the lowest perplexity
   its own judge measured among them) is written again from its recipe;
4. fp32, the floor, the lighten winner and the equal-size pick are judged on Wikipedia articles (gensim's enwiki
   sample), text that neither trained, calibrated nor selected anything: perplexity, KL and top-1 agreement.

Runs in a few minutes on 2 cores; it is a benchmark, not a test. Figures depend on the seed and the steps.

    python benchmarks/llm_trained.py [--work DIR] [--steps 300] [--threads 2] [--budget perplexity=5%]
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import shutil
import time
from pathlib import Path

print = functools.partial(print, flush=True)   # noqa: A001 - progress lines as they happen, into a log too
FLOOR = {"bits": 4, "block_size": 128, "symmetric": True, "accuracy_level": 4, "gather": "int4"}
#: "equal size": at most this many times the floor's bytes
EQUAL_SIZE = 1.05
TRAIN_DOCS = 200          # of lee_background.cor's 300 articles; the other 100 are lighten's --data
VOCAB, SEQ, BATCH = 2048, 128, 8


def isa() -> str:
    from onnxlite import hardware

    return f"{hardware.detect().isa} ({platform.processor() or platform.machine()})"


def train(folder: Path, steps: int, threads: int, seed: int = 0) -> Path:
    """A 4-layer LLaMA (hidden 128, 4 query heads, 2 KV heads) trained on news, saved with its tokenizer."""
    import numpy as np
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from onnxlite.data.gensim_text import news_documents

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    docs = news_documents()[:TRAIN_DOCS]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<pad>", "<s>", "</s>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    ids = np.concatenate([np.array([1] + tok.encode(d).ids + [2], dtype=np.int64) for d in docs])
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=128, intermediate_size=384,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    rng = np.random.default_rng(seed)
    began = time.perf_counter()
    for step in range(steps):
        starts = rng.integers(0, len(ids) - SEQ - 1, BATCH)
        batch = torch.from_numpy(np.stack([ids[s:s + SEQ] for s in starts]))
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  step {step + 1}/{steps}: loss {loss.item():.3f} ({time.perf_counter() - began:.0f} s)")
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                            model_max_length=512).save_pretrained(folder)
    GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(folder)
    return folder


def beside(model_dir: Path, fp32_dir: Path) -> None:
    """The fp32 export's tokenizer and genai files beside a quantized ``model.onnx``, so it is judged as a folder."""
    from onnxlite.search.decoder import publish_decoder_files
    from onnxlite.search.recipes import HF_FILES

    publish_decoder_files(fp32_dir, model_dir, model_dir / "model.onnx")
    for name in HF_FILES:
        if (fp32_dir / name).is_file() and not (model_dir / name).exists():
            shutil.copy2(fp32_dir / name, model_dir / name)


def quantize_into(fp32_dir: Path, out: Path, strategy: str, options: dict, calibration: Path | None) -> Path:
    import onnxlite

    out.mkdir(parents=True, exist_ok=True)
    onnxlite.quantize(fp32_dir / "model.onnx", out / "model.onnx", strategy=strategy, force=True,
                      calibration=str(calibration) if calibration else None, **options)
    beside(out, fp32_dir)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "onnxlite" / "bench-trained")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--budget", default="perplexity=5%")
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--windows", type=int, default=48, help="Wikipedia windows judged (half of each scored)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import onnxlite
    from onnxlite.data.gensim_text import news_documents, write_corpus
    from onnxlite.evaluation.decoder_judge import DecoderJudge, DecoderOptions
    from onnxlite.runtime import SessionSettings

    work = args.work
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    print(f"ISA {isa()}, {args.threads} threads")
    began = time.perf_counter()
    hf = train(work / "hf", args.steps, args.threads)
    print(f"trained in {time.perf_counter() - began:.0f} s")
    news = work / "news.txt"
    news.write_text("\n\n".join(news_documents()[TRAIN_DOCS:]) + "\n")
    wiki = write_corpus("wiki", work / "wiki.txt")
    settings = SessionSettings(threads=args.threads)

    began = time.perf_counter()
    result = onnxlite.lighten(hf, work / "lightened", data=str(news), max_drop=args.budget, settings=settings,
                              cache=False, data_options={"window": args.window})
    print(f"lighten in {time.perf_counter() - began:.0f} s: {result.message.split(';')[0]}")
    fp32_dir = work / "lightened-fp32"
    onnxlite.export(hf, fp32_dir)
    floor = quantize_into(fp32_dir, work / "floor", "weightonly", FLOOR, None)
    from onnxlite.modelio import model_size

    floor_size = model_size(floor / "model.onnx")
    key = result.primary_metric
    # within 5% of the floor's size (zero points, an 8-bit layer or two), the floor's own point left out
    judged = [r for r in result.candidates if r.drops.get(key) is not None and r.size_bytes
              and r.size_bytes <= floor_size * EQUAL_SIZE and r.status != "failed"
              and not (r.strategy == "weightonly" and dict(r.options) == FLOOR)]
    models = {"fp32": fp32_dir, "rtn4 b128 (floor)": floor}
    if result.winner is not None:
        models[f"winner {result.winner.name}"] = work / "lightened"
    if judged:
        pick = min(judged, key=lambda r: r.drops[key])
        calibration = work / "calibration.npz" if pick.strategy == "gptq" else None
        if calibration is not None:
            print("  (the equal-size pick calibrates: skipped, its calibration windows are lighten's own)")
        else:
            models[f"equal size {pick.name}"] = quantize_into(fp32_dir, work / "equal", pick.strategy,
                                                              dict(pick.options), None)
    from onnxlite.data.corpus import corpus_windows, plan_windows, read_documents
    from onnxlite.decoding import load_tokenizer
    from onnxlite.search.decoder_data import spread

    # windows spread through every article, each scoring its last half: args.windows x window/2 tokens
    plan = plan_windows(args.window, args.window // 2, None)
    held = spread(corpus_windows(read_documents(wiki), load_tokenizer(fp32_dir), plan, str(wiki)), args.windows)
    options = DecoderOptions(window=args.window, stride=args.window // 2, threads=args.threads)
    judge = DecoderJudge.from_decoders(fp32_dir, held, metrics=["perplexity", "kl", "next_token_agreement"],
                                       options=options, settings=settings)
    rows = []
    print(f"judged on {judge.windows.describe()}")
    print(f"{'model':<72} {'MB':>6} {'ppl':>8} {'vs fp32':>8} {'KL':>7} {'top-1':>6}")
    for name, folder in models.items():
        verdict = judge.evaluate(folder / "model.onnx", name)
        m = verdict.metrics
        ppl = next(v for k, v in m.items() if k.endswith("perplexity"))
        kl = next((v for k, v in m.items() if k.endswith(".kl")), 0.0)
        top1 = next((v for k, v in m.items() if k.endswith("next_token_agreement")), 1.0)
        ref = next(v for k, v in judge.reference_scores.items() if k.endswith("perplexity"))
        size = model_size(folder / "model.onnx")
        rows.append({"model": name, "bytes": size, "perplexity": ppl, "kl": kl, "top1": top1})
        print(f"{name[:72]:<72} {size / 1e6:6.2f} {ppl:8.3f} {ppl / ref - 1:+8.1%} {kl:7.4f} {top1:6.1%}")
    floor_ppl = rows[1]["perplexity"]
    for row in rows[2:]:
        beats = "beats" if row["perplexity"] < floor_ppl else "does not beat"
        print(f"{row['model'][:40]}: perplexity {row['perplexity']:.3f} vs the floor's {floor_ppl:.3f} at "
              f"{row['bytes'] / floor_size:.2f}x its size: {beats} the floor")
    if args.json:
        args.json.write_text(json.dumps({"isa": isa(), "steps": args.steps, "budget": args.budget, "rows": rows},
                                        indent=2))


if __name__ == "__main__":
    main()
