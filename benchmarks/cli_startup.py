"""Wall time of `onnxlite --help`, `--list-plugins` and `onnxlite plugins` (target: well under 0.5 s).

Run: .venv/bin/python benchmarks/cli_startup.py
Prints the median of 7 fresh processes for each command, next to a bare
`python -c pass` measured in the same run, so the difference is what onnxlite costs.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "onnxlite --help": [sys.executable, "-m", "onnxlite", "--help"],
    "onnxlite --list-plugins": [sys.executable, "-m", "onnxlite", "--list-plugins"],
    "onnxlite --list-plugins --json": [sys.executable, "-m", "onnxlite", "--list-plugins", "--json"],
    "onnxlite plugins": [sys.executable, "-m", "onnxlite", "plugins"],
    "onnxlite plugins --json": [sys.executable, "-m", "onnxlite", "plugins", "--json"],
}


def main(repeats: int = 7) -> None:
    from onnxlite.hardware import header

    print(header(), flush=True)   # what every figure below was measured on
    timings: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(repeats):  # interleaved, so drift hits every command alike
        for name, argv in COMMANDS.items():
            start = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            timings[name].append(time.perf_counter() - start)
    base = statistics.median(timings["python -c pass"])
    print(f"{'command':34} {'median s':>9} {'over python':>12}")
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"{name:34} {median:9.3f} {median - base:12.3f}")
    worst = max(statistics.median(v) for k, v in timings.items() if k.startswith("onnxlite"))
    print(f"slowest onnxlite command: {worst:.3f} s ({'OK' if worst < 0.5 else 'OVER'} the 0.5 s target)")


if __name__ == "__main__":
    main()
