"""Train a stage from a preset, resume it, load it when it already finished, and export it.

Each stage trains LoRA adapters on a frozen base and checkpoints them with Orbax
under ``runs/<run>/<stage>/checkpoints`` (adapters, optimizer state, step) every
``checkpoint_every`` steps and at the end. Re-running a stage resumes from its last
complete checkpoint: Tunix restores the step and optimizer state and skips the
batches it already consumed, and every batch stream is a deterministic function of
the data and the seed, so a resumed run ends where an uninterrupted one would. The
hand-off: DPO starts from the SFT adapters, GRPO from DPO's (or SFT's when DPO was
skipped); adapters are restored onto the new stage's mesh. Which stage starts from
which, the settings each records and the checks on them live with the run directory,
in :mod:`reasonkit.runtime.runs`. GRPO checks its accuracy on held-out prompts as it
trains and keeps its best adapters beside the last (:mod:`reasonkit.train.held_out`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import pathlib
import time
import warnings
from typing import Any, Callable, Iterable, Iterator, Sequence

import jax

from reasonkit import collate, data, models
from reasonkit.config import Preset, TrainConfig
from reasonkit.runtime import compiles, runs
from reasonkit.runtime import mesh as mesh_lib
from reasonkit.runtime.runs import RunDir
from reasonkit.runtime.session import is_writer, sync
from reasonkit.train import clock, contrast, held_out
from reasonkit.train.batches import (
    dpo_batches,
    dpo_examples,
    grpo_batches,
    grpo_records,
    sft_batches,
    sft_examples,
    take,
)
from reasonkit.train.build import TRAIN_STAGES, Stage, build_stage, grpo_reward_fns
from reasonkit.train.metrics import Recorded, log_compiles, show_progress
from reasonkit.tunix_patches import trainers

__all__ = ["StageResult", "StageRun", "saves_land_on_interrupt", "stage_run", "train_sft", "train_dpo",
           "train_grpo", "export", "exported", "export_once", "train_or_load"]


@contextlib.contextmanager
def saves_land_on_interrupt(manager) -> Iterator[None]:
    """If training stops with an exception, let the checkpoint still being written land first.

    Orbax finishes each save in a background thread, and Tunix closes its checkpoint
    manager only when training ends normally. Without this, an interrupt (the notebook's
    stop button, a failing step) a moment after a save would drop that save, or lose it
    when the interpreter exits, and the next run would resume one checkpoint earlier.
    """
    try:
        yield
    except BaseException as stop:
        try:
            manager.close()  # waits for the save in flight
        except Exception as e:  # noqa: BLE001 - the interrupt is what the caller must see
            stop.add_note(f"the checkpoint being written when training stopped was lost: {e!r}")
        raise


@dataclasses.dataclass
class StageResult:
    """What a stage run did: steps, whether it finished, where, and the live objects."""

    stage: str
    steps: int
    finished: bool
    started_from: str | None
    seconds: float
    stats: dict[str, Any]
    policy: Any = None
    tokenizer: Any = None
    model_dir: pathlib.Path | None = None

    def summary(self) -> dict[str, Any]:
        return {"stage": self.stage, "steps": self.steps, "finished": self.finished,
                "started_from": self.started_from, "seconds": round(self.seconds, 1), **self.stats}

    def line(self) -> str:
        """The run in one line, as a notebook prints it after training.

        >>> StageResult("sft", 240, True, None, 93.9, {"compiles": {"total": 14, "after_warmup": 0}}).line()
        'sft: 240 steps in 93.9 s from the base model, finished; 14 compilations, 0 after warm-up'
        """
        where = f"from {self.started_from}" if self.started_from else "from the base model"
        compiled = self.stats.get("compiles", {})
        tail = (f"; {compiled['total']} compilations, {compiled['after_warmup']} after warm-up"
                if compiled else "")
        return (f"{self.stage}: {self.steps} steps in {self.seconds:.1f} s {where}, "
                f"{'finished' if self.finished else 'not finished'}{tail}")


@dataclasses.dataclass
class _Run:
    """What :func:`_running` gives a trainer: the built stage, the splits, its batch streams.

    After the ``with`` block (training done) ``steps`` and ``policy`` are set, and
    :meth:`finish` turns the run into a :class:`StageResult`.
    """

    preset: Preset
    run: RunDir
    name: str
    deadline: float | None
    t0: float
    splits: data.Splits
    started: str | None
    stage: Stage
    counter: compiles.CompileCounter
    steps: int | None = None
    policy: Any = None

    @property
    def config(self) -> TrainConfig:
        return getattr(self.preset, self.name)

    def batches(self, stream: Iterable[Any], label: str) -> Iterator[Any]:
        """``stream`` until the deadline (:func:`reasonkit.train.clock.until`), its compilations counted.

        A resumed trainer first reads and discards the batches it already consumed
        (``skip``, its restored step): they are neither timed nor counted as warm-up. The
        ETA line's time per step leaves out every step the counter saw compile (GRPO's
        length buckets compile on their first steps), and says how many and how long.
        """
        skip = self.stage.trainer.train_steps
        return self.counter.watch(clock.until(stream, self.deadline, total=self.config.max_steps,
                                              name=label, skip=skip, counter=self.counter), skip=skip)

    def finish(self, collator, **extra: Any) -> StageResult:
        """The stage's result, after the block; marks the stage finished when it ran all its steps.

        ``extra``: more of what the stage did, for its summary (GRPO's held-out checks).
        """
        if self.steps is None:
            raise RuntimeError(f"{self.name}: finish() comes after the `with _running(...)` block")
        stats = {"collate": collator.stats.to_dict(),
                 "compiles": log_compiles(self.run, self.name, self.counter, self.steps), **extra}
        done = self.steps >= self.config.max_steps
        result = StageResult(self.name, self.steps, done, self.started, time.time() - self.t0, stats,
                             self.policy, self.stage.tokenizer, self.stage.model_dir)
        if done:
            self.run.mark_finished(self.name, **{k: v for k, v in result.summary().items()
                                                 if k != "stage"})
        else:
            print(f"{self.name}: stopped at step {self.steps}/{self.config.max_steps}; "
                  "run the notebook again to resume")
        return result


@contextlib.contextmanager
def _running(preset: Preset, run: RunDir, name: str, *, deadline: float | None, overwrite: bool,
             reward_fns: Sequence[Callable] | None = None) -> Iterator[_Run]:
    """What every training stage does around Tunix's own lines; the block is those lines.

    Before: refuse a finished stage (or clear it: ``overwrite``), read the splits, find
    the stage it starts from, record its settings (refusing a resume under other ones)
    and build it. Around the block: the stage's mesh, a compile counter, checkpoint saves
    that land on an interrupt, Tunix's metrics listeners detached however training ends.
    After it: the step count and the trained policy, for :meth:`_Run.finish`.
    """
    runs.begin_stage(run, name, overwrite)
    t0 = time.time()
    splits, _ = data.read_splits(run.require("data"))
    started = runs.start_from(run, name)  # None for SFT
    runs.record_settings(run, name, runs.stage_settings(preset, run, name, started))
    stage = build_stage(preset, name, run, started=started, reward_fns=reward_fns)
    trainer = stage.trainer  # GRPO: the RL cluster's actor trainer
    show_progress(trainer, preset, name, reward_fns or ())
    logger = (trainer.metrics_logger if stage.cluster is None
              else trainers.rl_metrics_logger(stage.cluster))
    with stage.mesh:
        with compiles.CompileCounter() as counter, saves_land_on_interrupt(trainer.checkpoint_manager), \
                trainers.detached_after(logger):
            r = _Run(preset, run, name, deadline, t0, splits, started, stage, counter)
            yield r
        r.steps, r.policy = trainer.train_steps, trainer.model


@dataclasses.dataclass
class StageRun:
    """A stage ready for its one Tunix call, as :func:`stage_run` yields it; ``result`` after the block.

    ``trains`` is False when there is nothing to call: the stage had already finished (its
    adapters are loaded: ``result`` is set before the block), or its deadline came before the
    first batch. Otherwise ``trainer`` is Tunix's ``PeftTrainer`` (SFT) or ``DPOTrainer``
    (DPO) and ``trainer.train(train_batches, eval_batches)`` trains it; for GRPO
    ``learner.train(train_batches)`` trains the ``learner`` (its RL cluster is ``cluster``,
    whose actor trainer is ``trainer``). :meth:`train` is that call.
    """

    stage: str
    trains: bool
    trainer: Any = None
    learner: Any = None
    cluster: Any = None
    train_batches: Iterator[Any] | None = None
    eval_batches: list[Any] | None = None
    result: StageResult | None = None

    def train(self) -> None:
        """The stage's Tunix call, as the notebooks write it (nothing when ``trains`` is False)."""
        if not self.trains:
            return
        if self.learner is not None:
            self.learner.train(self.train_batches)
        else:
            self.trainer.train(self.train_batches, self.eval_batches)


def _sft_inputs(r: _Run) -> tuple[Any, list[Any], collate.SFTCollator]:
    """SFT's training stream, two held-out batches (Tunix evaluates them at each checkpoint), its collator."""
    cfg, tok, mesh = r.config, r.stage.tokenizer, r.stage.mesh
    stream, collator = sft_batches(sft_examples(r.splits.sft, tok), r.preset, tok)
    held = collate.batches(sft_examples(r.splits.eval, tok), cfg.batch_size, collate.SFTCollator(
        layout=collate.StaticLayout(max_length=cfg.max_target_length), pad_id=tok.pad_id(),
        bos_id=tok.bos_id()))
    # global_batches: on several processes, each batch one global array
    return (r.batches(mesh_lib.global_batches(stream, mesh), "SFT"),
            list(mesh_lib.global_batches(take(held, 2), mesh)), collator)


def _dpo_inputs(r: _Run) -> tuple[Any, None, Any]:
    """DPO's (or ORPO's) training stream and its collator; DPO evaluates nothing as it trains."""
    tok = r.stage.tokenizer
    stream, collator = dpo_batches(dpo_examples(r.splits.dpo, tok), r.preset, tok)
    return r.batches(mesh_lib.global_batches(stream, r.stage.mesh), r.preset.dpo.algorithm), None, collator


@contextlib.contextmanager
def _stage(preset: Preset, run: RunDir, name: str, *, deadline: float | None, overwrite: bool,
           reward_fns: Sequence[Callable] | None = None) -> Iterator[StageRun]:
    """:func:`_running` with the stage's batches; the block makes the Tunix call, ``result`` follows.

    GRPO: its rewards are resolved before anything starts (an unknown name is refused with
    the stage untouched) and each wrapped in :class:`~reasonkit.train.metrics.Recorded` (its
    values per answer, for its zero-std fraction); its stream runs the held-out checks every
    ``grpo.eval_every`` steps, and after the block the last adapters are checked beside the
    best. A stream empty from the start (out of time) closes the cluster as Tunix's learner
    would (it saves the step) instead of calling it: Tunix would raise StopIteration.
    """
    if name == "grpo":
        fns = grpo_reward_fns(preset) if reward_fns is None else list(reward_fns)
        reward_fns = [Recorded(fn) for fn in fns]
    with _running(preset, run, name, deadline=deadline, overwrite=overwrite, reward_fns=reward_fns) as r:
        s = StageRun(name, True, trainer=r.stage.trainer, learner=r.stage.learner, cluster=r.stage.cluster)
        check = None
        if name == "grpo":
            s.train_batches, collator, check = _grpo_inputs(r)
            first = next(s.train_batches, None)
            if first is None:  # out of time before the first batch
                s.trains = False
                s.cluster.close()
            else:
                s.train_batches = itertools.chain([first], s.train_batches)
        else:
            s.train_batches, s.eval_batches, collator = (_sft_inputs if name == "sft" else _dpo_inputs)(r)
        yield s
        if s.trains and check is not None and s.cluster.global_steps >= preset.grpo.max_steps:
            check(s.cluster.global_steps)  # the last adapters, beside the best
    extra = {} if check is None else {"held_out": {
        "checks": len(check.readings), "seconds": round(check.seconds, 1), "best": {
            k: v for k, v in (check.best or {}).items() if k != "ids"}}}
    s.result = r.finish(collator, **extra)


def _grpo_inputs(r: _Run) -> tuple[Iterator[Any], Any, held_out.HeldOutCheck | None]:
    """GRPO's training stream (its held-out checks run in it), its collator, and the check."""
    cluster, tok, cfg = r.stage.cluster, r.stage.tokenizer, r.config
    # the split's prompts, or (grpo.keep_contrast) those the starting policy has contrast on
    records = contrast.grpo_prompts(r.preset, r.run, r.stage.trainer.model, tok, r.splits)
    stream, collator = grpo_batches(grpo_records(records), r.preset, tok)
    start = cluster.global_steps  # restored on resume
    check = held_out.for_run(r.preset, r.run, r.stage.trainer.model, tok, start=start, splits=r.splits,
                             trained=records)
    return r.batches(held_out.checked(stream, check, cfg.eval_every, start=start), "GRPO"), collator, check


@contextlib.contextmanager
def stage_run(preset: Preset, run: RunDir, stage: str, *, retrain: bool = False,
              deadline: float | None = None, reward_fns: Sequence[Callable] | None = None
              ) -> Iterator[StageRun]:
    """A training stage ready for its Tunix call in a notebook cell, or loaded if it already finished.

    The block makes the call; everything around it is the run directory's: a finished
    stage is loaded, not trained again (``retrain=True`` clears it and trains from
    scratch), an interrupted one resumes from its last checkpoint, its settings are
    recorded (a resume under other ones is refused), checkpoints land even on an
    interrupt, the batches stop before ``deadline``, Tunix's metrics listeners are
    detached however the block ends, and after it ``result`` (a :class:`StageResult`)
    says what ran, printed in one line. ``reward_fns``: GRPO's, instead of the preset's.
    What a notebook writes (for GRPO, ``r.learner.train(r.train_batches)``)::

        with train.stage_run(preset, run, "sft", retrain=RETRAIN, deadline=run.deadline()) as r:
            if r.trains:
                r.trainer.train(r.train_batches, r.eval_batches)
        result = r.result
    """
    if stage not in TRAIN_STAGES:
        raise ValueError(f"unknown training stage {stage!r}; stages: {list(TRAIN_STAGES)}")
    loaded = runs.load_or_build(run, stage, lambda: _load(preset, run, stage), lambda: None,
                                rebuild=retrain)
    if loaded is not None:
        yield StageRun(stage, False, result=loaded)
        return
    with _stage(preset, run, stage, deadline=deadline, overwrite=retrain, reward_fns=reward_fns) as s:
        yield s
    print(s.result.line())


def _load(preset: Preset, run: RunDir, stage: str) -> StageResult:
    """A finished stage's adapters, saying so (and warning when its settings differ from the preset's)."""
    info = run.finished_info(stage)
    print(f"{stage} of run {run.name!r} already finished ({info.get('steps')} steps, "
          f"{info.get('finished_at')}): loading its adapters instead of training "
          "(retrain=True trains again)")
    changes = runs.settings_changes(run, stage, runs.stage_settings(preset, run, stage,
                                                                    info.get("started_from")))
    if changes:
        warnings.warn(f"{stage} of run {run.name!r} was trained with other settings than "
                      f"now ({'; '.join(changes)}): the adapters loaded are the old "
                      "run's. retrain=True, or another run name, trains with these.", stacklevel=5)
    _, policy, tok, model_dir = models.load_policy(preset, run, stage, None)
    return StageResult(stage, info.get("steps", 0), True, info.get("started_from"), 0.0, {},
                       policy, tok, model_dir)


def train_sft(preset: Preset, run: RunDir, *, deadline: float | None = None,
              overwrite: bool = False) -> StageResult:
    """Supervised fine-tuning with completion-only loss, resuming from the last checkpoint.

    A finished stage is refused unless ``overwrite`` (:func:`stage_run` loads it instead).
    """
    with _stage(preset, run, "sft", deadline=deadline, overwrite=overwrite) as s:
        s.trainer.train(s.train_batches, s.eval_batches)
    return s.result


def train_dpo(preset: Preset, run: RunDir, *, deadline: float | None = None,
              overwrite: bool = False) -> StageResult:
    """DPO (or ORPO) from the SFT adapters; the reference is the SFT policy, frozen (no ORPO)."""
    with _stage(preset, run, "dpo", deadline=deadline, overwrite=overwrite) as s:
        s.trainer.train(s.train_batches)
    return s.result


def train_grpo(preset: Preset, run: RunDir, *, deadline: float | None = None,
               overwrite: bool = False, reward_fns: Sequence[Callable] | None = None) -> StageResult:
    """GRPO from the DPO (or SFT) adapters, KL-regularised towards where it started.

    The reward is ``preset.grpo.rewards``; ``reward_fns`` (a list of reward functions)
    replaces it, e.g. for a reward of your own (the settings still record the preset's).
    """
    with _stage(preset, run, "grpo", deadline=deadline, overwrite=overwrite, reward_fns=reward_fns) as s:
        s.train()  # learner.train(s.train_batches), unless out of time before the first batch
    return s.result


def export(result: StageResult, preset: Preset, run: RunDir, *,
           merged: bool = True, gguf: str | None = None) -> dict[str, pathlib.Path]:
    """Export a stage for use outside JAX: ``{"adapter": <stage>/adapter, "merged": <stage>/merged}``.

    ``adapter`` holds the LoRA adapters in PEFT's format, exact (no rounding of a bf16
    merge) and a small fraction of the model's size; ``merged`` the base with the adapters
    merged in, a complete Hugging Face directory, left out with ``merged=False``. ``gguf``,
    a GGUF tensor type ("f16" or "q8_0"), adds ``"gguf": <stage>/gguf``: the merged model as
    one GGUF file for llama.cpp, Ollama and LM Studio, with an Ollama Modelfile
    (:func:`reasonkit.models.export_gguf`). 05_grpo exports the final stage only (Kaggle
    keeps 20 GB of output); pass another stage's result to export that one.
    """
    name = f"reasonkit run {run.name!r}, stage {result.stage}"
    out = {"adapter": run.stage(result.stage) / "adapter"} | (
        {"merged": run.stage(result.stage) / "merged"} if merged else {}) | (
        {"gguf": run.stage(result.stage) / "gguf"} if gguf else {})
    # Several processes: each holds shards of the model; all gather it whole, process 0 writes.
    policy = mesh_lib.host_copy(result.policy) if jax.process_count() > 1 else result.policy
    if is_writer():
        models.export_adapter(policy, preset.model, preset.lora, out["adapter"], result.model_dir, name=name)
        if merged:
            models.export_merged(policy, preset.model, preset.lora, out["merged"], result.model_dir,
                                 name=name)
        if gguf:
            models.export_gguf(policy, preset.model, preset.lora, out["gguf"], result.model_dir,
                               name=name, kind=gguf)
    sync(f"{run.name}/{result.stage} exported")
    return out


def exported(run: RunDir, stage: str, *, gguf: str | None = None) -> bool:
    """Whether ``stage`` of ``run`` has both exports :func:`export` writes, adapter and merged
    (and with ``gguf``, a GGUF export of that type)."""
    return ((run.stage(stage) / "adapter" / "adapter_model.safetensors").is_file()
            and (run.stage(stage) / "merged" / "model.safetensors").is_file()
            and (not gguf or (run.stage(stage) / "gguf" / models.gguf_file_name(gguf)).is_file()))


def export_once(result: StageResult, preset: Preset, run: RunDir, *,
                again: bool = False, gguf: str | None = None) -> dict[str, pathlib.Path]:
    """:func:`export`, unless the stage's adapter and merged model (and with ``gguf``, its GGUF
    export) are already there (then says so and returns them); ``again=True`` exports anew."""
    kinds = ("adapter", "merged", *(["gguf"] if gguf else []))
    out = {kind: run.stage(result.stage) / kind for kind in kinds}
    done = exported(run, result.stage, gguf=gguf)
    extra = {"gguf": gguf} if gguf else {}  # without one, the same call as before GGUF exports

    def load() -> dict[str, pathlib.Path]:
        print("already exported:")
        return out

    return runs.load_or_build(run, result.stage, load, lambda: export(result, preset, run, **extra),
                              rebuild=again, done=done)


def train_or_load(preset: Preset, run: RunDir, stage: str, *, retrain: bool = False,
                  deadline: float | None = None) -> StageResult:
    """Train ``stage`` (resuming if it was interrupted), or load it if it already finished.

    :func:`stage_run` with its Tunix call made for you; ``retrain=True`` trains from scratch.
    """
    with stage_run(preset, run, stage, retrain=retrain, deadline=deadline) as r:
        r.train()
    return r.result
