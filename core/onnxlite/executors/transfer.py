"""Files to and from other machines: a model with its external data, or a folder, as one picklable value.

The Ray executor puts these into the object store once per run, so every
candidate task on a node reads the float model from the node's store instead of
the driver's disk; finished models come back the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: a packed path: {"name": the file or folder name, "kind": "file" | "folder", "files": {relative path: bytes}}
Packed = dict[str, Any]


def pack(path: str | os.PathLike[str]) -> Packed:
    """A file (an ``.onnx`` model travels with its external data) or a whole folder."""
    path = Path(path)
    if path.is_dir():
        files = {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
        return {"name": path.name, "kind": "folder", "files": files}
    members = [path]
    if path.suffix == ".onnx":
        from ..modelio import external_data_files

        members += external_data_files(path)
    return {"name": path.name, "kind": "file",
            "files": {str(p.relative_to(path.parent)): p.read_bytes() for p in members}}


def unpack(packed: Packed, folder: str | os.PathLike[str]) -> Path:
    """Write ``packed`` into ``folder``; returns the path of the file or folder it was packed from."""
    folder = Path(folder)
    root = folder / packed["name"] if packed["kind"] == "folder" else folder
    for relative, data in packed["files"].items():
        target = (root / relative).resolve()
        if not target.is_relative_to(root.resolve()):   # a packed name never escapes its folder
            raise ValueError(f"refusing to unpack {relative!r} outside {root}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return folder / packed["name"]
