"""``onnxlite bench`` for decoder language models: prefill and decode tokens per second, interleaved.

Each decoder (a folder with ``model.onnx`` and its key/value cache, or the
file) runs in its own worker process, as every model ``bench`` measures does,
so its peak resident memory is its own.  The scenarios are:

- **prefill** at each prompt length (batch 1, one new token): prefill tokens/s is
  the prompt length over the prefill's time, and **time to first token** is that
  time (the forward over the prompt and the choice of its first token);
- **decode** at each batch (prompts of the first prompt length, ``new_tokens`` each):
  decode tokens/s is the tokens the decode steps produced, over all rows, over their time.

After a warm-up round, each round runs every scenario once on every model in
turn (A B A B ...), so drift on the machine hits all models alike; a figure is
the median over the rounds.  The KV-cache bytes per token are
``2 * layers * kv_heads * head_dim * bytes`` (keys and values, every layer),
read from the graph.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import OnnxliteError, UsageError
from ..runtime import SessionSettings

Progress = Callable[[float, str], None]

DEFAULT_PROMPTS = (128, 512)
DEFAULT_BATCHES = (1, 4)
DEFAULT_NEW_TOKENS = 32
DEFAULT_ROUNDS = 3


@dataclass(frozen=True)
class GenerationPlan:
    """What is measured: prefill at ``prompt_lengths``, decode of ``new_tokens`` at ``batches`` (prompts of the
    first length), ``rounds`` interleaved rounds after ``warmup`` ones."""

    prompt_lengths: tuple[int, ...] = DEFAULT_PROMPTS
    new_tokens: int = DEFAULT_NEW_TOKENS
    batches: tuple[int, ...] = DEFAULT_BATCHES
    rounds: int = DEFAULT_ROUNDS
    warmup: int = 1
    seed: int = 0

    def scenarios(self) -> list[dict[str, Any]]:
        prefill = [{"kind": "prefill", "prompt": p, "batch": 1, "new_tokens": 1} for p in self.prompt_lengths]
        decode = [{"kind": "decode", "prompt": self.prompt_lengths[0], "batch": b, "new_tokens": self.new_tokens}
                  for b in self.batches]
        return prefill + decode


@dataclass
class GenerationRow:
    """One decoder's figures (medians over the rounds) and the runs they come from."""

    name: str
    path: str
    size_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    load_seconds: float | None = None
    peak_rss_bytes: int | None = None
    baseline_rss_bytes: int | None = None
    #: by prompt length
    prefill_tokens_per_s: dict[int, float] = field(default_factory=dict)
    ttft_ms: dict[int, float] = field(default_factory=dict)
    #: by batch
    decode_tokens_per_s: dict[int, float] = field(default_factory=dict)
    #: every timed run: the scenario and what the worker measured
    runs: list[dict[str, Any]] = field(default_factory=list)
    status: str = "ok"
    note: str = ""


@dataclass
class GenerationResult:
    rows: list[GenerationRow]
    plan: GenerationPlan
    #: (model index, scenario index) per timed run, in the order they ran
    schedule: list[tuple[int, int]]
    settings: dict[str, Any] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        from ..report.model import jsonable

        return jsonable({"kind": "generation", "plan": asdict(self.plan), "settings": self.settings,
                         "hardware": self.hardware, "models": [asdict(r) for r in self.rows],
                         "schedule": [list(s) for s in self.schedule]})

    def table_lines(self, width: int = 80) -> list[str]:
        """Figures down, models across: three models fit in 80 columns."""
        from ..report.text import fmt_bytes

        label_width = 22
        cell = max(10, min(16, (width - label_width) // max(1, len(self.rows)) - 1))

        def fmt(value: float | None, digits: int = 1) -> str:
            return "-" if value is None else f"{value:,.{digits}f}"

        lines = [f"{'':<{label_width}}" + "".join(f" {r.name[:cell]:>{cell}}" for r in self.rows)]

        def row(label: str, cells: Sequence[str]) -> None:
            lines.append(f"{label:<{label_width}}" + "".join(f" {c:>{cell}}" for c in cells))

        row("size", [fmt_bytes(r.size_bytes) for r in self.rows])
        row("KV cache per token", [fmt_bytes(r.kv_bytes_per_token) for r in self.rows])
        for p in self.plan.prompt_lengths:
            row(f"prefill tok/s @{p}", [fmt(r.prefill_tokens_per_s.get(p)) for r in self.rows])
        for p in self.plan.prompt_lengths:
            row(f"first token ms @{p}", [fmt(r.ttft_ms.get(p)) for r in self.rows])
        for b in self.plan.batches:
            row(f"decode tok/s batch {b}", [fmt(r.decode_tokens_per_s.get(b)) for r in self.rows])
        row("peak RSS", [fmt_bytes(r.peak_rss_bytes) for r in self.rows])
        row("load s", [fmt(r.load_seconds, 2) for r in self.rows])
        lines.append(f"decode: {self.plan.new_tokens} new tokens after {self.plan.prompt_lengths[0]}; "
                     f"medians of {self.plan.rounds} interleaved rounds")
        return lines


def check_plan(plan: GenerationPlan) -> None:
    for flag, values in (("--prompt-lengths", plan.prompt_lengths), ("--decode-batches", plan.batches)):
        if not values or any(not isinstance(v, int) or v < 1 for v in values):
            raise UsageError(f"{flag}: expected positive integers, got {','.join(map(str, values)) or 'none'}")
    if plan.new_tokens < 2:
        raise UsageError(f"--new-tokens: at least 2 (the first comes from the prefill), got {plan.new_tokens}")
    if plan.rounds < 1 or plan.warmup < 0:
        raise UsageError("--rounds: at least 1")


def _check_context(path: Path, plan: GenerationPlan) -> None:
    from ..decoding import generation_defaults

    context = generation_defaults(path).context_length
    longest = max(max(plan.prompt_lengths), plan.prompt_lengths[0] + plan.new_tokens)
    if context and longest > context:
        raise UsageError(f"{path}: a prompt of {longest} tokens (with the new ones) is longer than the model's "
                         f"context of {context}; give shorter --prompt-lengths or fewer --new-tokens")


def bench_generation(models: Sequence[str | os.PathLike[str]], plan: GenerationPlan | None = None,
                     settings: SessionSettings | None = None, *, names: Sequence[str] | None = None,
                     progress: Progress | None = None) -> GenerationResult:
    """Measure decoders' prefill, time to first token and decode speed, interleaved, each in its own process."""
    from ..hardware import detect
    from ..runtime import resolve_providers
    from .bench import describe_settings
    from .workers import WorkerProcess

    plan = plan or GenerationPlan()
    settings = settings or SessionSettings()
    check_plan(plan)
    rows, files = _rows(models, plan, names)
    resolve_providers(settings)
    schedule: list[tuple[int, int]] = []
    say = progress or (lambda _f, _m: None)
    with tempfile.TemporaryDirectory(prefix="onnxlite-bench-") as tmp:
        workers = [WorkerProcess(Path(tmp) / f"worker{i}.log") for i in range(len(rows))]
        try:
            say(0.0, "starting worker processes")
            for worker in workers:
                worker.start()
            for worker, row in zip(workers, rows):
                worker.request({"cmd": "ready", "settings": settings.to_dict()}, row.path)
            for worker, row, file in zip(workers, rows, files):
                say(0.0, f"loading {row.name}")
                reply = worker.request({"cmd": "load_decoder", "model": str(file), "settings": settings.to_dict()},
                                       row.path)
                row.load_seconds, row.baseline_rss_bytes = reply["load_seconds"], reply["baseline_rss_bytes"]
            _rounds(workers, rows, plan, schedule, say)
            for worker, row in zip(workers, rows):
                if worker.alive:
                    row.peak_rss_bytes = worker.request({"cmd": "stats"}, row.path)["peak_rss_bytes"]
        finally:
            for worker in workers:
                worker.close()
    for row in rows:
        summarize(row)
    if all(r.status != "ok" for r in rows):
        raise OnnxliteError("; ".join(f"{r.name} failed: {r.note}" for r in rows))
    described = describe_settings(settings, plan.rounds, plan.warmup, None, None, False, files)
    described.pop("runs", None)
    described["rounds"] = plan.rounds
    described["inputs"] = f"seeded random prompt ids (seed {plan.seed}), no end-of-sequence stop"
    return GenerationResult(rows, plan, schedule, described, detect(settings.provider).to_dict())


def _rows(models: Sequence[str | os.PathLike[str]], plan: GenerationPlan,
          names: Sequence[str] | None) -> tuple[list[GenerationRow], list[Path]]:
    """A row per decoder, checked before any worker starts (a decoder, and long enough a context)."""
    from ..decoding import decoder_layout, model_file
    from ..modelio import check_model, model_size

    if not models:
        raise UsageError("bench: give at least one model")
    files = [model_file(m) for m in models]
    labels = list(names) if names else model_names(models)
    if len(labels) != len(files):
        raise UsageError(f"--name: got {len(labels)} names for {len(files)} models")
    rows = []
    for label, file, given in zip(labels, files, models):
        check_model(file)
        layout = decoder_layout(file)
        if layout is None:
            raise UsageError(f"{given}: not a decoder with a key/value cache; bench it on its own for latency")
        _check_context(file, plan)
        rows.append(GenerationRow(name=label, path=str(given), size_bytes=model_size(file),
                                  kv_bytes_per_token=layout.cache_bytes_per_token()))
    return rows, files


def _rounds(workers: Sequence[Any], rows: Sequence[GenerationRow], plan: GenerationPlan,
            schedule: list[tuple[int, int]], say: Progress) -> None:
    """Warm-up rounds, then measured ones: each scenario on every model in turn (A B A B ...)."""
    scenarios = plan.scenarios()
    total = (plan.warmup + plan.rounds) * len(scenarios)
    for step in range(total):
        measured = step >= plan.warmup * len(scenarios)
        index = step % len(scenarios)
        scenario = scenarios[index]
        for i, (worker, row) in enumerate(zip(workers, rows)):
            if row.status != "ok":
                continue
            say(step / total, f"{'measuring' if measured else 'warming up'} {row.name}: "
                f"{scenario['kind']} {scenario['prompt']} tokens, batch {scenario['batch']}")
            reply = worker.paused_request({"cmd": "generate", "seed": plan.seed + step, **scenario})
            if not reply["ok"]:
                row.status, row.note = "failed", reply["error"]
                worker.close()
                continue
            if measured:
                row.runs.append({**scenario, **{k: v for k, v in reply.items() if k != "ok"}})
                schedule.append((i, index))


def model_names(models: Sequence[str | os.PathLike[str]]) -> list[str]:
    """A decoder's folder name (``model.onnx`` is every exported decoder's file name); ``#2``... on a clash."""
    out: list[str] = []
    for given in models:
        path = Path(given)
        name = path.parent.name if path.name == "model.onnx" and path.parent.name else path.name or str(path)
        name = name if name not in out else f"{name}#{sum(1 for n in out if n.split('#')[0] == name) + 1}"
        out.append(name)
    return out


def summarize(row: GenerationRow) -> None:
    """Medians over the rounds: prefill tokens/s and time to first token by prompt length, decode by batch."""
    by_prompt: dict[int, list[float]] = {}
    by_batch: dict[int, list[float]] = {}
    for run in row.runs:
        if run["kind"] == "prefill":
            by_prompt.setdefault(run["prompt"], []).append(run["prefill_seconds"])
        elif run["decode_seconds"] > 0:
            by_batch.setdefault(run["batch"], []).append(run["decode_tokens"] / run["decode_seconds"])
    for prompt, times in by_prompt.items():
        seconds = statistics.median(times)
        row.ttft_ms[prompt] = seconds * 1e3
        row.prefill_tokens_per_s[prompt] = prompt / seconds
    for batch, rates in by_batch.items():
        row.decode_tokens_per_s[batch] = statistics.median(rates)
