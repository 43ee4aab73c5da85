"""Tiny decoder LLMs for the tests, built in code with random weights.

For the quantization tests: a random LlamaForCausalLM (grouped-query attention) saved with save_pretrained and
exported by onnxruntime-genai's model builder at fp32, so the graph has what real exports have
(GroupQueryAttention with a packed QKV MatMul, rotary caches, tied or separate embeddings, an LM head); run
through onnxruntime with an empty cache: the prefill pass of a decode loop.

For the judge and bench tests: ``llm_models.tiny_llama`` through the builder at fp32, a perturbed copy (noise on
every MatMul weight) playing a lightened candidate, and a corpus their tokenizer reads.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from llm_models import WORDS, tiny_llama

VOCAB = 384   # no Linear of the model has this many outputs: the builder takes such a Linear for the LM head
HIDDEN, INNER, LAYERS, HEADS, KV_HEADS = 128, 256, 2, 4, 2


def save_tiny_llama(folder: Path, tie: bool, seed: int = 0, outliers: bool = False, prepare=None) -> Path:
    """A random 2-layer LLaMA (GQA 4/2 heads, vocabulary 256) and a byte-level tokenizer, saved to ``folder``.

    ``outliers``: a few input channels of every projection scaled up (what trained LLMs show), which is where
    4-bit blocks lose most and mixed precision has something to keep.  ``prepare(model)`` may change the
    weights before they are saved.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INNER, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
                         tie_word_embeddings=tie, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("proj.weight"):
                param.mul_(4.0)   # logits that move when weights do (the default init gives near-uniform ones)
                if outliers and "layers.1" in name:
                    gen = torch.Generator().manual_seed(len(name))
                    cols = torch.randperm(param.shape[1], generator=gen)[:2]
                    param[:, cols] *= 12.0
    if prepare is not None:
        prepare(model)
    model.save_pretrained(folder)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=alphabet[1],
                            eos_token=alphabet[2]).save_pretrained(folder)
    return folder


def build_fp32(hf_folder: Path, out: Path) -> Path:
    """onnxruntime-genai's builder at fp32 on the CPU: ``out/model.onnx`` (weights in ``model.onnx.data``)."""
    subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_folder), "-o", str(out),
                    "-p", "fp32", "-e", "cpu"], check=True, capture_output=True)
    return out / "model.onnx"


def tiny_decoder(root: Path, tie: bool, outliers: bool = False) -> Path:
    hf = save_tiny_llama(root / ("hf-tied" if tie else "hf"), tie, outliers=outliers)
    return build_fp32(hf, root / ("onnx-tied" if tie else "onnx"))


def token_windows(batch: int = 2, seq: int = 12, seed: int = 1) -> dict[str, np.ndarray]:
    """Token ids and a mask, the second row padded by 3 on the right (GroupQueryAttention graphs take right
    padding, as the decode loop batches them)."""
    ids = np.random.default_rng(seed).integers(3, VOCAB, size=(batch, seq)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1:, -3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def with_config(model: Path, folder: Path) -> Path:
    """``folder/model.onnx``'s path, with the builder's ``genai_config.json`` beside it (the cache sizes the decode
    loop reads, as an exported folder holds them)."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(model.parent / "genai_config.json", folder / "genai_config.json")
    return folder / "model.onnx"


def greedy_tokens(path: Path, steps: int = 16) -> tuple[tuple[int, ...], ...]:
    """Greedy continuations of two prompts of different lengths, through the cache (``DecoderSession``)."""
    from onnxlite.decoding import DecoderSession

    prompts = [[5, 17, 99, 42, 7, 250], [31, 8, 64]]
    return DecoderSession(path).greedy(prompts, steps, eos_token_id=None, pad_token_id=0).tokens


def prefill_logits(path: Path, feed: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Logits of one prefill pass (empty cache) through onnxruntime on the CPU."""
    import onnx
    import onnxruntime as ort

    from onnxlite.decoder_inputs import with_empty_past

    feed = feed or token_windows()
    proto = onnx.load(str(path), load_external_data=False)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    full = with_empty_past(proto, [feed])[0]
    return session.run(["logits"], full)[0]


def mean_kl(ref: np.ndarray, got: np.ndarray, mask: np.ndarray) -> float:
    """Mean KL(ref || got) of the next-token distributions over the unpadded positions."""
    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    p, q = log_softmax(ref.astype(np.float64)), log_softmax(got.astype(np.float64))
    kl = (np.exp(p) * (p - q)).sum(-1)
    return float(kl[mask.astype(bool)].mean())


#: llama.cpp's names for a LLaMA's weights, and the block format each gets in the test files
GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
              "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def _gguf_kind(name: str) -> str:
    if "embed_tokens" in name or "lm_head" in name:
        return "Q8_0"
    return "Q4_0" if "layers.0.self_attn" in name else "Q4_1"


def gguf_decoder(root: Path, tie: bool) -> tuple[Path, Path]:
    """A tiny LLaMA whose weights are the dequantized blocks of a GGUF file written beside it (Q4_0 for layer 0's
    attention, Q4_1 for the rest, Q8_0 for the embedding and LM head), as a model loaded from a GGUF is; q and k
    are stored with llama.cpp's rotary row permutation, so only values (not names or order) tie file and graph.
    Returns the builder's fp32 ``model.onnx`` and the ``.gguf`` file."""
    import gguf
    import torch
    from gguf.quants import dequantize, quantize

    gguf_path = root / ("tiny-tied.gguf" if tie else "tiny.gguf")
    writer = gguf.GGUFWriter(str(gguf_path), "llama")

    def permute(rows: np.ndarray, heads: int) -> np.ndarray:
        return rows.reshape(heads, 2, rows.shape[0] // heads // 2, -1).swapaxes(1, 2).reshape(rows.shape)

    def prepare(model) -> None:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if param.ndim != 2 or (tie and "lm_head" in name):
                    continue
                kind = getattr(gguf.GGMLQuantizationType, _gguf_kind(name))
                blocks = quantize(param.numpy().astype(np.float32), kind)
                param.copy_(torch.from_numpy(dequantize(blocks, kind).reshape(param.shape)))
                if "embed_tokens" in name:
                    target = "token_embd.weight"
                elif "lm_head" in name:
                    target = "output.weight"
                else:
                    layer, proj = name.split(".")[2], name.split(".")[-2]
                    target = f"blk.{layer}.{GGUF_NAMES[proj]}.weight"
                    if proj in ("q_proj", "k_proj"):
                        blocks = permute(blocks, HEADS if proj == "q_proj" else KV_HEADS)
                writer.add_tensor(target, blocks, raw_dtype=kind)

    hf = save_tiny_llama(root / ("hf-gguf-tied" if tie else "hf-gguf"), tie, prepare=prepare)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return build_fp32(hf, root / ("onnx-gguf-tied" if tie else "onnx-gguf")), gguf_path


def gguf_with(path: Path, kind: str, shape: tuple[int, int] = (4, 256)) -> Path:
    """A GGUF file holding one zero tensor ``blk.0.ffn_down.weight`` in block format ``kind`` (raw bytes)."""
    import gguf

    qtype = getattr(gguf.GGMLQuantizationType, kind)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("blk.0.ffn_down.weight", np.zeros((shape[0], shape[1] // block * size), dtype=np.uint8),
                      raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def builder_decoder(hf_folder: Path, out: Path) -> Path:
    """``python -m onnxruntime_genai.models.builder -p fp32 -e cpu`` of a transformers folder."""
    pytest.importorskip("onnxruntime_genai")
    done = subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf_folder), "-o",
                           str(out), "-p", "fp32", "-e", "cpu"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in ("generation_config.json", "config.json"):
        if (hf_folder / name).exists() and not (out / name).exists():
            shutil.copy(hf_folder / name, out / name)
    return out


def perturbed_copy(source: Path, target: Path, scale: float, seed: int = 0) -> Path:
    """``source``'s folder with Gaussian noise (``scale`` times each weight's mean magnitude) on its MatMul
    weights, saved with the weights inside the .onnx file."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.is_file() and not item.name.startswith("model.onnx"):
            shutil.copy(item, target / item.name)
    model = onnx.load(str(source / "model.onnx"))
    rng = np.random.default_rng(seed)
    for init in model.graph.initializer:
        if "MatMul" in init.name and init.data_type == onnx.TensorProto.FLOAT:
            w = numpy_helper.to_array(init)
            noisy = w + scale * np.abs(w).mean() * rng.standard_normal(w.shape).astype(w.dtype)
            init.CopyFrom(numpy_helper.from_array(noisy, init.name))
    onnx.save(model, str(target / "model.onnx"))
    return target


def word_corpus(path: Path, documents: int = 10, seed: int = 0, low: int = 30, high: int = 90) -> Path:
    """Documents of random words from the tiny tokenizer's vocabulary, blank lines between them."""
    rng = random.Random(seed)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))) for _ in range(documents)]
    path.write_text("\n\n".join(docs) + "\n")
    return path


def decoder_pair(root: Path) -> tuple[Path, Path, Path]:
    """(the fp32 decoder folder, a perturbed copy, the transformers folder they come from)."""
    hf = tiny_llama(root / "hf")
    fp32 = builder_decoder(hf, root / "fp32")
    noisy = perturbed_copy(fp32, root / "noisy", 0.3)
    return fp32, noisy, hf
