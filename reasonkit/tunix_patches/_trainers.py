"""What reasonkit reads of Tunix 0.1.7's trainers that they keep private.

- A ``MetricsLogger``'s backends: Tunix leaves their ``jax.monitoring`` listeners
  registered after training, where they would copy every later metric of the process
  (a resumed run, the next stage) into this stage's metrics.jsonl; :func:`detached_after`
  unregisters them however training ends.
- An ``RLCluster``'s metrics logger (:func:`rl_metrics_logger`).
- A ``DPOTrainer``'s input preparation, traced for its shapes without the reference's
  forward (:func:`dpo_prepared_inputs`), for the real-shape compile checks.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import jax

from reasonkit.tunix_patches._private import set_tunix_private, tunix_private

__all__ = ["detached_after", "rl_metrics_logger", "dpo_prepared_inputs"]


@contextlib.contextmanager
def detached_after(logger: Any) -> Iterator[None]:
    """Unregister a MetricsLogger's listeners however training ends, an interrupt included."""
    backends = tunix_private(logger, "_backends")  # before training: a missing one raises now
    try:
        yield
    finally:
        for backend in backends:
            try:
                jax.monitoring.unregister_scalar_listener(backend.log_scalar)
            except Exception:  # noqa: BLE001 - it was not registered
                pass


def rl_metrics_logger(cluster) -> Any:
    """The ``MetricsLogger`` an ``RLCluster`` logs its GRPO metrics with."""
    return tunix_private(cluster, "_rl_metrics_logger")


def dpo_prepared_inputs(trainer, batch) -> tuple[Any, bool]:
    """``(shapes of the DPO trainer's prepared batch, whether it has a reference)``.

    Traced with the reference switched off, so no reference forward runs; the caller fills
    in the reference's log-probabilities when there is one.
    """
    has_ref = tunix_private(trainer, "_ref_model_exists")
    set_tunix_private(trainer, "_ref_model_exists", False)
    try:
        return jax.eval_shape(tunix_private(trainer, "_prepare_inputs"), batch), has_ref
    finally:
        set_tunix_private(trainer, "_ref_model_exists", has_ref)
