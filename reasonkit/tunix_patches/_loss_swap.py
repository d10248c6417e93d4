"""Tunix 0.1.7's DPO and GRPO log-probabilities, computed in chunks (:mod:`.logprobs`).

Tunix computes DPO's and GRPO's log-probabilities from full-vocabulary float32 logits,
which do not fit a Gemma step (:mod:`reasonkit.tunix_patches._logprobs` says why). Its
trainers look the functions up at call time, so :func:`chunked_log_probs` swaps reasonkit's
chunked equivalents in while a loss or a forward of ours is traced, and restores Tunix's
after: :func:`chunk_dpo` and :func:`chunk_grpo` wrap a built trainer's loss and forwards in it.

Two more uses of the same swap, on DPO:

- RPO (Pang et al. 2024, "Iterative Reasoning Preference Optimization"), an algorithm
  variant Tunix 0.1.7 lacks: :func:`with_rpo` makes a trainer's loss Tunix's DPO loss plus
  ``rpo_alpha`` times the chosen answer's NLL per token (:func:`rpo_loss_fn`), from the
  same forward (the chosen log-probabilities are read as Tunix's loss computes them).
- :func:`pair_log_probs`: the policy's and the reference's summed log-probabilities of a
  batch of pairs, for the held-out pair figures, without training.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from typing import Any, Callable, Iterator

import numpy as np

from reasonkit.tunix_patches import _logprobs as logprobs
from reasonkit.tunix_patches._private import set_tunix_private, tunix_private
from reasonkit.tunix_patches._sampling import is_grouped

__all__ = ["chunked_log_probs", "chunked", "chunked_if_grouped", "chunk_dpo", "chunk_grpo",
           "RPO_METRIC", "rpo_loss_fn", "with_rpo", "pair_log_probs"]

# (module, function Tunix looks up at call time, reasonkit's chunked equivalent)
_CHUNKED = (("tunix.sft.dpo.dpo_trainer", "compute_logps", logprobs.dpo_compute_logps),
            ("tunix.rl.common", "compute_per_token_logps", logprobs.grpo_compute_per_token_logps),
            ("tunix.rl.algo_core", "compute_entropy_from_logits", logprobs.entropy_of_entropy))


@contextlib.contextmanager
def chunked_log_probs(group: int = 1) -> Iterator[None]:
    """While active, Tunix's DPO / GRPO compute log-probabilities with :mod:`.logprobs`.

    The one place reasonkit patches Tunix's log-probabilities (same arguments, same
    numbers, no ``[B, S, V]`` float32 logits). GRPO's "logits" come back as the
    per-token entropy they are only used for, with the matching entropy function.
    ``group`` > 1: GRPO's rows are groups of that many sharing a prompt, each prompt run
    once (:func:`reasonkit.tunix_patches._logprobs.shared_prompt_hidden`); only for rows known to be.
    """
    saved = []
    try:
        for module, name, ours in _CHUNKED:
            mod = importlib.import_module(module)
            saved.append((mod, name, getattr(mod, name)))
            if group > 1 and ours is logprobs.grpo_compute_per_token_logps:
                ours = functools.partial(ours, group=group)
            setattr(mod, name, ours)
        yield
    finally:
        for mod, name, theirs in reversed(saved):
            setattr(mod, name, theirs)


def chunked(fn: Callable, group: int = 1) -> Callable:
    """``fn`` run inside :func:`chunked_log_probs` (a loss: while it is traced)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with chunked_log_probs(group):
            return fn(*args, **kwargs)
    return wrapped


def chunked_if_grouped(fn: Callable, group: int) -> Callable:
    """``fn(prompt_tokens, ...)`` (a log-probability forward Tunix calls from Python, with
    arrays) inside :func:`chunked_log_probs`, sharing prompts when its rows are groups of
    ``group`` equal prompts, checked on the host; Tunix's row-by-row otherwise."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        prompts = kwargs["prompt_tokens"] if "prompt_tokens" in kwargs else args[0]
        with chunked_log_probs(group if group > 1 and is_grouped(prompts, group) else 1):
            return fn(*args, **kwargs)
    return wrapped


def chunk_dpo(trainer) -> None:
    """A ``DPOTrainer``'s loss (Tunix's ``dpo_loss_fn``) and input preparation (the
    reference's forward) with chunked log-probabilities."""
    from tunix.sft.dpo.dpo_trainer import dpo_loss_fn

    trainer.with_loss_fn(chunked(dpo_loss_fn), has_aux=True)
    set_tunix_private(trainer, "_prepare_inputs", chunked(tunix_private(trainer, "_prepare_inputs")))


def chunk_grpo(cluster, group: int = 1) -> None:
    """An ``RLCluster``'s policy loss, reference forward and old-policy forward with chunked
    log-probabilities; with ``group`` > 1 each prompt of a group runs once (the update
    always, the forwards when their rows are such groups)."""
    actor = cluster.actor_trainer
    actor.with_loss_fn(chunked(actor.loss_fn, group), has_aux=True)
    worker, rollout = cluster.inference_worker, cluster.rollout
    worker.get_ref_per_token_logps = chunked_if_grouped(worker.get_ref_per_token_logps, group)
    rollout.get_per_token_logps = chunked_if_grouped(rollout.get_per_token_logps, group)


RPO_METRIC = "rpo_nll"  # logged as train/rpo_nll: the chosen answers' mean NLL per token


def rpo_loss_fn(model, train_example, algorithm: str = "dpo", beta: float = 0.1,
                lambda_orpo: float = 0.1, label_smoothing: float = 0.0, *,
                rpo_alpha: float) -> tuple[Any, dict[str, Any]]:
    """Tunix's ``dpo_loss_fn`` plus ``rpo_alpha`` times the chosen answers' NLL per token.

    ``loss = DPO loss + rpo_alpha * mean_b(-logp(chosen_b) / tokens(chosen_b))``. The chosen
    log-probabilities are those Tunix's loss computes (its ``compute_logps``, read as it
    returns them): one forward, and with ``rpo_alpha=0`` the same loss as Tunix's. The aux
    gains :data:`RPO_METRIC`. DPO only (ORPO's loss has its own SFT term).
    """
    import jax.numpy as jnp
    from tunix.sft.dpo import dpo_trainer

    seen = {}
    theirs = dpo_trainer.compute_logps  # Tunix's, or the chunked one inside chunked_log_probs

    def reading(*args, **kwargs):
        seen["chosen"], rejected = theirs(*args, **kwargs)
        return seen["chosen"], rejected

    dpo_trainer.compute_logps = reading
    try:
        loss, aux = dpo_trainer.dpo_loss_fn(model, train_example, algorithm, beta, lambda_orpo,
                                            label_smoothing)
    finally:
        dpo_trainer.compute_logps = theirs
    half = train_example.completion_mask.shape[0] // 2
    tokens = train_example.completion_mask[:half].sum(axis=-1)  # [B]
    nll = (-seen["chosen"] / jnp.maximum(tokens, 1)).mean()  # per token, then over pairs
    return loss + rpo_alpha * nll, {**aux, RPO_METRIC: nll}


def with_rpo(trainer, rpo_alpha: float) -> None:
    """A ``DPOTrainer`` whose loss is :func:`rpo_loss_fn` (chunked log-probabilities) and
    which logs :data:`RPO_METRIC`; its beta and label smoothing stay the trainer's."""
    if trainer.algorithm != "dpo":
        raise ValueError(f"dpo.rpo_alpha={rpo_alpha}: RPO's term is DPO's; the trainer runs "
                         f"{trainer.algorithm!r}")
    def loss(model, train_example, algorithm: str = "dpo", beta: float = 0.1,
             lambda_orpo: float = 0.1, label_smoothing: float = 0.0):
        # a signature of its own: nnx's transforms bind keyword arguments by it (no partial)
        return rpo_loss_fn(model, train_example, algorithm, beta, lambda_orpo, label_smoothing,
                           rpo_alpha=rpo_alpha)

    trainer.with_loss_fn(chunked(loss), has_aux=True)
    tunix_private(trainer, "_aux_metrics_to_log")[RPO_METRIC] = np.mean


def pair_log_probs(trainer, batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """The summed log-probabilities of a DPO batch's pairs, without training, chunked.

    ``{"chosen", "rejected"}``: the trainer's policy's; ``"ref_chosen", "ref_rejected"``: its
    reference's (zeros without one, as Tunix's loss reads it); ``"chosen_tokens"``: each
    chosen answer's tokens. Each ``[B]``, on the host. The trainer's own input preparation
    runs the reference's forward; no ``[B, S, V]`` float32 logits anywhere.
    """
    from tunix.sft.dpo import dpo_trainer

    with chunked_log_probs():
        ex = tunix_private(trainer, "_prepare_inputs")(batch)
        chosen, rejected = dpo_trainer.compute_logps(trainer.model, ex.input_ids, ex.positions,
                                                     ex.attention_mask, ex.logits_to_keep,
                                                     ex.completion_mask, images=ex.images)
    zeros = np.zeros(np.shape(chosen), np.float32)
    half = ex.completion_mask.shape[0] // 2
    return {"chosen": np.asarray(chosen), "rejected": np.asarray(rejected),
            "ref_chosen": zeros if ex.ref_chosen_logps is None else np.asarray(ex.ref_chosen_logps),
            "ref_rejected": zeros if ex.ref_rejected_logps is None else np.asarray(ex.ref_rejected_logps),
            "chosen_tokens": np.asarray(ex.completion_mask[:half].sum(axis=-1))}
