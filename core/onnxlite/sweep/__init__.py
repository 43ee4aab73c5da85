"""``onnxlite sweep``: lighten a zoo of models from one manifest, locally or on Ray, and resume."""

from .manifest import Manifest, ModelJob, read_manifest
from .outcome import ModelOutcome
from .run import SweepResult, sweep

__all__ = ["Manifest", "ModelJob", "ModelOutcome", "SweepResult", "read_manifest", "sweep"]


# ``import onnxlite.sweep`` makes the package the ``onnxlite.sweep`` attribute, hiding the lazy API
# function of the same name; a callable package keeps ``onnxlite.sweep(MANIFEST)`` working either way.
def _install_call() -> None:
    import sys
    import types

    class _CallablePackage(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return sweep(*args, **kwargs)

    sys.modules[__name__].__class__ = _CallablePackage


_install_call()
