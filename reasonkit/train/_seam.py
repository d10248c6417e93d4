"""The training package's one seam to the patch package: every patch a stage applies, from here.

Each ``patch_*`` function takes an object Tunix built and applies the patches its preset
holds in force (``preset.optimisations``; the patches a stage needs, always). The recipes
and a notebook's ``r.patch(...)`` call these, and nothing else in the package reaches into
Tunix's internals. The rest re-exports what the other modules read of the patch package:
the sampler's model, the progress bar, the metrics listeners, the real-shape helpers.
"""

from __future__ import annotations

from reasonkit.config import Preset
from reasonkit.runtime import compiles
from reasonkit.tunix_patches import (
    attention,
    grpo,
    in_force,
    logprobs,
    loss_swap,
    progress,
    rl_cluster,
    sampling,
    sharding,
    trainers,
)

__all__ = ["patch_sft_trainer", "patch_dpo_trainer", "patch_rl_cluster", "patch_grpo_learner",
           "without_remat", "show_recent", "detached_after", "rl_metrics_logger", "dpo_prepared_inputs",
           "abstract_models_stay_put", "sampler_of", "sampler_programs", "SharedPrefill",
           "tpu_sharding_constraints", "attention_block_size", "logprob_chunk_positions",
           "check_dpo_loss", "dpo_pair_log_probs"]

without_remat = sampling.without_remat
show_recent = progress.show_recent
detached_after = trainers.detached_after
rl_metrics_logger = trainers.rl_metrics_logger
dpo_prepared_inputs = trainers.dpo_prepared_inputs
abstract_models_stay_put = rl_cluster.abstract_models_stay_put
sampler_of = sampling.sampler_of
sampler_programs = sampling.sampler_programs
SharedPrefill = sampling.SharedPrefill
tpu_sharding_constraints = sharding.tpu_sharding_constraints
attention_block_size = attention.block_size  # the sizes the patched programs compute in
logprob_chunk_positions = logprobs.chunk_positions
dpo_pair_log_probs = loss_swap.pair_log_probs  # the held-out pair figures (train._onpolicy)


def patch_sft_trainer(trainer, preset: Preset):
    """A ``PeftTrainer`` with the "chunked log-probs" patch when in force: Tunix's
    cross-entropy a chunk of positions at a time (no float32 ``[B, S, V]`` one-hot and
    log-softmax)."""
    if in_force(preset.optimisations, "chunked log-probs"):
        trainer.with_loss_fn(logprobs.sft_loss)
    return trainer


def check_dpo_loss(preset: Preset) -> None:
    """Refuse ``dpo.rpo_alpha > 0`` on a preset without "chunked log-probs" (Tunix's DPO as it
    ships has no NLL term; reasonkit's RPO variant is built on that loss swap)."""
    alpha = preset.dpo.rpo_alpha
    if alpha > 0 and not in_force(preset.optimisations, "chunked log-probs"):
        raise ValueError(
            f"dpo.rpo_alpha={alpha}: RPO's NLL term on the chosen answer is reasonkit's variant of "
            "Tunix's DPO loss, added through the 'chunked log-probs' loss swap, and preset "
            f"{preset.name!r} runs Tunix as it ships (optimisations={list(preset.optimisations)}). "
            "Set dpo.rpo_alpha=0 for Tunix's own DPO, or put 'chunked log-probs' in optimisations")


def patch_dpo_trainer(trainer, preset: Preset):
    """A ``DPOTrainer`` with "chunked log-probs" when in force: the loss's and the
    reference's log-probabilities a chunk of positions at a time (the same numbers); with
    ``dpo.rpo_alpha > 0`` the loss gains RPO's NLL term on the chosen answer ("rpo loss"),
    which a preset without "chunked log-probs" refuses (:func:`check_dpo_loss`)."""
    check_dpo_loss(preset)
    if in_force(preset.optimisations, "chunked log-probs"):
        loss_swap.chunk_dpo(trainer)
        if preset.dpo.rpo_alpha > 0:
            loss_swap.with_rpo(trainer, preset.dpo.rpo_alpha)
    return trainer


def patch_rl_cluster(cluster, preset: Preset, policy):
    """An ``RLCluster``'s sampler traced for decoding ("sampler graph": remat off, the
    prefill's output layer at the last position only) and, with "shared prefill", each
    prompt prefilled once for its G answers."""
    group = preset.grpo.num_generations if in_force(preset.optimisations, "shared prefill") else 1
    sampling.trace_for_sampling(sampling.sampler_of(cluster.rollout), policy, group)
    return cluster


def patch_grpo_learner(cluster, learner, preset: Preset, policy):
    """A GRPO learner's step: its own sampling key per step ("reseeded rollouts"); with
    "length buckets" the smallest padding that holds it; with "shared prompts" (and
    ``grpo.share_prompts``) each prompt run once for its G answers; with "chunked
    log-probs" the log-probabilities a chunk of positions at a time."""
    cfg, on = preset.grpo, preset.optimisations
    chunked = in_force(on, "chunked log-probs")
    group = cfg.num_generations if (chunked and in_force(on, "shared prompts")
                                    and cfg.shares_prompts(attention.impl_of(policy))) else 1
    buckets = cfg.length_buckets if (cfg.length_buckets != ((), ())
                                     and in_force(on, "length buckets")) else None
    grpo.patch_grpo_step(cluster, learner, seed=cfg.seed, max_prompt=cfg.max_prompt_length,
                         max_answer=cfg.max_generation_length, buckets=buckets, group=group,
                         on_shape=compiles.step_shape)
    if chunked:  # the policy loss, the reference's and the old policy's forwards
        loss_swap.chunk_grpo(cluster, group)
    return learner
