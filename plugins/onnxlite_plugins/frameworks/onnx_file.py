"""Built-in framework plugin: an existing ``.onnx`` file, checked and passed through.

The checker runs by path so models over 2 GB (external data) work; a model
that kept its weights in external data keeps them after passing through.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from onnxlite import FrameworkSpec, hookimpl


def detect(source: str) -> bool:
    return Path(source).suffix.lower() == ".onnx" and Path(source).is_file()


class OnnxSource:
    """An ONNX file: onnxruntime runs it as the reference, export copies it with its external data."""

    def __init__(self, path: Path, settings: Any = None):
        self.path = path
        self.settings = settings
        self._session = None

    def input_specs(self):
        from onnxlite.inputs import specs_from_onnx

        return specs_from_onnx(self.path)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        from onnxlite.runtime import create_session, run_session

        if self._session is None:
            self._session = create_session(self.path, self.settings)
        return run_session(self._session, feeds)

    def export(self, path: Path, inputs: Sequence[Any], sample: Mapping[str, Any], opset: int,
               options: Mapping[str, Any]) -> dict[str, str]:
        import onnx

        from onnxlite.modelio import external_data_files, load_model, save_model

        model = load_model(self.path, load_external_data=True)
        save_model(model, path, external_data=bool(external_data_files(self.path)) or None)
        producer = f"{model.producer_name} {model.producer_version}".strip()
        return {"onnxlite.exporter": "passthrough",
                "onnxlite.versions": json.dumps({"onnx": onnx.__version__, "producer": producer}, sort_keys=True)}


class OnnxExporter:
    def load(self, source: str, options: Mapping[str, Any]) -> OnnxSource:
        from onnxlite.modelio import check_model

        path = Path(source)
        check_model(path)   # a missing file or a folder is a one-line error from here too
        _check_input_names(path, options.get("inputs") or ())
        return OnnxSource(path, options.get("settings"))


def _check_input_names(path: Path, given) -> None:
    """An ONNX model's inputs have fixed names: ``--input`` must use them (onnxruntime feeds by name)."""
    from onnxlite.errors import UsageError
    from onnxlite.inputs import specs_from_onnx

    if not given:
        return
    names = [spec.name for spec in specs_from_onnx(path)]
    for spec in given:
        if spec.name not in names:
            raise UsageError(f"--input {spec}: {path} has no input {spec.name!r} (its inputs: "
                             f"{', '.join(repr(n) for n in names)}); name them as the model does")


@hookimpl
def register_frameworks() -> list[FrameworkSpec]:
    return [FrameworkSpec(
        name="onnx",
        description="An existing .onnx file: checked (onnx.checker), verified and passed through, "
                    "external data kept.",
        factory=OnnxExporter,
        requires=("onnx",),
        install="onnx",
        detect=detect,
    )]
