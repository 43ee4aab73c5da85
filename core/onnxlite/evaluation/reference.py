"""The reference a candidate is judged against: an ONNX model or any source a framework plugin loads.

A quantized model is judged against the original framework's outputs (a
PyTorch module, a TensorFlow SavedModel...), not against another ONNX file,
whenever the user names the source.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError, one_line

if TYPE_CHECKING:
    import numpy as np

    from ..inputs import InputSpec
    from ..runtime import SessionSettings

Progress = Callable[[str], None]


def _is_onnx(reference: Any, framework: str) -> bool:
    if framework == "onnx":
        return True
    return isinstance(reference, (str, os.PathLike)) and Path(reference).suffix.lower() == ".onnx"


class ReferenceModel:
    """Runs the reference: onnxruntime on the CPU for ONNX files, the framework plugin otherwise.

    The reference runs on the CPU whatever ``--provider`` says: its answers are
    the ones to keep, and an accelerator's own rounding belongs to the candidates.
    """

    def __init__(self, name: str, framework: str, run: Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]],
                 specs: Callable[[], list[InputSpec]] | None, path: str | None = None):
        self.name = name
        self.framework = framework
        self.run = run
        self._specs = specs
        self.path = path

    def specs(self, candidate: str | os.PathLike[str] | None = None) -> list[InputSpec]:
        from ..inputs import specs_from_onnx

        if self._specs is not None:
            try:
                return self._specs()
            except UsageError:
                if candidate is None:
                    raise
        if candidate is None:
            raise UsageError(f"{self.name}: cannot tell the model's inputs; give a candidate ONNX model or inputs")
        return specs_from_onnx(candidate)

    @classmethod
    def load(cls, reference: Any, framework: str = "auto", options: Mapping[str, Any] | None = None,
             settings: SessionSettings | None = None, inputs: Sequence[InputSpec] | None = None) -> ReferenceModel:
        from dataclasses import replace

        from ..runtime import SessionSettings

        if hasattr(reference, "run") and not isinstance(reference, (str, os.PathLike)):
            model = reference  # an already loaded SourceModel (lighten's, any framework)
            specs = (lambda: list(inputs)) if inputs else (lambda: [s.with_role() for s in model.input_specs()])
            return cls(type(model).__name__, framework if framework != "auto" else "python",
                       lambda feeds: _run_source(model, feeds), specs)
        if _is_onnx(reference, framework):
            from ..inputs import specs_from_onnx
            from ..modelio import check_model
            from ..runtime import create_session, run_session

            path = str(reference)
            check_model(path)  # unreadable files and unknown operators: one line, as quantize and export say it
            cpu = replace(settings or SessionSettings(), provider="cpu", provider_options={})
            session = create_session(path, cpu)
            specs = (lambda: list(inputs)) if inputs else (lambda: specs_from_onnx(path))
            return cls(path, "onnx", lambda feeds: run_session(session, feeds), specs, path)
        from ..conversion.sources import INPUTS, load_source

        opts = dict(options or {})
        if inputs:
            opts[INPUTS] = list(inputs)
        loaded = load_source(str(reference), framework, opts)
        return cls(str(reference), loaded.framework, lambda feeds: _run_source(loaded.model, feeds),
                   lambda: loaded.input_specs, str(reference) if Path(str(reference)).exists() else None)


def _run_source(model: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    import numpy as np

    try:
        outputs = model.run(feeds)
    except UsageError:
        raise
    except Exception as exc:
        raise UsageError(f"the reference model failed on the data: {type(exc).__name__}: "
                         f"{one_line(exc, 300)}") from exc
    return {k: np.asarray(v) for k, v in outputs.items()}
