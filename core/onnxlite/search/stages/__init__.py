"""The stages of the search, one module each; :data:`onnxlite.search.engine.STAGES` runs them in order."""

from .base import Outcome, Stage, StageContext
from .fallback import FallbackStage
from .grid import GridStage
from .last_resort import LastResortStage
from .mixed import MixedStage
from .quick import QuickStage

__all__ = ["FallbackStage", "GridStage", "LastResortStage", "MixedStage", "Outcome", "QuickStage", "Stage",
           "StageContext"]
