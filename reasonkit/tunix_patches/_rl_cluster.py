"""RLCluster on an abstract model: its start-up copy to host memory skipped (Tunix 0.1.7).

``RLCluster.__init__`` puts the actor's state on a memory kind with
``tunix.rl.utils.put_params_on_memory_kind``; a model of ShapeDtypeStructs (the real-shape
compile checks) has nothing to copy. :func:`abstract_models_stay_put` swaps that module
function while a cluster is built, and restores it after.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import jax

__all__ = ["abstract_models_stay_put"]


@contextlib.contextmanager
def abstract_models_stay_put() -> Iterator[None]:
    """RLCluster copies the actor's state to host memory as it starts (``device_put``);
    an abstract model (ShapeDtypeStructs) has nothing to copy, so it is returned as is."""
    from tunix.rl import utils as rl_utils

    put = rl_utils.put_params_on_memory_kind

    def put_unless_abstract(params, memory_kind):
        if any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(params)):
            return params
        return put(params, memory_kind)

    rl_utils.put_params_on_memory_kind = put_unless_abstract
    try:
        yield
    finally:
        rl_utils.put_params_on_memory_kind = put
