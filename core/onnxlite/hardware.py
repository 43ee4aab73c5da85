"""The processor a model is judged and timed on: its instruction sets, and whether int8 kernels can saturate.

onnxruntime's answers for an int8 model depend on the CPU.  On x86 without
VNNI its U8S8 kernels multiply with ``vpmaddubsw``, which adds pairs of
uint8 x int8 products into a *saturating* int16 (two products of 255 x 127
overflow it); with AVX-512 VNNI, AVX-VNNI or AMX the products are summed in
int32 and nothing saturates.  7-bit weights (``reduce_range``) or uint8
weights (U8U8, another kernel) cannot saturate anywhere.  So a verdict holds
on the ISA it was judged on, and this module says which one that was.

Detection reads CPUID as this process sees it (numpy's
``__cpu_features__``, so an emulator such as ``qemu-x86_64 -cpu Haswell`` is
seen as the CPU it emulates), plus ``/proc/cpuinfo`` for what numpy does not
name (AMX, AVX-VNNI, i8mm), trusted only where it agrees with numpy.  It
imports nothing heavy until called, so ``--help`` does not pay for it.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .errors import UsageError

if TYPE_CHECKING:
    from .specs import QuantizerSpec

#: ``metadata_props`` keys lighten writes into its model, so a lone model.onnx says where it was judged
ISA_KEY = "onnxlite.isa"
TARGET_KEY = "onnxlite.target_cpu"
PORTABLE_KEY = "onnxlite.int8_saturation_free"
RE_JUDGE = "re-judge it here (onnxlite lighten, or onnxlite compare against its source)"

#: ``--target-cpu`` names: the architecture and the instruction-set flags each stands for
TARGETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "avx2": ("x86_64", ("avx2",)),
    "avx512": ("x86_64", ("avx2", "avx512f", "avx512bw")),
    "avx-vnni": ("x86_64", ("avx2", "avx_vnni")),
    "avx512-vnni": ("x86_64", ("avx2", "avx512f", "avx512bw", "avx512_vnni")),
    "amx": ("x86_64", ("avx2", "avx512f", "avx512bw", "avx512_vnni", "amx_int8")),
    "arm64": ("arm64", ()),
    "arm64-dotprod": ("arm64", ("asimddp",)),
    "arm64-i8mm": ("arm64", ("asimddp", "i8mm")),
}
TARGET_CHOICES = (*TARGETS, "native")

#: instruction sets whose int8 dot products accumulate in int32 (no int16 pair sum that can saturate)
EXACT_INT8 = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
#: numpy's CPUID names for the flags we record (``/proc/cpuinfo`` spelling)
_NUMPY = {"AVX2": "avx2", "AVX512F": "avx512f", "AVX512BW": "avx512bw", "AVX512VNNI": "avx512_vnni",
          "FMA3": "fma", "F16C": "f16c", "ASIMDDP": "asimddp"}
#: flags only /proc/cpuinfo names (numpy has no key for them)
_CPUINFO_ONLY = ("avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "i8mm")


@dataclass(frozen=True)
class Hardware:
    """One CPU (detected here, or declared by ``--target-cpu``) as far as quantized kernels care."""

    arch: str                      # "x86_64", "arm64" or what platform.machine() says
    isa: str                       # short name: "avx2", "avx512-vnni", "amx", "arm64-dotprod", ...
    flags: tuple[str, ...] = ()    # the instruction sets found, /proc/cpuinfo spelling
    int8_saturates: bool = False   # U8S8 int8 kernels sum pairs in saturating int16 (x86 without VNNI)
    cpu: str = ""                  # the model name, when known
    cores: int | None = None
    onnxruntime: str | None = None
    provider: str = "cpu"
    declared: bool = False         # named by --target-cpu, not detected

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["flags"] = list(self.flags)
        return {k: v for k, v in data.items() if v is not None and v != ""}

    @property
    def kernels(self) -> str:
        return "U8S8 int8 kernels can saturate" if self.int8_saturates else "int8 kernels exact"

    def line(self) -> str:
        """One line for the top of a benchmark's output: what the figures below were measured on."""
        cpu = self.cpu or self.arch
        runtime = f", onnxruntime {self.onnxruntime}" if self.onnxruntime else ""
        return f"CPU: {cpu} ({self.cores or '?'} cores) ISA: {self.isa} ({self.kernels}){runtime}, {self.provider}"


def isa_name(arch: str, flags: Iterable[str]) -> str:
    have = set(flags)
    if arch == "x86_64":
        for flag, name in (("amx_int8", "amx"), ("avx512_vnni", "avx512-vnni"), ("avx_vnni", "avx-vnni"),
                           ("avx512f", "avx512"), ("avx2", "avx2")):
            if flag in have:
                return name
        return "x86-64"
    if arch == "arm64":
        return "arm64-i8mm" if "i8mm" in have else ("arm64-dotprod" if "asimddp" in have else "arm64")
    return arch or "unknown"


def saturates(arch: str, flags: Iterable[str]) -> bool:
    """x86 with AVX2 (vpmaddubsw) and none of the int32-accumulating instructions."""
    have = set(flags)
    return arch == "x86_64" and "avx2" in have and not (have & EXACT_INT8)


def _arch() -> str:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "x64"):
        return "x86_64"
    if machine in ("aarch64", "arm64", "armv8l"):
        return "arm64"
    return machine


def _numpy_flags() -> set[str] | None:
    import importlib

    for module in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):   # numpy 2, numpy 1
        try:
            features: dict[str, bool] = importlib.import_module(module).__cpu_features__
        except (ImportError, AttributeError):
            continue
        return {ours for theirs, ours in _NUMPY.items() if features.get(theirs)}
    return None


def _cpuinfo() -> tuple[str, set[str]]:
    name, flags = "", set[str]()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Model", "Hardware") and not name:
                    name = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return name, flags


def combine(numpy_flags: set[str] | None, cpuinfo_flags: set[str]) -> set[str]:
    """numpy's CPUID view, plus what only /proc/cpuinfo names when the two agree on the rest.

    Under an emulator /proc/cpuinfo describes the host, not the CPU this process runs on: numpy then
    disagrees on a shared flag, and the host's AMX or VNNI must not be claimed.
    """
    if numpy_flags is None:
        return {f for f in cpuinfo_flags if f in _NUMPY.values() or f in _CPUINFO_ONLY}
    shared = set(_NUMPY.values())
    if cpuinfo_flags and (cpuinfo_flags & shared) == numpy_flags:
        return numpy_flags | {f for f in _CPUINFO_ONLY if f in cpuinfo_flags}
    return set(numpy_flags)


def onnxruntime_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


@lru_cache(maxsize=8)
def detect(provider: str = "cpu") -> Hardware:
    """This machine, as this process sees it (cached)."""
    arch = _arch()
    name, info = _cpuinfo()
    seen = _numpy_flags()
    flags = combine(seen, info)
    if name and seen is not None and info and (info & set(_NUMPY.values())) != seen:
        name += " (emulated: CPUID differs from /proc/cpuinfo)"   # qemu: the name is the host's
    return Hardware(arch=arch, isa=isa_name(arch, flags), flags=tuple(sorted(flags)),
                    int8_saturates=saturates(arch, flags), cpu=name or platform.processor() or arch,
                    cores=os.cpu_count(), onnxruntime=onnxruntime_version(), provider=provider)


def declared(name: str) -> Hardware:
    """The record of a ``--target-cpu`` name (already checked)."""
    arch, flags = TARGETS[name]
    return Hardware(arch=arch, isa=name, flags=flags, int8_saturates=saturates(arch, flags), declared=True)


def parse_target_cpu(value: str | None, option: str = "--target-cpu") -> Hardware | None:
    """``--target-cpu``: None when not given or ``native`` (this machine), else the declared CPU."""
    if value is None or str(value).strip() == "":
        return None
    name = str(value).strip().lower().replace("_", "-")
    if name == "native":
        return None
    if name not in TARGETS:
        raise UsageError(f"{option} {value}: unknown CPU kind; expected one of {', '.join(TARGET_CHOICES)}")
    return declared(name)


def recorded(isa: str | None) -> Hardware | None:
    """The CPU kind an ISA name recorded in a recipe or a model stands for (None: unknown or not recorded)."""
    return declared(isa) if isa in TARGETS else None


def answers_differ(a: Hardware, b: Hardware) -> bool:
    """Whether an int8 model may answer differently on ``a`` and ``b``: one saturates, the other does not."""
    return a.int8_saturates != b.int8_saturates


def metadata(here: Hardware, target: Hardware | None, portable: bool) -> dict[str, str]:
    """What lighten writes into its model's ``metadata_props`` (``portable``: its int8 math cannot saturate)."""
    return {ISA_KEY: here.isa, PORTABLE_KEY: str(portable).lower(),
            **({TARGET_KEY: target.isa} if target is not None else {})}


def has_integer_kernels(op_types: Iterable[str]) -> bool:
    """Integer MatMul/Conv kernels run (QOperator, dynamic, or QDQ activations that onnxruntime fuses)."""
    from .ops import INTEGER_OPS

    ops = set(op_types)
    return bool(ops & INTEGER_OPS) or "QuantizeLinear" in ops


def mismatch_warning(judged: str | None, here: Hardware, what: str, target: str | None = None,
                     advice: str = RE_JUDGE) -> str | None:
    """One line when ``what`` was judged on a CPU kind whose int8 answers differ from this machine's.

    A model made for this kind of CPU (``target``) is not warned about: its numerics were chosen to give
    the same answers on both.
    """
    if target is not None and (kind := recorded(target)) is not None and not answers_differ(kind, here):
        return None
    then = recorded(judged)
    if then is None or not answers_differ(then, here):
        return None
    return (f"{what} was judged on {then.isa} ({then.kernels}); this machine is {here.isa} "
            f"({here.kernels}), so its int8 answers may differ here: {advice}")


def model_warning(paths: Iterable[str | os.PathLike[str]], here: Hardware) -> str | None:
    """:func:`mismatch_warning` for the first of ``paths`` with integer kernels that lighten judged elsewhere."""
    from .modelio import get_metadata, op_counts, read_header

    for path in paths:
        try:
            model = read_header(path)
        except Exception:  # noqa: BLE001, S112 - the command itself reports unreadable models
            continue
        meta = get_metadata(model)
        if ISA_KEY not in meta or meta.get(PORTABLE_KEY) == "true" or not has_integer_kernels(op_counts(model)):
            continue
        line = mismatch_warning(meta[ISA_KEY], here, os.path.basename(os.fspath(path)), meta.get(TARGET_KEY))
        if line:
            return line
    return None


def options_of(spec: QuantizerSpec, options: Mapping[str, Any]) -> dict[str, Any]:
    """A strategy's defaults with ``options`` over them (what its predicates are asked about)."""
    return {o.name: o.default for o in spec.options} | dict(options)


def saturation_free(spec: QuantizerSpec, options: Mapping[str, Any]) -> bool:
    """The strategy's own word that these options cannot saturate (no word: it runs no int8 kernels)."""
    check = spec.saturation_free
    if check is None:
        return True
    try:
        return bool(check(options_of(spec, options)))
    except Exception:  # noqa: BLE001 - a third party's check must not stop the caller; unknown is not portable
        return False


def where_it_holds(here: Hardware, target: Hardware | None) -> str:
    """The verdict's last words: the ISA it was judged and timed on, and whether it holds on the target."""
    said = f"judged and timed on {here.isa} ({here.kernels})"
    if target is None or target.isa == here.isa:
        return said
    if not answers_differ(here, target):
        return (f"{said} for {target.isa} (--target-cpu), whose int8 kernels give the same answers; "
                "speed not timed there")
    return (f"{said} for {target.isa} (--target-cpu), whose int8 kernels differ: only saturation-free int8 numerics "
            f"were tried, so the answers hold on both; speed not timed on {target.isa}")


def measured_here(paths: Iterable[str | os.PathLike[str]], provider: str = "cpu") -> dict[str, Any]:
    """What bench and compare record: this machine's ISA, and the one-line warning when a model was judged on
    a CPU kind whose int8 answers differ from this one's."""
    here = detect(provider)
    line = model_warning(paths, here) if provider == "cpu" else None
    return {"isa": here.isa, **({"isa_warning": line} if line else {})}


def isa_settings(here: Hardware, target: Hardware | None) -> dict[str, Any]:
    """What lighten's JSON and report settings record about the hardware."""
    return {"isa": here.isa, "hardware": here.to_dict(), **({"target_cpu": target.isa} if target is not None else {})}


def header(provider: str = "cpu") -> str:
    """The line every benchmark script prints first, so each figure it prints names the CPU it was measured on."""
    return detect(provider).line()


@dataclass(frozen=True)
class JudgedOn:
    """Where a search judges and times its candidates (``here``), and the CPU kind it chooses for (``target``)."""

    here: Hardware
    target: Hardware | None = None

    def note(self) -> str:
        return where_it_holds(self.here, self.target)

    def settings(self) -> dict[str, Any]:
        return isa_settings(self.here, self.target)

    def metadata(self, portable: bool) -> dict[str, str]:
        return metadata(self.here, self.target, portable)


def judged_on(provider: str = "cpu", target_cpu: str | None = None) -> JudgedOn:
    """This machine and the ``--target-cpu`` kind (an unknown name is a usage error)."""
    return JudgedOn(detect(provider), parse_target_cpu(target_cpu))
