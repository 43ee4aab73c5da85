"""Reading, measuring and writing ONNX files, with external data handled throughout."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from .atomic import replace_set, scratch_dir
from .errors import UsageError, one_line
from .ops import QUANTIZED_OPS  # noqa: F401 - modelio.QUANTIZED_OPS stays on the helper surface

if TYPE_CHECKING:
    import onnx

    from .runtime_compat import TargetRuntime

#: protobuf refuses single files over 2 GiB; above this we always write external data.
EXTERNAL_DATA_THRESHOLD = 2 * 1024**3 - 64 * 1024**2


def check_exists(path: str | os.PathLike[str], what: str = "model") -> Path:
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file")
    if what == "model" and path.is_dir():
        raise UsageError(f"{path}: is a folder, expected an .onnx file")
    return path


def load_model(path: str | os.PathLike[str], load_external_data: bool = True) -> onnx.ModelProto:
    """Load and check an ONNX model; unreadable files are a one-line :class:`UsageError`.

    A missing external-data file is named as such, even when the weights are
    not read (``load_external_data=False``, how every command first looks at
    its inputs), so each command refuses such a model the same way, before any work.
    """
    import onnx
    from onnx.external_data_helper import load_external_data_for_model

    path = check_exists(path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise UsageError(f"{path}: not a readable ONNX model ({one_line(exc, 200, kind=True)})") from None
    missing = missing_external_data(model, path)
    if missing:
        tensor, file = missing[0]
        more = f" (and {len(missing) - 1} more tensors)" if len(missing) > 1 else ""
        raise UsageError(f"{path}: its external data file {file} is missing (tensor {tensor!r}{more} is stored "
                         "there); keep the model's data file beside it")
    if load_external_data and uses_external_data(model):
        try:
            load_external_data_for_model(model, str(path.parent))
        except Exception as exc:
            raise UsageError(f"{path}: not a readable ONNX model ({one_line(exc, 200, kind=True)})") from None
    if not model.graph.node and not model.graph.output:
        raise UsageError(f"{path}: not a readable ONNX model (empty graph)")
    return model


def missing_external_data(model: onnx.ModelProto, path: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """``(tensor name, file)`` for each tensor of ``model`` (read from ``path``) whose external data file is absent."""
    folder = Path(path).parent
    return [(tensor.name, folder / location) for tensor in external_tensors(model)
            if not (folder / (location := _location(tensor))).is_file()]


def external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor of ``model`` stored outside the .onnx file: initializers, sparse initializers and tensor
    attributes (``Constant`` values), in every graph (:func:`onnxlite.subgraphs.iter_graphs`) and function."""
    from onnx import TensorProto

    from .subgraphs import iter_graphs

    def node_tensors(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.TensorProto]:
        for node in nodes:
            for attribute in node.attribute:
                if attribute.HasField("t"):
                    yield attribute.t
                yield from attribute.tensors
                if attribute.HasField("sparse_tensor"):
                    yield from (attribute.sparse_tensor.values, attribute.sparse_tensor.indices)

    def graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield from (sparse.values, sparse.indices)
        yield from node_tensors(graph.node)

    functions = [g for f in model.functions for node in f.node for a in node.attribute
                 for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)]
    tensors = itertools.chain(*(graph_tensors(g) for g in iter_graphs(model.graph)),
                              *(node_tensors(f.node) for f in model.functions),
                              *(graph_tensors(g) for top in functions for g in iter_graphs(top)))
    return (t for t in tensors if t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL)


def _location(tensor: onnx.TensorProto) -> str:
    return next((e.value for e in tensor.external_data if e.key == "location"), "")


def external_locations(model: onnx.ModelProto) -> list[str]:
    """The external-data files ``model`` (parsed) names, relative to it, sorted and each once."""
    return sorted({_location(t) for t in external_tensors(model)} - {""})


def rename_external_data(model: onnx.ModelProto, renamed: Mapping[str, str]) -> None:
    """Point ``model``'s external tensors at new file names (``old location -> new``), in place."""
    for tensor in external_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value in renamed:
                entry.value = renamed[entry.value]


def read_header(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """The model parsed without its external data, shared within the process while the file is unchanged.

    For readers (graph, inputs, outputs, op types): a command that looks at one
    file from several places parses it once.  The result is shared, so it must
    not be modified; a caller that edits a model loads its own with :func:`load_model`.
    """
    path = check_exists(path)
    stat = path.stat()
    return _read_header(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=4)   # a few files at a time: a header with inline weights can be large
def _read_header(path: str, mtime_ns: int, size: int) -> onnx.ModelProto:
    return load_model(path, load_external_data=False)


def check_model(path: str | os.PathLike[str]) -> None:
    """Refuse a model no command could use, before any work (one line, exit 2).

    Missing external data is named by :func:`load_model`; then ``onnx.checker``
    runs (by path, so models over 2 GB work), which catches unknown operators
    ("No Op registered for ..."), bad node specs and broken graphs.
    """
    import onnx

    path = check_exists(path)
    read_header(path)   # the parse every later look at the file shares (compare and bench check too)
    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:
        # What onnxruntime runs is not refused: its float16 converter appends Casts at the end of the
        # node list (onnxruntime sorts graphs itself), and its transformer fusions write
        # LayerNormalization into opset-13 graphs (onnxruntime registers it from opset 1).
        if _onnxruntime_loads(path):
            return
        raise UsageError(f"{path}: invalid ONNX model ({one_line(exc, 300)})") from None


def _onnxruntime_loads(path: Path) -> bool:
    try:
        import onnxruntime as ort
    except ImportError:
        return False
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any load failure means the checker's complaint stands
        return False
    return True


def private_copy(model: str | os.PathLike[str], folder: str | os.PathLike[str]) -> Path:
    """Copy ``model`` and its external data into ``folder``; returns the copy's path.

    For tools that write beside the model they are given: onnxruntime's
    quantizers write ``<model>-inferred.onnx`` next to their input, which must
    never land beside the user's model (nor fail in a read-only folder, nor
    stay behind after a Ctrl-C).  Copies, not links: onnx refuses external data
    that has more than one hard link or sits behind a symlink, and a tool that
    rewrote its input in place would rewrite the user's file through a link.
    """
    import shutil

    model, folder = Path(model), Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for path in [model, *external_data_files(model)]:
        target = folder / path.relative_to(model.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return folder / model.name


def uses_external_data(model: onnx.ModelProto) -> bool:
    """Whether any tensor of ``model`` is stored outside the .onnx file."""
    return next(external_tensors(model), None) is not None


def load_external_data(model: onnx.ModelProto, path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read the external tensors of ``model`` (parsed from ``path`` without them) into it, in place.

    Parse once with ``load_external_data=False``, look at the graph, and only then
    pay for the weights; an inline model already holds them and is returned as is.
    """
    if uses_external_data(model):
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(model, str(Path(path).parent))
    return model


#: how an external-data location is serialized: StringStringEntryProto field 1 = "location", then field 2
_LOCATION_ENTRY = b"\x0a\x08location\x12"


@lru_cache(maxsize=256)
def _external_locations(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """External-data locations named in ``path``, read from the raw bytes without parsing the protobuf.

    Parsing a 256 MiB model to learn that it has no external data took 542 ms; a
    byte scan of the memory-mapped file finds each ``location`` entry (the key is
    serialized verbatim) for a fraction of that, and the answer is kept per
    (path, mtime, size), so a file is scanned once per process while it is unchanged.
    """
    import mmap

    if size == 0:
        return ()
    found: list[str] = []
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        at = data.find(_LOCATION_ENTRY)
        while at != -1:
            cursor, length, shift = at + len(_LOCATION_ENTRY), 0, 0
            while cursor < size:   # the value's length, a protobuf varint
                byte = data[cursor]
                cursor += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            try:
                found.append(data[cursor:cursor + length].decode("utf-8"))
            except UnicodeDecodeError:
                pass   # weight bytes that happen to look like the key: not a location
            at = data.find(_LOCATION_ENTRY, cursor)
    return tuple(dict.fromkeys(found))


def external_data_files(path: str | os.PathLike[str]) -> list[Path]:
    """The external-data files a model refers to (existing ones only), found without parsing the model."""
    path = Path(path)
    stat = path.stat()
    locations = _external_locations(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    return sorted({path.parent / location for location in locations if location and (path.parent / location).is_file()})


def file_hash(*paths: str | os.PathLike[str] | None) -> str:
    """SHA-256 over the files' bytes, in order (a missing or absent path hashes as its absence)."""
    digest = hashlib.sha256()
    for path in paths:
        if path is None or not os.path.exists(path):
            digest.update(b"<none>")
            continue
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"<end>")
    return digest.hexdigest()


def model_hash(path: str | os.PathLike[str]) -> str:
    """SHA-256 over all the bytes a model reads: the .onnx file, then each external-data file it names."""
    return file_hash(path, *external_data_files(path)) if os.path.exists(path) else file_hash(path)


def model_size(path: str | os.PathLike[str]) -> int:
    """Bytes on disk, external data included (``os.stat`` plus a cached byte scan; no protobuf parse)."""
    path = Path(path)
    return path.stat().st_size + sum(p.stat().st_size for p in external_data_files(path))


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: Counter[str] = Counter(node.op_type for node in model.graph.node)
    for function in model.functions:
        counts.update(node.op_type for node in function.node)
    return dict(sorted(counts.items()))


def quantized_ops(model: onnx.ModelProto) -> dict[str, int]:
    return {op: n for op, n in op_counts(model).items() if op in QUANTIZED_OPS}


def is_quantized(model: onnx.ModelProto) -> bool:
    if quantized_ops(model):
        return True
    return any(p.key == "onnxlite.strategy" for p in model.metadata_props)


def set_metadata(model: onnx.ModelProto, values: dict[str, str]) -> None:
    """Set (or replace) ``metadata_props`` entries."""
    existing = {p.key: p for p in model.metadata_props}
    for key, value in values.items():
        if key in existing:
            existing[key].value = str(value)
        else:
            entry = model.metadata_props.add()
            entry.key, entry.value = key, str(value)


def get_metadata(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


def save_model(model: onnx.ModelProto, target: str | os.PathLike[str], external_data: bool | None = None,
               runtime: TargetRuntime | None = None) -> Path:
    """Write ``model`` to ``target`` atomically.

    ``external_data=None`` writes external data only when the model would not
    fit in one protobuf file.  The data file (``<name>.data``) is moved into
    place before the model file, so nobody ever sees a model without its data.
    ``runtime`` (``runtime_compat.parse_target``) lowers the IR version or opset
    where valid so that release loads the file, and refuses what it cannot
    load.  The oldest onnxruntime the file needs goes in its metadata
    (``onnxlite.min_onnxruntime``).
    """
    import onnx

    from .runtime_compat import fit_to_target, stamp

    if runtime is not None:
        fit_to_target(model, runtime)
    stamp(model)
    target = Path(target)
    if external_data is None:
        external_data = model.ByteSize() > EXTERNAL_DATA_THRESHOLD
    with scratch_dir(target) as work:
        tmp_model = work / target.name
        if external_data:
            onnx.save_model(model, str(tmp_model), save_as_external_data=True, all_tensors_to_one_file=True,
                            location=f"{target.name}.data", size_threshold=1024)
        else:
            onnx.save_model(model, str(tmp_model))
        install_model(tmp_model, target)
    return target


def install_model(staged: Path, target: Path) -> None:
    """Move ``staged`` (a model in a scratch folder beside ``target``) and its data files to ``target``, as a set.

    The old ``target`` and its ``<name>.data`` go (the new model may have no external data: an old data
    file left beside it would be stale); see :func:`onnxlite.atomic.replace_set` for why no reader ever
    sees a model beside another model's data.
    """
    data = [(path, target.parent / path.relative_to(staged.parent)) for path in external_data_files(staged)]
    replace_set([*data, (staged, target)], drop=[target.parent / f"{target.name}.data"])


def check_spares_input(source: str | os.PathLike[str], output: str | os.PathLike[str], flag: str = "-o",
                       folder: bool = False) -> None:
    """Refuse, before any work, an output whose writing would replace or delete ``source`` or its data files.

    ``output`` is a model file (its ``<name>.data`` and the data files an existing one names are replaced
    too) or, with ``folder``, an output folder replaced whole.  A source that is not a path (a hub id,
    ``module:attr``) has nothing to spare.
    """
    source, output = Path(source), Path(output)
    if not source.exists():
        return
    inputs = [source] if source.is_dir() else [source, *external_data_files(source)]
    where = f"{flag} {output}" if flag else str(output)
    for path in inputs:
        path = path.resolve()
        if folder:
            out = output.resolve()
            hit = path == out or out in path.parents
        else:
            written = [output, output.parent / f"{output.name}.data"]
            if output.is_file():
                written += external_data_files(output)
            hit = any(w.exists() and os.path.samefile(w, path) for w in written) or (
                path.is_dir() and any(w.exists() and path in w.resolve().parents for w in written))
        if hit:
            what = ("a file of the input folder" if path.is_dir() and not folder else
                    "the input" if path == source.resolve() else "the input's data file")
            raise UsageError(f"{where}: would replace {what} {path} (inputs are never modified); "
                             "choose another output path")


def publish_model(produced: str | os.PathLike[str], target: str | os.PathLike[str],
                  external_data: bool | None = None, metadata: dict[str, str] | None = None,
                  runtime: TargetRuntime | None = None,
                  rewrite: Callable[[onnx.ModelProto], object] | None = None) -> Path:
    """Move a model a tool wrote in a scratch folder to ``target`` atomically, re-homing its external data.

    ``external_data=None`` keeps external data if the produced model had it.  ``rewrite`` edits the loaded
    model in place before it is written (the one load and save a published model gets).
    """
    produced = Path(produced)
    had_external = bool(external_data_files(produced))
    model = load_model(produced, load_external_data=True)
    if rewrite is not None:
        rewrite(model)
    if metadata:
        set_metadata(model, metadata)
    if external_data is None:
        external_data = had_external or model.ByteSize() > EXTERNAL_DATA_THRESHOLD
    return save_model(model, target, external_data=external_data, runtime=runtime)
