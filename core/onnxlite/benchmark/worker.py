"""One model's measuring process for ``onnxlite bench`` (``python -m onnxlite.benchmark.worker``).

Each model gets its own long-lived process so that its peak resident memory
is its own and nothing one model allocates bleeds into another's figures.
The parent drives the workers in turn (A B A B ...) over a line-based JSON
protocol on stdin/stdout:

    {"cmd": "ready", "settings": {...}}  -> {"ok": true, "pid": ...}   (imports done, provider checked)
    {"cmd": "load", "model": PATH, "feeds": NPZ, "settings": {...}}
        -> {"ok": true, "pid": ..., "load_seconds": ..., "baseline_rss_bytes": ..., "providers": [...]}
    {"cmd": "run", "n": K}      -> {"ok": true, "latencies_ms": [...]}   (K timed session runs)
    {"cmd": "stats"}            -> {"ok": true, "peak_rss_bytes": ...}
    {"cmd": "load_decoder", "model": PATH, "settings": {...}}  -> as "load", for a decoder with its cache
    {"cmd": "generate", "prompt": N, "batch": B, "new_tokens": K, "seed": S}
        -> {"ok": true, "prefill_seconds": ..., "decode_seconds": ..., "decode_tokens": ...}   (one greedy run)
    {"cmd": "exit"}

Failures answer ``{"ok": false, "error": MESSAGE, "usage": BOOL}``.  Latency is
timed here, around ``session.run`` only, so the protocol's own overhead never
enters the figures.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from ..errors import one_line


def peak_rss_bytes() -> int:
    """The process's peak resident set so far.

    Linux keeps ``ru_maxrss`` across ``execve``, so a worker forked from a big
    parent would report the parent's peak; ``VmHWM`` belongs to the new
    address space and starts afresh.  Elsewhere ``ru_maxrss`` (bytes on macOS).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class Worker:
    def __init__(self) -> None:
        self.session: Any = None
        self.batches: list[dict[str, Any]] = []
        self.turn = 0

    def ready(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Do the imports and plugin discovery up front, so load time is the session's alone."""
        import numpy  # noqa: F401
        import onnxruntime  # noqa: F401

        from ..runtime import SessionSettings, resolve_providers

        resolve_providers(SessionSettings(**msg["settings"]))
        return {"pid": os.getpid()}

    def load(self, msg: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        from ..runtime import SessionSettings, create_session

        with np.load(msg["feeds"], allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        self.batches = unpack_batches(arrays)
        settings = SessionSettings(**msg["settings"])
        # Import onnxruntime before the baseline so that the figure isolates what the model itself costs.
        import onnxruntime  # noqa: F401

        baseline = peak_rss_bytes()
        start = time.perf_counter()
        self.session = create_session(msg["model"], settings)
        load_seconds = time.perf_counter() - start
        names = [i.name for i in self.session.get_inputs()]
        missing = [n for n in names if n not in self.batches[0]]
        if missing:
            raise _Usage(f"{msg['model']}: the inputs have no {missing[0]!r} (the model takes {', '.join(names)})")
        self.batches = [{n: b[n] for n in names} for b in self.batches]
        return {"pid": os.getpid(), "load_seconds": load_seconds, "baseline_rss_bytes": baseline,
                "providers": self.session.get_providers()}

    def run(self, n: int) -> dict[str, Any]:
        assert self.session is not None, "load first"
        run = self.session.run
        clock = time.perf_counter_ns
        latencies = []
        for _ in range(n):
            feeds = self.batches[self.turn % len(self.batches)]
            self.turn += 1
            start = clock()
            run(None, feeds)
            latencies.append((clock() - start) / 1e6)
        return {"latencies_ms": latencies}

    def stats(self) -> dict[str, Any]:
        return {"peak_rss_bytes": peak_rss_bytes()}


class _Usage(Exception):
    pass


def unpack_batches(arrays: dict[str, Any]) -> list[dict[str, Any]]:
    """``b<i>__<input>`` arrays (as the parent saves them) back into a list of feed dicts."""
    batches: dict[int, dict[str, Any]] = {}
    for key, value in arrays.items():
        index, _, name = key.partition("__")
        batches.setdefault(int(index[1:]), {})[name] = value
    if not batches:
        raise _Usage("no samples to run")
    return [batches[i] for i in sorted(batches)]


def die_with_parent() -> None:
    """Ask Linux to kill this worker when its parent dies.

    The parent pauses idle workers (SIGSTOP).  A paused process never reads
    the end of its stdin, so if the parent were killed outright the worker
    would stay stopped forever; SIGKILL reaches it even then.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))   # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:   # the parent died before we asked
        os._exit(1)


def main() -> None:
    die_with_parent()
    # The protocol owns the real stdout; anything a library prints goes to stderr instead.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = Worker()
    from .generation_worker import GenerationWorker

    generation = GenerationWorker(peak_rss_bytes)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        cmd = msg.get("cmd")
        if cmd == "exit":
            break
        try:
            if cmd == "ready":
                reply = worker.ready(msg)
            elif cmd == "load":
                reply = worker.load(msg)
            elif cmd == "run":
                reply = worker.run(int(msg["n"]))
            elif cmd == "stats":
                reply = worker.stats()
            elif cmd == "load_decoder":
                reply = generation.load(msg)
            elif cmd == "generate":
                reply = generation.generate(msg)
            else:
                raise _Usage(f"unknown command {cmd!r}")
            reply = {"ok": True, **reply}
        except Exception as exc:  # noqa: BLE001 - every failure goes back to the parent as one line
            from ..errors import UsageError

            usage = isinstance(exc, (UsageError, _Usage))
            text = str(exc) if usage else f"{one_line(exc, 400, kind=True)}"
            reply = {"ok": False, "error": text, "usage": usage}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()


if __name__ == "__main__":
    main()
