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
from reasonkit.train import clock, held_out
from reasonkit.train.batches import (
    dpo_batches,
    dpo_examples,
    grpo_batches,
    grpo_records,
    sft_batches,
    sft_examples,
    take,
)
from reasonkit.train.build import Stage, build_stage, grpo_reward_fns
from reasonkit.train.metrics import Recorded, log_compiles, show_progress
from reasonkit.tunix_patches import trainers

__all__ = ["StageResult", "saves_land_on_interrupt", "train_sft", "train_dpo", "train_grpo",
           "export", "exported", "export_once", "train_or_load"]


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


def train_sft(preset: Preset, run: RunDir, *, deadline: float | None = None,
              overwrite: bool = False) -> StageResult:
    """Supervised fine-tuning with completion-only loss, resuming from the last checkpoint."""
    cfg = preset.sft
    with _running(preset, run, "sft", deadline=deadline, overwrite=overwrite) as r:
        trainer, tok, mesh = r.stage.trainer, r.stage.tokenizer, r.stage.mesh
        train, collator = sft_batches(sft_examples(r.splits.sft, tok), preset, tok)
        held_out = collate.batches(sft_examples(r.splits.eval, tok), cfg.batch_size, collate.SFTCollator(
            layout=collate.StaticLayout(max_length=cfg.max_target_length), pad_id=tok.pad_id(),
            bos_id=tok.bos_id()))
        # global_batches: on several processes, each batch one global array
        trainer.train(r.batches(mesh_lib.global_batches(train, mesh), "SFT"),
                      list(mesh_lib.global_batches(take(held_out, 2), mesh)))
    return r.finish(collator)


def train_dpo(preset: Preset, run: RunDir, *, deadline: float | None = None,
              overwrite: bool = False) -> StageResult:
    """DPO (or ORPO) from the SFT adapters; the reference is the SFT policy, frozen (no ORPO)."""
    with _running(preset, run, "dpo", deadline=deadline, overwrite=overwrite) as r:
        tok = r.stage.tokenizer
        train, collator = dpo_batches(dpo_examples(r.splits.dpo, tok), preset, tok)
        r.stage.trainer.train(r.batches(mesh_lib.global_batches(train, r.stage.mesh),
                                        preset.dpo.algorithm))
    return r.finish(collator)


def train_grpo(preset: Preset, run: RunDir, *, deadline: float | None = None,
               overwrite: bool = False, reward_fns: Sequence[Callable] | None = None) -> StageResult:
    """GRPO from the DPO (or SFT) adapters, KL-regularised towards where it started.

    The reward is ``preset.grpo.rewards``; ``reward_fns`` (a list of reward functions)
    replaces it, e.g. for a reward of your own (the settings still record the preset's).
    """
    # Resolved before anything starts: an unknown reward name is refused with the stage untouched.
    fns = grpo_reward_fns(preset) if reward_fns is None else list(reward_fns)
    fns = [Recorded(fn) for fn in fns]  # each reward's values per answer, for its zero-std fraction
    cfg = preset.grpo
    with _running(preset, run, "grpo", deadline=deadline, overwrite=overwrite, reward_fns=fns) as r:
        cluster, learner, tok = r.stage.cluster, r.stage.learner, r.stage.tokenizer
        train, collator = grpo_batches(grpo_records(r.splits.grpo), preset, tok)
        start = cluster.global_steps  # restored on resume
        check = held_out.for_run(preset, run, r.stage.trainer.model, tok,
                                 start=start, splits=r.splits)
        stream = r.batches(held_out.checked(train, check, cfg.eval_every, start=start), "GRPO")
        first = next(stream, None)
        if first is None:  # out of time before the first batch: Tunix's learner would
            cluster.close()  # raise StopIteration; close as it does (saves the step)
        else:
            learner.train(itertools.chain([first], stream))
            if check is not None and cluster.global_steps >= cfg.max_steps:
                check(cluster.global_steps)  # the last adapters, beside the best
    extra = {} if check is None else {"held_out": {
        "checks": len(check.readings), "seconds": round(check.seconds, 1), "best": {
            k: v for k, v in (check.best or {}).items() if k != "ids"}}}
    return r.finish(collator, **extra)


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

    What a notebook cell wants: re-running a finished notebook loads its adapters instead
    of training again or failing; ``retrain=True`` trains from scratch.
    """
    trainers = {"sft": train_sft, "dpo": train_dpo, "grpo": train_grpo}
    if stage not in trainers:
        raise ValueError(f"unknown training stage {stage!r}; stages: {list(trainers)}")

    def load() -> StageResult:
        info = run.finished_info(stage)
        print(f"{stage} of run {run.name!r} already finished ({info.get('steps')} steps, "
              f"{info.get('finished_at')}): loading its adapters instead of training "
              "(retrain=True trains again)")
        changes = runs.settings_changes(run, stage, runs.stage_settings(preset, run, stage,
                                                                        info.get("started_from")))
        if changes:
            warnings.warn(f"{stage} of run {run.name!r} was trained with other settings than "
                          f"now ({'; '.join(changes)}): the adapters loaded are the old "
                          "run's. retrain=True, or another run name, trains with these.",
                          stacklevel=4)
        _, policy, tok, model_dir = models.load_policy(preset, run, stage, None)
        return StageResult(stage, info.get("steps", 0), True, info.get("started_from"), 0.0, {},
                           policy, tok, model_dir)

    def build() -> StageResult:
        result = trainers[stage](preset, run, deadline=deadline, overwrite=retrain)
        print(result.summary())
        return result

    return runs.load_or_build(run, stage, load, build, rebuild=retrain)
