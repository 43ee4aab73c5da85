"""Text in, text out: a prompt through an exported LM's tokenizer and :meth:`DecoderSession.greedy`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError


@dataclass(frozen=True)
class TextGeneration:
    """Greedy continuations of text prompts and how fast they came."""

    prompts: tuple[str, ...]
    texts: tuple[str, ...]
    prompt_tokens: tuple[int, ...]
    new_tokens: tuple[tuple[int, ...], ...]
    stopped: tuple[bool, ...]
    prefill_seconds: float
    decode_seconds: float
    decode_steps: int
    #: new tokens cut to fit the model's context, when they were
    capped_to: int | None = None

    @property
    def prefill_tokens_per_second(self) -> float:
        return sum(self.prompt_tokens) / self.prefill_seconds if self.prefill_seconds > 0 else 0.0

    @property
    def decode_tokens_per_second(self) -> float:
        """Decode-step tokens per second, over all rows (each row's first token comes from the prefill)."""
        tokens = sum(max(len(row) - 1, 0) for row in self.new_tokens)
        return tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"prompts": list(self.prompts), "texts": list(self.texts), "prompt_tokens": list(self.prompt_tokens),
                "new_tokens": [list(row) for row in self.new_tokens], "stopped": list(self.stopped),
                "prefill_seconds": self.prefill_seconds, "decode_seconds": self.decode_seconds,
                "decode_steps": self.decode_steps, "capped_to": self.capped_to,
                "prefill_tokens_per_second": self.prefill_tokens_per_second,
                "decode_tokens_per_second": self.decode_tokens_per_second}


def _continuation(tokenizer: Any, prompt: list[int], new: list[int]) -> str:
    """The new tokens' text as it follows the prompt (decoding them alone loses a joining space in some
    tokenizers): the whole sequence decoded, less the prompt's own text."""
    head = tokenizer.decode(prompt, skip_special_tokens=True)
    whole = tokenizer.decode(prompt + new, skip_special_tokens=True)
    return whole[len(head):] if whole.startswith(head) else tokenizer.decode(new, skip_special_tokens=True)


def generate(model: str | os.PathLike[str], prompts: Sequence[str], max_new_tokens: int = 64, *,
             threads: int | None = None) -> TextGeneration:
    """Greedy continuations of ``prompts`` by the exported LM folder ``model``, batched, each stopping at EOS.

    A prompt of at least the model's context length is a :class:`UsageError`; new tokens beyond what the
    context leaves are cut (``capped_to`` says so).
    """
    from .session import DecoderSession
    from .text import generation_defaults, load_tokenizer

    if not prompts:
        raise UsageError("generate: give at least one prompt")
    if max_new_tokens < 1:
        raise UsageError(f"--max-new-tokens {max_new_tokens}: must be at least 1")
    session = DecoderSession(model, threads=threads)   # refuses a non-decoder before the tokenizer loads
    tokenizer = load_tokenizer(model)
    defaults = generation_defaults(model, tokenizer)
    ids = [[int(i) for i in tokenizer(text)["input_ids"]] for text in prompts]
    for text, row in zip(prompts, ids):
        if not row:
            raise UsageError(f"prompt {text!r}: the tokenizer gives no tokens")
    longest = max(len(row) for row in ids)
    capped = None
    if defaults.context_length:
        if longest >= defaults.context_length:
            raise UsageError(f"prompt of {longest} tokens: the model's context is {defaults.context_length} tokens "
                             "(prompt and new tokens together); shorten the prompt")
        room = defaults.context_length - longest
        if max_new_tokens > room:
            capped = max_new_tokens = room
    run = session.greedy(ids, max_new_tokens, eos_token_id=list(defaults.eos_token_id) or None,
                         pad_token_id=defaults.pad_token_id)
    texts = tuple(_continuation(tokenizer, prompt, [t for t in row if t not in defaults.eos_token_id])
                  for prompt, row in zip(ids, run.tokens))
    return TextGeneration(prompts=tuple(prompts), texts=texts, prompt_tokens=tuple(len(r) for r in ids),
                          new_tokens=run.tokens, stopped=run.stopped, prefill_seconds=run.prefill_seconds,
                          decode_seconds=run.decode_seconds, decode_steps=run.decode_steps, capped_to=capped)
