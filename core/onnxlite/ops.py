"""Every operator vocabulary the host uses, in one table.

Which ONNX operators carry weights, which are conv-like or matmul-like, which
only a quantizer writes, and in which format.  The host's modules
(:mod:`~onnxlite.modelio`, :mod:`~onnxlite.graph_family`, :mod:`~onnxlite.claims`,
:mod:`~onnxlite.placement`, ``search/partial``) read these sets instead of
keeping their own, so a new quantized operator is added here once.  Plugins
may import them too (docs/plugins.md, the helper surface).

=========================  ================================================================
set                        what it holds
=========================  ================================================================
``WEIGHTED_OPS``           float operators with weights: what quantizers replace or wrap, and
                           what ``exclude=`` / ``keep_float`` name
``CONV_OPS``               convolutions, float and quantized (graph families: conv-heavy)
``MATMUL_OPS``             matrix products, float and quantized
``FUSED_TRANSFORMER_OPS``  onnxruntime's fused transformer operators: someone already fused
``INTEGER_OPS``            int8 forms written in a float node's place: QOperator (``QLinear*``,
                           ``QGemm``, ``QAttention``) and dynamic (``*Integer``,
                           ``DynamicQuantizeMatMul``)
``BLOCK_OPS``              block-wise weight-only forms (``MatMulNBits``, ``GatherBlockQuantized``)
``REPLACEMENT_OPS``        ``INTEGER_OPS | BLOCK_OPS``: evidence, by its name, that a node was
                           quantized
``QDQ_OPS``                quantize/dequantize steps (``QuantizeLinear``, ``DequantizeLinear``,
                           ``DynamicQuantizeLinear``): QDQ names them after *tensors*, so one
                           next to a float node is no evidence that the node was quantized
``QUANTIZED_OPS``          ``REPLACEMENT_OPS | QDQ_OPS``: appears only in a quantized model
``RANGE_ACTIVATIONS``      activations that only clip a range (``Relu``, ``Clip``): onnxruntime's
                           QDQ quantizer folds one into the quantized node before it, which then
                           takes the clipped range, but only when the activation is quantized too;
                           its ``WeightBiasQuantization`` pass looks through them to the Q
=========================  ================================================================
"""

from __future__ import annotations

WEIGHTED_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Attention", "EmbedLayerNormalization", "Gather"})

CONV_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv"})
MATMUL_OPS = frozenset({"MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "QGemm", "MatMulNBits"})

FUSED_TRANSFORMER_OPS = frozenset({
    "Attention", "MultiHeadAttention", "GroupQueryAttention", "QAttention", "EmbedLayerNormalization",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "RotaryEmbedding", "PackedAttention",
})

INTEGER_OPS = frozenset({
    # dynamic quantization
    "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
    # QOperator
    "QLinearConv", "QLinearMatMul", "QGemm", "QAttention", "QOrderedAttention", "QOrderedMatMul",
    "QEmbedLayerNormalization", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
    "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearSoftmax",
})
BLOCK_OPS = frozenset({"MatMulNBits", "MatMulBnb4", "GatherBlockQuantized"})
REPLACEMENT_OPS = INTEGER_OPS | BLOCK_OPS

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "DequantizeBFP"})
QUANTIZED_OPS = REPLACEMENT_OPS | QDQ_OPS

RANGE_ACTIVATIONS = frozenset({"Relu", "Clip"})


def is_qoperator(op_type: str) -> bool:
    """An int8 operator of the QOperator format or of dynamic quantization (``DynamicQuantizeLinear`` feeds those)."""
    return op_type in INTEGER_OPS or op_type == "DynamicQuantizeLinear" or op_type.startswith("QLinear")
