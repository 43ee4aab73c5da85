"""Faults and bad data, run as a user would against the CLI (issue 13).

Every failure must give one clear line naming its cause (exit 2 for what the
user can fix), leave the inputs untouched and leave nothing behind.  Models are
tiny and built here with onnx.helper; most cases run the CLI in this process
(``onnxlite.cli.main``), and only what needs its own process runs one: signals,
read-only mounts and third-party plugin discovery.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from conftest import make_plugin_dist, run_cli
from helpers import MLP_WIDTH, make_mlp, one_error_line, tree

K = MLP_WIDTH


@pytest.fixture
def mlp(tmp_path) -> Path:
    return make_mlp(tmp_path / "in" / "mlp.onnx")


def read_only_prefix(folder: Path) -> list[str]:
    """A command prefix under which ``folder`` is read-only, for root (a read-only bind mount) and others (chmod)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return []
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare: cannot make a folder read-only")
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --mount is not allowed here: {probe.stderr.decode().strip()}")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    return ["unshare", "--mount", "sh", "-c", script, str(folder)]


def run_read_only(folder: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    command = [*read_only_prefix(folder), sys.executable, "-m", "onnxlite", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd)


# ---------------------------------------------------------------- 3. output locations


@pytest.mark.parametrize("command", ["quantize", "export", "lighten"])
def test_read_only_output_folder_is_a_usage_error(tmp_path, command):
    model = make_mlp(tmp_path / "mlp.onnx")
    locked = tmp_path / "locked"
    locked.mkdir()
    target = locked / ("out" if command == "lighten" else "out.onnx")
    flag = ["-o", str(target)]
    args = {"quantize": ["quantize", str(model), *flag], "export": ["export", str(model), *flag],
            "lighten": ["lighten", str(model), *flag, "--strategies", "dynamic", "--runs", "2"]}[command]
    done = run_read_only(locked, *args)
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert str(locked) in line and ("read-only" in line.lower() or "permission" in line.lower())
    assert "PermissionError" not in line and "OSError" not in line
    assert list(locked.iterdir()) == []


@pytest.mark.parametrize("command", ["quantize", "export", "lighten"])
def test_output_under_a_file_is_a_usage_error(cli, mlp, tmp_path, command):
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a folder")
    target = blocker / "sub" / ("out" if command == "lighten" else "out.onnx")
    extra = ["--strategies", "dynamic"] if command == "lighten" else []
    before = tree(tmp_path)
    code, _out, err = cli(command, mlp, "-o", target, *extra)
    assert code == 2, err
    line = one_error_line(err, str(blocker))
    assert "FileExistsError" not in line and "NotADirectoryError" not in line
    assert tree(tmp_path) == before


EXPLODING_QUANTIZER = '''
from onnxlite import hookimpl, QuantizerSpec

class Explodes:
    def quantize(self, model, output, options, context):
        output.write_bytes(b"half a model")
        raise RuntimeError("boom halfway")

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="explodes", description="fails halfway", factory=Explodes)]
'''


def test_failed_runs_leave_no_new_folder(cli, mlp, tmp_path, fresh_plugins):
    site = make_plugin_dist(tmp_path / "site", "acme-explodes", "0.1", "acme_explodes", EXPLODING_QUANTIZER)
    fresh_plugins.syspath_prepend(str(site))
    before = tree(tmp_path)
    # The strategy fails inside its scratch folder, under two folders this run made.
    code, _out, err = cli("quantize", mlp, "-s", "explodes", "-o", tmp_path / "new1" / "new2" / "q.onnx")
    assert code == 1, err
    one_error_line(err, "boom halfway")
    assert tree(tmp_path) == before and not (tmp_path / "new1").exists()

    # lighten fails after exporting into its scratch folder: no strategy of that name.
    code, _out, err = cli("lighten", mlp, "-o", tmp_path / "new3" / "new4" / "out", "--strategies", "nope")
    assert code == 2, err
    one_error_line(err, "unknown quantizer 'nope'")
    assert tree(tmp_path) == before and not (tmp_path / "new3").exists()


def test_atomic_helpers_remove_the_folders_they_made(tmp_path):
    from onnxlite.atomic import atomic_path, scratch_dir

    with pytest.raises(RuntimeError):
        with scratch_dir(tmp_path / "a" / "b" / "model.onnx"):
            raise RuntimeError("the run failed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(tmp_path / "c" / "d" / "report.json") as tmp:
            tmp.write_text("{}")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    # A folder that already held something is never removed, and a success keeps what it made.
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "mine.txt").write_text("x")
    with pytest.raises(RuntimeError):
        with scratch_dir(tmp_path / "keep" / "model.onnx"):
            raise RuntimeError
    assert tree(tmp_path) == {"keep/mine.txt": hashlib.sha256(b"x").hexdigest()}
    with atomic_path(tmp_path / "e" / "f.txt") as tmp:
        tmp.write_text("done")
    assert (tmp_path / "e" / "f.txt").read_text() == "done"


# ---------------------------------------------------------------- 6. specs that cannot fit


def test_generated_samples_that_cannot_fit_are_refused(cli, mlp, tmp_path):
    from onnxlite.inputs import available_memory, check_feeds_fit, feeds_bytes, parse_input_spec

    spec = parse_input_spec("x:float32[batch,1000000000]")
    assert feeds_bytes([spec], batch=2) == 2 * 10**9 * 4
    assert available_memory() and available_memory() > 0
    check_feeds_fit([parse_input_spec("x:float32[batch,32]")], batch=2)   # small ones pass
    started = time.perf_counter()
    for args in (["export", mlp, "-o", tmp_path / "out.onnx", "--input", "x:float32[batch,1000000000]"],
                 ["export", mlp, "-o", tmp_path / "out.onnx", "--input", "x:int64[batch,seq,999999999999]"]):
        code, _out, err = cli(*args)
        assert code == 2, err
        line = one_error_line(err, "would take")
        assert "memory available" in line and "MemoryError" not in line
    assert time.perf_counter() - started < 30   # refused from the estimate, nothing allocated
    assert not (tmp_path / "out.onnx").exists()


# ---------------------------------------------------------------- 7. plugins that take a taken name

COPY_QUANTIZER = '''
import shutil
from onnxlite import hookimpl, QuantizerSpec

class Copy:
    def quantize(self, model, output, options, context):
        shutil.copyfile(model, output)

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="{name}", description="copies the model", factory=Copy)]
'''


def test_a_plugin_cannot_take_a_builtin_name(tmp_path):
    import json

    site = tmp_path / "site"
    make_plugin_dist(site, "acme-hijack", "0.3", "acme_hijack", COPY_QUANTIZER.format(name="dynamic"))
    make_plugin_dist(site, "acme-named", "0.4", "acme_named", COPY_QUANTIZER.format(name="named"),
                     entry_name="dynamic")
    make_plugin_dist(site, "acme-one", "1.0", "acme_one", COPY_QUANTIZER.format(name="one"), entry_name="shared")
    make_plugin_dist(site, "acme-two", "2.0", "acme_two", COPY_QUANTIZER.format(name="two"), entry_name="shared")
    listed = run_cli("--list-plugins", "--json", site=site)
    assert listed.returncode == 0, listed.stderr
    listing = json.loads(listed.stdout)
    dynamic = next(s for s in listing["strategies"] if s["name"] == "dynamic")
    assert dynamic["distribution"] == "onnxlite"                      # the built-in stays in place
    conflict = next(c for c in listing["conflicts"] if c["name"] == "dynamic")
    assert "acme-hijack 0.3" in conflict["message"] and "built-in" in conflict["message"]
    broken = {b["distribution"]: b["error"] for b in listing["broken"]}
    # An entry point named like a built-in, and two plugins sharing one name: the message says who took it.
    assert "already taken by onnxlite" in broken["acme-named"]
    taker, loser = ("acme-one", "acme-two") if "acme-two" in broken else ("acme-two", "acme-one")
    assert f"already taken by {taker}" in broken[loser] and loser in broken[loser]
    assert any(s["name"] == ("one" if taker == "acme-one" else "two") for s in listing["strategies"])

    model = make_mlp(tmp_path / "mlp.onnx")
    done = run_cli("quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--json", site=site)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["quantized_ops"].get("MatMulInteger") == 2   # the real dynamic ran


# ---------------------------------------------------------------- 4. signals

SLOW_QUANTIZER = '''
import os, time
from pathlib import Path
from onnxlite import hookimpl, QuantizerSpec

class Slow:
    def quantize(self, model, output, options, context):
        # written whole, then renamed: the test never reads a half-written pid
        Path(os.environ["SLOWPOKE_PID"] + ".tmp").write_text(str(os.getpid()))
        os.replace(os.environ["SLOWPOKE_PID"] + ".tmp", os.environ["SLOWPOKE_PID"])
        time.sleep(900)   # far longer than any wait below: only the signal ends it

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="slowpoke", description="takes its time", factory=Slow, applies_to=("any",))]
'''

SWALLOWING_QUANTIZER = '''
import os, signal, time
from onnxlite import hookimpl, QuantizerSpec

class Swallows:
    def quantize(self, model, output, options, context):
        # What an extension module does when Ctrl-C lands while it initialises: the interrupt
        # becomes "ImportError: initialization failed".
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            raise ImportError("initialization failed") from None

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="swallows", description="loses the interrupt", factory=Swallows)]
'''


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in status)
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_stop_signals_stop_workers_and_remove_scratch(tmp_path, sig):
    site = make_plugin_dist(tmp_path / "site", "acme-slow", "0.1", "acme_slow", SLOW_QUANTIZER)
    model = make_mlp(tmp_path / "mlp.onnx")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    pid_file = tmp_path / "worker.pid"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
               SLOWPOKE_PID=str(pid_file), TMPDIR=str(scratch))
    env.pop("ONNXLITE_DISABLE_PLUGIN_AUTOLOAD", None)
    # onnxlite leaves a stop signal ignored when it starts ignored (SIGHUP under nohup: the user asked for that),
    # so the child gets the signal's default whatever launched this test (a suite run under nohup, or as a
    # background job, which ignores SIGINT)
    proc = subprocess.Popen([sys.executable, "-m", "onnxlite", "lighten", str(model), "-o", str(tmp_path / "out"),
                             "--strategies", "slowpoke", "--workers", "1"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    # Generous deadlines, polled: on a loaded 2-core machine starting lighten (export, judge, a worker
    # process) and stopping it can take minutes; a quiet machine passes each wait in seconds.
    try:
        deadline = time.monotonic() + 600
        while not pid_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pid_file.exists(), proc.communicate()[1] if proc.poll() is not None else "the candidate never started"
        worker = int(pid_file.read_text())
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + sig, err
    assert err.strip().splitlines()[-1].startswith("Aborted"), err
    assert "Traceback" not in err
    deadline = time.monotonic() + 300
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(worker), "the candidate's worker is still running"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.onnx", "site", "tmp", "worker.pid"]
    # (a native library drops a small ".ses" session-id file into TMPDIR; it is not a scratch folder)
    assert [p.name for p in scratch.iterdir() if p.name != ".ses"] == []


def test_ctrl_c_swallowed_by_an_import_is_still_aborted(tmp_path):
    site = make_plugin_dist(tmp_path / "site", "acme-swallows", "0.1", "acme_swallows", SWALLOWING_QUANTIZER)
    model = make_mlp(tmp_path / "mlp.onnx")
    done = run_cli("quantize", str(model), "-o", str(tmp_path / "q.onnx"), "-s", "swallows", site=site)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "Aborted.", done.stderr
    assert not (tmp_path / "q.onnx").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp.onnx", "site"]


# ---------------------------------------------------------------- 1. NaN and inf in data


def nan_data(folder: Path, value: float = np.nan, sample: int = 3) -> Path:
    x = np.random.default_rng(1).standard_normal((8, K)).astype(np.float32)
    x[sample, 5] = value
    path = folder / "calib.npz"
    np.savez(path, x=x)
    return path


@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("strategy", ["smoothquant", "static"])
def test_non_finite_calibration_data_is_refused_at_load(cli, mlp, tmp_path, strategy, value):
    data = nan_data(tmp_path, value)
    out = tmp_path / "q.onnx"
    code, _out, err = cli("quantize", mlp, "-o", out, "-s", strategy, "--calibration", data)
    assert code == 2, err
    line = one_error_line(err, str(data))
    assert "'x'" in line and "sample 3" in line and ("NaN" in line or "inf" in line)
    assert not out.exists()


def test_non_finite_evaluation_data_is_refused_at_load(cli, mlp, tmp_path):
    data = nan_data(tmp_path, np.nan, sample=6)
    for args in (["compare", mlp, mlp, "--data", data], ["compare", mlp, mlp, "--data", data, "--max-drop", "1%"],
                 ["lighten", mlp, "-o", tmp_path / "out", "--data", data, "--strategies", "dynamic"],
                 ["bench", mlp, "--data", data, "--runs", "2"]):
        code, _out, err = cli(*args)
        assert code == 2, (args, err)
        line = one_error_line(err, str(data))
        assert "'x'" in line and "sample 6" in line and "NaN" in line and "FAIL" not in err
    assert not (tmp_path / "out").exists()


def test_non_finite_values_in_streamed_and_python_data(cli, mlp, tmp_path):
    folder = tmp_path / "chunks"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for i in range(3):
        x = rng.standard_normal((4, K)).astype(np.float32)
        if i == 2:
            x[1, 0] = -np.inf
        np.savez(folder / f"part{i}.npz", x=x)
    code, _out, err = cli("quantize", mlp, "-o", tmp_path / "q.onnx", "-s", "static", "--calibration", folder)
    assert code == 2, err
    line = one_error_line(err, "part2.npz")
    assert "'x'" in line and "sample 9" in line and "inf" in line   # counted over the whole folder

    npy = tmp_path / "npy"
    npy.mkdir()
    x = rng.standard_normal((5, K)).astype(np.float32)
    x[4, 2] = np.nan
    np.save(npy / "x.npy", x)
    code, _out, err = cli("compare", mlp, mlp, "--data", npy)
    assert code == 2, err
    assert "sample 4" in one_error_line(err, "x.npy")

    script = tmp_path / "feeds.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        def feeds():
            for i in range(3):
                x = np.ones((2, {K}), np.float32)
                if i == 1:
                    x[1, 0] = np.nan
                yield {{"x": x}}
    """))
    code, _out, err = cli("compare", mlp, mlp, "--data", f"{script}:feeds")
    assert code == 2, err
    assert "sample 3" in one_error_line(err, "feeds")


# ---------------------------------------------------------------- 2. nothing beside the user's input


@pytest.mark.parametrize("strategy", ["dynamic", "static", "smoothquant"])
def test_quantize_never_writes_beside_its_input(tmp_path, strategy):
    source = tmp_path / "models"
    make_mlp(source / "mlp.onnx")
    make_mlp(source / "ext.onnx", external=True)
    data = nan_data(tmp_path, 0.5)
    before = tree(source)
    for name in ("mlp.onnx", "ext.onnx"):
        out = tmp_path / f"{strategy}-{name}"
        extra = ["--calibration", str(data)] if strategy != "dynamic" else []
        done = run_read_only(source, "quantize", str(source / name), "-o", str(out), "-s", strategy, *extra)
        assert done.returncode == 0, done.stderr
        assert out.exists()
    assert tree(source) == before


def test_missing_external_data_leaves_nothing_beside_the_input(cli, tmp_path):
    model = make_mlp(tmp_path / "in" / "ext.onnx", external=True)
    (tmp_path / "in" / "ext.onnx.data").unlink()
    before = tree(tmp_path)
    code, _out, err = cli("quantize", model, "-o", tmp_path / "out" / "q.onnx")
    assert code == 2, err
    one_error_line(err, "ext.onnx.data")
    assert tree(tmp_path) == before and not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 3 (cont.). existing outputs


def test_quantize_refuses_an_existing_output_without_force(cli, mlp, tmp_path):
    default = mlp.with_name("mlp.dynamic.onnx")
    for target, flags in ((default, []), (tmp_path / "q.onnx", ["-o", tmp_path / "q.onnx"])):
        target.write_bytes(b"the user's own file")
        code, _out, err = cli("quantize", mlp, *flags)
        assert code == 2, err
        one_error_line(err, str(target))
        assert "--force" in err and target.read_bytes() == b"the user's own file"
        code, _out, err = cli("quantize", mlp, *flags, "--force")
        assert code == 0, err
        onnx.checker.check_model(str(target))


# ---------------------------------------------------------------- 5. the input model, checked alike everywhere


def test_unknown_operator_is_the_same_usage_error_in_every_command(cli, tmp_path):
    model = make_mlp(tmp_path / "odd.onnx", op="NoSuchOp")
    lines = {}
    fine = make_mlp(tmp_path / "fine" / "fine.onnx")
    for args in (["quantize", model, "-o", tmp_path / "q.onnx"], ["export", model, "-o", tmp_path / "e.onnx"],
                 ["bench", model, "--runs", "2"], ["bench", fine, model, "--runs", "2"], ["compare", model, model],
                 ["compare", model, fine], ["compare", fine, model], ["lighten", model, "-o", tmp_path / "out"]):
        code, _out, err = cli(*args)
        assert code == 2, (args, err)
        key = " ".join(str(a) for a in args[:3])
        lines[key] = one_error_line(err, "No Op registered for NoSuchOp")
        assert "already quantized" not in lines[key]
        # one wording everywhere: the file, then what onnx's checker found (bench and compare used to say
        # "onnxruntime cannot load it ([ONNXRuntimeError] ...)")
        assert lines[key].startswith(f"Error: {model}: invalid ONNX model (No Op registered for NoSuchOp"), lines[key]
    assert len(set(lines.values())) == 1, lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fine", "odd.onnx"]


def test_missing_external_data_is_a_usage_error_in_every_command(cli, tmp_path):
    model = make_mlp(tmp_path / "ext.onnx", external=True)
    (tmp_path / "ext.onnx.data").unlink()
    for args in (["quantize", model, "-o", tmp_path / "q.onnx"], ["export", model, "-o", tmp_path / "e.onnx"],
                 ["bench", model, "--runs", "2"], ["compare", model, model],
                 ["lighten", model, "-o", tmp_path / "out"]):
        code, _out, err = cli(*args)
        assert code == 2, (args, err)
        line = one_error_line(err, "ext.onnx.data")
        assert "ValidationError" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ext.onnx"]


# ---------------------------------------------------------------- 6 (cont.). --input naming an input the model lacks


def test_input_naming_a_missing_input_names_the_flag_and_the_name(cli, mlp, tmp_path):
    for args in (["export", mlp, "-o", tmp_path / "e.onnx", "--input", f"z:float32[batch,{K}]"],
                 ["lighten", mlp, "-o", tmp_path / "out", "--input", f"z:float32[batch,{K}]"]):
        code, _out, err = cli(*args)
        assert code == 2, err
        line = one_error_line(err, "--input")
        assert "'z'" in line and "'x'" in line


# ---------------------------------------------------------------- install hints name the project's extras


def test_quantizer_install_hints_name_the_projects_extra(monkeypatch):
    """Without onnxruntime every built-in strategy says `pip install 'onnxlite[cpu]'`, the extra that picks the
    build (a bare `pip install onnxruntime` would put a second build beside onnxruntime-gpu or -openvino)."""
    import tomllib

    from onnxlite import registry
    from onnxlite.registry import get_registry

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(dep.startswith("onnxruntime") for dep in extras["cpu"])
    real = registry._module_missing
    monkeypatch.setattr(registry, "_module_missing", lambda m: m == "onnxruntime" or real(m))
    entries = [e for e in get_registry().all("quantizer") if e.plugin.distribution == "onnxlite"]
    assert len(entries) >= 7
    for entry in entries:
        # the hint names the cpu extra (a strategy needing more, such as qat's torch, names it beside cpu)
        reason = entry.unavailable_reason() or ""
        assert reason.startswith("onnxruntime is not installed: pip install 'onnxlite["), (entry.name, reason)
        assert "cpu" in reason.split("onnxlite[", 1)[1].rstrip("]'").split(","), (entry.name, reason)


# ---------------------------------------------------------------- issue 25 §4: late failures


def test_unknown_strategy_fails_before_any_work(cli, mlp, tmp_path):
    """``lighten --strategies nosuch`` fails in one line before the export (no progress, no budget warning)."""
    before = tree(mlp.parent)
    out = tmp_path / "out"
    code, stdout, err = cli("lighten", mlp, "-o", out, "--strategies", "dynamic,nosuch")
    assert code == 2
    line = one_error_line(err, "--strategies: unknown quantizer 'nosuch'")
    assert "dynamic" in line                                 # the known names are listed
    assert [ln for ln in err.strip().splitlines() if ln.strip()] == [line]    # nothing ran before it
    assert not out.exists() and tree(mlp.parent) == before


TEXT_WRITER = '''
from onnxlite import hookimpl, QuantizerSpec

class WritesText:
    def quantize(self, model, output, options, context):
        output.write_text("this is not a model")

@hookimpl
def register_quantizers():
    return [QuantizerSpec(name="textwriter", description="writes text", factory=WritesText)]
'''


def test_a_strategy_writing_a_non_onnx_file_is_named_with_its_distribution(cli, mlp, tmp_path, fresh_plugins):
    site = make_plugin_dist(tmp_path / "site", "acme-text", "0.2", "acme_text", TEXT_WRITER)
    fresh_plugins.syspath_prepend(str(site))
    code, _out, err = cli("quantize", mlp, "-s", "textwriter", "-o", tmp_path / "q.onnx")
    assert code == 1, err
    line = one_error_line(err, "strategy 'textwriter' (from the acme-text 0.2 distribution) wrote a file that is "
                               "not an ONNX model")
    assert ".work" not in line and "out.onnx" not in line and not (tmp_path / "q.onnx").exists()
