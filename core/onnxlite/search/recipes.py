"""``recipe.toml``: the exact strategy, options and budget that ``lighten`` chose.

``onnxlite lighten --recipe recipe.toml`` reads it back and reproduces the
result without searching.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from .config import LightenConfig

RECIPE_VERSION = 1


@dataclass(frozen=True)
class Recipe:
    strategy: str
    options: Mapping[str, Any] = field(default_factory=dict)
    excluded_nodes: tuple[str, ...] = ()
    metric: str | None = None
    max_drop: float | None = None
    #: every budget the search held (primary included), by metric key
    budgets: Mapping[str, float] = field(default_factory=dict)
    objective: str = "latency"
    provider: str = "cpu"
    framework: str | None = None
    inputs: tuple[str, ...] = ()
    #: what the run needs to load its source and data again (a replay must not ask for them)
    model_class: str | None = None
    source_options: Mapping[str, Any] = field(default_factory=dict)
    data: str | None = None
    data_options: Mapping[str, Any] = field(default_factory=dict)
    calibration: str | None = None
    calibration_options: Mapping[str, Any] = field(default_factory=dict)
    threads: int | None = None
    batch: int | None = None
    #: where the verdict was judged and timed (onnxlite.hardware.Hardware.to_dict()), and the --target-cpu kind
    hardware: Mapping[str, Any] = field(default_factory=dict)
    target_cpu: str | None = None
    #: a note for the reader, never read back as options: what of ``options`` acted on the source graph
    #: (``op_types`` that have nodes there); a replay uses ``options`` as they are
    acted: Mapping[str, Any] = field(default_factory=dict)

    @property
    def isa(self) -> str | None:
        return self.hardware.get("isa")

    def to_toml(self) -> str:
        import tomli_w

        doc: dict[str, Any] = {
            "version": RECIPE_VERSION,
            "strategy": {"name": self.strategy, "options": _plain(dict(self.options))},
            "budget": {k: v for k, v in (("metric", self.metric), ("max_drop", self.max_drop),
                                          ("objective", self.objective)) if v is not None},
            "runtime": {k: v for k, v in (("provider", self.provider), ("threads", self.threads),
                                           ("batch", self.batch)) if v is not None},
        }
        if self.hardware or self.target_cpu:
            doc["hardware"] = {k: v for k, v in self.hardware.items() if v is not None} | (
                {"target_cpu": self.target_cpu} if self.target_cpu else {})
        if self.budgets:
            doc["budget"]["max_drops"] = {k: float(v) for k, v in self.budgets.items()}
        if self.excluded_nodes:
            doc["strategy"]["excluded_nodes"] = list(self.excluded_nodes)
        if self.acted:
            doc["strategy"]["acted"] = _plain(dict(self.acted))
        source = {k: v for k, v in (("framework", self.framework), ("inputs", list(self.inputs)),
                                    ("model_class", self.model_class),
                                    ("options", _plain(dict(self.source_options)))) if v}
        if source:
            doc["source"] = source
        data = {k: v for k, v in (("path", self.data), ("options", _plain(dict(self.data_options))),
                                  ("calibration", self.calibration),
                                  ("calibration_options", _plain(dict(self.calibration_options)))) if v}
        if data:
            doc["data"] = data
        return "# Written by onnxlite lighten; reproduce with: onnxlite lighten SOURCE --recipe recipe.toml\n" + \
            tomli_w.dumps(doc)


def acted_options(options: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """What of ``options`` acted on ``model`` (an ONNX path or ModelProto), for the recipe's note: the ``op_types``
    entries the graph has nodes of ({} when every entry has some, or there is no such option).

    Only a note: the recipe keeps the options as the winner ran them, since they are what reproduces it
    (onnxruntime's dynamic int8 splits a Gemm into a MatMul before it quantizes, so ``op_types = ["Gemm"]``
    alone would quantize nothing).
    """
    wanted = options.get("op_types")
    if not wanted or isinstance(wanted, str):
        return {}
    from ..graph_family import as_model

    present = {n.op_type for n in as_model(model).graph.node}
    kept = tuple(op for op in wanted if op in present)
    return {} if len(kept) == len(tuple(wanted)) else {"op_types": kept}


def _plain(options: dict[str, Any]) -> dict[str, Any]:
    """TOML has no None and no tuples: drop the one, list the other."""
    out = {}
    for key, value in options.items():
        if value is None:
            continue
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def read_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Parse ``recipe.toml``; a malformed file is a one-line usage error."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"--recipe {path}: no such file")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--recipe {path}: not valid TOML ({exc})") from None
    strategy = doc.get("strategy")
    if not isinstance(strategy, dict) or not isinstance(strategy.get("name"), str):
        raise UsageError(f"--recipe {path}: missing [strategy] name")
    budget = doc.get("budget", {})
    source = doc.get("source", {})
    budgets = budget.get("max_drops", {})
    if not isinstance(budgets, dict) or not all(isinstance(v, (int, float)) for v in budgets.values()):
        raise UsageError(f"--recipe {path}: [budget.max_drops] must map metric keys to numbers")
    return Recipe(
        strategy=strategy["name"],
        options=dict(strategy.get("options", {})),
        excluded_nodes=tuple(strategy.get("excluded_nodes", ())),
        metric=budget.get("metric"),
        max_drop=budget.get("max_drop"),
        budgets={str(k): float(v) for k, v in budgets.items()},
        objective=budget.get("objective", "latency"),
        provider=doc.get("runtime", {}).get("provider", "cpu"),
        framework=source.get("framework"),
        inputs=tuple(source.get("inputs", ())),
        model_class=source.get("model_class"),
        source_options=dict(source.get("options", {})),
        data=doc.get("data", {}).get("path"),
        data_options=dict(doc.get("data", {}).get("options", {})),
        calibration=doc.get("data", {}).get("calibration"),
        calibration_options=dict(doc.get("data", {}).get("calibration_options", {})),
        threads=doc.get("runtime", {}).get("threads"),
        batch=doc.get("runtime", {}).get("batch"),
        hardware={k: v for k, v in doc.get("hardware", {}).items() if k != "target_cpu"},
        target_cpu=doc.get("hardware", {}).get("target_cpu"),
        acted=dict(strategy.get("acted", {})),
    )


def record(config: LightenConfig) -> dict[str, Any]:
    """The :class:`Recipe` fields of ``config`` that let a replay run without retyping flags: paths made absolute
    (a replay may run from another folder), in-memory data left out (it has no name to record)."""
    def path(value: Any) -> str | None:
        return str(Path(value).resolve()) if isinstance(value, (str, os.PathLike)) else None

    def options(values: Mapping[str, Any] | None) -> dict[str, Any]:
        # tokenizer=DIR and the like: a relative path that exists here is recorded absolute
        return {k: (str(Path(v).resolve()) if isinstance(v, str) and os.sep in v and Path(v).exists() else v)
                for k, v in (values or {}).items()}

    framework_options = config.framework_options
    if isinstance(framework_options, (list, tuple)):
        from ..specs import option_pairs

        framework_options = option_pairs(framework_options, "--option")
    cls = config.model_class
    if cls and ".py:" in cls and Path(cls.split(":", 1)[0]).is_file():
        cls = f"{Path(cls.split(':', 1)[0]).resolve()}:{cls.split(':', 1)[1]}"
    data, calibration = config.data, config.calibration
    return {"model_class": cls, "source_options": dict(framework_options or {}), "data": path(data),
            "data_options": options(config.data_options) if path(data) else {}, "calibration": path(calibration),
            "calibration_options": options(config.calibration_options) if path(calibration) else {},
            "threads": config.settings.threads if config.settings else None, "batch": config.batch}


def replay(recipe: Recipe, config: LightenConfig, emit: Any = None) -> LightenConfig:
    """``config`` with what the user left out filled in from ``recipe`` (:func:`dataclasses.replace`).

    A flag the user gave wins over the recipe.  A recorded file that is gone is a usage error that
    names the flag which brings it back, rather than a failure deep in the run.
    """
    from dataclasses import replace

    out: dict[str, Any] = {}
    if config.framework in (None, "", "auto") and recipe.framework:
        out["framework"] = recipe.framework
    if not config.inputs and recipe.inputs:
        out["inputs"] = list(recipe.inputs)
    if not config.model_class and recipe.model_class:
        out["model_class"] = recipe.model_class
    if not config.framework_options and recipe.source_options:
        out["framework_options"] = dict(recipe.source_options)
    for key, flag in (("data", "--data"), ("calibration", "--calibration")):
        recorded = getattr(recipe, key)
        if getattr(config, key) is None and recorded:
            if not Path(recorded).exists():
                raise UsageError(f"--recipe: the run's {key} data {recorded} is not there any more; "
                                 f"pass {flag} PATH (the recipe's budget is judged on it)")
            out[key] = recorded
            if not getattr(config, f"{key}_options"):
                out[f"{key}_options"] = dict(getattr(recipe, f"{key}_options"))
    settings = config.settings
    if settings is not None and settings.threads is None and recipe.threads:
        out["settings"] = replace(settings, threads=int(recipe.threads))
    if config.batch is None and recipe.batch:
        out["batch"] = int(recipe.batch)
    if config.metric is None and recipe.metric:
        # Every budgeted metric must be computed again, the primary first.
        out["metric"] = [recipe.metric, *(k for k in recipe.budgets if k != recipe.metric)]
    if config.max_drop is None:
        out["max_drop"] = dict(recipe.budgets) if recipe.budgets else recipe.max_drop
    if config.objective is None:
        out["objective"] = recipe.objective
    if emit is not None:
        _replay_notes(recipe, settings.provider if settings is not None else None, emit)
    return replace(config, **out)


def _replay_notes(recipe: Recipe, provider: str | None, emit: Any) -> None:
    """Say when the recipe was judged on another CPU kind (unless saturation-free) or another provider."""
    from ..hardware import detect, mismatch_warning

    line = mismatch_warning(recipe.isa, detect(provider or "cpu"), "the recipe", recipe.target_cpu,
                            advice="this replay judges it here, against the recipe's budget")
    if line and not _saturation_free(recipe):
        emit("note", {"message": line})
    if provider and provider != recipe.provider:
        emit("note", {"message": f"the recipe was made on provider {recipe.provider}; replaying on {provider} "
                                 "(--provider)"})


def _saturation_free(recipe: Recipe) -> bool:
    """The recipe's strategy says its options cannot saturate (or it runs no int8 kernels)."""
    from ..registry import get_registry
    from .candidates import int8_portable

    try:
        spec = get_registry().get("quantizer", recipe.strategy).spec
    except UsageError:
        return False
    return int8_portable(spec, recipe.options)


#: files of a transformers / sentence-transformers folder that loading the ONNX model needs beside it:
#: the config (Optimum's ORTModelForFeatureExtraction), the tokenizer (AutoTokenizer) and the
#: sentence-transformers modules (pooling, normalisation); weights are never copied
HF_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
            "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.txt", "vocab.json",
            "merges.txt", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model", "modules.json",
            "sentence_bert_config.json", "config_sentence_transformers.json")


def copy_hf_files(source: str | os.PathLike[str], folder: Path, model: Path) -> list[str]:
    """Make ``folder`` loadable as a Hugging Face ONNX folder when ``source`` is a transformers folder.

    Copies the config and tokenizer files (Optimum's layout: ``model.onnx`` beside ``config.json``) and,
    for a sentence-transformers folder, its module folders (``1_Pooling``...) plus ``onnx/model.onnx``
    (a hard link to ``model.onnx`` where the file system allows), the layout
    ``SentenceTransformer(folder, backend="onnx")`` reads.  Returns the names copied.
    """
    import shutil

    src = Path(source)
    if not (src.is_dir() and (src / "config.json").is_file()):
        return []
    copied = []
    for name in HF_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, folder / name)
            copied.append(name)
    if (src / "modules.json").is_file():
        for sub in sorted(p for p in src.iterdir() if p.is_dir() and p.name[:1].isdigit() and "_" in p.name):
            shutil.copytree(sub, folder / sub.name)
            copied.append(sub.name + "/")
        (folder / "onnx").mkdir()
        try:
            os.link(model, folder / "onnx" / "model.onnx")
        except OSError:
            shutil.copy2(model, folder / "onnx" / "model.onnx")
        copied.append("onnx/model.onnx")
    return copied


def recipe_candidate(recipe: Recipe, calibration_for: Any) -> Any:
    """The one candidate a recipe names; ``calibration_for(spec)`` is the calibration file its strategy would get."""
    from ..registry import get_registry
    from .candidates import Candidate, candidate_name, exclude_option

    spec = get_registry().get("quantizer", recipe.strategy).spec
    # The recipe's options already hold the float nodes in the strategy's exclusion option;
    # excluded_nodes is kept for the record.
    option = exclude_option(spec) if recipe.excluded_nodes else None
    # An empty option (mixed's assign = []) is left out of the name, as the search names it.
    name = candidate_name(recipe.strategy, {k: v for k, v in recipe.options.items()
                                            if k != option and v not in ([], (), "")})
    if recipe.excluded_nodes:
        name += f"+float{len(recipe.excluded_nodes)}"
    if spec.needs_calibration and calibration_for(spec) is None:
        raise UsageError(f"--recipe: strategy {recipe.strategy!r} needs calibration data (--calibration or --data)")
    return Candidate(name, recipe.strategy, dict(recipe.options), tuple(recipe.excluded_nodes))
