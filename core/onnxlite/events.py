"""``Event``: how progress reaches a caller: ``on_event(kind, info)``.

``kind`` is one of :data:`Kind` (``"stage"``, ``"note"``, ``"bench"``...) and ``info`` its payload; the CLI prints
them as progress lines and ``--json`` leaves them out.  Every module that emits or forwards progress
takes this one type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

#: every kind of progress an ``on_event`` hears: the search's stages and trials, the benchmark, and a sweep's models
Kind = Literal["bench", "candidate_done", "candidate_start", "candidates", "done", "model_done", "model_kept",
               "model_stage", "model_start", "note", "probe_done", "stage", "step", "sweep"]

Event = Callable[[Kind, Mapping[str, Any]], None]
