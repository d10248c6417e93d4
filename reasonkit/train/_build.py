"""Build a training stage without running it: preset -> mesh -> models -> LoRA -> Tunix trainer.

The parts come one call each, named for what they are, and go to Tunix's own
constructors as its examples pass them: the configs (:func:`sft_training_config`,
:func:`dpo_training_config`, :func:`cluster_config` with :func:`grpo_training_config` and
:func:`rollout_config`, :func:`grpo_algorithm`), the optimizer
(:func:`~reasonkit.train._optim.make_optimizer`), the model inputs
(:func:`gen_model_input_fn`), the rewards and GRPO's metrics, and reasonkit's patches
(``patch_*``, from :mod:`reasonkit.train._seam`, the one place patches are applied).
:func:`sft_trainer`, :func:`dpo_trainer` and :func:`grpo_learner` put them together as
the notebooks do in their own cells, and :func:`build_stage` (what training builds)
calls those three: the returned :class:`Stage` holds the real Tunix objects and can
lower their jitted step for a batch at the stage's full shapes.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from reasonkit import masks, models, rewards
from reasonkit.config import TRAIN_STAGES, Preset, TrainConfig
from reasonkit.runtime import RunDir, runs
from reasonkit.runtime import mesh as mesh_lib
from reasonkit.train import _seam
from reasonkit.train._batches import dpo_collator, sft_collator
from reasonkit.train._metrics import grpo_metrics, metrics_options
from reasonkit.train._optim import make_optimizer
from reasonkit.train._policies import build_models
from reasonkit.train._seam import patch_dpo_trainer, patch_grpo_learner, patch_rl_cluster, patch_sft_trainer

__all__ = ["TRAIN_STAGES", "gen_model_input_fn", "Stage", "run_options", "stage_models",
           "sft_training_config", "dpo_training_config", "grpo_training_config", "rollout_config",
           "cluster_config", "grpo_reward_fns", "grpo_metric_fns", "grpo_algorithm", "sft_trainer",
           "dpo_trainer", "grpo_learner", "build_stage", "stage_has_reference"]




def gen_model_input_fn(pad_id: int) -> Callable[[Any], dict[str, Any]]:
    """SFT batch -> model inputs; attention and positions come from the padding, not the loss mask.

    A packed batch (with ``segment_ids``) gets block-causal attention and positions that
    restart in each segment, so each example sees only itself, as if unpacked.
    """
    def fn(x):
        if "segment_ids" in x:
            return {"input_tokens": x["input_tokens"], "input_mask": x["input_mask"],
                    "positions": masks.segment_positions(x["segment_ids"]),  # [B, S]
                    "attention_mask": masks.segment_causal_mask(x["segment_ids"])}  # [B, S, S]
        valid = masks.padding_mask(x["input_tokens"], pad_id)  # [B, S]
        return {"input_tokens": x["input_tokens"], "input_mask": x["input_mask"],
                "positions": masks.positions_from_mask(valid),  # [B, S]
                "attention_mask": masks.causal_mask(valid)}  # [B, S, S]
    return fn


def _checkpointing(cfg: TrainConfig):
    import orbax.checkpoint as ocp

    return ocp.CheckpointManagerOptions(save_interval_steps=cfg.checkpoint_every, max_to_keep=2)


def _abstract(shape, dtype, mesh, data_sharded: bool = True) -> jax.ShapeDtypeStruct:
    """A batch array as Tunix's ``shard_input`` places it: rows over the data axes."""
    spec = jax.sharding.PartitionSpec(mesh_lib.DATA_AXES if len(mesh_lib.DATA_AXES) > 1
                                      else mesh_lib.DATA_AXES[0])
    if not data_sharded or not shape or shape[0] % mesh_lib.data_ways(mesh):
        spec = jax.sharding.PartitionSpec()
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype),
                                sharding=jax.sharding.NamedSharding(mesh, spec))


def _placed(tree, mesh):
    """Every array of a batch (numpy or abstract) as :func:`_abstract` places it."""
    return jax.tree.map(lambda x: _abstract(np.shape(x), x.dtype, mesh), tree)


@dataclasses.dataclass
class Stage:
    """One training stage built and not run: the real Tunix objects, as training uses them.

    ``trainer`` is the ``PeftTrainer`` (SFT), ``DPOTrainer`` (DPO) or the RL cluster's
    actor trainer (GRPO, with ``cluster`` and ``learner``). :meth:`example_batch` is what
    the jitted step receives (after Tunix's own preparation and sharding), as
    ShapeDtypeStructs, and :meth:`lower` lowers that step for it, as training would
    compile it: ``stage.lower().compile().memory_analysis()`` is what each device needs.
    """

    name: str
    preset: Preset
    mesh: Any
    weights: str
    base: Any
    policy: Any
    reference: Any
    tokenizer: Any
    model_dir: pathlib.Path | None
    trainer: Any
    started_from: str | None = None
    cluster: Any = None
    learner: Any = None

    @property
    def config(self) -> TrainConfig:
        return getattr(self.preset, self.name)

    def example_batch(self) -> Any:
        """The step's input at the stage's full shapes, as ShapeDtypeStructs on the mesh."""
        cfg, tok = self.config, self.tokenizer
        if self.name == "sft":  # one example per row, filling it
            rows = [([5], [6] * (cfg.max_target_length - 2))] * cfg.batch_size
            return _placed(sft_collator(self.preset, tok)(rows), self.mesh)
        if self.name == "dpo":
            rows = [([5] * cfg.max_prompt_length, [6] * cfg.max_response_length,
                     [7] * cfg.max_response_length)] * cfg.batch_size
            batch = dpo_collator(self.preset, tok)(rows)
            with self.mesh:  # Tunix's own preparation; the reference's log-probs filled in below
                example, has_ref = _seam.dpo_prepared_inputs(self.trainer, batch)
            if has_ref:
                logps = jax.ShapeDtypeStruct((cfg.batch_size,), jnp.float32)
                example = example.replace(ref_chosen_logps=logps, ref_rejected_logps=logps)
            return _placed(example, self.mesh)
        from tunix.rl.common import TrainExample

        n, p, c = (cfg.batch_size * cfg.num_generations, cfg.max_prompt_length,
                   cfg.max_generation_length)
        per_token = jax.ShapeDtypeStruct((n, c), jnp.float32)
        return _placed(TrainExample(
            prompt_ids=jax.ShapeDtypeStruct((n, p), jnp.int32),
            prompt_mask=jax.ShapeDtypeStruct((n, p), jnp.bool_),
            completion_ids=jax.ShapeDtypeStruct((n, c), jnp.int32),
            completion_mask=jax.ShapeDtypeStruct((n, c), jnp.bool_),
            advantages=jax.ShapeDtypeStruct((n,), jnp.float32),
            ref_per_token_logps=per_token if self.learner.algo_config.beta != 0.0 else None,
            old_per_token_logps=per_token if cfg.num_iterations > 1 else None), self.mesh)

    def lower(self):
        """The trainer's jitted train step, lowered for :meth:`example_batch`."""
        with self.mesh:
            step, _ = self.trainer.jit_train_and_eval_step(cache_nnx_graph=False)
            try:
                return step.func.lower(*step.args, self.example_batch())
            finally:
                self.trainer.clear_jit_cache()  # training jits its own (cached-graph) step


def run_options(run: RunDir | None, stage: str, cfg: TrainConfig) -> dict[str, Any]:
    """The fields of a Tunix training config that put a stage's checkpoints and metrics in its
    run directory: ``checkpoint_root_directory``, ``checkpointing_options`` (every
    ``checkpoint_every`` steps, the last two kept) and ``metrics_logging_options``; none
    without a run."""
    if run is None:
        return {}
    return dict(checkpoint_root_directory=str(runs.checkpoint_dir(run, stage)),
                checkpointing_options=_checkpointing(cfg),
                metrics_logging_options=metrics_options(run, stage))


# --- the parts: one call each, what a notebook passes to Tunix's own constructors ---------


def sft_training_config(preset: Preset, run: RunDir | None = None):
    """Tunix's ``TrainingConfig`` for SFT: the steps, a held-out evaluation every checkpoint,
    and (with ``run``) where checkpoints and metrics go."""
    import tunix

    cfg = preset.sft
    return tunix.TrainingConfig(eval_every_n_steps=cfg.checkpoint_every, max_steps=cfg.max_steps,
                                pbar_description="SFT", **run_options(run, "sft", cfg))


def dpo_training_config(preset: Preset, run: RunDir | None = None):
    """Tunix's ``DPOTrainingConfig``: DPO or ORPO, beta, the lengths the collator pads to,
    no held-out evaluation, and (with ``run``) where checkpoints and metrics go."""
    import tunix

    cfg = preset.dpo
    return tunix.DPOTrainingConfig(
        algorithm=cfg.algorithm, beta=cfg.beta, lambda_orpo=cfg.lambda_orpo,
        eval_every_n_steps=cfg.max_steps + 1, max_steps=cfg.max_steps,
        max_prompt_length=cfg.max_prompt_length, max_response_length=cfg.max_response_length,
        pbar_description=cfg.algorithm.upper(), **run_options(run, "dpo", cfg))


def grpo_training_config(preset: Preset, run: RunDir | None = None):
    """Tunix's ``RLTrainingConfig`` for GRPO: the actor's optimizer (:func:`make_optimizer`),
    the steps, one mini-batch per step, and (with ``run``) checkpoints and metrics."""
    import tunix

    cfg = preset.grpo
    return tunix.RLTrainingConfig(
        actor_optimizer=make_optimizer(cfg), eval_every_n_steps=cfg.max_steps + 1,
        max_steps=cfg.max_steps, mini_batch_size=cfg.batch_size,
        train_micro_batch_size=cfg.batch_size, **run_options(run, "grpo", cfg))


def rollout_config(preset: Preset, tok):
    """Tunix's ``RolloutConfig``: how GRPO samples its answers (lengths, temperature, top-p,
    top-k) and the ids it stops on. The KV cache holds a whole prompt and answer."""
    import tunix

    cfg = preset.grpo
    return tunix.RolloutConfig(
        max_tokens_to_generate=cfg.max_generation_length, max_prompt_length=cfg.max_prompt_length,
        kv_cache_size=cfg.max_prompt_length + cfg.max_generation_length,
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
        eos_tokens=models.stop_token_ids(tok))


def cluster_config(preset: Preset, mesh, tok, run: RunDir | None = None):
    """Tunix's ``ClusterConfig``: actor, reference and rollout on ``mesh``, Tunix's own
    ("vanilla") sampler, :func:`grpo_training_config` and :func:`rollout_config`."""
    import tunix

    return tunix.ClusterConfig(
        role_to_mesh={tunix.Role.ACTOR: mesh, tunix.Role.REFERENCE: mesh, tunix.Role.ROLLOUT: mesh},
        rollout_engine="vanilla", offload_to_cpu=False,
        training_config=grpo_training_config(preset, run), rollout_config=rollout_config(preset, tok))


def grpo_reward_fns(preset: Preset) -> list[Callable]:
    """The reward functions of ``preset.grpo.rewards``, weighted, in Tunix's signature."""
    return rewards.from_config(preset.grpo.rewards)


def grpo_metric_fns(cluster, preset: Preset, reward_fns: Sequence[Callable]) -> list[Callable]:
    """GRPO's own metrics for the learner's ``metric_fns`` (groups that teach nothing, an answer)."""
    return [grpo_metrics(cluster, preset.grpo, list(reward_fns))]


def grpo_algorithm(preset: Preset):
    """``(learner class, algorithm config)`` for the preset's policy-loss variant."""
    from tunix.rl.grpo import dapo_learner, drgrpo_learner, grpo_learner

    cfg = preset.grpo
    common = dict(num_generations=cfg.num_generations, num_iterations=cfg.num_iterations,
                  epsilon=cfg.epsilon)
    if cfg.loss == "dapo":  # no KL term, clip-higher, token-mean loss
        return dapo_learner.DAPOLearner, dapo_learner.DAPOConfig(
            **common, overlong_buffer={"enable": False})
    if cfg.loss == "dr-grpo":  # no length / std normalisation
        return drgrpo_learner.DrGRPOLearner, drgrpo_learner.DrGRPOConfig(
            **common, beta=cfg.beta, kl_loss_mode=cfg.kl_loss_mode)
    return grpo_learner.GRPOLearner, grpo_learner.GRPOConfig(
        **common, beta=cfg.beta, kl_loss_mode=cfg.kl_loss_mode, loss_algo=cfg.loss)


# --- the Tunix objects, built from those parts as the notebooks build them ----------------


def sft_trainer(preset: Preset, policy, tok, run: RunDir | None = None):
    """Tunix's ``PeftTrainer`` for SFT, as ``03_sft`` builds it from the parts."""
    import tunix

    trainer = tunix.PeftTrainer(policy, make_optimizer(preset.sft), sft_training_config(preset, run))
    trainer = trainer.with_gen_model_input_fn(gen_model_input_fn(tok.pad_id()))
    return patch_sft_trainer(trainer, preset)


def dpo_trainer(preset: Preset, policy, reference, run: RunDir | None = None, *, training_config=None):
    """Tunix's ``DPOTrainer`` (DPO, or ORPO without a reference), as ``04_dpo`` builds it;
    ``training_config`` replaces :func:`dpo_training_config`'s (a sweep's own evaluation)."""
    import tunix

    trainer = tunix.DPOTrainer(model=policy, ref_model=reference,
                               optimizer=make_optimizer(preset.dpo),
                               training_config=training_config or dpo_training_config(preset, run))
    return patch_dpo_trainer(trainer, preset)


def grpo_learner(preset: Preset, policy, reference, tok, mesh, run: RunDir | None = None,
                 reward_fns: Sequence[Callable] | None = None):
    """``(RLCluster, learner)`` for GRPO, as ``05_grpo`` builds them; ``reward_fns``
    replaces :func:`grpo_reward_fns`."""
    import tunix

    # an abstract model (shapes only) has no arrays to copy to host memory as the cluster starts
    with _seam.abstract_models_stay_put():
        cluster = tunix.RLCluster(actor=policy, reference=reference, tokenizer=tok,
                                  cluster_config=cluster_config(preset, mesh, tok, run))
    cluster = patch_rl_cluster(cluster, preset, policy)
    fns = grpo_reward_fns(preset) if reward_fns is None else list(reward_fns)
    learner_class, algo_config = grpo_algorithm(preset)
    learner = learner_class(rl_cluster=cluster, reward_fns=fns, algo_config=algo_config,
                            metric_fns=grpo_metric_fns(cluster, preset, fns))
    return cluster, patch_grpo_learner(cluster, learner, preset, policy)


def stage_models(preset: Preset, stage: str, run: RunDir | None = None, *, weights: str = "checkpoint",
                 started: str | None = None, mesh=None):
    """``(base, policy, reference or None, tokenizer, model_dir)`` of ``stage``, on its mesh.

    ``weights``: real (``"checkpoint"``, adapters restored from ``started``), random or
    abstract (:func:`build_models`); the reference (DPO, GRPO) is ``started``'s adapters
    frozen on the policy's own base. A batch that does not split over the mesh's data axes
    is refused here, before anything is built. Call it inside the mesh.
    """
    if stage not in TRAIN_STAGES:
        raise ValueError(f"stage={stage!r}: must be one of {', '.join(TRAIN_STAGES)}")
    cfg = getattr(preset, stage)
    mesh = mesh if mesh is not None else mesh_lib.stage_mesh(preset, stage)
    repeat, how = {"sft": (1, ""), "dpo": (2, "chosen + rejected"),
                   "grpo": (getattr(cfg, "num_generations", 1),
                            "x grpo.num_generations")}[stage]
    mesh_lib.check_batch(cfg.batch_size, mesh, f"{stage}.batch_size", repeat=repeat,
                         how=how and f"{cfg.batch_size} {how}")
    return build_models(preset, mesh, weights, run=run, started=started, seed=cfg.seed,
                        reference=stage_has_reference(preset, stage))


def build_stage(preset: Preset, stage: str, run: RunDir | None = None, *,
                weights: str = "checkpoint", started: str | None = None,
                reward_fns: Sequence[Callable] | None = None, mesh=None) -> Stage:
    """Build ``stage`` without training it: preset -> mesh -> model -> LoRA -> Tunix trainer.

    :func:`stage_models` and the stage's recipe (:func:`sft_trainer`, :func:`dpo_trainer`,
    :func:`grpo_learner`), what scripts train: the real-shape checks
    (:mod:`reasonkit.shapes`) and benchmarks look inside it. ``weights`` picks real
    (``"checkpoint"``), random or abstract weights; ``started`` is the stage whose
    adapters to start from (and to freeze as the reference); ``run`` gives checkpoints and
    metrics (none without it); ``reward_fns`` replaces GRPO's ``preset.grpo.rewards``.
    """
    mesh = mesh if mesh is not None else mesh_lib.stage_mesh(preset, stage)
    with mesh:
        base, policy, reference, tok, model_dir = stage_models(
            preset, stage, run, weights=weights, started=started, mesh=mesh)
        built = Stage(stage, preset, mesh, weights, base, policy, reference, tok, model_dir,
                      None, started)
        if stage == "sft":
            built.trainer = sft_trainer(preset, policy, tok, run)
        elif stage == "dpo":
            built.trainer = dpo_trainer(preset, policy, reference, run)
        else:
            built.cluster, built.learner = grpo_learner(preset, policy, reference, tok, mesh, run,
                                                        reward_fns)
            built.trainer = built.cluster.actor_trainer
    return built


def stage_has_reference(preset: Preset, stage: str) -> bool:
    """Whether ``stage`` trains against a frozen reference: GRPO and DPO do, ORPO and SFT not."""
    return stage == "grpo" or (stage == "dpo" and preset.dpo.algorithm == "dpo")
