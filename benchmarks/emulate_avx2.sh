#!/bin/sh
# A Python that runs as on an AVX2-only CPU (Haswell: AVX2, no AVX-512, no VNNI), child processes included,
# for checking int8 NUMERICS on a machine with VNNI (qemu user-mode emulation; its speeds mean nothing).
#
#   benchmarks/emulate_avx2.sh .venv /tmp/qvenv      # then use /tmp/qvenv/bin/python as the venv's python
#   /tmp/qvenv/bin/python -m pytest -q -m unit
#
# qemu's -0 keeps argv[0] the wrapper's path, so the emulated interpreter's sys.executable is the wrapper and
# every worker lighten starts (multiprocessing spawn/forkserver, subprocess) is emulated too; DIR/pyvenv.cfg
# and DIR/lib make it the same venv.  onnxlite.hardware reads CPUID through numpy and reports
# "avx2 (U8S8 int8 kernels can saturate)"; /proc/cpuinfo still describes the host.  Needs qemu-user
# (Debian: apt-get install qemu-user) 7.2 or later, the first with AVX2 in its TCG.
set -eu
venv=$(cd "${1:?usage: emulate_avx2.sh VENV DIR}" && pwd)
dir=${2:?usage: emulate_avx2.sh VENV DIR}
real=$(readlink -f "$venv/bin/python")
command -v qemu-x86_64 >/dev/null || { echo "error: qemu-x86_64 not found (apt-get install qemu-user)" >&2; exit 2; }
mkdir -p "$dir/bin"
dir=$(cd "$dir" && pwd)
cp "$venv/pyvenv.cfg" "$dir/pyvenv.cfg"
ln -sfn "$venv/lib" "$dir/lib"
cat > "$dir/bin/python" <<WRAPPER
#!/bin/sh
exec qemu-x86_64 -cpu Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm -0 "$dir/bin/python" "$real" "\$@"
WRAPPER
chmod +x "$dir/bin/python"
ln -sf python "$dir/bin/python3"
"$dir/bin/python" -c "import sys; from onnxlite.hardware import detect; print(sys.executable, detect().line())" 2>/dev/null \
    || echo "$dir/bin/python made (onnxlite not importable from it as is: set PYTHONPATH)"
