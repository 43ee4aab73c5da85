"""A causal language model to a folder: ``model.onnx`` with its key/value cache, tokenizer and configs, verified.

The framework plugin loads the source and offers its engines (the torch plugin:
onnxruntime-genai's builder where it supports the architecture, the torch
exporter over a flat cache otherwise); this module checks the folder each
writes against the source in PyTorch, through :mod:`onnxlite.decoding`, and
only then moves it into place:

- prefill logits of a left-padded batch of prompts, within a tolerance relative
  to the reference logits' largest magnitude (thousands of logits of size ~20
  differ by ~1e-3 in float32 without anything being wrong);
- greedy tokens through the cache at that batch, token for token with each
  prompt decoded alone in PyTorch.

The first engine whose folder passes wins; the others' first errors are kept.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OnnxliteError, UsageError, VerificationError, one_line

if TYPE_CHECKING:
    from ..decoding import DecoderLayout
    from ..runtime import SessionSettings
    from .sources import LoadedSource

#: prefill logits pass when max |diff| <= LOGITS_RTOL x max |reference logit| (over the valid positions)
LOGITS_RTOL = 1e-3
#: greedy steps checked through the cache
DEFAULT_STEPS = 32
#: the prompts the check decodes (batched, so the shorter one is padded)
CHECK_PROMPTS = ("The capital of France is", "Once upon a time, in a small house by the river, there lived")
CHECK_FILE = "onnxlite_export.json"
NO_TOKENIZER = ("{source}: a causal LM without a tokenizer (no tokenizer.json, tokenizer.model or vocab.json beside "
                "it); save its tokenizer with the model (tokenizer.save_pretrained)")


def _tokenizer_files(source: str) -> bool:
    from ..decoding.text import has_tokenizer

    return has_tokenizer(source)


@dataclass(frozen=True)
class DecoderCheck:
    """How the exported decoder compared with PyTorch."""

    batch: int
    prompt_lengths: tuple[int, ...]
    padding: str
    max_abs_diff: float
    logits_scale: float
    tolerance: float
    steps: int
    #: greedy tokens equal to PyTorch's before the first difference, per prompt
    tokens_equal: tuple[int, ...]
    #: PyTorch's top-1 minus top-2 logit where a prompt first differed (None where it did not)
    margins: tuple[float | None, ...]

    @property
    def prefill_passed(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    @property
    def passed(self) -> bool:
        return self.prefill_passed and all(n == self.steps for n in self.tokens_equal)

    def message(self) -> str:
        prefill = (f"prefill logits at batch {self.batch} ({self.padding} padded): max |diff| {self.max_abs_diff:.3g} "
                   f"{'<=' if self.prefill_passed else '>'} {LOGITS_RTOL:g} x max |logit| {self.logits_scale:.3g}")
        greedy = (f"greedy tokens through the cache equal PyTorch's for {'/'.join(str(n) for n in self.tokens_equal)} "
                  f"of {self.steps} steps")
        differs = [f"prompt {i + 1} differs at step {n + 1} (PyTorch's top-2 margin {m:.3g})"
                   for i, (n, m) in enumerate(zip(self.tokens_equal, self.margins)) if m is not None]
        return "; ".join([prefill, greedy, *differs])

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "prompt_lengths": list(self.prompt_lengths), "padding": self.padding,
                "max_abs_diff": self.max_abs_diff, "logits_scale": self.logits_scale, "tolerance": self.tolerance,
                "logits_rtol": LOGITS_RTOL, "steps": self.steps, "tokens_equal": list(self.tokens_equal),
                "margins": list(self.margins), "passed": self.passed, "message": self.message()}


@dataclass(frozen=True)
class DecoderExport:
    """A causal LM exported to a folder with its cache."""

    path: Path
    source: str
    framework: str
    #: ``genai-builder`` (onnxruntime-genai's model builder) or ``torchscript`` (the torch exporter)
    engine: str
    layout: DecoderLayout
    size_bytes: int
    check: DecoderCheck | None
    fallback: str | None = None
    notes: tuple[str, ...] = ()
    files: tuple[str, ...] = field(default_factory=tuple)

    @property
    def verified(self) -> bool:
        return self.check is not None and self.check.passed

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {"path": str(self.path), "source": self.source, "framework": self.framework, "engine": self.engine,
                "exporter": self.engine, "layout": asdict(self.layout), "size_bytes": self.size_bytes,
                "verified": self.verified, "verification": self.check.to_dict() if self.check else None,
                "fallback": self.fallback, "notes": list(self.notes), "files": list(self.files)}


def is_causal_source(source: str) -> bool:
    """A cheap look: a GGUF file, or a transformers folder whose config names a causal-LM class."""
    path = Path(source)
    if path.suffix.lower() == ".gguf":
        return True
    if path.is_dir():
        try:
            config = json.loads((path / "config.json").read_text())
        except (OSError, ValueError):
            return False
        names = config.get("architectures") if isinstance(config, dict) else None
        return any(str(n).endswith(("ForCausalLM", "LMHeadModel")) for n in names or ())
    return False


def check_output_folder(output: Path, source: str) -> None:
    """Refuse, before loading anything, an output folder that is a file, the source or inside it."""
    from ..atomic import check_writable

    if output.exists() and not output.is_dir():
        raise UsageError(f"-o {output}: is a file; a causal LM exports to a folder (model.onnx, tokenizer, configs)")
    if output.is_dir() and any(output.iterdir()) and not (output / "model.onnx").is_file():
        # the folder is replaced as a whole: never someone's folder of other files
        raise UsageError(f"-o {output}: a folder with other files in it; give a new or empty folder (or a previous "
                         "export's, which is replaced)")
    src = Path(source)
    if src.exists():
        src_dir = src.resolve() if src.is_dir() else src.resolve().parent
        out = output.resolve()
        if out == src_dir or (src.is_dir() and src_dir in out.parents):
            raise UsageError(f"-o {output}: is the source folder or inside it; choose another folder "
                             "(inputs are never modified)")
    check_writable(output)


def _check_prompts(lm: Any, vocab: int) -> list[list[int]]:
    """Token ids of :data:`CHECK_PROMPTS` (ids in range; without a tokenizer, fixed pseudo-random ids)."""
    import numpy as np

    tokenizer = lm.load_tokenizer() if lm.has_tokenizer() else None
    prompts: list[list[int]] = []
    if tokenizer is not None:
        for text in CHECK_PROMPTS:
            ids = [int(i) for i in tokenizer(text)["input_ids"] if 0 <= int(i) < vocab]
            prompts.append(ids)
    if len(prompts) < 2 or min(len(p) for p in prompts) < 2 or len({len(p) for p in prompts}) < 2:
        rng = np.random.default_rng(0)
        prompts = [rng.integers(0, vocab, size=n).tolist() for n in (9, 5)]
    return prompts


def verify_decoder(folder: Path, lm: Any, steps: int, settings: SessionSettings | None) -> DecoderCheck:
    """Prefill logits and greedy tokens of the folder's model against ``lm`` (the plugin's PyTorch reference)."""
    import numpy as np

    from ..decoding import DecoderSession

    session = DecoderSession(folder, threads=settings.threads if settings else None)
    vocab = int(lm.config.vocab_size)
    prompts = _check_prompts(lm, vocab)
    width = max(len(p) for p in prompts)
    ids = np.zeros((len(prompts), width), dtype=np.int64)
    left = np.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = prompt
        left[row, width - len(prompt):] = 1
    reference = lm.prefill(ids, left)
    if session.layout.padding == "right":   # same tokens, pads after: compare position by position
        right_ids = np.zeros_like(ids)
        right = np.zeros_like(ids)
        for row, prompt in enumerate(prompts):
            right_ids[row, :len(prompt)] = prompt
            right[row, :len(prompt)] = 1
        got, _ = session.forward(right_ids, right)
        got = np.stack([np.roll(got[row], width - len(p), axis=0) for row, p in enumerate(prompts)])
    else:
        got, _ = session.forward(ids, left)
    valid = left.astype(bool)
    diff = float(np.abs(got[valid] - reference[valid]).max())
    scale = float(np.abs(reference[valid]).max())
    generation = session.greedy(prompts, steps, eos_token_id=None, pad_token_id=0)
    equal: list[int] = []
    margins: list[float | None] = []
    for prompt, produced in zip(prompts, generation.tokens):
        expected, margin = lm.greedy(prompt, steps)
        same = next((i for i, (a, b) in enumerate(zip(produced, expected)) if a != b),
                    min(len(produced), len(expected)))
        equal.append(same)
        margins.append(margin[same] if same < steps else None)
    return DecoderCheck(batch=len(prompts), prompt_lengths=tuple(len(p) for p in prompts),
                        padding=session.layout.padding, max_abs_diff=diff, logits_scale=scale,
                        tolerance=LOGITS_RTOL * scale, steps=steps, tokens_equal=tuple(equal),
                        margins=tuple(margins))


def _notes(loaded: LoadedSource, lm: Any) -> list[str]:
    """What was changed to export: the plugin's cast at load, then the LM's own."""
    cast = getattr(loaded.model, "provenance", {}).get("onnxlite.cast")
    return [*([cast] if cast else []), *lm.notes]


def _stamp(folder: Path, values: dict[str, str]) -> None:
    """Provenance in ``model.onnx``'s metadata, leaving its external weights where they are."""
    import onnx

    from ..modelio import set_metadata

    path = folder / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    set_metadata(model, values)
    onnx.save(model, str(path))


def export_decoder(source: str | os.PathLike[str], output: str | os.PathLike[str], *, exporter: str | None = None,
                   opset: int = 18, steps: int = DEFAULT_STEPS, verify: bool = True,
                   settings: SessionSettings | None = None, on_step: Callable[[str], None] | None = None,
                   loaded: LoadedSource | None = None, framework: str = "auto") -> DecoderExport:
    """Export the causal LM ``source`` (a transformers folder, a GGUF file, a ``file.py:model``) to the folder
    ``output`` with its cache, verified against PyTorch fp32 (:func:`verify_decoder`).

    ``exporter`` picks the engine (``genai-builder`` or ``torchscript``); by default the builder where it
    supports the architecture, falling back to the torch exporter when its folder fails.
    """
    from ..atomic import replace_dir, scratch_dir
    from ..decoding import decoder_layout
    from ..modelio import model_size
    from .sources import load_source

    step = on_step or (lambda _message: None)
    source = str(source)
    output = Path(output)
    check_output_folder(output, source)
    if steps < 1:
        raise UsageError(f"--steps {steps}: must be at least 1")
    if loaded is None and Path(source).is_dir() and is_causal_source(source) and not _tokenizer_files(source):
        raise UsageError(NO_TOKENIZER.format(source=source))
    if loaded is None:
        step(f"Loading {source}")
        loaded = load_source(source, framework)
    lm = getattr(loaded.model, "causal_lm", None)
    if lm is None:
        raise UsageError(f"{source}: not a causal language model; a folder output is for those "
                         "(give -o FILE.onnx for any other model)")
    if not lm.has_tokenizer():
        raise UsageError(NO_TOKENIZER.format(source=source))
    engines = lm.engines(exporter)
    lm.to_float32()
    errors: list[tuple[str, str]] = []
    # the builder's input folder and cache go to a private temporary folder, never beside the input
    with scratch_dir(output) as work, tempfile.TemporaryDirectory(prefix="onnxlite-lm-") as private:
        for index, engine in enumerate(engines):
            staged = work / f"out{index}"
            staged.mkdir()
            step(f"Exporting with {engine} ({index + 1} of {len(engines)})")
            try:
                lm.export(staged, engine, opset, Path(private) / engine)
                lm.save_tokenizer(staged)
                lm.save_generation_config(staged)
                layout = decoder_layout(staged)
                if layout is None:
                    raise OnnxliteError("the graph has no key/value cache inputs and outputs")
                check = None
                if verify:
                    step(f"Verifying {engine} against PyTorch ({steps} greedy steps)")
                    check = verify_decoder(staged, lm, steps, settings)
                    if not check.passed:
                        raise VerificationError(check.message())
            except Exception as exc:  # noqa: BLE001 - each engine's own first error is reported
                if isinstance(exc, UsageError) and "onnxruntime cannot load" not in str(exc):
                    raise
                errors.append((engine, one_line(exc, 300)))
                continue
            fallback = (f"{errors[0][0]} failed ({errors[0][1]}); used {engine}") if errors else None
            _stamp(staged, {"onnxlite.exporter": engine, "onnxlite.source": source,
                            "onnxlite.framework": loaded.framework})
            if check is not None:
                (staged / CHECK_FILE).write_text(json.dumps({"engine": engine, "source": source,
                                                             "verification": check.to_dict()}, indent=2))
            files = tuple(sorted(p.name for p in staged.iterdir()))
            replace_dir(staged, output)
            return DecoderExport(path=output, source=source, framework=loaded.framework, engine=engine,
                                 layout=layout, size_bytes=model_size(output / "model.onnx"), check=check,
                                 fallback=fallback, notes=tuple(_notes(loaded, lm)), files=files)
    detail = "; ".join(f"{engine}: {message}" for engine, message in errors)
    kind = VerificationError if all("prefill logits" in m for _, m in errors) else OnnxliteError
    raise kind(f"{source}: no engine exported a decoder that matches PyTorch (nothing written) [{detail}]")


def describe(result: DecoderExport) -> list[tuple[str, str]]:
    """Rows for the CLI's summary table."""
    from ..report.text import human_bytes

    layout = result.layout
    rows = [("framework", f"{result.framework} ({result.engine})"),
            ("size", human_bytes(result.size_bytes)),
            ("cache", f"{layout.num_layers} layers x {layout.kv_heads} KV heads x {layout.head_dim} "
                      f"({layout.past_dtype}, {human_bytes(layout.cache_bytes_per_token())}/token)"),
            ("files", ", ".join(result.files))]
    if result.fallback:
        rows.append(("fallback", result.fallback))
    rows.extend(("note", note) for note in result.notes)
    rows.append(("verified", result.check.message() if result.check else "not verified (--no-verify)"))
    return rows
