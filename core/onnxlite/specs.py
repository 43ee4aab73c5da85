"""The plain, frozen specs that plugin hooks return.

A hook never hands the host a live object: it returns specs that describe what
it offers (name, description, what it ``requires``, its options) and a
``factory`` that builds the worker only when it is needed.  The host collects
the specs, keys them by name and checks ``requires`` with
``importlib.util.find_spec`` so that listing plugins never imports torch or
tensorflow.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n"}


@dataclass(frozen=True)
class Option:
    """One option of a plugin, settable as ``--option name=value``.

    ``type`` is one of ``str``, ``int``, ``float`` or ``bool``.  With
    ``multiple=True`` the value is a comma-separated list of that type.
    ``choices`` restricts the (string) values.
    """

    name: str
    type: type = str
    default: Any = None
    help: str = ""
    choices: tuple[str, ...] = ()
    multiple: bool = False

    def parse(self, raw: Any) -> Any:
        """Convert ``raw`` (a string from the command line, or a Python value) to this option's type.

        Raises ``ValueError`` with a short reason when it does not fit.
        """
        if self.multiple:
            items = raw if isinstance(raw, (list, tuple)) else [s for s in str(raw).split(",") if s.strip()]
            return tuple(self._parse_one(item) for item in items)
        return self._parse_one(raw)

    def _parse_one(self, raw: Any) -> Any:
        if raw is None:
            return None
        if self.type is bool:
            if isinstance(raw, bool):
                value: Any = raw
            elif str(raw).strip().lower() in _TRUE:
                value = True
            elif str(raw).strip().lower() in _FALSE:
                value = False
            else:
                raise ValueError(f"expected true or false, got {raw!r}")
        else:
            try:
                value = self.type(raw.strip() if isinstance(raw, str) else raw)
            except (TypeError, ValueError):
                raise ValueError(f"expected {self.type.__name__}, got {raw!r}") from None
        if self.choices and value not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {raw!r}")
        return value

    def describe_type(self) -> str:
        base = "|".join(self.choices) if self.choices else self.type.__name__
        return f"{base}[,...]" if self.multiple else base


def split_pair(pair: str, flag: str = "--option") -> tuple[str, str]:
    """``"key=value"`` as ``(key, value)``; anything else is a usage error naming ``flag``."""
    from .errors import UsageError

    key, sep, value = str(pair).partition("=")
    if not sep or not key.strip():
        raise UsageError(f"{flag} {pair!r}: expected key=value")
    return key.strip(), value


def option_pairs(pairs: Iterable[str], flag: str = "--option") -> dict[str, str]:
    """``["key=value", ...]`` from a repeatable flag as a dict; a malformed item is a usage error."""
    return dict(split_pair(p, flag) for p in pairs)


def parse_options(options: Sequence[Option], given: Mapping[str, Any] | Iterable[str] | None, *,
                  flag: str = "--option", owner: str = "this", defaults: bool = True,
                  allow_unknown: bool = False) -> dict[str, Any]:
    """The one typed-option parser: ``key=value`` strings (or a mapping) as typed values of ``options``.

    Names may be spelt with dashes or underscores.  With ``defaults`` every
    declared option is in the result (its default when not given); without, only
    the given ones.  ``allow_unknown`` passes undeclared names through untyped.
    Errors read the same everywhere: ``FLAG KEY: OWNER has no such option
    (valid: ...)`` (with a "did you mean" when one is close) and ``FLAG KEY=VALUE: reason``.
    """
    from .errors import UsageError

    declared = {o.name: o for o in options}
    items = (given.items() if isinstance(given, Mapping)
             else (split_pair(p, flag) for p in (given or ())))
    values: dict[str, Any] = {o.name: o.default for o in options} if defaults else {}
    for given_key, raw in items:
        key = str(given_key).strip().replace("-", "_")
        option = declared.get(key)
        if option is None:
            if allow_unknown:
                values[str(given_key)] = raw  # passed on as spelt: the receiver knows its own names
                continue
            close = difflib.get_close_matches(key, declared, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise UsageError(f"{flag} {given_key}: {owner} has no such option "
                             f"(valid: {', '.join(sorted(declared)) or 'none'}){hint}")
        try:
            values[key] = option.parse(raw)
        except ValueError as exc:
            raise UsageError(f"{flag} {given_key}={raw}: {exc}") from None
    return values


def parse_spec_options(spec: Spec, given: Mapping[str, Any] | Iterable[str] | None, flag: str = "--option",
                       defaults: bool = True) -> dict[str, Any]:
    """:func:`parse_options` for a plugin's spec (the owner reads ``strategy 'dynamic'`` and so on)."""
    return parse_options(spec.options, given, flag=flag, owner=f"{spec.kind} {spec.name!r}", defaults=defaults)


@dataclass(frozen=True)
class Spec:
    """Fields every kind of spec shares.

    ``requires`` names top-level modules the worker imports; ``install`` is the
    pip requirement that brings them (for example ``"onnxlite[tensorflow]"``),
    used in the "not available" message.
    """

    kind: ClassVar[str] = "spec"

    name: str
    description: str
    factory: Callable[[], Any]
    requires: tuple[str, ...] = ()
    install: str = ""
    options: tuple[Option, ...] = ()

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)


@dataclass(frozen=True)
class FrameworkSpec(Spec):
    """A source framework that loads a model and exports it to ONNX.

    ``detect(source)`` must be cheap (look at the path, never import the
    framework); it says whether this framework claims ``source`` for
    ``--framework auto``.  The factory returns an :class:`~onnxlite.protocols.Exporter`.
    """

    kind: ClassVar[str] = "framework"

    detect: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class PerNodeSchemes:
    """How a strategy takes a scheme per node, so that ``lighten``'s mixed-precision stage can build its plan.

    ``assign`` names the strategy's ``multiple=True`` option of ``NODE=SCHEME`` items and ``default`` the option
    giving every other node's scheme (schemes as in :mod:`onnxlite.mixed_plan`); ``composes`` names the
    strategies it delegates to, each of which must be available for the stage to run.
    """

    assign: str
    default: str
    composes: tuple[str, ...] = ()


@dataclass(frozen=True)
class QuantizerSpec(Spec):
    """A lightweighting strategy.  The factory returns a :class:`~onnxlite.protocols.Quantizer`.

    ``needs_calibration``: the strategy needs representative input data.
    ``calibrates_on_generated``: its calibration finds structure that does not
    depend on what the inputs say (SmoothQuant: which channels the model's
    normalization layers make large), so when the user gives no data at all,
    ``lighten`` calibrates it on generated samples, disjoint from the ones that
    judge, and says so.  Ranges a static quantizer keeps need real data.
    ``applies_to``: graph families it suits, any of ``"any"``, ``"transformer"``,
    ``"conv"``, ``"matmul"``; ``lighten`` uses it to build candidates.
    ``grid``: option sets worth trying when searching (each a mapping of option
    name to value); the empty mapping means "the defaults".
    ``avoid``: graph families a search should not try it on unless asked by name
    (``static`` declares ``("transformer",)``: per-tensor activation ranges break
    attention masks and softmax).
    ``gpu_only_gain``: honest flag for strategies (fp16) that mostly pay off on GPUs.
    ``skip_reason(model)``: optional, cheap (reads the ``onnx.ModelProto``, runs
    nothing); returns why the strategy has nothing to do on this model, or None.
    A search skips the strategy with that reason unless it is named (``int4``
    on a model whose only linear layers are Gemm).
    ``output_format``: the model format the strategy writes, in the words of
    :attr:`ProviderSpec.fast_formats` (``"qoperator"``, ``"qdq"``, ``"fp16"``,
    ``"int4"`` for MatMulNBits), or a function of its option values giving it.
    A search on a provider other than the CPU skips a candidate whose format
    the provider does not run fast, unless the strategy is named.  None:
    unknown, always tried.
    ``isa_grid``: more option sets, tried only when int8 kernels can saturate (x86 without VNNI, here or on
    ``--target-cpu``; see :mod:`onnxlite.hardware`): variants whose integer math cannot saturate.
    ``saturation_free(options)``: whether the strategy's integer math with these option values (defaults
    filled in) cannot saturate; when the target CPU's int8 answers differ from this machine's, a search
    tries only the candidates for which it says True.  None: the strategy runs no int8 kernels.
    ``family_grids``: graph family -> option sets tried *instead of* ``grid`` on a model of that family
    (:func:`onnxlite.graph_family.model_family`; ``weightonly`` gives decoders the 4-bit grid the LLM tools
    use, not the 8-bit encoder one).  The first family listed that the model belongs to wins.
    ``needs_source``: source frameworks whose loaded model the strategy needs (``QuantizeContext.source_model``;
    ``qat`` trains a PyTorch module).  A search runs such a strategy only as its last resort, when the source is
    of one of these frameworks (:mod:`onnxlite.search.last_resort`).
    ``exclude_option``: the name of the strategy's ``multiple=True`` option that keeps nodes in float (node
    names or glob patterns; ``"exclude"`` in every built-in).  Declaring it is what makes the strategy take
    part in ``lighten``'s partial fallback (which keeps the worst nodes in float through it); the host checks
    that every pattern given there matches a node, and compares what the written model keeps in float with
    it.  None: the strategy cannot keep chosen nodes in float.
    ``per_node``: how it takes a scheme per node (:class:`PerNodeSchemes`); declaring it makes the strategy the
    one ``lighten``'s mixed-precision stage plans for (``mixed`` in the built-ins).  None: one scheme throughout.
    """

    kind: ClassVar[str] = "quantizer"

    needs_calibration: bool = False
    calibrates_on_generated: bool = False
    applies_to: tuple[str, ...] = ("any",)
    grid: tuple[Mapping[str, Any], ...] = field(default_factory=lambda: ({},))
    gpu_only_gain: bool = False
    avoid: tuple[str, ...] = ()
    skip_reason: Callable[[Any], str | None] | None = None
    output_format: str | Callable[[Mapping[str, Any]], str | None] | None = None
    isa_grid: tuple[Mapping[str, Any], ...] = ()
    saturation_free: Callable[[Mapping[str, Any]], bool] | None = None
    exclude_option: str | None = None
    per_node: PerNodeSchemes | None = None
    needs_source: tuple[str, ...] = ()
    family_grids: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)

    def grid_for(self, family: set[str] | frozenset[str]) -> tuple[Mapping[str, Any], ...]:
        """The option sets to try on a model of ``family``: its family grid when it declares one, else ``grid``."""
        for name, grid in self.family_grids.items():
            if name in family:
                return tuple(grid)
        return tuple(self.grid or ({},))

    def __post_init__(self) -> None:
        for field_name, name in (("exclude_option", self.exclude_option),
                                 ("per_node.assign", self.per_node.assign if self.per_node else None)):
            option = self.option(name) if name is not None else None
            if name is not None and (option is None or not option.multiple):
                raise ValueError(f"quantizer {self.name!r}: {field_name}={name!r} must name one of "
                                 "its options declared with multiple=True")
        if self.per_node is not None and self.option(self.per_node.default) is None:
            raise ValueError(f"quantizer {self.name!r}: per_node.default={self.per_node.default!r} must name one of "
                             "its options")


@dataclass(frozen=True)
class ProviderSpec(Spec):
    """An ONNX Runtime execution provider.

    ``ort_name`` is the name onnxruntime uses (``"CUDAExecutionProvider"``).
    ``packages`` are the pip distributions that ship it; the first is the one to
    suggest.  ``provider_options`` are the defaults passed to onnxruntime and
    ``fast_formats`` the model formats it accelerates (``"fp32"``, ``"fp16"``,
    ``"qdq"``, ``"qoperator"``, ``"int4"``).  ``platforms`` limits it to some
    operating systems (``("darwin",)`` for CoreML).  The factory returns a
    :class:`~onnxlite.protocols.Provider`.
    """

    kind: ClassVar[str] = "provider"

    ort_name: str = ""
    packages: tuple[str, ...] = ("onnxruntime",)
    provider_options: Mapping[str, Any] = field(default_factory=dict)
    fast_formats: tuple[str, ...] = ()
    #: ``sys.platform`` prefixes it exists on (empty: any).
    platforms: tuple[str, ...] = ()


@dataclass(frozen=True)
class MetricSpec(Spec):
    """A way to score a candidate's outputs against the reference's.

    ``higher_is_better`` orients the score; ``lighten`` and ``--max-drop``
    measure a drop as the loss in that direction.  ``default``: used without
    ``--metric`` on every output it applies to (False: only when named).  The
    factory returns a :class:`~onnxlite.protocols.Metric`.
    ``decoder``: it scores a decoder language model's records (``text`` and ``greedy``, see
    :mod:`onnxlite.evaluation.decoder_records`) instead of a model output; such metrics judge decoders, and only
    they do.  ``relative``: its drop is relative to the reference's score (perplexity: ``--max-drop
    perplexity=5%`` allows 1.05 times the reference's).
    """

    kind: ClassVar[str] = "metric"

    higher_is_better: bool = True
    default: bool = True
    decoder: bool = False
    relative: bool = False


SPEC_TYPES: dict[str, type[Spec]] = {
    "framework": FrameworkSpec,
    "quantizer": QuantizerSpec,
    "provider": ProviderSpec,
    "metric": MetricSpec,
}
