"""Built-in provider plugin: the onnxruntime execution providers people deploy on.

Availability has two layers.  The registry's cheap check (no import) looks at
which onnxruntime distribution is installed and the platform; ``check()``
then asks the live build (``onnxruntime.get_available_providers()``).  A
provider that fails either is an error with the package to install, never a
silent run on the CPU.  ``fast_formats`` records which model formats each
provider accelerates (docs/providers.md): CUDA has no fast int8 QOperator
kernels (MatMulInteger/ConvInteger run on the CPU), TensorRT wants QDQ for
int8.  OpenVINO's were measured (benchmarks/openvino_formats.py): QDQ int8
and MatMulNBits weight-only run fast; dynamic int8 (MatMulInteger) is slower
than fp32 there, QLinear* ops fall back to the CPU, and an fp16 model runs at
fp32 speed (OpenVINO picks its own inference precision).

No onnxruntime build is a dependency of onnxlite: each is an extra
(``onnxlite[cpu]``, ``[gpu]``, ``[openvino]``, ``[directml]``), because they all
ship the same ``onnxruntime`` module and would overwrite each other.  The
install hints name the extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onnxlite import Option, ProviderSpec, hookimpl

CPU = "CPUExecutionProvider"
#: onnxruntime wheels share the ``onnxruntime`` module; two installed at once shadow each other
_ORT_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml",
                      "onnxruntime-rocm", "onnxruntime-training")


def _installed(dist: str) -> bool:
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution(dist)
    except PackageNotFoundError:
        return False
    return True


class OrtProvider:
    """One execution provider; checks the live onnxruntime build before use."""

    def __init__(self, spec: ProviderSpec):
        self.spec = spec

    def check(self) -> str | None:
        import onnxruntime as ort

        available = ort.get_available_providers()
        if self.spec.ort_name in available:
            return None
        installed = [d for d in _ORT_DISTRIBUTIONS if _installed(d)]
        wanted = self.spec.packages[0]
        if wanted in installed and len(installed) > 1:
            others = ", ".join(d for d in installed if d != wanted)
            return (f"{self.spec.ort_name} is missing although {wanted} is installed: {others} shadows it "
                    f"(they share the onnxruntime module); pip uninstall {others} && "
                    f"pip install --force-reinstall {wanted}")
        return (f"{self.spec.ort_name} is not in this onnxruntime build (onnxruntime {ort.__version__} offers "
                f"{', '.join(available)}): pip install {wanted}")

    def session_providers(self, options: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        values = dict(self.spec.provider_options)
        from onnxlite.specs import parse_options

        # Only the options given override the spec's defaults; a provider that declares none passes
        # whatever it is given on to onnxruntime.
        values.update(parse_options(self.spec.options, options, flag="provider option",
                                    owner=f"provider {self.spec.name!r}", defaults=False,
                                    allow_unknown=not self.spec.options))
        # onnxruntime wants provider option values as strings or plain numbers
        chosen = [(self.spec.ort_name, {k: (str(v) if isinstance(v, bool) else v) for k, v in values.items()})]
        if self.spec.ort_name != CPU:
            # Nodes the accelerator has no kernel for go to the CPU; naming it keeps that explicit,
            # and onnxlite.placement reports which nodes they were.
            chosen.append((CPU, {}))
        return chosen


#: the onnxlite extra that installs each onnxruntime distribution
EXTRAS = {"onnxruntime": "cpu", "onnxruntime-gpu": "gpu", "onnxruntime-openvino": "openvino",
          "onnxruntime-directml": "directml"}


def install_hint(dist: str) -> str:
    """``onnxlite[gpu]`` for onnxruntime-gpu: the extra, so that pip leaves other builds alone."""
    extra = EXTRAS.get(dist)
    return f"onnxlite[{extra}]" if extra else dist


def _spec(name: str, ort_name: str, description: str, packages: tuple[str, ...], fast: tuple[str, ...],
          provider_options: dict[str, Any] | None = None, platforms: tuple[str, ...] = (),
          options: tuple[Option, ...] = ()) -> ProviderSpec:
    holder: list[ProviderSpec] = []
    spec = ProviderSpec(name=name, description=description, factory=lambda: OrtProvider(holder[0]),
                        requires=("onnxruntime",), install=install_hint(packages[0]), ort_name=ort_name,
                        packages=packages,
                        provider_options=provider_options or {}, fast_formats=fast, platforms=platforms,
                        options=options)
    holder.append(spec)
    return spec


_DEVICE_ID = Option("device_id", int, 0, "GPU index")


@hookimpl
def register_providers() -> list[ProviderSpec]:
    return [
        _spec("cpu", CPU, "onnxruntime's default CPU kernels (MLAS); int8 QOperator, QDQ and int4 all run fast.",
              ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml", "onnxruntime-rocm"),
              ("fp32", "qdq", "qoperator", "int4")),
        _spec("cuda", "CUDAExecutionProvider",
              "NVIDIA GPUs through CUDA/cuDNN; fp16 pays off, int8 QOperator ops fall back to the CPU.",
              ("onnxruntime-gpu",), ("fp32", "fp16", "int4"),
              options=(_DEVICE_ID,
                       Option("gpu_mem_limit", int, None, "bytes the arena may use"),
                       Option("cudnn_conv_algo_search", str, None, "cuDNN convolution algorithm search",
                              choices=("EXHAUSTIVE", "HEURISTIC", "DEFAULT")),
                       Option("do_copy_in_default_stream", bool, None, "copy inputs in the compute stream"))),
        _spec("tensorrt", "TensorrtExecutionProvider",
              "NVIDIA TensorRT; int8 wants QDQ models, fp16 via trt_fp16_enable; unsupported subgraphs go to CUDA/CPU.",
              ("onnxruntime-gpu",), ("fp32", "fp16", "qdq"),
              options=(_DEVICE_ID,
                       Option("trt_fp16_enable", bool, None, "let TensorRT run fp32 layers in fp16"),
                       Option("trt_int8_enable", bool, None, "int8 for QDQ models"),
                       Option("trt_engine_cache_enable", bool, None, "cache built engines"),
                       Option("trt_engine_cache_path", str, None, "folder for cached engines"),
                       Option("trt_max_workspace_size", int, None, "bytes TensorRT may use while building"))),
        _spec("openvino", "OpenVINOExecutionProvider",
              "Intel CPUs, GPUs and NPUs through OpenVINO; int8 wants QDQ models, int4 weight-only runs fast, "
              "MatMulInteger is slower than fp32.",
              ("onnxruntime-openvino",), ("fp32", "qdq", "int4"),
              options=(Option("device_type", str, None, "CPU, GPU, NPU or e.g. HETERO:GPU,CPU"),
                       Option("precision", str, None, "inference precision", choices=("FP32", "FP16", "ACCURACY")),
                       Option("num_of_threads", int, None, "CPU threads"),
                       Option("cache_dir", str, None, "folder for compiled blobs"))),
        _spec("directml", "DmlExecutionProvider", "DirectX 12 GPUs on Windows; fp16 pays off, int8 mostly does not.",
              ("onnxruntime-directml",), ("fp32", "fp16"), platforms=("win32",), options=(_DEVICE_ID,)),
        _spec("coreml", "CoreMLExecutionProvider", "Apple Neural Engine and GPU on macOS/iOS; fp16 pays off.",
              ("onnxruntime",), ("fp32", "fp16"), platforms=("darwin",),
              options=(Option("ModelFormat", str, None, "CoreML model type", choices=("MLProgram", "NeuralNetwork")),
                       Option("MLComputeUnits", str, None, "where CoreML may run",
                              choices=("ALL", "CPUOnly", "CPUAndGPU", "CPUAndNeuralEngine")))),
        _spec("rocm", "ROCMExecutionProvider", "AMD GPUs through ROCm; fp16 pays off.",
              ("onnxruntime-rocm",), ("fp32", "fp16"), options=(_DEVICE_ID,)),
    ]
