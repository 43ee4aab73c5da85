"""Decoder language models in onnxruntime: their cache layout, a greedy loop, and their tokenizer.

``decoder_layout`` reads a model's key/value cache from its graph,
``DecoderSession`` runs it step by step (``forward``, ``greedy``), and
``load_tokenizer`` / ``generation_defaults`` read what an exported folder holds
beside ``model.onnx`` (docs/llm.md).  Nothing heavy is imported until used.
"""

from .generate import TextGeneration, generate
from .layout import DecoderLayout, decoder_layout, model_file
from .session import Cache, DecoderSession, Generation, position_ids
from .text import GenerationDefaults, generation_defaults, has_tokenizer, load_tokenizer, model_folder

__all__ = ["Cache", "DecoderLayout", "DecoderSession", "Generation", "GenerationDefaults", "TextGeneration",
           "decoder_layout", "generate", "generation_defaults", "has_tokenizer", "load_tokenizer", "model_file",
           "model_folder", "position_ids"]
