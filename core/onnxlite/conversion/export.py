"""``onnxlite.export``: any supported source to a verified ONNX file.

Order matters: reference outputs come from the freshly loaded model before
exporting (an in-memory transformers model was seen to answer differently after
a TorchScript export in the same process); the export goes to a scratch folder
beside the output; provenance is written into ``metadata_props``; onnxruntime
runs the result against the references; only then is the file moved into
place.  A failed check leaves nothing behind.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OnnxliteError, UsageError, VerificationError, one_line
from .verify import DEFAULT_ATOL, DEFAULT_RTOL, Verification

if TYPE_CHECKING:
    import numpy as np

    from ..inputs import InputSpec
    from ..runtime import SessionSettings
    from .sources import LoadedSource

#: Recent enough for transformer graphs, supported by both torch exporters and every onnxruntime >= 1.15.
DEFAULT_OPSET = 18

#: (batch, sequence length) of the synthetic sample sets; dims >= 2 because dynamo specializes 0 and 1,
#: and batch differs from seq so the exporter cannot mistake one axis for the other.
SAMPLE_SHAPES = ((2, 8), (3, 5))


@dataclass
class ExportResult:
    """What ``export`` produced and how well it matched the source."""

    path: Path
    source: str
    framework: str
    exporter: str
    opset: int
    inputs: list[str]
    outputs: list[str]
    size_bytes: int
    verification: Verification | None = None
    fallback: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    #: what the exporter plugin changed to make the model exportable (``onnxlite.cast`` provenance)
    notes: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return self.verification is not None and self.verification.passed

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.verification.per_output() if self.verification else []

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "source": self.source, "framework": self.framework,
                "exporter": self.exporter, "opset": self.opset, "inputs": self.inputs, "outputs": self.outputs,
                "size_bytes": self.size_bytes, "fallback": self.fallback, "notes": list(self.notes),
                "verified": self.verified,
                "verification": self.verification.to_dict() if self.verification else None,
                "metadata": self.metadata}


def _dim_sizes(specs: Sequence[InputSpec], batch: int, seq: int) -> dict[str, int]:
    """Distinct sizes for distinct dim names (batch axes excepted), so no two dynamic axes look tied together."""
    sizes: dict[str, int] = {}
    others = 0
    for spec in specs:
        for axis, dim in spec.dynamic_axes.items():
            if dim in sizes:
                continue
            if axis == spec.batch_axis:
                sizes[dim] = batch
            else:
                sizes[dim] = seq + others
                others += 1
    return sizes


def sample_sets(input_specs: Sequence[InputSpec], samples: Any = None) -> list[dict[str, np.ndarray]]:
    """Feed sets for verification.

    With ``samples`` (an ``.npz`` path, a :class:`~onnxlite.data.Dataset` or a
    mapping of arrays) the user's samples are the first set and its first
    sample alone the second (a batch of one).  Otherwise two synthetic sets at
    different batch sizes and sequence lengths, padded where there are masks,
    with every value in its input's valid range.
    """
    from ..data import Dataset, load_data, validate
    from ..inputs import make_feeds

    specs = [spec.with_role() for spec in input_specs]
    if samples is not None:
        if isinstance(samples, Dataset):
            dataset = samples
            validate(dataset, specs, dataset.source or "--samples")
        elif isinstance(samples, Mapping):
            dataset = Dataset({k: v for k, v in samples.items()}, None, "--samples")
            validate(dataset, specs, "--samples")
        else:
            dataset = load_data(samples, specs)
        from ..data.dataset import take_rows

        arrays = {spec.name: dataset.arrays[spec.name] for spec in specs}
        sets = [arrays]
        if len(dataset) > 1:   # the first sample alone, each input cut on its own sample axis
            sets.append(take_rows(arrays, 0, 1, {s.name: s.batch_axis for s in specs}))
        return sets
    sets = []
    for seed, (batch, seq) in enumerate(SAMPLE_SHAPES):
        sets.append(make_feeds(specs, batch=batch, seq=seq, seed=seed, pad=True, sizes=_dim_sizes(specs, batch, seq)))
    return sets


def _trace_sample(feeds_list: list[dict[str, np.ndarray]], specs: Sequence[InputSpec]) -> dict[str, np.ndarray]:
    first = feeds_list[0]
    if all(spec.batch_axis is None or spec.batch_axis not in spec.dynamic_axes or array.shape[spec.batch_axis] >= 2
           for spec, array in zip(specs, (first[s.name] for s in specs))):
        return first
    # A user batch of one would let dynamo specialize the batch axis; trace on synthetic shapes instead.
    return sample_sets(specs)[0]


def _versions(extra: str | None) -> str:
    import onnx
    import onnxruntime

    from .. import __version__

    versions = json.loads(extra) if extra else {}
    versions.update({"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "onnxlite": __version__})
    return json.dumps(versions, sort_keys=True)


def _output_specs(model: Any) -> list[str]:
    from onnx import helper

    specs = []
    for value in model.graph.output:
        tensor = value.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else "?"
        dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
        specs.append(f"{value.name}:{dtype}[{','.join(dims)}]")
    return specs


def _opset(model: Any) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


#: the note on a causal LM exported to one file
LOGITS_ONLY = ("a causal LM exported to one file has logits only, no key/value cache (each new token recomputes "
               "the prompt); -o FOLDER exports it with its cache, tokenizer and genai_config.json")


def _may_be_causal(source: str, loaded: LoadedSource | None) -> bool:
    """Whether a folder output may be a causal LM's (python references are only known once loaded)."""
    from ..pyref import is_python_ref
    from .causal import is_causal_source

    if loaded is not None:
        return getattr(loaded.model, "causal_lm", None) is not None
    return is_causal_source(source) or is_python_ref(source)


def _check_output(output: Path, source: str) -> None:
    if output.is_dir():
        raise UsageError(f"-o {output}: is a folder, expected a file path such as model.onnx")
    if output.suffix.lower() != ".onnx":
        raise UsageError(f"-o {output}: the output should end in .onnx")
    from ..atomic import check_writable
    from ..modelio import check_spares_input

    check_spares_input(source, output)

    check_writable(output)   # a read-only folder or a path through a file, before loading anything


def _coerce_inputs(inputs: Sequence[InputSpec | str] | None) -> list[InputSpec] | None:
    from ..inputs import InputSpec, parse_input_spec

    if not inputs:
        return None
    specs = [item if isinstance(item, InputSpec) else parse_input_spec(str(item)) for item in inputs]
    names = [spec.name for spec in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"--input {dupes[0]}: given more than once")
    return [spec.with_role() for spec in specs]


def _run_reference(model: Any, feeds: Mapping[str, np.ndarray], specs: Sequence[InputSpec], source: str) -> dict:
    try:
        return model.run(feeds)
    except OnnxliteError:
        raise
    except Exception as exc:
        shapes = ", ".join(f"{n}{list(a.shape)}" for n, a in feeds.items())
        given = " ".join(str(s) for s in specs)
        raise UsageError(f"{source}: the model failed on sample inputs {shapes} built from {given} "
                         f"({one_line(exc, 200, kind=True)}); check --input") from None


def load_for_export(source: str | os.PathLike[str], framework: str = "auto", *,
                    inputs: Sequence[InputSpec | str] | None = None, model_class: str | None = None,
                    settings: SessionSettings | None = None, options: Mapping[str, Any] | None = None,
                    framework_options: Mapping[str, Any] | Sequence[str] | None = None) -> LoadedSource:
    """Load ``source`` through its framework plugin the way :func:`export` does (a ``file.py`` runs here)."""
    from .sources import INPUTS, load_source

    user_specs = _coerce_inputs(inputs)
    load_options: dict[str, Any] = dict(options or {})
    if model_class:
        load_options["model_class"] = model_class
    if user_specs:
        load_options[INPUTS] = user_specs
    if settings is not None:
        load_options.setdefault("settings", settings)
    return load_source(str(source), framework, load_options, framework_options)


@dataclass(frozen=True)
class ExportOptions:
    """How :func:`export` loads its source and checks what it wrote (its keywords besides the run's own)."""

    framework: str = "auto"
    inputs: Sequence[InputSpec | str] | None = None
    model_class: str | None = None
    options: Mapping[str, Any] | None = None
    framework_options: Mapping[str, Any] | Sequence[str] | None = None
    samples: Any = None
    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL
    verify: bool = True
    #: greedy steps a causal LM's folder export is checked over through its cache
    decode_steps: int = 32


def export(source: str | os.PathLike[str], output: str | os.PathLike[str], *, opset: int | None = None,
           exporter: str | None = None, external_data: bool | None = None, settings: SessionSettings | None = None,
           on_step: Callable[[str], None] | None = None, loaded: LoadedSource | None = None,
           **given: Any) -> ExportResult:
    """Export ``source`` to ``output`` (an ``.onnx`` path) and verify it in onnxruntime.

    A causal language model with ``output`` a folder goes to
    :func:`onnxlite.conversion.causal.export_decoder` instead (``model.onnx``
    with its key/value cache, the tokenizer and configs; a
    :class:`~onnxlite.conversion.causal.DecoderExport` comes back).

    ``given`` are the fields of :class:`ExportOptions` as keywords:

    ``inputs`` are ``NAME:DTYPE[dims]`` strings or InputSpecs (else derived from
    the model); ``samples`` real inputs (``.npz``) used for verification;
    ``external_data=None`` means only when the model is over 2 GB.
    ``framework_options`` are the framework plugin's declared options
    (``{"signature": "serving_default"}`` or ``["signature=serving_default"]``,
    as ``--option`` gives them), checked against its spec.  Raises
    :class:`VerificationError` when outputs differ beyond ``atol``/``rtol``
    (nothing is written then).  ``loaded`` is the source already loaded by
    :func:`load_for_export` (``lighten`` loads it once for the export and its judge);
    ``framework``, ``inputs``, ``model_class``, ``options`` and ``framework_options`` are then unused.
    """
    unknown = sorted(set(given) - {f.name for f in fields(ExportOptions)})
    if unknown:
        raise TypeError(f"export() got unexpected keyword argument(s): {', '.join(unknown)}")
    how = ExportOptions(**given)
    atol, rtol, samples = how.atol, how.rtol, how.samples
    from ..atomic import scratch_dir
    from ..modelio import external_data_files, install_model, load_model, model_size, save_model, set_metadata
    from ..slow_fusions import unblock
    from .verify import verify as run_verify

    step = on_step or (lambda _message: None)
    source = str(source)
    output = Path(output)
    if output.suffix.lower() != ".onnx" and not output.is_file() and _may_be_causal(source, loaded):
        from .causal import export_decoder

        return export_decoder(source, output, exporter=exporter, opset=opset or DEFAULT_OPSET,  # type: ignore[return-value]
                              verify=how.verify, settings=settings, on_step=on_step, loaded=loaded,
                              framework=how.framework, steps=how.decode_steps)
    _check_output(output, source)
    if atol < 0 or rtol < 0:
        raise UsageError("--atol/--rtol: tolerances must not be negative")
    opset = opset or DEFAULT_OPSET
    if not 7 <= opset <= 23:
        raise UsageError(f"--opset {opset}: expected an opset between 7 and 23")
    if loaded is None:
        step(f"Loading {source}")
        loaded = load_for_export(source, how.framework, inputs=how.inputs, model_class=how.model_class,
                                 settings=settings, options=how.options, framework_options=how.framework_options)
    specs = loaded.input_specs
    feeds_list = sample_sets(specs, samples)
    step("Computing reference outputs")
    references = [_run_reference(loaded.model, feeds, specs, source) for feeds in feeds_list]

    with scratch_dir(output) as work:
        raw_dir = work / "export"
        raw_dir.mkdir()
        raw = raw_dir / "model.onnx"
        step(f"Exporting with {loaded.framework}")
        export_options = {**loaded.user_options, **({"exporter": exporter} if exporter else {})}
        provenance = dict(loaded.model.export(raw, specs, _trace_sample(feeds_list, specs), opset, export_options))
        if not raw.exists():
            raise OnnxliteError(f"{source}: the {loaded.framework} plugin reported success but wrote no model")
        had_external = bool(external_data_files(raw))
        model = load_model(raw, load_external_data=True)
        # the dynamo and tf2onnx exporters keep shape annotations that let onnxruntime fuse every residual
        # Add + LayerNormalization into its slower SkipLayerNormalization kernel (onnxlite.slow_fusions)
        unfused = unblock(model)
        metadata = {key: str(value) for key, value in provenance.items() if key.startswith("onnxlite.")}
        metadata.update({
            "onnxlite.framework": loaded.framework,
            "onnxlite.exporter": str(provenance.get("onnxlite.exporter", loaded.framework)),
            "onnxlite.versions": _versions(provenance.get("onnxlite.versions")),
            "onnxlite.inputs": json.dumps([str(spec) for spec in specs]),
            "onnxlite.source": source,
        })
        set_metadata(model, metadata)
        staged = work / output.name
        save_model(model, staged, external_data=True if (external_data or had_external) else None)
        outputs = _output_specs(model)
        opset_used = _opset(model)
        del model

        verification = None
        if how.verify:
            step("Verifying in onnxruntime")
            try:
                verification = run_verify(None, staged, feeds_list, atol, rtol, settings, references)
            except UsageError as exc:   # name what the user asked for, not the scratch file
                raise UsageError(str(exc).replace(str(staged), f"the model exported from {source}")) from None
            if not verification.passed:
                raise VerificationError(f"{source}: the exported model does not match {loaded.framework} "
                                        f"(nothing written): {verification.message()}")
        install_model(staged, output)   # the model and its data file replace an old set together

    return ExportResult(path=output, source=source, framework=loaded.framework,
                        exporter=metadata["onnxlite.exporter"], opset=opset_used,
                        inputs=[str(spec) for spec in specs], outputs=outputs, size_bytes=model_size(output),
                        verification=verification, fallback=provenance.get("onnxlite.fallback"),
                        metadata=metadata,
                        notes=([provenance["onnxlite.cast"]] if provenance.get("onnxlite.cast") else [])
                        + ([LOGITS_ONLY] if getattr(loaded.model, "causal_lm", None) is not None else [])
                        + ([f"dropped {unfused} shape annotations that would fuse residual Add + "
                            "LayerNormalization into onnxruntime's slower SkipLayerNormalization"] if unfused else []))
