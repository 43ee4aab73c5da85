"""Built-in strategy ``transformer``: onnxruntime's transformer fusions, then dynamic per-channel int8.

``onnxruntime.transformers.optimizer.optimize_model`` rewrites attention,
layer norms and GELU into fused kernels (Attention, SkipLayerNormalization,
EmbedLayerNormalization, BiasGelu...).  It needs the head count and hidden
size; we read them from the export's ``onnxlite.transformers_config`` metadata,
else from the graph, and let the user override them.  Symbolic shape inference
runs on the fused graph before ``quantize_dynamic``, which otherwise fails with
"Unable to find data type for weight_name".  Measured on all-MiniLM-L6-v2
(2 threads): ~4x smaller, ~2x faster than fp32 at ~0.992 mean cosine.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnxlite import OnnxliteError, Option, QuantizeOutcome, QuantizerSpec, UsageError, hookimpl

from .common import (
    common_options,
    run_excluding,
    saturation_free,
    select_nodes,
    weights_note,
)

CONFIG_KEY = "onnxlite.transformers_config"

#: transformers' model_type -> onnxruntime optimizer model_type, for encoders that share BERT's graph shape.
BERT_LIKE = {"bert", "roberta", "xlm-roberta", "distilbert", "electra", "camembert", "albert", "mpnet",
             "deberta", "ernie", "xlm", "layoutlm", "megatron-bert", "minilm", "e5", "nomic_bert"}
ORT_NAMES = {"gpt2": "gpt2", "bart": "bart", "t5": "t5", "mt5": "t5", "vit": "vit", "swin": "swin",
             "clip": "clip", "gpt_neox": "gpt_neox", "phi": "phi", "qwen3": "qwen3", "deit": "vit"}
FUSION_OPS = ("Attention", "MultiHeadAttention", "EmbedLayerNormalization", "SkipLayerNormalization",
              "SkipSimplifiedLayerNormalization", "BiasGelu", "FastGelu", "Gelu", "GemmFastGelu",
              "LayerNormalization", "RotaryEmbedding")


#: Quantize the fused ops too: QAttention is onnxruntime's int8 attention kernel, and the embedding
#: tables (EmbedLayerNormalization / Gather) are a large share of an encoder's bytes (half of MiniLM's).
FUSED_OP_TYPES = ("MatMul", "Gemm", "Attention", "EmbedLayerNormalization", "Gather")


def _constant_values(model) -> dict[str, list[int]]:
    """Small integer constants by tensor name (initializers and Constant nodes)."""
    from onnx import numpy_helper

    values: dict[str, list[int]] = {}
    tensors = [(init.name, init) for init in model.graph.initializer]
    tensors += [(node.output[0], attr.t) for node in model.graph.node if node.op_type == "Constant"
                for attr in node.attribute if attr.name == "value"]
    for name, tensor in tensors:
        if tensor.data_type in (6, 7) and len(tensor.dims) <= 1 and (not tensor.dims or tensor.dims[0] <= 8):
            values[name] = [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)]
    return values


def _shape_tail(model, shape_input: str, consts: dict[str, list[int]], producers: dict[str, Any]) -> list[int | None]:
    """The entries of a Reshape's target shape that are known constants (None where computed at run time)."""
    if shape_input in consts:
        return list(consts[shape_input])
    node = producers.get(shape_input)
    if node is None or node.op_type != "Concat":
        return []
    tail: list[int | None] = []
    for part in node.input:
        value = consts.get(part)
        if value is None:
            unsqueeze = producers.get(part)
            if unsqueeze is not None and unsqueeze.op_type == "Unsqueeze" and unsqueeze.input[0] in consts:
                value = consts[unsqueeze.input[0]]
        tail.extend(value if value is not None else [None])
    return tail


def detect_dims(model) -> dict[str, Any]:
    """``{"num_heads", "hidden_size"}`` read from the graph (0 when not found).

    hidden size: the most common LayerNormalization scale length.  Heads: the
    Reshape that splits heads before a Transpose(0,2,1,3) has ``[..., heads, head_dim]``
    in its target shape, written as constants or as ``-1, head_dim``.
    """
    sizes = {init.name: list(init.dims) for init in model.graph.initializer}
    norm_sizes = Counter(sizes[n.input[1]][0] for n in model.graph.node
                         if n.op_type in ("LayerNormalization", "SkipLayerNormalization")
                         and len(n.input) > 1 and len(sizes.get(n.input[1], [])) == 1)
    hidden = norm_sizes.most_common(1)[0][0] if norm_sizes else 0
    consts = _constant_values(model)
    producers = {out: node for node in model.graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    heads: Counter[int] = Counter()
    for node in model.graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2:
            continue
        perms = [list(a.ints) for c in consumers.get(node.output[0], []) if c.op_type == "Transpose"
                 for a in c.attribute if a.name == "perm"]
        if not any(p[:4] == [0, 2, 1, 3] or p[:4] == [0, 2, 3, 1] for p in perms):
            continue
        tail = _shape_tail(model, node.input[1], consts, producers)
        if len(tail) < 2:
            continue
        n_heads, head_dim = tail[-2], tail[-1]
        if isinstance(n_heads, int) and n_heads > 0:
            heads[n_heads] += 1
        elif isinstance(head_dim, int) and head_dim > 0 and hidden and hidden % head_dim == 0:
            heads[hidden // head_dim] += 1
    return {"num_heads": heads.most_common(1)[0][0] if heads else 0, "hidden_size": hidden}


def resolve_settings(model, options: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """model_type / num_heads / hidden_size from options, else metadata, else the graph; plus where each came from."""
    config: dict[str, Any] = {}
    raw = next((p.value for p in model.metadata_props if p.key == CONFIG_KEY), None)
    if raw:
        try:
            config = json.loads(raw)
        except ValueError:
            config = {}
    graph = detect_dims(model)
    found: dict[str, Any] = {}
    sources: list[str] = []
    for key, config_key in (("num_heads", "num_attention_heads"), ("hidden_size", "hidden_size")):
        if options[key]:
            found[key], where = int(options[key]), "option"
        elif isinstance(config.get(config_key), int) and config[config_key] > 0:
            found[key], where = int(config[config_key]), "export metadata"
        elif graph[key]:
            found[key], where = graph[key], "graph"
        else:
            found[key], where = 0, "onnxruntime's own detection"
        sources.append(f"{key}={found[key] or '?'} ({where})")
    model_type = options["model_type"]
    if model_type == "auto":
        hf_type = str(config.get("model_type", "")).lower()
        if hf_type in ORT_NAMES:
            model_type, where = ORT_NAMES[hf_type], f"export metadata: {hf_type}"
        elif hf_type in BERT_LIKE:
            model_type, where = "bert", f"export metadata: {hf_type}"
        else:
            model_type, where = "bert", "default for encoders" if not hf_type else f"{hf_type!r} treated as bert"
        sources.insert(0, f"model_type={model_type} ({where})")
    else:
        sources.insert(0, f"model_type={model_type} (option)")
    found["model_type"] = model_type
    return found, sources


def _symbolic_shape_inference():
    """``SymbolicShapeInference``, loaded without ``onnxruntime.tools/__init__``, which imports torch
    when it is installed (5 s here) for an unrelated helper."""
    import importlib.util
    import sys

    name = "onnxlite_plugins._ort_symbolic_shape_infer"
    if name in sys.modules:
        return sys.modules[name].SymbolicShapeInference
    found = importlib.util.find_spec("onnxruntime")
    path = Path(found.origin).parent / "tools" / "symbolic_shape_infer.py" if found and found.origin else None
    if path is None or not path.exists():
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        return SymbolicShapeInference
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        return SymbolicShapeInference
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.SymbolicShapeInference


#: fused ops whose onnxruntime CPU kernels take a 1-D scale (gamma) and bias (beta): inputs 2 and 3
SKIP_NORMS = ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization")


def unfit_norm_scales(model) -> list[str]:
    """Skip layer norms the fusion made whose gamma or beta is a constant of rank other than 1.

    The fusion copies an RMSNorm's scale as it finds it (``[1, 1, hidden]`` in some exports), and onnxruntime's
    kernel then refuses the graph when it runs ("gamma is expected to have 1 dimension, got 3").
    """
    ranks = {init.name: len(init.dims) for init in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type not in SKIP_NORMS:
            continue
        for index, role in ((2, "gamma"), (3, "beta")):
            if len(node.input) > index and ranks.get(node.input[index], 1) != 1:
                found.append(f"{node.op_type} {node.name}: {role} of rank {ranks[node.input[index]]}")
    return found


class TransformerQuantizer:
    def quantize(self, model: Path, output: Path, options: Mapping[str, Any], context) -> QuantizeOutcome:
        import onnx
        from onnxruntime.transformers.optimizer import MODEL_TYPES, optimize_model

        from onnxlite.modelio import uses_external_data
        from onnxlite.runtime import quiet_root_logging

        if options["model_type"] != "auto" and options["model_type"] not in MODEL_TYPES:
            raise UsageError(f"--option model_type={options['model_type']}: onnxruntime's optimizer knows "
                             f"{', '.join(sorted(MODEL_TYPES))} (or auto)")
        header = onnx.load(str(model), load_external_data=False)
        external = uses_external_data(header)
        settings, sources = resolve_settings(header, options)
        def fuse(fusion_options: Any = None) -> Any:
            with quiet_root_logging():
                return optimize_model(str(model), model_type=settings["model_type"], num_heads=settings["num_heads"],
                                      hidden_size=settings["hidden_size"], opt_level=options["opt_level"],
                                      use_gpu=options["use_gpu"], optimization_options=fusion_options)

        optimized = fuse()
        unfit = unfit_norm_scales(optimized.model)
        skipped_fusion = ""
        if unfit:
            # onnxruntime would refuse this graph when it runs: fuse again without that one pattern
            from onnxruntime.transformers.fusion_options import FusionOptions

            fusion_options = FusionOptions(settings["model_type"])
            fusion_options.enable_skip_layer_norm = False
            optimized = fuse(fusion_options)
            skipped_fusion = (f"skip layer norm fusion left out: it made {'; '.join(unfit[:3])}"
                              f"{' ...' if len(unfit) > 3 else ''}, which onnxruntime's kernel refuses (it takes "
                              "a 1-D gamma)")
            context.warn(f"transformer: {skipped_fusion}")
            still = unfit_norm_scales(optimized.model)
            if still:
                raise OnnxliteError(f"transformer: the fused graph has {still[0]}, which onnxruntime refuses "
                                    "(it takes a 1-D gamma); try --option opt_level=0 or another strategy")
        stats = {k: int(v) for k, v in optimized.get_fused_operator_statistics().items() if v}
        # Saving through OnnxModel adds the com.microsoft opset import the fused ops need.
        fused_path = context.workdir / "fused.onnx"
        optimized.save_model_to_file(str(fused_path), use_external_data_format=external)
        notes = ["fusion settings: " + ", ".join(sources)]
        if skipped_fusion:
            notes.append(skipped_fusion)
        if not any(stats.get(op) for op in ("Attention", "MultiHeadAttention", "GroupQueryAttention")):
            context.warn("attention was not fused (onnxruntime did not recognise the attention pattern"
                         + ("" if settings["num_heads"] else ", and the head count could not be detected: "
                            "pass --option num_heads=N --option hidden_size=H") + "); other fusions still apply")
        details: dict[str, Any] = {"fusions": stats, "model_type": settings["model_type"],
                                   "num_heads": settings["num_heads"], "hidden_size": settings["hidden_size"]}
        if not options["quantize"]:
            # Same folder, so any external data file it refers to stays beside it for the host to publish.
            os.replace(fused_path, output)
            notes.append("fusion only (quantize=false): weights stay fp32")
            return QuantizeOutcome(notes=notes, details=details)
        # quantize_dynamic cannot type the fused graph's weights without this (see the module docstring).
        with quiet_root_logging():
            inferred = _symbolic_shape_inference().infer_shapes(onnx.load(str(fused_path)), auto_merge=True)
        staged = context.workdir / "fused_shapes.onnx"
        onnx.save_model(inferred, str(staged), save_as_external_data=external, all_tensors_to_one_file=True,
                        location="fused_shapes.onnx.data")
        op_types, targets, exclude = select_nodes(inferred, options, what="fused ")
        run_excluding(staged, output, options, targets, exclude, external)
        notes.append("then dynamic int8: " + weights_note(options, op_types))
        return QuantizeOutcome(excluded_nodes=exclude, notes=notes, details=details)


@hookimpl
def register_quantizers():
    return [
        QuantizerSpec(
            name="transformer",
            exclude_option="exclude",
            description="onnxruntime transformer fusions (attention, skip/embed layer norm, GELU), "
                        "then dynamic per-channel int8. For BERT-style encoders on CPU.",
            factory=TransformerQuantizer,
            requires=("onnxruntime", "onnx", "sympy"),
            install="onnxlite[cpu]",
            applies_to=("transformer",),
            # encoder fusions: a decoder exported with its cache already has its attention written for decoding
            avoid=("decoder",),
            needs_calibration=False,
            output_format=lambda options: "qoperator" if options.get("quantize", True) else "fp32",
            options=(
                Option("model_type", str, "auto", "onnxruntime optimizer model type (bert, gpt2, vit, ...); "
                                                  "auto reads the export metadata, else bert."),
                Option("num_heads", int, 0, "Attention heads (0: from the export metadata or the graph)."),
                Option("hidden_size", int, 0, "Hidden size (0: from the export metadata or the graph)."),
                Option("opt_level", int, 0, "onnxruntime graph optimisation before saving "
                                            "(0: python fusions only, portable; 1 or 99 bake in onnxruntime's own)."),
                Option("use_gpu", bool, False, "Fuse for a GPU provider (some fused ops are GPU-only)."),
                Option("quantize", bool, True, "Quantize after fusing (false: fused fp32 only)."),
                *common_options(FUSED_OP_TYPES),
            ),
            grid=({}, {"quantize": False}),
            isa_grid=({"reduce_range": True},),   # where U8S8 kernels saturate (x86 without VNNI)
            saturation_free=lambda options: not options.get("quantize") or saturation_free(options),
        )
    ]
