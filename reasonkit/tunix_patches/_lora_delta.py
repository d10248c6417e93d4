"""qwix 0.1.8's LoRA delta on a CPU, computed on the input flattened to [tokens, in].

:func:`install` replaces ``qwix._src.providers.lora._compute_lora_delta`` for the process
(every trace after it uses :func:`flat_lora_delta`) and :func:`uninstall` puts qwix's own
back. It changes nothing off a single CPU device: everything else is handed to qwix.
Models are built with it in place when their preset's ``optimisations`` list "flat LoRA
delta", and with qwix's own when they do not (reasonkit's models package does either).
"""

from __future__ import annotations

import inspect
from typing import Callable

import jax
import numpy as np

__all__ = ["flat_lora_delta", "install", "uninstall", "installed", "qwix_own"]

# qwix's own function, kept while ours is installed
_QWIX_OWN: list[Callable] = []
_SIGNATURE = ["lhs", "lora_a", "lora_b", "lhs_ca", "lhs_ba", "contract_shape", "batch_shape",
              "remain_shape", "rank", "precision"]


def flat_lora_delta(lhs, lora_a, lora_b, lhs_ca, lhs_ba, contract_shape, batch_shape, remain_shape,
                     rank, precision=None):
    """qwix 0.1.8's ``_compute_lora_delta``, ``(lhs A) B``, on ``lhs`` flattened to [tokens, in].

    The same products, but the gradient with respect to ``B`` no longer costs a transposed
    copy of its [tokens, out] cotangent on XLA:CPU. qwix contracts a 3-D ``lhs``
    ([B, T, in]) over its last axis, so autodiff's ``dB = (lhs A)^T g`` is a dot over two
    axes (B and T), which JAX writes as ``(g^T (lhs A))^T``. XLA:CPU lays that dot out
    by copying ``g`` to [out, tokens]: 6 ms for each MLP projection of the tiny SFT step
    at [4, 1024]. Over one flattened axis the same gradient is one dot with no copy
    (docs/performance.md has the measurements).
    Anything else goes to qwix: batch axes, contracted axes not last, another backend, or
    several devices (the real-shape compiles of benchmarks/speed/shapes.py stand for a TPU's
    program, which keeps qwix's).
    """
    n, k = lhs.ndim, len(lhs_ca)
    if (lhs_ba or tuple(lhs_ca) != tuple(range(n - k, n)) or jax.default_backend() != "cpu"
            or jax.device_count() != 1):
        return _QWIX_OWN[0](lhs, lora_a, lora_b, lhs_ca, lhs_ba, contract_shape, batch_shape,
                                remain_shape, rank, precision=precision)
    size = int(np.prod(contract_shape))
    dims = (((1,), (0,)), ((), ()))
    delta = jax.lax.dot_general(lhs.reshape(-1, size), lora_a.reshape(size, rank), dims,
                                precision=precision)
    delta = jax.lax.dot_general(delta, lora_b.reshape(rank, -1), dims, precision=precision)
    return delta.reshape(*lhs.shape[:n - k], *remain_shape)


def _qwix_lora():
    from qwix._src.providers import lora as qwix_lora  # qwix 0.1.8's private module

    return qwix_lora


def qwix_own() -> Callable | None:
    """qwix's own delta while :func:`flat_lora_delta` stands in for it, else None."""
    return _QWIX_OWN[0] if _QWIX_OWN else None


def installed() -> bool:
    """Whether qwix computes its LoRA delta with :func:`flat_lora_delta` now."""
    return bool(_QWIX_OWN)


def install() -> str:
    """Put :func:`flat_lora_delta` in place of qwix's delta; returns what it did (one line).

    Idempotent. A qwix whose function has another signature is left as it is.
    """
    if _QWIX_OWN:
        return "qwix LoRA delta: flattened on one CPU device (already installed)"
    qwix_lora = _qwix_lora()
    own = getattr(qwix_lora, "_compute_lora_delta", None)
    if own is None or list(inspect.signature(own).parameters) != _SIGNATURE:
        return "qwix LoRA delta: qwix's own (this qwix's function differs from 0.1.8's)"
    _QWIX_OWN.append(own)
    qwix_lora._compute_lora_delta = flat_lora_delta
    return ("qwix LoRA delta: flattened on one CPU device (optimisation 'flat LoRA delta'; a preset "
            "without it in its optimisations uses qwix's own)")


def uninstall() -> None:
    """Give qwix its own delta back (traces already made keep what they traced)."""
    if _QWIX_OWN:
        _qwix_lora()._compute_lora_delta = _QWIX_OWN.pop()
