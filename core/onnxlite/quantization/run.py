"""``onnxlite.quantize``: run one lightweighting strategy on an ONNX file, safely.

The host owns everything around the math: it refuses bad input in one line,
reaches the strategy through the registry (built-in and third-party alike),
feeds it calibration data when it asks for some, gives it a scratch folder,
smoke-checks what it produced against the input model, and only then publishes
the result atomically with its provenance in ``metadata_props``.  The input
file is never written to.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import hardware
from ..errors import OnnxliteError, UsageError, one_line

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from ..registry import Registered
    from ..specs import QuantizerSpec

#: metadata keys written into every output
STRATEGY_KEY = "onnxlite.strategy"
STRATEGY_OPTIONS_KEY = "onnxlite.strategy_options"


@dataclass
class QuantizeResult:
    """What one ``quantize`` run produced."""

    path: Path
    strategy: str
    options: dict[str, Any]
    size_before: int
    size_after: int
    quantized_ops: dict[str, int]
    excluded_nodes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    source: Path | None = None
    #: the CPU it was made and smoke-checked on (:meth:`onnxlite.hardware.Hardware.to_dict`), also in its metadata
    hardware: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """How many times smaller the output is (``size_before / size_after``)."""
        return self.size_before / self.size_after if self.size_after else float("inf")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"] = str(self.path)
        data["source"] = str(self.source) if self.source else None
        data["ratio"] = round(self.ratio, 4)
        data["options"] = _plain_options(self.options)
        return data


class CalibrationData:
    """Calibration samples as a quantizer sees them in ``QuantizeContext.calibration``.

    Iterating yields one feed dict per sample (``{input name: array}`` with a
    batch axis of 1), which is what onnxruntime's calibration readers want.
    Everything else (``batches(n)``, ``arrays``, ``labels``, ``len``) comes from
    the underlying :class:`onnxlite.data.Dataset`, available as ``.dataset``.
    """

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self.dataset.batches(1))

    def __len__(self) -> int:
        return len(self.dataset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.dataset, name)


# ---------------------------------------------------------------- strategies


def get_strategy(name: str) -> Registered:
    """The registered quantizer ``name`` (unknown names raise with "did you mean")."""
    from ..registry import get_registry

    return get_registry().get("quantizer", name)


def strategies() -> list[Registered]:
    from ..registry import get_registry

    return get_registry().all("quantizer")


def applicable_strategies(model: Any, available_only: bool = True) -> list[Registered]:
    """Strategies whose ``applies_to`` fits the model's graph family (see
    :func:`onnxlite.graph_family.model_family`)."""
    from ..graph_family import matches, model_family

    family = model_family(model)
    found = [r for r in strategies() if matches(tuple(r.spec.applies_to), family)]
    return [r for r in found if r.available] if available_only else found


# ---------------------------------------------------------------- the run


def default_output(model: Path, strategy_name: str) -> Path:
    return model.with_name(f"{model.stem}.{strategy_name}{model.suffix or '.onnx'}")


def _check_input(model: Path) -> onnx.ModelProto:
    from ..modelio import get_metadata, is_quantized, load_model, quantized_ops

    proto = load_model(model, load_external_data=False)
    if is_quantized(proto):
        ops = quantized_ops(proto)
        why = (f"it already has {', '.join(f'{n} {op}' for op, n in ops.items())}" if ops
               else f"its metadata says it came from strategy {get_metadata(proto).get(STRATEGY_KEY)!r}")
        raise UsageError(f"{model}: already quantized ({why}); quantize the float model instead")
    return proto


def _plain_options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}


def _load_calibration(spec: QuantizerSpec, model: Path, proto: onnx.ModelProto, calibration: Any,
                      calibration_options: Mapping[str, Any] | None, warn: Callable[[str], None]) -> Any:
    if calibration is None:
        if spec.needs_calibration:
            raise UsageError(f"--strategy {spec.name} needs calibration data: pass --calibration PATH "
                             "(see docs/calibration.md for the formats)")
        return None
    if not spec.needs_calibration:
        return None   # run_quantize says what it is used for: the smoke check's samples, or nothing
    if not isinstance(calibration, (str, os.PathLike)):
        from ..data.dataset import Dataset

        # a Dataset (lighten's tasks load it on the judge's sample axes) reaches the strategy as a path would
        return CalibrationData(calibration) if isinstance(calibration, Dataset) else calibration
    from ..data import load_data
    from ..decoder_inputs import window_specs
    from ..inputs import specs_from_onnx

    specs = window_specs(proto, specs_from_onnx(proto))   # a decoder calibrates on token windows
    return CalibrationData(load_data(calibration, specs, dict(calibration_options or {})))


def quantize(model: str | os.PathLike[str], output: str | os.PathLike[str] | None = None,
             strategy: str = "dynamic", calibration: Any = None,
             calibration_options: Mapping[str, Any] | None = None, *,
             check: bool = True, on_warning: Callable[[str], None] | None = None, force: bool = False,
             check_data: Any = None, target_runtime: str | None = None, **options: Any) -> QuantizeResult:
    """Quantize ``model`` with ``strategy`` and write ``output`` (default ``<stem>.<strategy>.onnx``).

    ``options`` are the strategy's own options, as Python values or strings
    (``per_channel=False`` or ``per_channel="false"``); unknown ones raise a
    :class:`UsageError` listing the valid ones.  ``calibration`` is a data path
    (see :func:`onnxlite.data.load_data`, configured by ``calibration_options``)
    for strategies that need one.  ``check`` runs the input and the output on a
    padded batch of two and refuses outputs that do not run or give non-finite
    or differently shaped results; the cosine it saw goes in ``details["check"]``.
    An existing ``output`` is replaced only with ``force=True``.  The check runs on the first samples of
    ``check_data`` (a data path or Dataset), else of the calibration data, else on generated samples.
    ``source_model=`` (a keyword, not a strategy option): the loaded source-framework model ``model`` was
    exported from (a ``torch.nn.Module``), handed to the strategy as ``QuantizeContext.source_model``
    (``qat`` trains it).
    """
    source_model = options.pop("source_model", None)
    # target_runtime ("onnxruntime==1.24") keeps the output loadable by that release (docs/providers.md).
    return run_quantize(model, output, strategy, options, calibration, calibration_options,
                        check=check, on_warning=on_warning, force=force, check_data=check_data,
                        target_runtime=target_runtime, source_model=source_model)


def _check_claims(source: onnx.ModelProto, produced: Path, spec: QuantizerSpec, values: Mapping[str, Any],
                  outcome: Any, warn: Callable[[str], None]) -> dict[str, Any]:
    """What the written model really holds against the exclusions the plugin reported or was asked for.

    A mismatch is a warning here; ``lighten`` fails the candidate (``details["claims"]["message"]``).
    """
    from ..claims import check_claims, requested_float_nodes
    from ..modelio import load_model

    patterns = list(values.get(spec.exclude_option) or ()) if spec.exclude_option else []
    checked = check_claims(source, load_model(produced, load_external_data=False),
                           claimed_float=list(outcome.excluded_nodes),
                           requested_float=requested_float_nodes(source, patterns))
    message = checked.message(spec.name)
    if message:
        warn(message)
    return checked.to_dict() | {"message": message}


def _normalize_copy(given: Path, spec: QuantizerSpec, values: Mapping[str, Any],
                    warn: Callable[[str], None]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Normalise the strategy's private copy (:mod:`onnxlite.normalize`) before it runs, and say so.

    Paddle2ONNX keeps its weights in ``Constant`` nodes, which every onnxruntime quantizer passes over
    in silence; opset 12 cannot hold per-channel ``DequantizeLinear``.  When the opset stays too old,
    a strategy's ``per_channel`` option is turned off (per tensor), and the warning says so.
    """
    from ..normalize import normalize_file

    values = dict(values)
    done = normalize_file(given)
    if done is None:
        return None, values
    record: dict[str, Any] = {"lifted_constants": done.lifted_constants, "opset_before": done.opset_before,
                              "opset_after": done.opset_after, "per_channel_ok": done.per_channel_ok,
                              "summary": done.summary()}
    if not done.per_channel_ok and "per_channel" in {o.name for o in spec.options} \
            and values.get("per_channel") is not False:
        values["per_channel"] = False
        record["per_channel_fallback"] = True
        warn(f"{spec.name}: per_channel off (per tensor): the model's opset {done.opset_before} "
             f"cannot hold per-channel DequantizeLinear and onnx's version converter could not raise it")
    return record, values


#: samples of the user's calibration data the smoke check runs on (their shapes are the ones the model takes)
CHECK_SAMPLES = 2


def _load_check_data(data: Any, proto: onnx.ModelProto, options: Mapping[str, Any] | None = None) -> Any:
    if not isinstance(data, (str, os.PathLike)):
        return data
    from ..data import load_data
    from ..inputs import specs_from_onnx

    return load_data(data, specs_from_onnx(proto), dict(options or {}))


def _check_samples(feeds: Any, proto: onnx.ModelProto) -> dict[str, np.ndarray] | None:
    """The first samples of the calibration data as one feed dict, or None (the check generates samples).

    At most :data:`CHECK_SAMPLES`, and no more than the model takes at once: a fixed batch axis (an
    Ultralytics export's 1) sets the count.  Each input is cut on its own sample axis (a state
    ``[2, batch, 8]`` on axis 1), the Dataset's, else the model's.
    """
    if feeds is None:
        return None
    from ..data.dataset import take_rows
    from ..inputs import batch_axes, specs_from_onnx

    specs = specs_from_onnx(proto)
    fixed = [s.shape[s.batch_axis] for s in specs
             if s.batch_axis is not None and isinstance(s.shape[s.batch_axis], int)]
    count = min([CHECK_SAMPLES, *(int(d) for d in fixed)])
    dataset = getattr(feeds, "dataset", feeds)
    if isinstance(dataset, Mapping):   # feeds from a Python caller: cut on the model's sample axes
        return take_rows(dataset, 0, count, batch_axes(specs)) if dataset else None
    try:
        return next(iter(dataset.batches(count)))
    except (AttributeError, StopIteration, TypeError):
        return None


def _check_produced(produced: Path, strategy: str, entry: Any) -> None:
    """What a strategy wrote is an ONNX model; if not, the message names the strategy and the distribution it
    came from (whose author can fix it), not the scratch path the user never chose."""
    import onnx

    try:
        onnx.load(str(produced), load_external_data=False)
    except Exception as exc:
        plugin = entry.plugin
        origin = "built-in" if plugin.builtin else f"from the {plugin.distribution} {plugin.version} distribution"
        raise OnnxliteError(f"strategy {strategy!r} ({origin}) wrote a file that is not an ONNX model "
                            f"({type(exc).__name__}: {one_line(exc, 160)}); report it to the plugin's authors"
                            ) from None


@dataclass(frozen=True)
class QuantizeRun:
    """How :func:`run_quantize` checks and writes its output (:func:`quantize`'s keywords of the same names)."""

    check: bool = True
    check_data: Any = None
    force: bool = False
    target_runtime: str | None = None
    #: the loaded source-framework model ``model`` was exported from (a ``torch.nn.Module``), handed to
    #: the strategy as ``QuantizeContext.source_model`` (``qat`` trains it)
    source_model: Any = None


def run_quantize(model: str | os.PathLike[str], output: str | os.PathLike[str] | None, strategy_name: str,
                 options: Mapping[str, Any] | list[str] | tuple[str, ...], calibration: Any = None,
                 calibration_options: Mapping[str, Any] | None = None, *,
                 on_warning: Callable[[str], None] | None = None, **run: Any) -> QuantizeResult:
    """Like :func:`quantize`, with options as ``["key=value", ...]`` or a mapping (the CLI's entry);
    ``run`` are the fields of :class:`QuantizeRun` as keywords."""
    from ..atomic import check_writable, scratch_dir
    from ..modelio import (
        check_exists,
        check_model,
        check_spares_input,
        external_data_files,
        load_model,
        model_size,
        private_copy,
        publish_model,
        quantized_ops,
    )
    from ..protocols import QuantizeContext, QuantizeOutcome
    from ..runtime_compat import parse_target, runtime_needs
    from ..slow_fusions import unblock
    from ..specs import parse_spec_options

    unknown = sorted(set(run) - {f.name for f in fields(QuantizeRun)})
    if unknown:
        raise TypeError(f"run_quantize() got unexpected keyword argument(s): {', '.join(unknown)}")
    how = QuantizeRun(**run)
    check, check_data, force, target_runtime = how.check, how.check_data, how.force, how.target_runtime
    runtime = parse_target(target_runtime) if target_runtime else None   # a bad value fails before any work
    here = hardware.detect()
    source = check_exists(model)
    entry = get_strategy(strategy_name)
    spec: QuantizerSpec = entry.spec
    values = parse_spec_options(spec, options)
    target = Path(output) if output is not None else default_output(source, spec.name)
    check_spares_input(source, target)
    if target.is_dir():
        raise UsageError(f"{target}: is a folder, expected an .onnx file path for -o")
    if target.exists() and not force:
        raise UsageError(f"{target}: already exists; choose another -o or pass --force to replace it")
    check_writable(target)
    proto = _check_input(source)
    check_model(source)   # what export and lighten check, before any work (unknown operators, broken graphs)
    if spec.exclude_option and not entry.plugin.builtin and values.get(spec.exclude_option):
        # the check every built-in makes itself, made for third-party strategies too: a pattern that matches no
        # node is a typo that would quantize the layer the user meant to protect
        from ..authoring import match_nodes

        match_nodes([n.name for n in proto.graph.node], values[spec.exclude_option], option=spec.exclude_option)
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning is not None:
            on_warning(message)

    feeds = _load_calibration(spec, source, proto, calibration, calibration_options, warn)
    if calibration is not None and not spec.needs_calibration:
        if check and check_data is None:
            # the user's samples have the sizes the model takes; generated ones may not
            check_data = _load_check_data(calibration, proto, calibration_options)
            warn(f"strategy {spec.name!r} does not use calibration data; the smoke check runs on the first "
                 f"samples of {calibration}")
        else:
            warn(f"strategy {spec.name!r} does not use calibration data; ignoring {calibration}")
    quantizer = entry.create()
    had_external = bool(external_data_files(source))
    size_before = model_size(source)

    with scratch_dir(target) as work:
        produced = work / target.name
        # onnxruntime's quantizers write "<model>-inferred.onnx" beside the model they are given: the strategy
        # gets a private copy in the scratch folder, so nothing ever lands beside the user's input.
        given = private_copy(source, work / "input")
        normalized, values = _normalize_copy(given, spec, values, warn)
        context = QuantizeContext(calibration=feeds, workdir=work, warn=warn, source_model=how.source_model)
        started = time.perf_counter()
        try:
            outcome = quantizer.quantize(given, produced, values, context)
        except OnnxliteError:
            raise
        except Exception as exc:
            message = one_line(exc, 400)
            raise OnnxliteError(f"strategy {spec.name!r} failed on {source}: {type(exc).__name__}: {message}") from exc
        seconds = time.perf_counter() - started
        outcome = outcome or QuantizeOutcome()
        if not produced.exists():
            raise OnnxliteError(f"strategy {spec.name!r} wrote no model (expected {produced.name} in its workdir)")
        _check_produced(produced, spec.name, entry)
        details = dict(outcome.details)
        if normalized is not None:
            details["normalized"] = normalized
        claims_source = proto if normalized is None else load_model(given, load_external_data=False)
        details["claims"] = _check_claims(claims_source, produced, spec, values, outcome, warn)
        if check:
            from .smoke import smoke_check

            samples = _check_samples(_load_check_data(check_data, proto) if check_data is not None else feeds, proto)
            details["check"] = smoke_check(source, produced, spec, warn, proto, samples=samples)
        metadata = {STRATEGY_KEY: spec.name, STRATEGY_OPTIONS_KEY: json.dumps(_plain_options(values), sort_keys=True)}
        # the ISA, as lighten's model carries it: compare and bench on a CPU whose int8 kernels answer
        # differently say so (onnxlite.hardware.model_warning) unless its int8 math cannot saturate
        details["int8_saturation_free"] = hardware.saturation_free(spec, values)
        metadata |= hardware.metadata(here, None, details["int8_saturation_free"])
        # onnxruntime would fuse the residual Adds into its slow SkipLayerNormalization kernel, which the float
        # export never gets (onnxlite.slow_fusions): drop the shape annotations that let it
        unfused: list[int] = []
        publish_model(produced, target, external_data=True if had_external else None, metadata=metadata,
                      runtime=runtime, rewrite=lambda proto: unfused.append(unblock(proto)))
        details["dropped_value_info"] = unfused[0]

    out_proto = load_model(target, load_external_data=False)
    details["runtime"] = runtime_needs(out_proto).summary()
    return QuantizeResult(
        path=target, strategy=spec.name, options=dict(values), size_before=size_before,
        size_after=model_size(target), quantized_ops=quantized_ops(out_proto),
        excluded_nodes=list(outcome.excluded_nodes), seconds=round(seconds, 3),
        notes=([f"normalised first: {normalized['summary']}"] if normalized and normalized["summary"] else [])
        + list(outcome.notes),
        warnings=warnings, details=details, source=source, hardware=here.to_dict(),
    )
