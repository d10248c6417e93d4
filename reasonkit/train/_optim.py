"""The optimizer every stage trains with: AdamW, global-norm clipping, warm-up then cosine.

:func:`make_optimizer` builds it from a stage's :class:`~reasonkit.config.TrainConfig`;
:func:`schedule` is its learning rate as a function of the step and
:func:`schedule_numbers` the numbers that rate is made of, which the optimizer's state
carries as arrays so that runs differing only in them share one compiled update.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import optax

from reasonkit.config import TrainConfig

__all__ = ["schedule_numbers", "schedule", "make_optimizer"]


def schedule_numbers(cfg: TrainConfig) -> dict[str, float | int]:
    """What :func:`schedule` is made of: the peak learning rate, the warm-up's steps and
    the step at which the cosine reaches 0 (at least one past the warm-up).

    >>> from reasonkit.config import SFTConfig
    >>> schedule_numbers(SFTConfig(max_steps=100, warmup_ratio=0.1, learning_rate=3e-3))
    {'peak': 0.003, 'warmup': 10, 'total': 100}
    """
    warmup = max(1, int(round(cfg.warmup_ratio * cfg.max_steps))) if cfg.warmup_ratio else 0
    return {"peak": cfg.learning_rate, "warmup": warmup, "total": max(cfg.max_steps, warmup + 1)}


def _learning_rate(count, peak, warmup, total):
    """Linear warm-up from 0 over ``warmup`` steps, then cosine decay from ``peak`` to 0 at
    ``total``: optax's ``warmup_cosine_decay_schedule(0, peak, warmup, total, 0)``, in
    jnp on numbers that may be arrays (the optimizer's state holds them)."""
    count = jnp.asarray(count, jnp.float32)
    peak, warmup, total = (jnp.asarray(x, jnp.float32) for x in (peak, warmup, total))
    rising = peak * count / jnp.maximum(warmup, 1.0)
    done = jnp.clip((count - warmup) / (total - warmup), 0.0, 1.0)
    return jnp.where(count < warmup, rising, 0.5 * peak * (1.0 + jnp.cos(jnp.pi * done)))


def schedule(cfg: TrainConfig) -> optax.Schedule:
    """Linear warm-up over ``warmup_ratio`` of the steps, then cosine decay to 0.

    A warm-up starts at 0, so it takes at least a step; no warm-up starts at the peak.
    """
    return functools.partial(_learning_rate, **schedule_numbers(cfg))


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """AdamW + global-norm clipping at :func:`schedule`'s learning rate.

    The state is optax's ``InjectHyperparamsState``: Tunix logs
    ``hyperparams["learning_rate"]``, the rate of the step just taken. The schedule's
    numbers (:func:`schedule_numbers`) sit beside it in ``hyperparams``, as arrays, not
    in the compiled update: runs that differ only in their step count or peak rate (a
    branch for fewer steps, 05_grpo's format-only run) compile the same program, so the
    second loads the first's from the compilation cache instead of compiling its own.
    """
    def inner(learning_rate):
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm),
                           optax.adamw(learning_rate, weight_decay=cfg.weight_decay))

    def init(params):
        numbers = {k: jnp.asarray(v, jnp.float32) for k, v in schedule_numbers(cfg).items()}
        return optax.InjectHyperparamsState(
            count=jnp.zeros([], jnp.int32), inner_state=inner(0.0).init(params),
            hyperparams={"learning_rate": _learning_rate(0, **numbers), **numbers})

    def update(updates, state, params=None):
        numbers = {k: state.hyperparams[k] for k in ("peak", "warmup", "total")}
        lr = _learning_rate(state.count, **numbers)
        updates, inner_state = inner(lr).update(updates, state.inner_state, params)
        return updates, optax.InjectHyperparamsState(
            count=optax.safe_increment(state.count), inner_state=inner_state,
            hyperparams={"learning_rate": lr, **numbers})

    return optax.GradientTransformation(init, update)
