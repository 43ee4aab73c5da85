"""The candidates ``lighten`` tries: every applicable strategy, each with its small option grid."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from ..hardware import Hardware, JudgedOn
    from ..specs import QuantizerSpec


@dataclass(frozen=True)
class Candidate:
    """One strategy with one option set (plus nodes kept in float by the partial fallback)."""

    name: str
    strategy: str
    options: Mapping[str, Any] = field(default_factory=dict)
    keep_float: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "strategy": self.strategy, "options": dict(self.options),
                "keep_float": list(self.keep_float)}


@dataclass(frozen=True)
class Skipped:
    strategy: str
    reason: str


def candidate_name(strategy: str, options: Mapping[str, Any]) -> str:
    if not options:
        return strategy
    text = ",".join(f"{k}={_short(v)}" for k, v in options.items())
    return f"{strategy}[{text}]"


def _short(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)   # as on the command line (--option op_types=MatMul,Gemm)
    return str(value)


def exclude_option(spec: QuantizerSpec) -> str | None:
    """The option through which a strategy keeps nodes in float: what its spec declares
    (:attr:`QuantizerSpec.exclude_option`), not a name that happens to contain "exclude"."""
    return spec.exclude_option


def with_keep_float(candidate: Candidate, spec: Any, nodes: Sequence[str]) -> Candidate:
    """The same candidate with ``nodes`` added to its strategy's exclusion option."""
    option = exclude_option(spec)
    if option is None:
        raise UsageError(f"strategy {candidate.strategy!r} has no exclusion option; it cannot keep nodes in float")
    existing = tuple(candidate.options.get(option) or ())
    # Node names can hold glob characters; escape them so each matches only itself.
    escaped = tuple(re.sub(r"([*?\[])", r"[\1]", n) for n in nodes)
    options = dict(candidate.options) | {option: existing + escaped}
    name = f"{candidate.name}+float{len(nodes)}"
    return Candidate(name=name, strategy=candidate.strategy, options=options, keep_float=tuple(nodes))


def _plugin_skip_reason(spec: Any, model: Any) -> str | None:
    """The plugin's own word on whether it has anything to do; a broken check only costs a candidate."""
    try:
        reason: str | None = spec.skip_reason(model)
        return reason
    except Exception:  # noqa: BLE001 - a third party's check must not stop the search
        return None


def _same_model_key(spec: Any, options: Mapping[str, Any], ops: set[str]) -> str:
    """Option sets that make the same model share a key: defaults filled in, ``op_types`` cut to the model's
    own (an ISA grid entry adding Gather is the plain entry again on a model without embeddings)."""
    from ..hardware import options_of

    full = options_of(spec, options)
    if full.get("op_types"):
        full["op_types"] = sorted(set(full["op_types"]) & ops)
    return json.dumps(full, sort_keys=True, default=str)


def _ops_present(options: Mapping[str, Any], ops: set[str]) -> bool:
    """A grid entry limited to op types (``op_types=Conv``) the model lacks would quantize nothing: not tried."""
    wanted = options.get("op_types")
    return not wanted or bool(set(wanted) & ops)


def candidate_format(spec: QuantizerSpec, options: Mapping[str, Any]) -> str | None:
    """The model format a candidate will have (``spec.output_format``), None when the plugin does not say."""
    declared = spec.output_format
    if callable(declared):
        defaults = {o.name: o.default for o in spec.options}
        try:
            found: str | None = declared(defaults | dict(options))
            return found
        except Exception:  # noqa: BLE001 - a third party's guess must not stop the search
            return None
    return declared


def _fast_formats(provider: str) -> tuple[str, ...]:
    """What the provider runs fast; empty (anything goes) on the CPU, whose results must not change."""
    if provider == "cpu":
        return ()
    from ..registry import get_registry

    try:
        return tuple(get_registry().get("provider", provider).spec.fast_formats)
    except UsageError:
        return ()


def int8_portable(spec: Any, options: Mapping[str, Any]) -> bool:
    """The strategy's own word that these options cannot saturate (:func:`onnxlite.hardware.saturation_free`)."""
    from ..hardware import saturation_free

    return saturation_free(spec, options)


def isa_grid(spec: QuantizerSpec, here: Hardware | None, target: Hardware | None = None,
             family: set[str] | None = None) -> tuple[tuple[Mapping[str, Any], ...], str | None]:
    """The option sets to try on this ISA (and ``target``'s), and why some were left out (None: none were).

    Where int8 kernels can saturate, here or on the target, the saturation-free ``isa_grid`` is added;
    where the two CPUs' int8 answers differ, only saturation-free sets are kept, so the answers judged
    here are the ones the target gives.
    """
    from ..hardware import answers_differ

    grid = spec.grid_for(family or set())   # a decoder takes the strategy's decoder grid (family_grids)
    if here is None:
        return grid, None
    if here.int8_saturates or (target is not None and target.int8_saturates):
        grid += tuple(spec.isa_grid or ())
    if target is None or not answers_differ(here, target):
        return grid, None
    kept = tuple(o for o in grid if int8_portable(spec, o))
    if len(kept) == len(grid):
        return grid, None
    saturating = here if here.int8_saturates else target
    other = target if saturating is here else here
    return kept, (f"its int8 kernels saturate on {saturating.isa} and not on {other.isa}: the answers judged on "
                  f"{here.isa} (this machine) would not be the ones {target.isa} (--target-cpu) gives; only its "
                  "saturation-free variants are tried")


def check_strategy_names(strategies: Sequence[str] | None) -> None:
    """``--strategies`` names every strategy it lists, checked before any export or data work: an unknown one
    fails in one line, ``--strategies: unknown quantizer 'nosuch'; did you mean ...`` (known names listed)."""
    from ..errors import UsageError
    from ..registry import get_registry

    registry = get_registry()
    for name in strategies or ():
        try:
            registry.get("quantizer", name)
        except UsageError as error:
            raise UsageError(f"--strategies: {error}") from None


def build_candidates(model: Any, *, strategies: Sequence[str] | None = None, has_calibration: bool,
                     provider: str = "cpu", generated_calibration: bool = False,
                     isa: JudgedOn | None = None) -> tuple[list[Candidate], list[Skipped]]:
    """Every available strategy that applies to ``model``, expanded over its grid.

    ``strategies`` limits the search to those names (then a GPU-only strategy
    or one that does not match the graph family is tried anyway, because the
    user asked for it).  A strategy that needs calibration data is skipped
    when there is none, with the reason, unless it may calibrate on generated samples
    (``calibrates_on_generated``) and ``generated_calibration`` says they were made.  GPU-minded strategies
    (fp16) are tried on the CPU too: they are cheap, halve the size, and on recurrent or
    mixed-range models they keep answers that int8 loses (issue 12).  On a provider other than the CPU, a
    candidate whose format (``output_format``) the provider does not declare
    among its ``fast_formats`` is skipped unless its strategy is named.  ``isa`` (this machine and the
    ``--target-cpu`` kind, :class:`onnxlite.hardware.JudgedOn`) shapes each grid (:func:`isa_grid`).
    """
    from ..graph_family import as_model, matches, model_family
    from ..registry import get_registry

    registry = get_registry()
    model = as_model(model)   # once, for the family and for the plugins' own checks
    family = model_family(model)
    ops = {n.op_type for n in model.graph.node}
    wanted = list(dict.fromkeys(strategies)) if strategies else None
    entries = [registry.get("quantizer", name) for name in wanted] if wanted else registry.all("quantizer")
    found: list[Candidate] = []
    skipped: list[Skipped] = []
    fast = _fast_formats(provider)
    for entry in entries:
        spec = entry.spec
        reason = entry.unavailable_reason()
        if reason is None and not wanted and not matches(tuple(spec.applies_to), family):
            reason = (f"applies to {', '.join(spec.applies_to)} graphs; "
                      f"this one is {', '.join(sorted(family)) or 'neither'}")
        if reason is None and not wanted and set(spec.avoid) & family:
            reason = (f"its plugin marks it unsuited to {', '.join(sorted(set(spec.avoid) & family))} graphs; "
                      "name it in --strategies to try it anyway")
        if reason is None and not wanted and spec.skip_reason is not None:
            reason = _plugin_skip_reason(spec, model)
        if reason is None and spec.needs_source:     # trains the source: search.last_resort decides, named or not
            reason = "trains the source model: lighten runs it only as its last resort (no post-training " \
                     "candidate at >= 3x smaller within budget)"
        if (reason is None and spec.needs_calibration and not has_calibration
                and not (generated_calibration and spec.calibrates_on_generated)):
            reason = "needs calibration data (--calibration or --data)"
        if reason:
            skipped.append(Skipped(spec.name, reason))
            continue
        seen = set()
        grid, left_out = (isa_grid(spec, isa.here, isa.target, family) if isa is not None
                          else (spec.grid_for(family), None))
        if left_out:
            skipped.append(Skipped(f"{spec.name} (saturating variants)", left_out))
        for options in grid:
            key = _same_model_key(spec, options, ops)
            if key in seen or not _ops_present(options, ops):
                continue
            seen.add(key)
            name = candidate_format(spec, options)
            if fast and not wanted and name and name not in fast:
                skipped.append(Skipped(candidate_name(spec.name, options),
                                       f"writes {name} models, which {provider} does not run fast "
                                       f"({', '.join(fast)}); name {spec.name} in --strategies to try it"))
                continue
            found.append(Candidate(candidate_name(spec.name, options), spec.name, dict(options)))
    return found, skipped
