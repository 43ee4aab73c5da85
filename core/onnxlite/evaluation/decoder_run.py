"""Running a decoder language model over corpus windows and prompts, for its judge.

The model is an ONNX decoder with its key/value cache (a file, or an exported
folder with ``model.onnx``), run by :class:`onnxlite.decoding.DecoderSession`,
or a transformers folder (the PyTorch source) run by transformers.  Either way
the judge keeps only the per-window records of
:mod:`onnxlite.evaluation.decoder_records`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import UsageError, one_line
from . import decoder_records as records

if TYPE_CHECKING:
    import numpy as np

    from ..data.corpus import CorpusWindows

#: the most logits bytes one batch of windows may take ([batch, window, vocab] float32)
LOGITS_BYTES = 256 * 2**20


class Decoder(Protocol):
    """What the judge runs: logits of whole windows, and greedy continuations of prompts."""

    name: str
    framework: str
    path: str

    def logits(self, ids: np.ndarray) -> np.ndarray:
        """float32 ``[batch, window, vocab]`` for int64 ``ids`` ``[batch, window]`` (no padding)."""
        ...

    def greedy(self, prompts: Sequence[Sequence[int]], new_tokens: int, eos: Sequence[int],
               pad: int) -> list[list[int]]:
        ...


class OnnxDecoder:
    """An ONNX decoder with its cache, through :class:`onnxlite.decoding.DecoderSession`."""

    framework = "onnx"

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None, providers: Any = None):
        from ..decoding import DecoderSession, model_file

        self.path = str(model_file(path))
        self.name = str(path)
        self.session = DecoderSession(path, threads=threads, providers=providers)

    def logits(self, ids: np.ndarray) -> np.ndarray:
        import numpy as np

        logits, _cache = self.session.forward(ids, np.ones_like(ids))
        return logits

    def greedy(self, prompts: Sequence[Sequence[int]], new_tokens: int, eos: Sequence[int],
               pad: int) -> list[list[int]]:
        generation = self.session.greedy([list(p) for p in prompts], new_tokens, eos_token_id=list(eos),
                                         pad_token_id=pad)
        return [list(t) for t in generation.tokens]


class TorchDecoder:
    """A transformers folder of a causal LM (the PyTorch source), in float32 on the CPU."""

    framework = "pytorch"

    def __init__(self, folder: str | os.PathLike[str], threads: int | None = None):
        import torch
        from transformers import AutoModelForCausalLM

        if threads:
            torch.set_num_threads(threads)
        try:
            self.model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32,
                                                              local_files_only=True).eval()
        except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a folder it cannot load
            raise UsageError(f"{folder}: transformers cannot load it as a causal LM ({one_line(exc, 200)})") from None
        self.name = str(folder)
        self.path = str(folder)
        self._torch = torch

    def logits(self, ids: np.ndarray) -> np.ndarray:
        with self._torch.inference_mode():
            out = self.model(input_ids=self._torch.from_numpy(ids))
        return out.logits.float().numpy()

    def greedy(self, prompts: Sequence[Sequence[int]], new_tokens: int, eos: Sequence[int],
               pad: int) -> list[list[int]]:
        torch = self._torch
        lengths = {len(p) for p in prompts}
        if len(lengths) != 1:
            raise ValueError("the judge's prompts all have one length")
        ids = torch.tensor([list(p) for p in prompts], dtype=torch.int64)
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                      min_new_tokens=0, do_sample=False, eos_token_id=list(eos) or None,
                                      pad_token_id=pad)
        rows = []
        for row in out[:, ids.shape[1]:].tolist():
            kept: list[int] = []
            for token in row:
                kept.append(int(token))
                if token in eos:
                    break
            rows.append(kept)
        return rows


def is_decoder_source(path: Any) -> bool:
    """A folder a judge can run as a decoder: an exported one (``model.onnx`` with a cache) or a transformers
    causal LM (``config.json`` and weights, no ``model.onnx``)."""
    return is_onnx_decoder(path) or _transformers_folder(path)


def is_onnx_decoder(path: Any) -> bool:
    """An ONNX decoder with a cache: ``input_ids`` and ``past_key_values.0.key`` in, ``logits`` and
    ``present.0.key`` out (read from the shared header parse, so asking costs no second parse)."""
    from ..decoding import model_file
    from ..modelio import read_header

    if not isinstance(path, (str, os.PathLike)):
        return False
    file = model_file(path)
    if not file.is_file() or file.suffix != ".onnx":
        return False
    try:
        graph = read_header(file).graph
    except Exception:  # noqa: BLE001 - an unreadable model is not a decoder; check_model words the error
        return False
    inputs, outputs = {i.name for i in graph.input}, {o.name for o in graph.output}
    return {"input_ids", "past_key_values.0.key"} <= inputs and {"logits", "present.0.key"} <= outputs


def _transformers_folder(path: Any) -> bool:
    if not isinstance(path, (str, os.PathLike)):
        return False
    folder = Path(path)
    return folder.is_dir() and (folder / "config.json").is_file() and not (folder / "model.onnx").exists()


def open_decoder(path: str | os.PathLike[str], threads: int | None = None, providers: Any = None) -> Decoder:
    """The decoder at ``path``: an ONNX one (on ``providers``, default the CPU), else a transformers folder."""
    if is_onnx_decoder(path):
        return OnnxDecoder(path, threads, providers)
    if _transformers_folder(path):
        return TorchDecoder(path, threads)
    raise UsageError(f"{path}: not a decoder language model (expected a folder with model.onnx and its key/value "
                     "cache, or a transformers folder of a causal LM)")


@dataclass(frozen=True)
class GreedyPlan:
    """Each window's first ``prompt_tokens`` tokens, continued greedily for ``new_tokens``."""

    prompt_tokens: int
    new_tokens: int
    eos: tuple[int, ...]
    pad: int


def window_batch(window: int, vocab: int | None) -> int:
    """Windows per forward so that the logits stay under :data:`LOGITS_BYTES`."""
    if not vocab:
        return 1
    return max(1, LOGITS_BYTES // (window * vocab * 4))


def run_records(decoder: Decoder, windows: CorpusWindows, greedy: GreedyPlan | None,
                support: int | np.ndarray, *, vocab: int | None = None,
                progress: Callable[[str], None] | None = None) -> dict[str, np.ndarray]:
    """The ``text`` record of every window (and the ``greedy`` one with a plan).

    ``support``: K for the reference (its own top K), or the reference's ``text`` record, whose support a
    candidate is scored on.
    """
    import numpy as np

    say = progress or (lambda _msg: None)
    stride = windows.plan.stride
    per_batch = window_batch(windows.plan.window, vocab)
    rows = []
    for start in range(0, len(windows), per_batch):
        say(f"{decoder.name}: windows {start + 1} to {min(start + per_batch, len(windows))} of {len(windows)}")
        ids = windows.ids[start:start + per_batch]
        logits = decoder.logits(ids)
        for i in range(ids.shape[0]):
            own = support if isinstance(support, (int, np.integer)) else support[start + i]
            rows.append(records.next_token_record(logits[i], ids[i], stride, own))
        del logits
    out = {records.NEXT_TOKEN: np.stack(rows)}
    if greedy is not None:
        say(f"{decoder.name}: greedy continuations of {len(windows)} prompts")
        prompts = windows.ids[:, :greedy.prompt_tokens].tolist()
        tokens = decoder.greedy(prompts, greedy.new_tokens, greedy.eos, greedy.pad)
        out[records.GREEDY] = records.greedy_record(tokens, greedy.new_tokens)
    return out
