"""Tunix's activation sharding constraints, turned back on on a CPU (Tunix 0.1.7).

Tunix turns its constraints off when the platform is CPU (``tunix/utils/sharding_utils.py``,
``tunix/models/gemma/model.py``), so a check on simulated CPU devices would compile another
program than a TPU runs. :func:`tpu_sharding_constraints` swaps both modules' ``shard`` for
:func:`constrain` while a real-shape check compiles, and restores them after.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import jax
import jax.numpy as jnp

__all__ = ["constrain", "tpu_sharding_constraints", "current_mesh"]


def current_mesh():
    """The mesh set by ``with mesh:`` around this call (empty when none is)."""
    from jax.interpreters import pxla

    return pxla.thread_resources.env.physical_mesh


def constrain(x, spec, eager: bool = False):
    """Tunix's ``shard`` without its CPU shortcut: a sharding constraint wherever a mesh is set."""
    mesh = current_mesh()
    if mesh.empty:
        return jnp.asarray(x)
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
    if eager:
        return jax.device_put(x, sharding)
    return jax.lax.with_sharding_constraint(x, sharding)


@contextlib.contextmanager
def tpu_sharding_constraints() -> Iterator[None]:
    """While active, Tunix's Gemma 2 / Gemma 3 constrain activations on CPU as on a TPU.

    Both modules look their ``shard`` up at call time, so replacing it here reaches every
    layer traced inside the block (the one place reasonkit patches this).
    """
    from tunix.models.gemma import model as gemma2
    from tunix.utils import sharding_utils

    saved = sharding_utils.shard, gemma2.shard
    sharding_utils.shard = constrain
    gemma2.shard = lambda x, s: constrain(x, s)
    try:
        yield
    finally:
        sharding_utils.shard, gemma2.shard = saved
