"""``onnxlite sweep``: lighten a zoo of models from one manifest, locally or on Ray, and resume.

The package is ``sweeps`` so that it never shadows the API function ``onnxlite.sweep()`` (importing a
package sets it as an attribute of its parent).
"""

from .manifest import Manifest, ModelJob, read_manifest
from .outcome import ModelOutcome, SweepResult
from .run import sweep

__all__ = ["Manifest", "ModelJob", "ModelOutcome", "SweepResult", "read_manifest", "sweep"]
