"""Tunix 0.1.7's DPO and GRPO log-probabilities, computed in chunks (:mod:`.logprobs`).

Tunix computes DPO's and GRPO's log-probabilities from full-vocabulary float32 logits,
which do not fit a Gemma step (:mod:`reasonkit.tunix_patches._logprobs` says why). Its
trainers look the functions up at call time, so :func:`chunked_log_probs` swaps reasonkit's
chunked equivalents in while a loss or a forward of ours is traced, and restores Tunix's
after: :func:`chunk_dpo` and :func:`chunk_grpo` wrap a built trainer's loss and forwards in it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from typing import Callable, Iterator

from reasonkit.tunix_patches import _logprobs as logprobs
from reasonkit.tunix_patches._private import set_tunix_private, tunix_private
from reasonkit.tunix_patches._sampling import is_grouped

__all__ = ["chunked_log_probs", "chunked", "chunked_if_grouped", "chunk_dpo", "chunk_grpo"]

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
