"""Build a training stage without running it: preset -> mesh -> models -> LoRA -> Tunix trainer.

:func:`build_stage` is the one way a stage is built, whether to train it
(:mod:`reasonkit.train.stages`) or to look inside it: the returned :class:`Stage` holds
the real Tunix objects (``PeftTrainer``, ``DPOTrainer``, or GRPO's RL cluster and
learner, with reasonkit's patches in place) and can lower their jitted step for a batch
at the stage's full shapes. :func:`grpo_algorithm` picks GRPO's learner for the preset's
policy-loss variant.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from reasonkit import masks, models, rewards, tunix_patches
from reasonkit.config import Preset, TrainConfig
from reasonkit.runtime import compiles, runs
from reasonkit.runtime import mesh as mesh_lib
from reasonkit.runtime.runs import RunDir
from reasonkit.train.batches import dpo_collator, sft_collator
from reasonkit.train.metrics import grpo_metrics, metrics_options
from reasonkit.train.optim import make_optimizer
from reasonkit.train.policies import build_models
from reasonkit.tunix_patches import attention, grpo, logprobs, loss_swap, rl_cluster, sampling, trainers

__all__ = ["TRAIN_STAGES", "gen_model_input_fn", "Stage", "build_stage", "grpo_algorithm"]


TRAIN_STAGES = ("sft", "dpo", "grpo")


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
                example, has_ref = trainers.dpo_prepared_inputs(self.trainer, batch)
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


def _io(run: RunDir | None, stage: str, cfg: TrainConfig) -> dict[str, Any]:
    """Checkpoint and metrics options of a stage's run directory; none without a run."""
    if run is None:
        return {}
    return dict(checkpoint_root_directory=str(runs.checkpoint_dir(run, stage)),
                checkpointing_options=_checkpointing(cfg),
                metrics_logging_options=metrics_options(run, stage))


def build_stage(preset: Preset, stage: str, run: RunDir | None = None, *,
                weights: str = "checkpoint", started: str | None = None,
                reward_fns: Sequence[Callable] | None = None, mesh=None) -> Stage:
    """Build ``stage`` without training it: preset -> mesh -> model -> LoRA -> Tunix trainer.

    The one way every stage is built: ``train_sft`` / ``train_dpo`` / ``train_grpo`` train
    what this returns, and the real-shape checks (:mod:`reasonkit.shapes`), notebooks and
    benchmarks look inside it. ``weights`` picks real (``"checkpoint"``), random or
    abstract weights (:func:`build_models`); ``started`` is the stage whose adapters to
    start from (and to freeze as the reference); ``run`` gives checkpoints and metrics
    (none without it); ``reward_fns`` replaces GRPO's ``preset.grpo.rewards``. A batch that
    does not split over the mesh's data axes is refused here, before anything is built.
    """
    import tunix

    if stage not in TRAIN_STAGES:
        raise ValueError(f"stage={stage!r}: must be one of {', '.join(TRAIN_STAGES)}")
    cfg = getattr(preset, stage)
    mesh = mesh if mesh is not None else mesh_lib.stage_mesh(preset, stage)
    repeat, how = {"sft": (1, ""), "dpo": (2, "chosen + rejected"),
                   "grpo": (getattr(cfg, "num_generations", 1),
                            "x grpo.num_generations")}[stage]
    mesh_lib.check_batch(cfg.batch_size, mesh, f"{stage}.batch_size", repeat=repeat,
                         how=how and f"{cfg.batch_size} {how}")
    with_ref = stage == "grpo" or (stage == "dpo" and cfg.algorithm == "dpo")  # ORPO: none
    with mesh:
        base, policy, reference, tok, model_dir = build_models(
            preset, mesh, weights, run=run, started=started, seed=cfg.seed, reference=with_ref)
        built = Stage(stage, preset, mesh, weights, base, policy, reference, tok, model_dir,
                      None, started)
        if stage == "sft":
            built.trainer = tunix.PeftTrainer(policy, make_optimizer(cfg), tunix.TrainingConfig(
                eval_every_n_steps=cfg.checkpoint_every, max_steps=cfg.max_steps,
                pbar_description="SFT", **_io(run, stage, cfg)))
            built.trainer.with_gen_model_input_fn(gen_model_input_fn(tok.pad_id()))
            if tunix_patches.enabled("chunked log-probs"):
                built.trainer.with_loss_fn(logprobs.sft_loss)  # Tunix's loss, chunked
        elif stage == "dpo":
            built.trainer = _dpo_trainer(preset, run, policy, reference)
        else:
            built.cluster, built.learner = _grpo_learner(preset, run, policy, reference, tok,
                                                         mesh, reward_fns)
            built.trainer = built.cluster.actor_trainer
    return built


def _dpo_trainer(preset: Preset, run: RunDir | None, policy, reference):
    import tunix
    from tunix.sft.dpo.dpo_trainer import DPOTrainingConfig

    cfg = preset.dpo
    trainer = tunix.DPOTrainer(
        model=policy, ref_model=reference, optimizer=make_optimizer(cfg),
        training_config=DPOTrainingConfig(
            algorithm=cfg.algorithm, beta=cfg.beta, lambda_orpo=cfg.lambda_orpo,
            eval_every_n_steps=cfg.max_steps + 1, max_steps=cfg.max_steps,
            max_prompt_length=cfg.max_prompt_length, max_response_length=cfg.max_response_length,
            pbar_description=cfg.algorithm.upper(), **_io(run, "dpo", cfg)))
    if tunix_patches.enabled("chunked log-probs"):
        loss_swap.chunk_dpo(trainer)
    return trainer


def _grpo_learner(preset: Preset, run: RunDir | None, policy, reference, tok, mesh,
                  reward_fns: Sequence[Callable] | None):
    from tunix.rl import rl_cluster as rl
    from tunix.rl.rollout import base_rollout

    cfg = preset.grpo
    training = rl.RLTrainingConfig(
        actor_optimizer=make_optimizer(cfg), eval_every_n_steps=cfg.max_steps + 1,
        max_steps=cfg.max_steps, mini_batch_size=cfg.batch_size,
        train_micro_batch_size=cfg.batch_size, **_io(run, "grpo", cfg))
    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=cfg.max_generation_length, max_prompt_length=cfg.max_prompt_length,
        kv_cache_size=cfg.max_prompt_length + cfg.max_generation_length,
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
        eos_tokens=models.stop_token_ids(tok))
    with rl_cluster.abstract_models_stay_put():
        cluster = rl.RLCluster(actor=policy, reference=reference, tokenizer=tok,
                               cluster_config=rl.ClusterConfig(
                                   role_to_mesh={rl.Role.ACTOR: mesh, rl.Role.REFERENCE: mesh,
                                                 rl.Role.ROLLOUT: mesh},
                                   rollout_engine="vanilla", offload_to_cpu=False,
                                   training_config=training, rollout_config=rollout))
    # Tunix's sampler traces the actor's graph as given: with remat on it cannot decode,
    # and it would compute the prefill's logits at every position and each prompt G times
    prefill_group = cfg.num_generations if tunix_patches.enabled("shared prefill") else 1
    sampling.trace_for_sampling(sampling.sampler_of(cluster.rollout), policy, prefill_group)
    learner_cls, algo = grpo_algorithm(preset)
    fns = rewards.from_config(cfg.rewards) if reward_fns is None else list(reward_fns)
    learner = learner_cls(rl_cluster=cluster, reward_fns=fns, algo_config=algo,
                          metric_fns=[grpo_metrics(cluster, cfg, fns)])
    # with grpo.share_prompts each prompt runs once for its G answers (needs reasonkit's attention)
    chunked = tunix_patches.enabled("chunked log-probs")
    group = cfg.num_generations if (chunked and tunix_patches.enabled("shared prompts")
                                    and cfg.shares_prompts(attention.impl_of(policy))) else 1
    buckets = cfg.length_buckets if (cfg.length_buckets != ((), ())
                                     and tunix_patches.enabled("length buckets")) else None
    grpo.patch_grpo_step(cluster, learner, seed=cfg.seed, max_prompt=cfg.max_prompt_length,
                         max_answer=cfg.max_generation_length, buckets=buckets, group=group,
                         on_shape=compiles.step_shape)
    if chunked:  # the policy loss, the reference's and the old policy's forwards
        loss_swap.chunk_grpo(cluster, group)
    return cluster, learner


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
