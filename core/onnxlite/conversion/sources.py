"""Works out which framework a source belongs to and loads it through that framework's plugin.

The host never imports a framework plugin: it asks the registry for every
``framework`` spec, lets their cheap ``detect(source)`` claim paths, and builds
the exporter with ``.create()``.  ``compare`` and ``lighten`` use the same two
functions, so any source ``export`` accepts can also serve as a reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from ..inputs import InputSpec
    from ..protocols import SourceModel

#: options key under which an already imported Python object reaches ``Exporter.load``
PYTHON_OBJECT = "python_object"
#: options key for input specs the user gave (``--input``); they win over what the model says
INPUTS = "inputs"


class LoadedSource:
    """A loaded source: which framework, the model, and its inputs.

    ``input_specs`` are the user's ``--input`` specs when given, else what the
    model itself declares.  They are worked out on first access, so a caller
    that takes its inputs from elsewhere (``compare`` reading an ONNX
    candidate) is not stopped by a source that cannot describe its inputs.
    """

    def __init__(self, source: str, framework: str, model: SourceModel,
                 input_specs: Sequence[InputSpec] | None = None, user_options: Mapping[str, Any] | None = None):
        self.source = source
        self.framework = framework
        self.model = model
        self._input_specs = list(input_specs) if input_specs else None
        #: the framework options the user set (``--option``), typed by the plugin's spec
        self.user_options = dict(user_options or {})

    @property
    def input_specs(self) -> list[InputSpec]:
        if self._input_specs is None:
            self._input_specs = [spec.with_role() for spec in self.model.input_specs()]
        return self._input_specs

    def __repr__(self) -> str:
        return f"LoadedSource({self.source!r}, framework={self.framework!r})"


def _frameworks():
    from ..registry import get_registry

    return get_registry().all("framework")


def _claims(source: str) -> list[str]:
    claimed = []
    for entry in _frameworks():
        detect = getattr(entry.spec, "detect", None)
        if detect is None:
            continue
        try:
            if detect(source):
                claimed.append(entry.name)
        except Exception:  # noqa: BLE001 - a third-party detect() that crashes simply does not claim
            continue
    return claimed


def _python_object(source: str) -> tuple[Any, str | None]:
    """Import a Python reference once; a zero-argument factory is called to see what it builds.

    A function that takes arguments is left for the framework plugin, which may
    trace it as the model itself (TensorFlow wraps a plain function in tf.function).
    """
    import inspect

    from ..pyref import guess_framework, load_python_ref, needs_arguments

    obj = load_python_ref(source, "source")
    framework = guess_framework(obj)
    if framework is None and callable(obj) and not inspect.isclass(obj) and not needs_arguments(obj):
        try:
            built = obj()
        except TypeError as exc:
            raise UsageError(f"source {source!r}: not a model, and calling it as a zero-argument factory "
                             f"failed ({exc})") from None
        except Exception as exc:
            raise UsageError(f"source {source!r}: the factory raised {type(exc).__name__}: {exc}") from exc
        obj, framework = built, guess_framework(built)
    return obj, framework


def _missing(source: str) -> UsageError:
    import re

    # "org/name" that is not on disk reads as a Hugging Face hub id: onnxlite never downloads, so say how
    # to make the local folder it reads.
    if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", source) and not source.endswith((".onnx", ".pt", ".py", ".keras")):
        return UsageError(f"{source}: no such file or folder; if it is a Hugging Face hub id, onnxlite needs a "
                          f"local folder (it downloads nothing): huggingface-cli download {source} --local-dir "
                          f"{source.rsplit('/', 1)[1]}, or in Python AutoModel.from_pretrained('{source}')"
                          f".save_pretrained('{source.rsplit('/', 1)[1]}') plus the tokenizer's save_pretrained; "
                          "then pass that folder")
    return UsageError(f"{source}: no such file")


def detect_framework(source: str) -> str:
    """Name of the framework plugin that should load ``source``; a clear UsageError when none (or several) claim it."""
    from ..pyref import is_python_ref

    source = str(source)
    if is_python_ref(source):
        _, framework = _python_object(source)
        if framework is None:
            raise UsageError(f"source {source!r}: the object is neither a PyTorch nor a TensorFlow model; "
                             "pass --framework NAME")
        return framework
    if not Path(source).exists():
        raise _missing(source)
    claimed = _claims(source)
    if len(claimed) == 1:
        return claimed[0]
    tried = ", ".join(e.name for e in _frameworks()) or "no framework plugins installed"
    if not claimed:
        raise UsageError(f"{source}: cannot tell which framework it belongs to (tried {tried}); "
                         "pass --framework NAME")
    raise UsageError(f"{source}: claimed by several frameworks ({', '.join(claimed)}); pass --framework NAME")


def load_source(source: str, framework: str = "auto", options: Mapping[str, Any] | None = None,
                user_options: Mapping[str, Any] | Sequence[str] | None = None) -> LoadedSource:
    """Load ``source`` with the named framework plugin (or the one ``detect_framework`` picks).

    ``options`` go to ``Exporter.load`` unchanged, plus ``python_object`` for a
    Python reference (imported here once, so user code never runs twice) and
    ``inputs`` (a list of :class:`~onnxlite.inputs.InputSpec`) when given.
    ``user_options`` (``key=value`` strings or a mapping, the CLI's ``--option``)
    are checked against the chosen plugin's declared options and typed; an
    unknown name is a usage error that lists the valid ones.
    """
    from ..pyref import is_python_ref
    from ..registry import get_registry

    source = str(source)
    options = dict(options or {})
    obj_framework: str | None = None
    if is_python_ref(source) and PYTHON_OBJECT not in options:
        options[PYTHON_OBJECT], obj_framework = _python_object(source)
    elif not is_python_ref(source) and not Path(source).exists():
        raise _missing(source)
    if framework in (None, "", "auto"):
        if PYTHON_OBJECT in options:
            framework = obj_framework or _guess(options[PYTHON_OBJECT], source)
        else:
            framework = detect_framework(source)
    entry = get_registry().get("framework", framework)
    given = _framework_options(entry.spec, user_options) if user_options else {}
    options.update(given)
    model = entry.create().load(source, options)
    user_inputs = options.get(INPUTS) or None
    return LoadedSource(source, framework, model, user_inputs, given)


def _framework_options(spec: Any, user_options: Mapping[str, Any] | Sequence[str]) -> dict[str, Any]:
    """Only the options the user named, typed (the plugin applies its own defaults to the rest)."""
    from ..specs import parse_spec_options

    return parse_spec_options(spec, user_options, flag="--option", defaults=False)


def _guess(obj: Any, source: str) -> str:
    from ..pyref import guess_framework

    framework = guess_framework(obj)
    if framework is None:
        raise UsageError(f"source {source!r}: the object is neither a PyTorch nor a TensorFlow model; "
                         "pass --framework NAME")
    return framework
