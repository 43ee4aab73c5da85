"""``lighten``'s first stages, each a function returning a frozen record: what the run was given
(:class:`Env`), the source and its data (:func:`load_inputs` -> :class:`Inputs`), and the reference with its
judge and the float model's verdict (:func:`export_reference` -> :class:`Reference`).

The source is loaded once: it serves the export and the judge (a file.py runs once).  The judge holds the
*source framework's* outputs on held-out data, computed before exporting, never the calibration samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..events import Event
from ..figures import figures_of
from ..normalize import normalize_file
from .heldout import export_samples, hf_tokenizer_default, split_data, write_calibration
from .results import CandidateRow

if TYPE_CHECKING:
    from ..conversion.export import ExportResult
    from ..evaluation.judge import Judge
    from ..executors import Executor
    from ..hardware import JudgedOn
    from ..runtime import SessionSettings
    from ..runtime_compat import TargetRuntime
    from ..specs import QuantizerSpec
    from .confidence import ConfidenceSetup
    from .config import LightenConfig
    from .heldout import DataSets


GENERATED_SAMPLES = 128   # held-out samples generated when the user gives no data


@dataclass(frozen=True)
class Env:
    """One run's givens before any work: the source, its scratch folder, where tasks run and what they judge on."""

    source: str
    work: Path
    settings: SessionSettings
    emit: Event
    executor: Executor
    #: the CPU the verdict is judged and timed on, and the --target-cpu kind
    isa: JudgedOn
    target: TargetRuntime | None
    config: LightenConfig


@dataclass(frozen=True)
class Inputs:
    """The loaded source, its inputs, and the run's data sets (calibration written to a file for the workers)."""

    loaded: Any
    framework: str
    specs: Sequence[Any]
    data: DataSets
    calibration_file: Path | None = None
    generated_calibration: Path | None = None

    def calibration_for(self, spec: QuantizerSpec) -> Path | None:
        """The calibration file a strategy gets: the user's data, else generated samples if it may use them."""
        if not spec.needs_calibration:
            return None
        if self.calibration_file is not None:
            return self.calibration_file
        return self.generated_calibration if spec.calibrates_on_generated else None


@dataclass(frozen=True)
class Reference:
    """The exported float model, the judge set up on the source's outputs, and the float model's own row."""

    exported: ExportResult
    fp32: Path
    judge: Judge
    setup: ConfidenceSetup
    judge_dir: Path
    baseline: CandidateRow
    #: what the export changed, said in the verdict
    notes: tuple[str, ...] = ()
    #: fp32 with fp16-rounded weights, judged as a yardstick (search.float_noise); None when skipped
    noise: CandidateRow | None = None


def load_inputs(env: Env) -> Inputs:
    """Load the source once, then read (or generate) the calibration and held-out data for its inputs."""
    from ..conversion.export import load_for_export

    config = env.config
    env.emit("step", {"message": f"Loading {env.source}"})
    loaded = load_for_export(env.source, config.framework, inputs=config.inputs, model_class=config.model_class,
                             settings=env.settings, framework_options=config.framework_options)
    specs = loaded.input_specs
    data_options = hf_tokenizer_default(env.source, config.data_options)
    calibration_options = hf_tokenizer_default(env.source, config.calibration_options)
    data = split_data(config.data, config.calibration, specs, data_options, calibration_options, config.split)
    calibration_file = generated = None
    if data.calibration is not None:
        calibration_file = write_calibration(data.calibration, env.work / "calibration.npz")
    elif data.held_out is None:
        from ..evaluation.judge import DEFAULT_SEQ
        from .heldout import generated_calibration

        generated = generated_calibration(specs, env.work / "generated_calibration.npz", DEFAULT_SEQ)
    return Inputs(loaded, loaded.framework, specs, data, calibration_file, generated)


def export_reference(env: Env, inputs: Inputs) -> Reference:
    """Run the source on held-out data, export it (verified), set the judge up and judge the float model."""
    from ..conversion.export import export
    from ..evaluation.judge import Judge
    from ..jobs.candidate import save_judge
    from .confidence import configure_judge

    config = env.config
    env.emit("stage", {"message": f"running the {inputs.framework} source on held-out data"})
    # An ONNX source runs as the judge's CPU reference (its answers are the ones to keep, whatever
    # --provider says); any other source runs as loaded, so user code is not run a second time.
    held_out = inputs.data.held_out
    run = Judge.run_reference(env.source if inputs.framework == "onnx" else inputs.loaded.model, held_out,
                              framework=inputs.framework, inputs=inputs.specs, settings=env.settings, seed=1,
                              samples=None if held_out is not None else GENERATED_SAMPLES)
    run.name = env.source
    env.emit("stage", {"message": "exporting and verifying against the source"})
    exported = export(env.source, env.work / "fp32.onnx", opset=config.opset, exporter=config.exporter,
                      loaded=inputs.loaded, settings=env.settings, samples=export_samples(held_out, inputs.specs),
                      on_step=lambda msg: env.emit("step", {"message": msg}))
    fp32 = Path(exported.path)
    notes: list[str] = []
    if (done := normalize_file(fp32)) and done.summary():   # once per model, before family and candidates
        notes.append(f"normalised before quantizing: {done.summary()}")
        env.emit("note", {"message": notes[-1]})
    judge = Judge.from_run(run, fp32, metrics=config.metrics, max_drop=config.max_drop, settings=env.settings)
    if not judge.budgets:
        raise UsageError("--max-drop: a budget is needed to judge candidates (for example 1%)")
    # before any quantizing: the confidence rule, the select/confirm parts, and what the data cannot resolve
    setup = configure_judge(judge, config.confidence, tails=config.metric is None)
    for line in setup.messages:
        env.emit("note", {"message": line})
    judge_dir = save_judge(judge, env.work / "judge")
    verdict = judge.evaluate(fp32, "fp32")
    baseline = CandidateRow(name="fp32", strategy="none", options={}, status="reference", path=str(fp32),
                            reason="the exported model, unquantized",
                            **figures_of(verdict, "size_bytes", "metrics", "drops"))
    from .float_noise import float_noise_row, noise_notes

    env.emit("stage", {"message": "judging the float model's own noise (fp16-rounded weights)"})
    noise = float_noise_row(judge, fp32, env.work / "float_noise")
    # the verdict says how many judging samples are near-ties, and what rounding alone changes
    notes += [*setup.near_ties, *noise_notes(noise, judge.budgets)]
    return Reference(exported, fp32, judge, setup, judge_dir, baseline, tuple(notes), noise)
