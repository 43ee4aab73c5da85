"""``Event``: how progress reaches a caller: ``on_event(kind, info)``.

``kind`` is a short word (``"trial"``, ``"note"``, ``"bench"``...) and ``info`` its payload; the CLI prints
them as progress lines and ``--json`` leaves them out.  Every module that emits or forwards progress
takes this one type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Event = Callable[[str, Mapping[str, Any]], None]
