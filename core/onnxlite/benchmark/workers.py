"""The parent side of ``onnxlite bench``'s worker processes: start one per model, time a turn, pause it between turns.

Each model runs in its own ``python -m onnxlite.benchmark.worker`` child (the
child side is :mod:`onnxlite.benchmark.worker`), spoken to one JSON line at a
time, so its peak resident memory is its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from ..errors import OnnxliteError, UsageError

#: a turn aims at this much running time, so switching between workers costs little of it
TURN_SECONDS = 0.05
#: ... but every model gets at least this many turns, so the interleaving means something
MIN_TURNS = 10
#: Pause (SIGSTOP) the workers that are not taking their turn; see _WorkerProcess.timed_turn.
#: benchmarks/worker_isolation.py turns it off to measure what it is worth.
PAUSE_IDLE_WORKERS = True


class _WorkerProcess:
    """A ``python -m onnxlite.benchmark.worker`` child, spoken to one JSON line at a time."""

    def __init__(self, log: Path):
        self.log_path = log
        self.proc: subprocess.Popen[str] | None = None
        self._log: IO[str] | None = None

    def start(self) -> None:
        self._log = open(self.log_path, "w")  # noqa: SIM115 - kept open for the child's lifetime
        env = dict(os.environ)
        # The worker must import this very onnxlite, even from a source tree that is not installed.
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen([sys.executable, "-m", "onnxlite.benchmark.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True, env=env, bufsize=1)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def timed_turn(self, n: int) -> dict[str, Any]:
        """``n`` timed runs, with the worker stopped (SIGSTOP) again as soon as it answers.

        onnxruntime's intra-op threads keep spinning for a while after a run
        returns, waiting for more work.  In an interleaved benchmark the next
        run belongs to another worker, and those spinning threads take its
        cores: on 2 cores all-MiniLM-L6-v2 fp32 took 166 ms instead of 137
        and int8 90 instead of 60 (benchmarks/worker_isolation.py), which
        squeezed every ratio toward 1.  Stopping the idle workers keeps the
        spinning inside each turn, where back-to-back runs of a deployed model
        see it too; ``session.force_spinning_stop`` would have stopped that as
        well, and cost sub-millisecond models a thread wake-up per run.
        """
        return self.paused_request({"cmd": "run", "n": n})

    def paused_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One command, with the worker stopped again as soon as it answers (see :meth:`timed_turn`)."""
        try:
            return self.try_request(msg)
        finally:
            if PAUSE_IDLE_WORKERS and self._signal("SIGSTOP"):
                self._wait_stopped()

    def _signal(self, name: str) -> bool:
        sig = getattr(signal, name, None)   # POSIX only; elsewhere idle workers stay runnable
        if sig is None or not self.alive:
            return False
        assert self.proc is not None
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def _wait_stopped(self) -> None:
        """Block until the stop has taken effect: a signal is delivered asynchronously."""
        assert self.proc is not None
        try:
            pid, status = os.waitpid(self.proc.pid, os.WUNTRACED)
        except ChildProcessError:
            return
        if pid and not os.WIFSTOPPED(status):
            # It exited instead; the status is ours now, so hand it to Popen.
            self.proc.returncode = os.waitstatus_to_exitcode(status)

    def try_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send one command; a dead worker answers as a failure carrying its last words."""
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self._signal("SIGCONT")
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.proc.wait(timeout=10)
            return {"ok": False, "usage": False,
                    "error": f"the worker process died (exit {self.proc.returncode}): {self._tail()}"}
        return json.loads(line)

    def request(self, msg: dict[str, Any], what: str) -> dict[str, Any]:
        reply = self.try_request(msg)
        if reply["ok"]:
            return reply
        error = reply["error"]
        if reply.get("usage"):
            raise UsageError(error if error.startswith(what) else f"{what}: {error}")
        raise OnnxliteError(f"{what}: {error}")

    def _tail(self) -> str:
        try:
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "no output"
        return " | ".join(lines[-3:])[-400:] or "no output"

    def close(self) -> None:
        if self.proc is None:
            return
        self._signal("SIGCONT")   # a stopped worker would never read its exit command
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"cmd": "exit"}) + "\n")
                self.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stdin):
            try:
                if stream:
                    stream.close()
            except (BrokenPipeError, OSError, ValueError):
                pass
        if self._log:
            self._log.close()
            self._log = None


#: the public name of a worker process, for the measuring loops outside this module
WorkerProcess = _WorkerProcess
