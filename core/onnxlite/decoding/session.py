"""Greedy generation over an onnxruntime session of a decoder with its key/value cache.

The cache stays in onnxruntime's own buffers between steps
(``run_with_ort_values``): each step's ``present`` tensors are fed back as the
next ``past`` without a copy through numpy; only the last position's logits
come back as an array.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from .layout import DecoderLayout, decoder_layout, model_file


@dataclass(frozen=True)
class Cache:
    """The key/value cache after a forward: onnxruntime values in :attr:`DecoderLayout.past_names` order."""

    values: tuple[Any, ...]
    #: positions held (the attention mask's length so far)
    length: int

    def arrays(self) -> list[np.ndarray]:
        """The cache as numpy arrays (a copy; for checks, not for the decode loop)."""
        return [value.numpy() if hasattr(value, "numpy") else np.asarray(value) for value in self.values]


@dataclass(frozen=True)
class Generation:
    """What :meth:`DecoderSession.greedy` produced."""

    #: new tokens per prompt, the end-of-sequence token included when it was hit
    tokens: tuple[tuple[int, ...], ...]
    #: whether each prompt stopped at an end-of-sequence token
    stopped: tuple[bool, ...]
    prefill_seconds: float
    decode_seconds: float
    #: forwards after the prefill (each gives one token per row still running)
    decode_steps: int
    #: prompt lengths, and the padded length they were batched at
    prompt_lengths: tuple[int, ...] = ()

    @property
    def decode_tokens(self) -> int:
        """Tokens the decode steps produced, over all rows (the first token of each row comes from the prefill)."""
        return sum(max(len(row) - 1, 0) for row in self.tokens)

    def to_dict(self) -> dict[str, Any]:
        return {"tokens": [list(row) for row in self.tokens], "stopped": list(self.stopped),
                "prefill_seconds": self.prefill_seconds, "decode_seconds": self.decode_seconds,
                "decode_steps": self.decode_steps, "prompt_lengths": list(self.prompt_lengths)}


def position_ids(attention_mask: np.ndarray, length: int) -> np.ndarray:
    """Positions of the last ``length`` columns: the count of real tokens before each, pads at 0."""
    positions = np.cumsum(attention_mask, axis=-1, dtype=np.int64) - 1
    np.maximum(positions, 0, out=positions)
    return np.ascontiguousarray(positions[:, -length:])


def _eos_set(eos_token_id: int | Sequence[int] | None) -> frozenset[int]:
    if eos_token_id is None:
        return frozenset()
    if isinstance(eos_token_id, (int, np.integer)):
        return frozenset({int(eos_token_id)})
    return frozenset(int(t) for t in eos_token_id)


class DecoderSession:
    """A decoder ONNX model (a file or an exported folder) in onnxruntime, with its cache layout."""

    def __init__(self, path: str | os.PathLike[str], *, threads: int | None = None, providers: Any = None,
                 spinning: bool | None = None):
        """``spinning=False`` stops onnxruntime's idle threads from spin-waiting between ops: on a CPU shared
        with other work, spinning threads take turns from the ones computing, and decode (many short runs)
        suffers most; ``None`` keeps onnxruntime's default."""
        import onnxruntime as ort

        from ..runtime import SessionSettings, create_session, session_options

        self.path = model_file(path)
        if not self.path.is_file():
            raise UsageError(f"{path}: no such model (expected an .onnx file or a folder with model.onnx)")
        layout = decoder_layout(self.path)
        if layout is None:
            raise UsageError(f"{path}: not a decoder with a key/value cache (it needs inputs input_ids, "
                             "attention_mask, past_key_values.N.key/value and outputs logits, present.N.key/value)")
        self.layout: DecoderLayout = layout
        settings = SessionSettings(threads=threads)
        options = session_options(settings)
        if spinning is not None:
            options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
        if providers is None:
            self.session = create_session(self.path, settings, options)
        else:
            self.session = ort.InferenceSession(str(self.path), options, providers=providers)
        self._ort = ort
        self._output_names = ["logits", *layout.present_names]
        self._input_names = {i.name for i in self.session.get_inputs()}
        self._past_dtype = np.float16 if layout.past_dtype == "float16" else np.dtype(layout.past_dtype)

    def _value(self, array: np.ndarray) -> Any:
        return self._ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))

    def empty_cache(self, batch: int) -> Cache:
        """A zero-length cache for ``batch`` rows."""
        shape = (batch, self.layout.kv_heads, 0, self.layout.head_dim)
        empty = np.zeros(shape, dtype=self._past_dtype)
        return Cache(tuple(self._value(empty) for _ in self.layout.past_names), 0)

    def _run(self, input_ids: np.ndarray, attention_mask: np.ndarray, past: Cache) -> tuple[Any, Cache]:
        feeds = {"input_ids": self._value(input_ids), "attention_mask": self._value(attention_mask)}
        if self.layout.has_position_ids:
            feeds["position_ids"] = self._value(position_ids(attention_mask, input_ids.shape[1]))
        feeds.update(zip(self.layout.past_names, past.values))
        outputs = self.session.run_with_ort_values(self._output_names, feeds)
        return outputs[0], Cache(tuple(outputs[1:]), int(attention_mask.shape[1]))

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray,
                past: Cache | None = None) -> tuple[np.ndarray, Cache]:
        """Logits (float32 [batch, seq, vocab]) for ``input_ids`` after ``past``, and the cache that follows.

        ``attention_mask`` covers the past and the new tokens ([batch, past + seq]); ``past=None`` is an empty cache.
        """
        input_ids = np.asarray(input_ids, dtype=np.int64)
        attention_mask = np.asarray(attention_mask, dtype=np.int64)
        if input_ids.ndim != 2 or attention_mask.ndim != 2 or attention_mask.shape[0] != input_ids.shape[0]:
            raise ValueError(f"input_ids [batch, seq] and attention_mask [batch, past + seq] expected, got "
                             f"{list(input_ids.shape)} and {list(attention_mask.shape)}")
        past = past or self.empty_cache(input_ids.shape[0])
        if attention_mask.shape[1] != past.length + input_ids.shape[1]:
            raise ValueError(f"attention_mask has {attention_mask.shape[1]} columns; the cache holds {past.length} "
                             f"and input_ids adds {input_ids.shape[1]}")
        logits, cache = self._run(input_ids, attention_mask, past)
        return logits.numpy().astype(np.float32, copy=False), cache

    def greedy(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, *,
               eos_token_id: int | Sequence[int] | None, pad_token_id: int) -> Generation:
        """Greedy continuations of ``prompts`` (token ids), batched and left padded (right padded for a
        GroupQueryAttention graph, :attr:`DecoderLayout.padding`).

        Each row stops at an end-of-sequence token (kept in its tokens); the loop
        stops when every row has.  A stopped row is fed ``pad_token_id`` (its
        outputs are discarded) so the batch keeps one shape.
        """
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("greedy() needs at least one prompt, each of at least one token")
        eos = _eos_set(eos_token_id)
        batch = len(prompts)
        lengths = np.array([len(p) for p in prompts], dtype=np.int64)
        width = int(lengths.max())
        total = width + max(max_new_tokens, 0)
        right = self.layout.padding == "right"
        ids = np.full((batch, width), pad_token_id, dtype=np.int64)
        # left: each row's ones sit at the end, so every step's mask is a slice of one array
        mask = np.zeros((batch, total), dtype=np.int64)
        for row, prompt in enumerate(prompts):
            start = 0 if right else width - len(prompt)
            ids[row, start:start + len(prompt)] = prompt
            mask[row, start:start + len(prompt)] = 1
        mask[:, width:] = 1
        columns = np.arange(total, dtype=np.int64)
        tokens: list[list[int]] = [[] for _ in range(batch)]
        stopped = [False] * batch
        if max_new_tokens <= 0:
            return Generation(tuple(tuple(t) for t in tokens), tuple(stopped), 0.0, 0.0, 0, tuple(lengths.tolist()))

        start_time = time.perf_counter()
        logits, cache = self._run(ids, np.ascontiguousarray(mask[:, :width]), self.empty_cache(batch))
        last = logits.numpy()[np.arange(batch), lengths - 1 if right else width - 1]
        step_ids = self._take(last, tokens, stopped, eos, pad_token_id)
        prefill = time.perf_counter() - start_time
        steps = 0
        start_time = time.perf_counter()
        for used in range(width + 1, total):
            if all(stopped):
                break
            if right:   # row b holds its prompt and the tokens so far, counted from the first column
                step_mask = (columns[:used] < (lengths + (used - width))[:, None]).astype(np.int64)
            else:
                step_mask = np.ascontiguousarray(mask[:, :used])
            logits, cache = self._run(step_ids, step_mask, cache)
            step_ids = self._take(logits.numpy()[:, -1], tokens, stopped, eos, pad_token_id)
            steps += 1
        decode = time.perf_counter() - start_time
        return Generation(tuple(tuple(t) for t in tokens), tuple(stopped), prefill, decode, steps,
                          tuple(lengths.tolist()))

    @staticmethod
    def _take(last: np.ndarray, tokens: list[list[int]], stopped: list[bool], eos: frozenset[int],
              pad_token_id: int) -> np.ndarray:
        """Append each running row's argmax of ``last`` ([batch, vocab]); the ids to feed next, [batch, 1]."""
        chosen = np.argmax(last, axis=-1)
        feed = np.empty((len(tokens), 1), dtype=np.int64)
        for row, token in enumerate(chosen.tolist()):
            if stopped[row]:
                feed[row, 0] = pad_token_id
                continue
            tokens[row].append(token)
            feed[row, 0] = token
            if token in eos:
                stopped[row] = True
        return feed
