#!/usr/bin/env bash
# The CUDA and TensorRT execution providers on a machine with an NVIDIA GPU, in one go (under 8 minutes).
#
#   bash benchmarks/gpu_check.sh --fetch        # here, with PyPI: wheels into benchmarks/wheels/ (gitignored),
#                                               # the big onnxruntime-gpu wheel split into parts of <= 56 MiB
#   bash benchmarks/gpu_check.sh --stash        # on the GPU machine: keep the parts carried in this call in
#                                               # $STASH (default /tmp/onnxlite-gpu-wheels) for the next call
#   bash benchmarks/gpu_check.sh [--quick]      # on the GPU machine: install onnxruntime-gpu, measure, report
#   bash benchmarks/gpu_check.sh --dry-run      # anywhere: check the wheels, then run the same measurement
#                                               # code on the CPU provider only, with tiny models
#
# What it measures, all through onnxlite's own API (export, quantize, bench, placement):
#   * a BERT with all-MiniLM-L6-v2's shape (6 layers, hidden 384, random weights: the PyPI model package is
#     too big to carry) at batch 64, seq 40, and a small CNN (3x96x96, batch 16, random weights);
#   * formats fp32, fp16, dynamic int8 (QOperator: MatMulInteger, ConvInteger), static int8 QDQ and
#     QOperator (QLinearConv/QLinearMatMul);
#   * providers cpu, cuda, and tensorrt (fp16 and int8 enabled) when its libraries are there;
#   * p50 latency (interleaved, each model in its own worker), the ratio to the same model on the CPU,
#     and the CPU-fallback report on each GPU provider: nodes, ops and the time they cost.
# Speed only: random weights, so no accuracy figures.  Results: stdout, and JSON + markdown in $OUT
# (or /tmp/onnxlite-gpu-check/).  No test depends on a GPU; this script is where GPU claims are checked.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(dirname "$HERE")"
WHEELS="$HERE/wheels"
STASH="${STASH:-/tmp/onnxlite-gpu-wheels}"
ORT_GPU="${ORT_GPU:-onnxruntime-gpu==1.31.1}"   # built for CUDA 13 and cuDNN 9 (its [cuda,cudnn] extras)
PY_VERSION="${PY_VERSION:-3.12}"                 # the GPU machine's python3
PART_MIB=56
MODE=run
QUICK=0
for arg in "$@"; do
  case "$arg" in
    --fetch) MODE=fetch ;;
    --stash) MODE=stash ;;
    --dry-run) MODE=dry-run ;;
    --quick) QUICK=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "error: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done

fetch() {
  mkdir -p "$WHEELS/parts"
  local dl=(--no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp
            --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
            --platform manylinux2014_x86_64 -d "$WHEELS")
  python3 -m pip download -q "${dl[@]}" "$ORT_GPU" tomli-w==1.2.0
  local whl
  whl="$(ls "$WHEELS"/onnxruntime_gpu-*.whl | head -1)"
  rm -f "$WHEELS"/parts/*
  (cd "$WHEELS" && sha256sum "$(basename "$whl")" > parts/SHA256SUMS)
  split -b "${PART_MIB}M" -d -a 2 "$whl" "$WHEELS/parts/$(basename "$whl").part"
  rm -f "$whl"
  echo "parts of $(basename "$whl") ($(du -sh "$WHEELS/parts" | cut -f1) in all):"
  ls -1 "$WHEELS/parts"
  echo "carry benchmarks/wheels/parts/<one part> per call with --stash (the tree itself must stay small),"
  echo "then the last part and benchmarks/wheels/tomli_w-*.whl with the measuring call."
}

stash() {
  mkdir -p "$STASH"
  local n=0
  for f in "$WHEELS"/parts/* "$WHEELS"/*.whl; do
    [ -f "$f" ] || continue
    cp -f "$f" "$STASH/" && n=$((n + 1))
  done
  echo "stashed $n file(s); $STASH now holds:"; ls -1 "$STASH"
}

# The onnxruntime-gpu wheel from its parts (carried now or stashed by earlier calls), checked.
assemble() {
  local sums name found=()
  sums="$(ls "$WHEELS/parts/SHA256SUMS" "$STASH/SHA256SUMS" 2>/dev/null | head -1 || true)"
  [ -n "$sums" ] || { echo "error: no SHA256SUMS in $WHEELS/parts or $STASH: run --fetch here first" >&2; return 1; }
  name="$(awk '{print $2}' "$sums")"
  local work="${TMPDIR:-/tmp}/onnxlite-gpu-assemble"
  rm -rf "$work" && mkdir -p "$work"
  for dir in "$STASH" "$WHEELS/parts"; do
    for f in "$dir/$name".part*; do [ -f "$f" ] && cp -f "$f" "$work/"; done
  done
  found=("$work/$name".part*)
  [ -f "${found[0]}" ] || { echo "error: no parts of $name found in $WHEELS/parts or $STASH" >&2; return 1; }
  cat "$work/$name".part* > "$work/$name"
  if ! (cd "$work" && sha256sum -c --quiet "$sums"); then
    echo "error: $name from ${#found[@]} part(s) fails its checksum: a part is missing (the machine went back" >&2
    echo "       between calls?); parts present: $(cd "$work" && ls "$name".part* | sed 's/.*part//' | tr '\n' ' ')" >&2
    return 1
  fi
  echo "$work/$name"
}

if [ "$MODE" = fetch ]; then fetch; exit 0; fi
if [ "$MODE" = stash ]; then stash; exit 0; fi

OUTDIR="${OUT:-${TMPDIR:-/tmp}/onnxlite-gpu-check}"
mkdir -p "$OUTDIR"
PY="${PYTHON:-python3}"
if [ "$MODE" = dry-run ]; then
  if whl="$(assemble 2>/dev/null)"; then echo "wheels: $(basename "$whl") assembles and matches its checksum"
  else echo "wheels: not fetched or incomplete (bash benchmarks/gpu_check.sh --fetch); measuring on the CPU anyway"; fi
  [ -x "$REPO/.venv/bin/python" ] && PY="${PYTHON:-$REPO/.venv/bin/python}"
  export PYTHONPATH="$REPO/core:$REPO/plugins${PYTHONPATH:+:$PYTHONPATH}"
else
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  whl="$(assemble)"
  SITE="${TMPDIR:-/tmp}/onnxlite-gpu-site"
  rm -rf "$SITE"
  # --target keeps the image's own onnxruntime (a CPU build) out of the way: PYTHONPATH comes first.
  tomli_w="$(ls "$WHEELS"/tomli_w-*.whl "$STASH"/tomli_w-*.whl 2>/dev/null | head -1 || true)"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$whl" ${tomli_w:+"$tomli_w"}
  export PYTHONPATH="$SITE:$REPO/core:$REPO/plugins${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$HERE:$PYTHONPATH"   # benchmarks/openvino_formats.py: the CNN and the quantizing loop
export GPU_CHECK_MODE="$MODE" GPU_CHECK_QUICK="$QUICK" GPU_CHECK_OUT="$OUTDIR" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
exec "$PY" - <<'PYTHON'
import json, os, platform, statistics, sys, time
from pathlib import Path

from onnxlite.hardware import header

print(header(), flush=True)   # the host CPU (the GPU line above is nvidia-smi's)

DRY = os.environ["GPU_CHECK_MODE"] == "dry-run"
QUICK = os.environ["GPU_CHECK_QUICK"] == "1" or DRY
OUT = Path(os.environ["GPU_CHECK_OUT"])
WORK = OUT / "work"
WORK.mkdir(parents=True, exist_ok=True)
started = time.time()


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')} +{time.time() - started:.0f}s] {msg}", file=sys.stderr, flush=True)


if not DRY:
    import torch  # noqa: F401 - its CUDA 13 / cuDNN 9 libraries (nvidia-* packages) are the ones onnxruntime-gpu wants
import onnxruntime as ort

if not DRY and hasattr(ort, "preload_dlls"):
    try:
        ort.preload_dlls()   # CUDA/cuDNN from the nvidia-* pip packages the image already has
    except Exception as exc:  # noqa: BLE001 - the CUDA EP check below says what is missing
        log(f"onnxruntime.preload_dlls: {exc}")
available = ort.get_available_providers()
log(f"onnxruntime {ort.__version__} from {Path(ort.__file__).parent}: {', '.join(available)}")
import onnxlite
from onnxlite.placement import model_format, placement_report
from onnxlite.runtime import SessionSettings, create_session

# the small CNN and the quantizing loop are benchmarks/openvino_formats.py's (one copy; on PYTHONPATH above)
from openvino_formats import CNN_SOURCE, make_variants

THREADS = os.cpu_count() or 2
PROVIDERS = {"cpu": SessionSettings(provider="cpu", threads=THREADS)}
TRT_CACHE = WORK / "trt-cache"
if not DRY:
    PROVIDERS["cuda"] = SessionSettings(provider="cuda")
    PROVIDERS["tensorrt"] = SessionSettings(provider="tensorrt", provider_options={
        "trt_fp16_enable": True, "trt_int8_enable": True, "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(TRT_CACHE)})


def usable(name, settings, probe):
    """Can a session on this provider be made here? (the TensorRT EP needs libnvinfer, which pip does not bring)"""
    try:
        create_session(probe, settings)
        return None
    except Exception as exc:  # noqa: BLE001 - the reason is the result
        return " ".join(str(exc).split())[:240]


def bert_folder():
    import torch
    import transformers

    folder = WORK / "minilm-shaped-bert"
    if not (folder / "config.json").exists():
        torch.manual_seed(0)
        dims = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128) if DRY else \
            dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
        config = transformers.BertConfig(vocab_size=30522, max_position_embeddings=512, **dims)
        transformers.BertModel(config).eval().save_pretrained(folder)
    return folder




def measure(label, models, bench_kwargs, runs):
    rows = {n: ({"error": p} if isinstance(p, str) else {"format": model_format(p),
                                                          "size_mb": round(p.stat().st_size / 1e6, 2)})
            for n, p in models.items()}
    paths = {n: p for n, p in models.items() if not isinstance(p, str)}
    for provider, settings in PROVIDERS.items():
        reason = usable(provider, settings, paths["fp32"])
        if reason:
            log(f"{label}: {provider} not usable here: {reason}")
            for n in paths:
                rows[n][f"{provider}_error"] = reason
            continue
        ok = []
        for n, p in paths.items():
            try:
                report = placement_report(p, settings, runs=3)
            except Exception as exc:  # noqa: BLE001 - e.g. a model this provider cannot build
                rows[n][f"{provider}_error"] = " ".join(str(exc).split())[:200]
                continue
            ok.append(n)
            if provider != "cpu":
                rows[n][f"{provider}_fallback"] = {"nodes": len(report.fallback), "ms": round(report.fallback_ms, 3),
                                                   "ops": report.fallback_ops(), "summary": report.summary()}
        if not ok:
            continue
        log(f"{label}: bench {len(ok)} models on {provider}")
        result = onnxlite.bench([paths[n] for n in ok], names=ok, runs=runs, warmup=5, settings=settings,
                                **bench_kwargs)
        for row in result.rows:
            if row.latency_ms:
                rows[row.name][f"{provider}_p50_ms"] = row.latency_ms["p50"]
            else:
                rows[row.name][f"{provider}_error"] = row.note or row.status
    return rows


def table(title, rows):
    gpus = [p for p in PROVIDERS if p != "cpu"]
    head = ["format", "kind", "MB", "cpu p50 ms"] + [f"{p} p50 ms" for p in gpus] + \
        [f"cpu/{p}" for p in gpus] + [f"{p} fallback (nodes, ms, ops)" for p in gpus]
    lines = [f"## {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"| {name} | " + " | ".join(["-"] * (len(head) - 2)) + f" | {row['error']} |")
            continue
        cpu = row.get("cpu_p50_ms")
        cells = [name, row["format"], f"{row['size_mb']:.1f}", f"{cpu:.2f}" if cpu else row.get("cpu_error", "-")[:40]]
        for p in gpus:
            v = row.get(f"{p}_p50_ms")
            cells.append(f"{v:.2f}" if v else f"failed: {row.get(f'{p}_error', '-')[:60]}")
        for p in gpus:
            v = row.get(f"{p}_p50_ms")
            cells.append(f"{cpu / v:.1f}x" if v and cpu else "-")
        for p in gpus:
            fb = row.get(f"{p}_fallback")
            cells.append("-" if fb is None else f"{fb['nodes']}, {fb['ms']:.2f}, " +
                         ", ".join(f"{op} x{n}" for op, n in list(fb["ops"].items())[:3]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


import numpy as np

runs = 5 if QUICK else 30
rng = np.random.default_rng(0)
results = {}

# A BERT shaped like all-MiniLM-L6-v2
folder = WORK / "bert"
folder.mkdir(exist_ok=True)
fp32 = folder / "fp32.onnx"
batch, seq = (4, 16) if DRY else (64, 40)
if not fp32.exists():
    log("export the MiniLM-shaped BERT")
    onnxlite.export(bert_folder(), fp32)
calibration = folder / "calibration.npz"
np.savez(calibration, input_ids=rng.integers(1000, 29000, (32, seq)).astype(np.int64),
         attention_mask=np.ones((32, seq), np.int64), token_type_ids=np.zeros((32, seq), np.int64))
plans = [("fp16", "fp16", {}, False), ("dynamic", "dynamic", {}, False),
         ("static_qdq", "static", {"format": "QDQ"}, True), ("static_qoperator", "static", {"format": "QOperator"}, True)]
results["bert"] = measure("bert", make_variants(fp32, folder, plans, calibration, {}),
                          {"batch": batch, "seq_len": seq}, runs)

# The small CNN
folder = WORK / "cnn"
folder.mkdir(exist_ok=True)
(folder / "small_cnn.py").write_text(CNN_SOURCE)
fp32 = folder / "fp32.onnx"
side, cbatch = (32, 2) if DRY else (96, 16)
if not fp32.exists():
    log("export the small CNN")
    onnxlite.export(f"{folder / 'small_cnn.py'}:build", fp32, inputs=[f"pixels:float32[batch,3,{side},{side}]"])
calibration = folder / "calibration.npz"
np.savez(calibration, pixels=rng.random((32, 3, side, side), dtype=np.float32))
plans = [("fp16", "fp16", {}, False), ("dynamic_conv", "dynamic", {"op_types": "Conv,MatMul,Gemm"}, False),
         ("static_qdq", "static", {"format": "QDQ"}, True), ("static_qoperator", "static", {"format": "QOperator"}, True)]
results["cnn"] = measure("cnn", make_variants(fp32, folder, plans, calibration, {}), {"batch": cbatch}, runs)

header = (f"onnxruntime {ort.__version__} ({', '.join(available)}); {platform.node()}; {os.cpu_count()} CPUs; "
          f"mode {'dry-run (CPU only, tiny models)' if DRY else 'GPU'}; {runs} runs; {time.time() - started:.0f} s")
text = "\n\n".join([header, table(f"MiniLM-shaped BERT, batch {batch}, seq {seq}", results["bert"]),
                    table(f"small CNN 3x{side}x{side}, batch {cbatch}", results["cnn"]),
                    "cpu/X: CPU p50 over the provider's p50 (above 1: the GPU provider is faster). "
                    "fallback: nodes that ran on the CPU instead, and their kernel time per run."])
print(text)
(OUT / "gpu_check.md").write_text(text + "\n")
(OUT / "gpu_check.json").write_text(json.dumps({"header": header, "results": results}, indent=2, default=str))
log(f"wrote {OUT / 'gpu_check.md'} and gpu_check.json")
PYTHON
