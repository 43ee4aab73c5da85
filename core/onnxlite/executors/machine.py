"""A description of the machine that measured: the report says where latency figures come from."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any


def describe_machine() -> dict[str, Any]:
    """Host name, OS, architecture, CPU model, CPU count and memory of *this* machine."""
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "system": platform.system(),
        "machine": platform.machine(),
        "cpu": _cpu_model() or platform.processor() or "unknown",
        "cpus": os.cpu_count(),
    }
    try:
        info["memory_bytes"] = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    return info


def machine_text(info: dict[str, Any]) -> str:
    """One line for tables and reports: ``host (Linux x86_64, AMD EPYC ..., 2 CPUs)``, plus the Ray node."""
    text = (f"{info.get('hostname', '?')} ({info.get('system', '?')} {info.get('machine', '?')}, "
            f"{info.get('cpu', '?')}, {info.get('cpus', '?')} CPUs)")
    if info.get("node_id"):
        text += f", Ray node {info['node_id'][:12]}"
        labels = {k: v for k, v in (info.get("labels") or {}).items() if not k.startswith("ray.io/")}
        if labels:
            text += " [" + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) + "]"
    return text


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                # x86: "model name"; many ARM kernels: "Model" or only "CPU part".
                key, _, value = line.partition(":")
                if key.strip() in {"model name", "Model", "Hardware"} and value.strip():
                    return " ".join(value.split())
    except OSError:
        pass
    if platform.system() == "Darwin":
        import subprocess

        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                  timeout=2).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            return None
    return None


def record_machine(result: Any, info: dict[str, Any]) -> None:
    """Say in a BenchResult's settings where it was measured: ``measured_on`` (a line) and ``bench_node``."""
    result.settings["measured_on"] = machine_text(info)
    result.settings["bench_node"] = info
