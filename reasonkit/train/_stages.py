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
in :mod:`reasonkit.runtime._runs`. GRPO checks its accuracy on held-out prompts as it
trains and keeps its best adapters beside the last (:mod:`reasonkit.train._held_out`).
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
from reasonkit.runtime import RunDir, compiles, is_writer, runs, sync
from reasonkit.runtime import mesh as mesh_lib
from reasonkit.train import _clock as clock
from reasonkit.train import _contrast as contrast
from reasonkit.train import _held_out as held_out
from reasonkit.train import _onpolicy as onpolicy
from reasonkit.train import _seam
from reasonkit.train._batches import (
    dpo_batches,
    dpo_examples,
    grpo_batches,
    grpo_records,
    sft_batches,
    sft_examples,
    take,
)
from reasonkit.train._build import (
    TRAIN_STAGES,
    dpo_trainer,
    grpo_learner,
    grpo_metric_fns,
    grpo_reward_fns,
    run_options,
    sft_trainer,
    stage_models,
)
from reasonkit.train._metrics import Recorded, log_compiles, show_progress
from reasonkit.train._seam import (
    patch_dpo_trainer,
    patch_grpo_learner,
    patch_rl_cluster,
    patch_sft_trainer,
)

__all__ = ["StageResult", "StageRun", "saves_land_on_interrupt", "stage_run", "train_with_recipe",
           "train_sft", "train_dpo", "train_grpo", "export", "exported", "export_once", "train_or_load"]


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
class StageRun:
    """A training stage opened for a notebook cell, as :func:`stage_run` yields it.

    ``trains`` is False when there is nothing to train: the stage had already finished (its
    adapters are loaded, ``result`` is set before the block). Otherwise the stage's models
    are built on its mesh (``policy``, the frozen ``reference`` or None, ``tokenizer``), the
    mesh is in force, and the cell builds Tunix's object on them and trains it::

        trainer = PeftTrainer(r.policy, optimizer, TrainingConfig(..., **r.run_options))
        trainer = r.patch(trainer)                        # the preset's optimisations
        trainer.train(r.batches(trainer), r.eval_batches)  # DPO: train(r.batches(trainer))

    For GRPO the object is the learner (``learner.train(r.batches(learner))``).
    :meth:`batches` hands the object its data and, from then on, the run watches it:
    compiles counted, checkpoints that land on an interrupt, listeners detached after.
    ``result`` (a :class:`StageResult`) follows the block.
    """

    stage: str
    preset: Preset
    run: RunDir
    trains: bool
    result: StageResult | None = None
    started_from: str | None = None
    mesh: Any = None
    policy: Any = None
    reference: Any = None
    tokenizer: Any = None
    model_dir: pathlib.Path | None = None
    base: Any = None
    reward_fns: list[Callable] | None = None  # GRPO's, each recorded for its metrics
    eval_batches: list[Any] | None = None  # SFT's held-out batches, evaluated at each checkpoint
    trainer: Any = None  # the trainer :meth:`batches` watches (GRPO: the cluster's actor trainer)
    learner: Any = None
    cluster: Any = None
    deadline: float | None = None
    t0: float = dataclasses.field(default_factory=time.time)
    splits: Any = None
    counter: compiles.CompileCounter | None = None
    collator: Any = None
    check: held_out.HeldOutCheck | None = None
    pair_check: onpolicy.PairCheck | None = None  # DPO's held-out pair figures (dpo.pairs="on-policy")
    out_of_time: bool = False  # GRPO: the deadline came before the first batch
    exits: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack)

    @property
    def config(self) -> TrainConfig:
        return getattr(self.preset, self.stage)

    @property
    def run_options(self) -> dict[str, Any]:
        """The Tunix config fields that put checkpoints and metrics in this run's stage folder."""
        return run_options(self.run, self.stage, self.config)

    def metric_fns(self, cluster) -> list[Callable]:
        """GRPO's own metrics, for the learner's ``metric_fns`` (groups that teach nothing)."""
        return grpo_metric_fns(cluster, self.preset, self.reward_fns)

    def patch(self, built):
        """``built`` (the Tunix object the cell made) with the preset's patches applied."""
        if self.stage == "sft":
            return patch_sft_trainer(built, self.preset)
        if self.stage == "dpo":
            return patch_dpo_trainer(built, self.preset)
        patch_rl_cluster(built.rl_cluster, self.preset, self.policy)
        return patch_grpo_learner(built.rl_cluster, built, self.preset, self.policy)

    def batches(self, built) -> Iterator[Any]:
        """The training batches for ``built`` (trainer, or GRPO's learner), until the deadline.

        From this call on the run watches ``built``: its progress bar, its compilations, its
        checkpoint saves (they land on an interrupt) and its metrics listeners (detached
        however training ends). A resumed trainer first reads and discards the batches it
        already consumed. GRPO's stream runs the held-out checks every ``grpo.eval_every``
        steps.
        """
        if self.trainer is not None:
            raise RuntimeError(f"{self.stage}: batches() is called once, with the object that trains")
        if self.stage == "grpo":
            self.learner, self.cluster = built, built.rl_cluster
            self.trainer = self.cluster.actor_trainer
        else:
            self.trainer = built
        show_progress(self.trainer, self.preset, self.stage, self.reward_fns or ())
        logger = (self.trainer.metrics_logger if self.cluster is None
                  else _seam.rl_metrics_logger(self.cluster))
        self.counter = self.exits.enter_context(compiles.CompileCounter())
        self.exits.enter_context(saves_land_on_interrupt(self.trainer.checkpoint_manager))
        self.exits.enter_context(_seam.detached_after(logger))
        tok, mesh = self.tokenizer, self.mesh
        if self.stage == "sft":
            stream, self.collator = sft_batches(sft_examples(self.splits.sft, tok), self.preset, tok)
            label = "SFT"
        elif self.stage == "dpo":
            return self._dpo_batches()
        else:
            return self._grpo_batches()
        # global_batches: on several processes, each batch one global array
        return self._until(mesh_lib.global_batches(stream, mesh), label)

    def _until(self, stream: Iterable[Any], label: str) -> Iterator[Any]:
        """``stream`` until the deadline (:func:`reasonkit.train._clock.until`), its compilations counted.

        The batches a resumed trainer skips (``skip``, its restored step) are neither timed
        nor counted as warm-up. The ETA line's time per step leaves out every step the
        counter saw compile (GRPO's length buckets compile on their first steps).
        """
        skip = self.trainer.train_steps
        return self.counter.watch(clock.until(stream, self.deadline, total=self.config.max_steps,
                                              name=label, skip=skip, counter=self.counter), skip=skip)

    def _dpo_batches(self) -> Iterator[Any]:
        """DPO's stream: the split's synthetic pairs, or (``dpo.pairs="on-policy"``) the
        starting policy's own, with the held-out pair figures before the first step and
        every ``dpo.eval_every`` steps (:mod:`reasonkit.train._onpolicy`)."""
        tok, cfg, start = self.tokenizer, self.preset.dpo, self.trainer.train_steps
        pairs, held = onpolicy.dpo_pairs(self.preset, self.run, self.trainer.model, tok, self.splits,
                                         step=start)
        stream, self.collator = dpo_batches(dpo_examples(pairs, tok), self.preset, tok)
        stream = mesh_lib.global_batches(stream, self.mesh)
        if held:
            self.pair_check = onpolicy.PairCheck(self.trainer, held, self.preset, tok, self.run,
                                                 self.mesh)
            stream = onpolicy.checked(stream, self.pair_check, cfg.eval_every, start=start)
        return self._until(stream, cfg.algorithm)

    def _grpo_batches(self) -> Iterator[Any]:
        """GRPO's stream, with its held-out checks; empty when out of time before the first batch."""
        tok, model = self.tokenizer, self.trainer.model
        # the split's prompts, or (grpo.keep_contrast) those the starting policy has contrast on
        records = contrast.grpo_prompts(self.preset, self.run, model, tok, self.splits)
        stream, self.collator = grpo_batches(grpo_records(records), self.preset, tok)
        start = self.cluster.global_steps  # restored on resume
        self.check = held_out.for_run(self.preset, self.run, model, tok, start=start,
                                      splits=self.splits, trained=records)
        stream = self._until(held_out.checked(stream, self.check, self.config.eval_every,
                                              start=start), "GRPO")
        first = next(stream, None)
        if first is None:  # Tunix's learner raises StopIteration on an empty stream
            self.out_of_time = True
            return iter(())
        return itertools.chain([first], stream)

    def finish(self) -> StageResult:
        """The stage's result after the block; marks the stage finished when it ran all its steps."""
        steps = self.trainer.train_steps
        extra = {} if self.check is None else {"held_out": {
            "checks": len(self.check.readings), "seconds": round(self.check.seconds, 1), "best": {
                k: v for k, v in (self.check.best or {}).items() if k != "ids"}}}
        if self.pair_check is not None and self.pair_check.readings:
            first, last = self.pair_check.readings[0], self.pair_check.readings[-1]
            extra["held_out_pairs"] = {k: (first[k], last[k]) for k in (
                "step", "pair_accuracy", "chosen_logp_per_token")} | {"n": last["n"]}
        stats = {"collate": self.collator.stats.to_dict(),
                 "compiles": log_compiles(self.run, self.stage, self.counter, steps), **extra}
        done = steps >= self.config.max_steps
        result = StageResult(self.stage, steps, done, self.started_from, time.time() - self.t0, stats,
                             self.trainer.model, self.tokenizer, self.model_dir)
        if done:
            self.run.mark_finished(self.stage, **{k: v for k, v in result.summary().items()
                                                  if k != "stage"})
        else:
            print(f"{self.stage}: stopped at step {steps}/{self.config.max_steps}; "
                  "run the notebook again to resume")
        return result


def _open(preset: Preset, run: RunDir, name: str, *, deadline: float | None, retrain: bool,
          reward_fns: Sequence[Callable] | None) -> StageRun:
    """Open a stage that trains: refuse a finished one (or clear it: ``retrain``), read the
    splits, find the stage it starts from, record its settings (refusing a resume under other
    ones) and make its mesh (:func:`_opened` builds the models on it). GRPO's rewards are
    resolved first (an unknown name is refused with the stage untouched), each wrapped in
    :class:`Recorded`."""
    if name == "grpo":
        fns = grpo_reward_fns(preset) if reward_fns is None else list(reward_fns)
        reward_fns = [Recorded(fn) for fn in fns]
    if name == "dpo":
        _seam.check_dpo_loss(preset)  # RPO on plain Tunix: refused with the stage untouched
    runs.begin_stage(run, name, retrain)
    if name == "dpo" and retrain:
        onpolicy.clear(run)  # sampled from the adapters it started from, which may have changed
    r = StageRun(name, preset, run, True, deadline=deadline, reward_fns=reward_fns)
    r.splits, _ = data.read_splits(run.require("data"))
    r.started_from = runs.start_from(run, name)  # None for SFT
    runs.record_settings(run, name, runs.stage_settings(preset, run, name, r.started_from))
    r.mesh = mesh_lib.stage_mesh(preset, name)
    return r


@contextlib.contextmanager
def _opened(preset: Preset, run: RunDir, stage: str, *, deadline: float | None, retrain: bool,
            reward_fns: Sequence[Callable] | None) -> Iterator[StageRun]:
    """:func:`_open`, the stage's mesh and models around the block, its result after it."""
    r = _open(preset, run, stage, deadline=deadline, retrain=retrain, reward_fns=reward_fns)
    with r.mesh:
        r.base, r.policy, r.reference, r.tokenizer, r.model_dir = stage_models(
            preset, stage, run, started=r.started_from, mesh=r.mesh)
        if stage == "sft":  # two held-out batches; Tunix evaluates them at each checkpoint
            r.eval_batches = _sft_held_out(r)
        with r.exits:
            try:
                yield r
            except StopIteration:
                if not r.out_of_time:
                    raise
                r.cluster.close()  # as Tunix's learner closes it after training: saves the step
        if r.trainer is None:
            raise RuntimeError(f"{stage}: the block trained nothing: build Tunix's object on r.policy "
                               "and call its train(r.batches(...)) inside the `with` block")
        if r.check is not None and not r.out_of_time and r.cluster.global_steps >= preset.grpo.max_steps:
            r.check(r.cluster.global_steps)  # the last adapters, beside the best
        pc = r.pair_check
        if pc is not None and pc.readings and pc.readings[-1]["step"] != r.trainer.train_steps:
            pc(r.trainer.train_steps)  # the end: the adapters the stage leaves
    r.result = r.finish()


def _sft_held_out(r: StageRun) -> list[Any]:
    """Two batches of the eval split, as SFT's collator pads them, one global array each."""
    cfg, tok = r.config, r.tokenizer
    held = collate.batches(sft_examples(r.splits.eval, tok), cfg.batch_size, collate.SFTCollator(
        layout=collate.StaticLayout(max_length=cfg.max_target_length), pad_id=tok.pad_id(),
        bos_id=tok.bos_id()))
    return list(mesh_lib.global_batches(take(held, 2), r.mesh))


@contextlib.contextmanager
def stage_run(preset: Preset, run: RunDir, stage: str, *, retrain: bool = False,
              deadline: float | None = None, reward_fns: Sequence[Callable] | None = None
              ) -> Iterator[StageRun]:
    """A training stage opened for its notebook cell, or loaded if it already finished.

    The block builds Tunix's object on the stage's models and trains it (:class:`StageRun`);
    everything around it is the run directory's: a finished stage is loaded, not trained
    again (``retrain=True`` clears it and trains from scratch), an interrupted one resumes
    from its last checkpoint (Tunix's trainers restore it as they are built), its settings
    are recorded (a resume under other ones is refused), checkpoints land even on an
    interrupt, the batches stop before ``deadline``, Tunix's metrics listeners are detached
    however the block ends, and after it ``result`` (a :class:`StageResult`) says what ran,
    printed in one line. ``reward_fns``: GRPO's, instead of the preset's.
    """
    if stage not in TRAIN_STAGES:
        raise ValueError(f"unknown training stage {stage!r}; stages: {list(TRAIN_STAGES)}")
    loaded = runs.load_or_build(run, stage, lambda: _load(preset, run, stage), lambda: None,
                                rebuild=retrain, preset=preset)
    if loaded is not None:
        yield StageRun(stage, preset, run, False, result=loaded)
        return
    with _opened(preset, run, stage, deadline=deadline, retrain=retrain, reward_fns=reward_fns) as r:
        yield r
    print(r.result.line())


def train_with_recipe(r: StageRun) -> None:
    """Build ``r``'s Tunix object with the stage's recipe and train it: the notebook cell's
    lines, for scripts (:func:`~reasonkit.train._build.sft_trainer` and its siblings)."""
    if r.stage == "sft":
        trainer = sft_trainer(r.preset, r.policy, r.tokenizer, r.run)
        trainer.train(r.batches(trainer), r.eval_batches)
    elif r.stage == "dpo":
        trainer = dpo_trainer(r.preset, r.policy, r.reference, r.run)
        trainer.train(r.batches(trainer))
    else:
        _, learner = grpo_learner(r.preset, r.policy, r.reference, r.tokenizer, r.mesh, r.run,
                                  r.reward_fns)
        learner.train(r.batches(learner))


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
    with _opened(preset, run, "sft", deadline=deadline, retrain=overwrite, reward_fns=None) as r:
        train_with_recipe(r)
    return r.result


def train_dpo(preset: Preset, run: RunDir, *, deadline: float | None = None,
              overwrite: bool = False) -> StageResult:
    """DPO (or ORPO) from the SFT adapters; the reference is the SFT policy, frozen (no ORPO)."""
    with _opened(preset, run, "dpo", deadline=deadline, retrain=overwrite, reward_fns=None) as r:
        train_with_recipe(r)
    return r.result


def train_grpo(preset: Preset, run: RunDir, *, deadline: float | None = None,
               overwrite: bool = False, reward_fns: Sequence[Callable] | None = None) -> StageResult:
    """GRPO from the DPO (or SFT) adapters, KL-regularised towards where it started.

    The reward is ``preset.grpo.rewards``; ``reward_fns`` (a list of reward functions)
    replaces it, e.g. for a reward of your own (the settings still record the preset's).
    """
    with _opened(preset, run, "grpo", deadline=deadline, retrain=overwrite, reward_fns=reward_fns) as r:
        train_with_recipe(r)
    return r.result


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
        if r.trains:
            train_with_recipe(r)
    return r.result
