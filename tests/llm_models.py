"""Tiny causal language models built in code (random weights) with a tiny tokenizer, saved as transformers folders.

The tokenizer is a word-level vocabulary over ``WORDS`` plus special tokens, so any text made of those words
round-trips; ids above the tokenizer's size still exist in the model (its vocabulary is larger), as in real
checkpoints whose embedding is padded.
"""

from __future__ import annotations

from pathlib import Path

WORDS = ("the a of to and in is was for on that with as by at from it this be are or an not his her they "
         "capital france paris city river north south east west big small old new one two three four five "
         "red green blue cat dog house tree water fire stone light dark day night king queen road").split()
SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")


def tiny_tokenizer(folder: Path):
    """A word-level PreTrainedTokenizerFast with pad 0, bos 1, eos 2, unk 3, saved into ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*SPECIALS, *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    from tokenizers import decoders

    tok.decoder = decoders.WordPiece(prefix="##")   # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>")
    fast.save_pretrained(str(folder))
    return fast


def _save(model, folder: Path, eos: int = 2) -> Path:
    from transformers import GenerationConfig

    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    GenerationConfig(bos_token_id=1, eos_token_id=eos, pad_token_id=0).save_pretrained(str(folder))
    tiny_tokenizer(folder)
    return folder


def tiny_llama(folder: Path, *, seed: int = 0, vocab: int = 300, tokenizer: bool = True,
               dtype: str = "float32") -> Path:
    """2 layers, hidden 64, 4 query heads and 2 KV heads (grouped-query attention), RoPE, untied head;
    ``dtype="bfloat16"`` saves it as models ship."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval().to(getattr(torch, dtype))
    if not tokenizer:
        folder.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(folder))
        return folder
    return _save(model, folder)


def tiny_gpt2(folder: Path, *, seed: int = 0, vocab: int = 300) -> Path:
    """2 layers, hidden 64, 4 heads, learned positions, tied head."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=128,
                        bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return _save(GPT2LMHeadModel(config).eval(), folder)


def greedy_reference(folder: Path, prompts, max_new_tokens: int) -> list[list[int]]:
    """transformers' own greedy continuation of each prompt alone (no padding), fp32: the reference."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for prompt in prompts:
            ids = model.generate(torch.tensor([list(prompt)]), max_new_tokens=max_new_tokens, do_sample=False,
                                 min_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=0)
            out.append(ids[0, len(prompt):].tolist())
    return out
