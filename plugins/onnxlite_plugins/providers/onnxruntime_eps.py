"""Built-in provider plugin: the onnxruntime execution providers people deploy on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onnxlite import ProviderSpec, hookimpl

CPU = "CPUExecutionProvider"


class OrtProvider:
    """One execution provider; checks the live onnxruntime build before use."""

    def __init__(self, spec: ProviderSpec):
        self.spec = spec

    def check(self) -> str | None:
        import onnxruntime as ort

        available = ort.get_available_providers()
        if self.spec.ort_name in available:
            return None
        return (f"{self.spec.ort_name} is not in this onnxruntime build (onnxruntime {ort.__version__} offers "
                f"{', '.join(available)}): pip install {self.spec.packages[0]}")

    def session_providers(self, options: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        chosen = [(self.spec.ort_name, {**self.spec.provider_options, **options})]
        if self.spec.ort_name != CPU:
            # onnxruntime places nodes the accelerator cannot run on the CPU; naming it keeps that explicit.
            chosen.append((CPU, {}))
        return chosen


def _spec(name: str, ort_name: str, description: str, packages: tuple[str, ...], fast: tuple[str, ...],
          provider_options: dict[str, Any] | None = None, platforms: tuple[str, ...] = ()) -> ProviderSpec:
    holder: list[ProviderSpec] = []
    spec = ProviderSpec(name=name, description=description, factory=lambda: OrtProvider(holder[0]),
                        requires=("onnxruntime",), install=packages[0], ort_name=ort_name, packages=packages,
                        provider_options=provider_options or {}, fast_formats=fast, platforms=platforms)
    holder.append(spec)
    return spec


@hookimpl
def register_providers() -> list[ProviderSpec]:
    return [
        _spec("cpu", CPU, "onnxruntime's default CPU kernels (MLAS); int8 QOperator and QDQ both run fast.",
              ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml"),
              ("fp32", "qdq", "qoperator", "int4")),
        _spec("cuda", "CUDAExecutionProvider", "NVIDIA GPUs through CUDA/cuDNN; fp16 pays off, int8 QOperator does not.",
              ("onnxruntime-gpu",), ("fp32", "fp16", "int4")),
        _spec("tensorrt", "TensorrtExecutionProvider", "NVIDIA TensorRT; wants QDQ models for int8.",
              ("onnxruntime-gpu",), ("fp32", "fp16", "qdq")),
        _spec("openvino", "OpenVINOExecutionProvider", "Intel CPUs, GPUs and NPUs through OpenVINO; QDQ for int8.",
              ("onnxruntime-openvino",), ("fp32", "fp16", "qdq")),
        _spec("directml", "DmlExecutionProvider", "DirectX 12 GPUs on Windows.",
              ("onnxruntime-directml",), ("fp32", "fp16"), platforms=("win32",)),
        _spec("coreml", "CoreMLExecutionProvider", "Apple Neural Engine and GPU on macOS/iOS.",
              ("onnxruntime",), ("fp32", "fp16"), platforms=("darwin",)),
        _spec("rocm", "ROCMExecutionProvider", "AMD GPUs through ROCm.",
              ("onnxruntime-rocm",), ("fp32", "fp16")),
    ]
