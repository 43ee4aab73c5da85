"""The CPU a verdict holds on: ISA detection, --target-cpu, the ISA-following grid, and the mismatch warning.

Detection is mocked both ways (an AVX2-only EPYC and an AMX Xeon), so these hold on either kind of CI
machine; the integer test runs onnxruntime's real kernel on whatever CPU this is and checks it against a
NumPy model of that kernel's arithmetic.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxlite import hardware
from onnxlite.errors import UsageError
from onnxlite.hardware import Hardware

from conftest import save_graph

EPYC_FLAGS = {"avx2", "fma", "f16c"}
XEON_FLAGS = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni"}
XEON_CPUINFO = XEON_FLAGS | {"avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "sse4_2"}


def fake_cpu(monkeypatch, arch: str, numpy_flags: set[str] | None, cpuinfo: set[str],
             name: str = "Test CPU") -> Hardware:
    monkeypatch.setattr(hardware, "_arch", lambda: arch)
    monkeypatch.setattr(hardware, "_numpy_flags", lambda: None if numpy_flags is None else set(numpy_flags))
    monkeypatch.setattr(hardware, "_cpuinfo", lambda: (name, set(cpuinfo)))
    hardware.detect.cache_clear()
    try:
        return hardware.detect()
    finally:
        hardware.detect.cache_clear()


def as_detected(monkeypatch, isa: str) -> Hardware:
    """Make every later ``detect()`` answer as the kind of CPU named ``isa``."""
    kind = hardware.declared(isa)
    here = Hardware(arch=kind.arch, isa=kind.isa, flags=kind.flags, int8_saturates=kind.int8_saturates,
                    cpu=f"mocked {isa}", cores=2)
    monkeypatch.setattr(hardware, "detect", lambda provider="cpu": here)
    return here


# -- detection ---------------------------------------------------------------------------------------------

@pytest.mark.unit
def test_an_avx2_only_epyc_is_avx2_and_its_u8s8_kernels_can_saturate(monkeypatch):
    here = fake_cpu(monkeypatch, "x86_64", EPYC_FLAGS, EPYC_FLAGS | {"sse4_2"}, "AMD EPYC 7B13")
    assert (here.isa, here.int8_saturates, here.cpu) == ("avx2", True, "AMD EPYC 7B13")
    assert "ISA: avx2" in here.line() and "can saturate" in here.line()


@pytest.mark.unit
def test_a_vnni_amx_xeon_is_amx_and_its_int8_kernels_are_exact(monkeypatch):
    here = fake_cpu(monkeypatch, "x86_64", XEON_FLAGS, XEON_CPUINFO, "Intel Xeon")
    assert here.isa == "amx" and not here.int8_saturates
    assert {"amx_int8", "avx_vnni", "avx512_vnni"} <= set(here.flags)
    # VNNI without AMX, and AVX-512 without VNNI (Skylake: vpmaddubsw, so it saturates like AVX2)
    assert fake_cpu(monkeypatch, "x86_64", XEON_FLAGS, XEON_FLAGS).isa == "avx512-vnni"
    skylake = fake_cpu(monkeypatch, "x86_64", {"avx2", "avx512f", "avx512bw"}, {"avx2", "avx512f", "avx512bw"})
    assert (skylake.isa, skylake.int8_saturates) == ("avx512", True)


@pytest.mark.unit
def test_under_emulation_the_hosts_cpuinfo_flags_are_not_claimed(monkeypatch):
    """qemu -cpu Haswell: CPUID (numpy) says AVX2 only while /proc/cpuinfo still lists the host's AMX."""
    here = fake_cpu(monkeypatch, "x86_64", EPYC_FLAGS, XEON_CPUINFO, "Intel Xeon")
    assert here.isa == "avx2" and here.int8_saturates
    assert not {"amx_int8", "avx_vnni"} & set(here.flags)
    assert "emulated" in here.cpu


@pytest.mark.unit
def test_arm_and_a_machine_without_numpy_features(monkeypatch):
    arm = fake_cpu(monkeypatch, "arm64", {"asimddp"}, {"asimd", "asimddp", "i8mm"})
    assert (arm.isa, arm.int8_saturates) == ("arm64-i8mm", False)
    bare = fake_cpu(monkeypatch, "arm64", None, set())
    assert (bare.isa, bare.int8_saturates, bare.flags) == ("arm64", False, ())
    # numpy's CPUID view missing: /proc/cpuinfo alone decides
    assert fake_cpu(monkeypatch, "x86_64", None, EPYC_FLAGS).isa == "avx2"


@pytest.mark.unit
def test_detection_sees_this_process_cpu():
    """Whatever this machine is, the record agrees with numpy's CPUID view of AVX2 and AVX-512 VNNI."""
    from numpy._core._multiarray_umath import __cpu_features__ as features

    here = hardware.detect()
    assert here.onnxruntime and here.cores
    if here.arch == "x86_64":
        assert ("avx2" in here.flags) == bool(features.get("AVX2"))
        assert ("avx512_vnni" in here.flags) == bool(features.get("AVX512VNNI"))
        assert here.int8_saturates == (bool(features.get("AVX2")) and not ({"avx512_vnni", "avx_vnni", "amx_int8"}
                                                                           & set(here.flags)))


# -- --target-cpu ------------------------------------------------------------------------------------------

@pytest.mark.unit
def test_target_cpu_values():
    assert hardware.parse_target_cpu(None) is None and hardware.parse_target_cpu("native") is None
    assert hardware.parse_target_cpu("AVX2").int8_saturates
    assert hardware.parse_target_cpu("avx512_vnni").isa == "avx512-vnni"
    assert not hardware.parse_target_cpu("arm64-dotprod").int8_saturates
    with pytest.raises(UsageError) as error:
        hardware.parse_target_cpu("pentium")
    message = str(error.value)
    assert message.startswith("--target-cpu pentium:") and "\n" not in message
    assert all(name in message for name in ("avx2", "avx512-vnni", "amx", "arm64-dotprod", "native"))


def test_a_bad_target_cpu_is_one_usage_line_before_any_work(tmp_path):
    from conftest import run_cli

    done = run_cli("lighten", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "out"), "--target-cpu", "z80")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "--target-cpu z80" in done.stderr and "avx2" in done.stderr
    assert not (tmp_path / "out").exists()


# -- the grid follows the ISA ------------------------------------------------------------------------------

def small_matmul_model(path):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], name="embed"),
             helper.make_node("MatMul", ["emb", "W"], ["y"], name="fc")]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, 16])],
                              [numpy_helper.from_array(rng.standard_normal((50, 32)).astype(np.float32), "table"),
                               numpy_helper.from_array(rng.standard_normal((32, 16)).astype(np.float32), "W")])
    return save_graph(graph, path)


def _grid(path, here, target=None, strategies=("dynamic", "smoothquant", "static", "fp16")):
    from onnxlite.search.candidates import build_candidates

    isa = hardware.JudgedOn(here, target) if here is not None else None
    found, skipped = build_candidates(path, strategies=list(strategies), has_calibration=True, isa=isa)
    return {c.name: c for c in found}, skipped


@pytest.mark.unit
def test_the_grid_adds_saturation_free_int8_variants_where_u8s8_saturates(tmp_path):
    from onnxlite.registry import get_registry
    from onnxlite.search.candidates import int8_portable

    model = small_matmul_model(tmp_path / "m.onnx")
    avx2, amx = hardware.declared("avx2"), hardware.declared("amx")
    on_vnni, _ = _grid(model, amx)
    on_avx2, _ = _grid(model, avx2)
    assert set(on_vnni) < set(on_avx2)
    added = [on_avx2[name] for name in set(on_avx2) - set(on_vnni)]
    registry = get_registry()
    # the added ones are the strategies' own saturation-free variants, for every int8 strategy
    assert {c.strategy for c in added} == {"dynamic", "smoothquant", "static"}
    assert all(int8_portable(registry.get("quantizer", c.strategy).spec, c.options) for c in added)
    # 7-bit weights WITH int8 embeddings, and U8U8, for dynamic (smoothquant quantizes Gather by default)
    dynamic = [dict(c.options) for c in added if c.strategy == "dynamic"]
    assert {"op_types": ("MatMul", "Gemm", "Gather"), "reduce_range": True} in dynamic
    assert {"op_types": ("MatMul", "Gemm", "Gather"), "weight_type": "quint8"} in dynamic
    assert any(c.strategy == "static" and c.options.get("weight_type") == "uint8" for c in added)
    # a declared AVX2 target on a VNNI machine offers them too
    assert set(_grid(model, amx, hardware.declared("avx2"))[0]) >= {c.name for c in added}
    # no hardware record: the plain grid, as before
    assert set(_grid(model, None)[0]) == set(on_vnni)


@pytest.mark.unit
def test_for_a_target_whose_int8_answers_differ_only_saturation_free_numerics_are_tried(tmp_path):
    from onnxlite.registry import get_registry
    from onnxlite.search.candidates import int8_portable

    model = small_matmul_model(tmp_path / "m.onnx")
    found, skipped = _grid(model, hardware.declared("amx"), hardware.declared("avx2"))
    registry = get_registry()
    assert all(int8_portable(registry.get("quantizer", c.strategy).spec, c.options) for c in found.values())
    assert {c.strategy for c in found.values()} >= {"dynamic", "smoothquant", "static", "fp16"}
    why = {s.strategy: s.reason for s in skipped}
    assert "avx2" in why["dynamic (saturating variants)"] and "saturation-free" in why["dynamic (saturating variants)"]
    # a target whose int8 kernels agree with this machine's keeps every variant
    same, skipped = _grid(model, hardware.declared("amx"), hardware.declared("arm64-dotprod"))
    assert set(same) == set(_grid(model, hardware.declared("amx"))[0]) and not skipped


@pytest.mark.unit
def test_the_verdict_names_where_it_holds():
    amx, avx2 = hardware.declared("amx"), hardware.declared("avx2")
    assert hardware.where_it_holds(amx, None).startswith("judged and timed on amx")
    line = hardware.where_it_holds(amx, avx2)
    assert "avx2 (--target-cpu)" in line and "saturation-free" in line and "hold on both" in line
    assert hardware.isa_settings(amx, avx2)["target_cpu"] == "avx2"


# -- the kernel's integer math ------------------------------------------------------------------------------

def u8s8_vpmaddubsw(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """onnxruntime's x86 U8S8 GEMM without VNNI: vpmaddubsw adds the two uint8 x int8 products of each pair
    along K into a saturating int16, vpmaddwd then sums those in int32 (exact)."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    if a.shape[1] % 2:
        a, b = np.pad(a, ((0, 0), (0, 1))), np.pad(b, ((0, 1), (0, 0)))
    pairs = a[:, 0::2, None] * b[None, 0::2, :] + a[:, 1::2, None] * b[None, 1::2, :]
    return np.clip(pairs, -(2 ** 15), 2 ** 15 - 1).sum(axis=1)


def u8u8_widened(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The U8U8 kernel widens both to int16 and multiplies with vpmaddwd: each pair sum lands in int32."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    if a.shape[1] % 2:
        a, b = np.pad(a, ((0, 0), (0, 1))), np.pad(b, ((0, 1), (0, 0)))
    return (a[:, 0::2, None] * b[None, 0::2, :] + a[:, 1::2, None] * b[None, 1::2, :]).sum(axis=1)


def matmul_integer(tmp_path, weight_type: int):
    import onnxruntime as ort

    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "mmi",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, ["m", "k"]),
                               helper.make_tensor_value_info("b", weight_type, ["k", "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, ["m", "n"])])
    path = save_graph(graph, tmp_path / f"mmi{weight_type}.onnx", opset=13)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda a, b: session.run(None, {"a": a, "b": b})[0]


def test_saturation_free_variants_give_the_exact_integer_result(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (16, 64)).astype(np.uint8)
    a[:4] = 255                                                      # activations at the top of uint8
    full = rng.integers(-128, 128, (64, 16)).astype(np.int8)
    full[:, :4] = 127                                                # full int8 weights: 2 x 255 x 127 > 32767
    seven_bit = rng.integers(-64, 64, (64, 16)).astype(np.int8)      # reduce_range: 2 x 255 x 64 = 32640
    seven_bit[:, :4], seven_bit[:, 4:8] = 63, -64
    unsigned = rng.integers(0, 256, (64, 16)).astype(np.uint8)       # U8U8
    unsigned[:, :4] = 255
    exact = a.astype(np.int64) @ full.astype(np.int64)

    # the NumPy model of the kernel, on every CPU: U8S8 saturates here, the two variants cannot
    assert not np.array_equal(u8s8_vpmaddubsw(a, full), exact)
    assert np.array_equal(u8s8_vpmaddubsw(a, seven_bit), a.astype(np.int64) @ seven_bit.astype(np.int64))
    assert np.array_equal(u8u8_widened(a, unsigned), a.astype(np.int64) @ unsigned.astype(np.int64))
    worst = np.array([[255, 255]], np.uint8), np.array([[-64], [-64]], np.int8)   # the largest 7-bit pair sum
    assert u8s8_vpmaddubsw(*worst)[0, 0] == -2 * 255 * 64 >= -(2 ** 15)

    # onnxruntime on this CPU, whatever it is: the saturation-free variants are exact
    u8s8, u8u8 = matmul_integer(tmp_path, TensorProto.INT8), matmul_integer(tmp_path, TensorProto.UINT8)
    assert np.array_equal(u8s8(a, seven_bit), a.astype(np.int64) @ seven_bit.astype(np.int64))
    assert np.array_equal(u8u8(a, unsigned), a.astype(np.int64) @ unsigned.astype(np.int64))
    # and full-range U8S8 gives what the detected ISA says: the saturating model's answer, or the exact one
    expected = u8s8_vpmaddubsw(a, full) if hardware.detect().int8_saturates else exact
    assert np.array_equal(u8s8(a, full), expected), hardware.detect().line()


# -- where the verdict holds: recipe and model ---------------------------------------------------------------

@pytest.mark.unit
def test_the_recipe_records_the_isa_and_a_replay_on_another_isa_warns(tmp_path, monkeypatch):
    from onnxlite.search.config import LightenConfig
    from onnxlite.search.recipes import Recipe, read_recipe, replay

    amx = hardware.declared("amx")
    path = tmp_path / "recipe.toml"
    path.write_text(Recipe(strategy="dynamic", hardware=amx.to_dict()).to_toml())
    recipe = read_recipe(path)
    assert recipe.isa == "amx" and "[hardware]" in path.read_text()

    def notes(recipe) -> list[str]:
        said: list[str] = []
        replay(recipe, LightenConfig(), lambda kind, info: said.append(info["message"]))
        return said

    as_detected(monkeypatch, "avx2")
    (line,) = notes(recipe)
    assert "judged on amx" in line and "this machine is avx2" in line
    as_detected(monkeypatch, "avx512-vnni")
    assert notes(recipe) == []                                      # both exact: the same answers
    as_detected(monkeypatch, "avx2")
    seven_bit = Recipe(strategy="dynamic", options={"reduce_range": True}, hardware=amx.to_dict())
    assert notes(seven_bit) == []                                   # cannot saturate anywhere
    made_for = Recipe(strategy="dynamic", hardware=amx.to_dict(), target_cpu="avx2")
    assert notes(made_for) == []                                    # made for this kind of CPU


def quantized_model(tmp_path, metadata: dict[str, str], name: str = "m"):
    from onnxruntime.quantization import quantize_dynamic

    from onnxlite.modelio import load_model, save_model, set_metadata

    tmp_path = tmp_path / name
    tmp_path.mkdir()
    fp32 = small_matmul_model(tmp_path / "fp32.onnx")
    out = tmp_path / "int8.onnx"
    quantize_dynamic(str(fp32), str(out), op_types_to_quantize=["MatMul"])
    model = load_model(out)
    set_metadata(model, metadata)
    save_model(model, out)
    return fp32, out


def test_a_model_judged_on_another_isa_warns_once_in_compare(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from onnxlite.cli import cli

    fp32, int8 = quantized_model(tmp_path, hardware.metadata(hardware.declared("amx"), None, portable=False))
    as_detected(monkeypatch, "avx2")
    assert hardware.model_warning([fp32], hardware.detect()) is None          # no integer kernels
    done = CliRunner().invoke(cli, ["compare", str(fp32), str(int8), "--json"])
    assert done.exit_code == 0, done.output
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "judged on amx" in warnings[0] and "this machine is avx2" in warnings[0]
    assert "re-judge it here" in warnings[0]
    import json

    payload = json.loads(done.stdout)
    assert payload["hardware"]["isa"] == "avx2" and payload["settings"]["isa_warning"]
    # the same model here on a VNNI machine, or made saturation-free, or for this target: no warning
    as_detected(monkeypatch, "avx512-vnni")
    assert hardware.model_warning([int8], hardware.detect()) is None
    as_detected(monkeypatch, "avx2")
    _, portable = quantized_model(tmp_path, hardware.metadata(hardware.declared("amx"), None, portable=True),
                                  "portable")
    assert hardware.model_warning([portable], hardware.detect()) is None
    _, targeted = quantized_model(tmp_path, hardware.metadata(hardware.declared("amx"), hardware.declared("avx2"),
                                                              portable=False), "targeted")
    assert hardware.model_warning([targeted], hardware.detect()) is None


def test_bench_records_the_cpu_and_warns_once_for_a_model_judged_elsewhere(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from onnxlite.cli import cli

    fp32, int8 = quantized_model(tmp_path, hardware.metadata(hardware.declared("avx512-vnni"), None, portable=False))
    here = as_detected(monkeypatch, "avx2")
    done = CliRunner().invoke(cli, ["bench", str(fp32), str(int8), "--runs", "2", "--warmup", "1", "--json"])
    assert done.exit_code == 0, done.output
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "judged on avx512-vnni" in warnings[0], done.stderr
    payload = json.loads(done.stdout)
    assert payload["hardware"] == here.to_dict() and payload["settings"]["isa"] == "avx2"


def test_a_plain_quantize_output_carries_the_isa_it_was_made_on(tmp_path, monkeypatch):
    """``onnxlite quantize`` records the ISA in the model and its --json, as lighten does, so compare and bench on
    a CPU whose int8 kernels answer differently warn about it; a saturation-free one says so and is not warned."""
    import json

    from click.testing import CliRunner

    from onnxlite.cli import cli
    from onnxlite.modelio import get_metadata, load_model

    fp32 = small_matmul_model(tmp_path / "fp32.onnx")
    as_detected(monkeypatch, "avx2")
    made = {}
    for name, options in (("u8s8", []), ("reduce_range", ["--option", "reduce_range=true"])):
        made[name] = tmp_path / f"{name}.onnx"
        done = CliRunner().invoke(cli, ["quantize", str(fp32), "-o", str(made[name]), "--json", *options])
        assert done.exit_code == 0, done.output
        payload = json.loads(done.stdout)
        meta = get_metadata(load_model(made[name], load_external_data=False))
        assert payload["hardware"]["isa"] == meta[hardware.ISA_KEY] == "avx2", (payload["hardware"], meta)
        free = name == "reduce_range"
        assert payload["details"]["int8_saturation_free"] is free and meta[hardware.PORTABLE_KEY] == str(free).lower()
    shown = CliRunner().invoke(cli, ["quantize", str(fp32), "-o", str(tmp_path / "shown.onnx")])
    assert shown.exit_code == 0 and "avx2 (U8S8 int8 kernels can saturate)" in shown.stdout, shown.output
    # on a VNNI machine the U8S8 one is not the model it was on avx2; the 7-bit one is
    here = as_detected(monkeypatch, "avx512-vnni")
    warning = hardware.model_warning([made["u8s8"]], here)
    assert warning and "u8s8.onnx was judged on avx2" in warning
    assert hardware.model_warning([made["reduce_range"]], here) is None
