"""LoRA adapters over a Tunix model: add them with qwix, read them apart, merge them in.

:func:`apply_lora` adds qwix LoRA (or QLoRA, over an NF4 base) adapters to the projections
a :class:`~reasonkit.config.LoraConfig` names, on any mesh; :func:`lora_params` and
:func:`base_params` read the adapters and the frozen base apart; :func:`merge_lora` folds
the adapters into the base weights. qwix's LoRA delta is replaced by
the patch package's flattened delta while a preset's optimisations install it
(:func:`reasonkit.models._checkpoint.use_optimisations`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from reasonkit.config import LoraConfig
from reasonkit.models._checkpoint import _flat_params
from reasonkit.runtime import mesh as mesh_lib

__all__ = ["lora_trace_input", "apply_lora", "lora_params", "base_params", "merge_lora"]


def lora_trace_input(model: nnx.Module, mesh: jax.sharding.Mesh | None = None) -> dict[str, Any]:
    """The dummy call qwix runs to find the projections: Tunix's, with a batch the mesh splits.

    Tunix's ``get_model_input()`` has 2 rows; under its activation constraints (on a TPU)
    a batch must split over the data axes, and 2 rows do not split 4 or 8 ways. The values
    do not matter, only the shapes.
    """
    rows = mesh_lib.data_ways(mesh)
    return {k: jnp.ones((rows, *v.shape[1:]), v.dtype) if hasattr(v, "shape") else v
            for k, v in model.get_model_input().items()}


def _is_traced(model: nnx.Module) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(nnx.state(model)))


def apply_lora(model: nnx.Module, lora: LoraConfig, mesh: jax.sharding.Mesh | None = None,
               seed: int = 0) -> nnx.Module:
    """Add qwix LoRA (or QLoRA: NF4 base) adapters to the preset's target projections.

    Works on any mesh (:func:`lora_trace_input`), and on an abstract model under
    ``nnx.eval_shape`` (the adapters are then left for the caller to place).
    """
    import qwix

    kwargs: dict[str, Any] = {"module_path": lora.module_path, "rank": lora.rank, "alpha": lora.alpha}
    if lora.qlora:
        kwargs.update(weight_qtype="nf4", tile_size=lora.tile_size)
    provider = qwix.LoraProvider(**kwargs)
    lora_model = qwix.apply_lora_to_model(model, provider, rngs=nnx.Rngs(seed),
                                          **lora_trace_input(model, mesh))
    if not any(isinstance(v, nnx.LoRAParam) for _, v in nnx.iter_graph(lora_model)):
        raise ValueError(f"LoraConfig.module_path={lora.module_path!r} matched no module")
    if mesh is not None and not _is_traced(lora_model):
        # Shard the new adapters only. The base arrays must stay the very objects the base
        # model holds: Tunix shares the frozen backbone between a LoRA actor and its
        # reference by identity, and would silently copy it otherwise. (Tunix's own
        # reshard also skips arrays already on the mesh even when they are replicated.)
        nnx.update(lora_model, mesh_lib.reshard(nnx.state(lora_model, nnx.LoRAParam), mesh))
    return lora_model


def lora_params(model: nnx.Module) -> dict[str, np.ndarray]:
    """The LoRA adapters alone, whole on the host, as ``{path: array}``.

    On several processes each holds only its shards: every process must call it (the
    adapters alone are gathered, :func:`~reasonkit.runtime._mesh.host_copy`).
    """
    state = nnx.state(model, nnx.LoRAParam)
    if jax.process_count() > 1:
        state = mesh_lib.host_copy(state)
    return {".".join(map(str, p)): np.asarray(v.value if hasattr(v, "value") else v)
            for p, v in nnx.to_flat_state(state)}


def base_params(model: nnx.Module) -> dict[str, np.ndarray]:
    """The frozen base weights alone, as ``{path: array}``."""
    return {k: v for k, v in _flat_params(model).items() if "lora" not in k.rsplit(".", 1)[-1]}


def merge_lora(lora_model: nnx.Module, lora: LoraConfig) -> None:
    """Fold every adapter into its base weight in place and zero the adapter.

    Works on qwix's einsum and linear adapters of Gemma 2 and Gemma 3 alike: the
    delta is ``einsum(a, b)`` laid out like the weight, scaled by alpha / rank. A QLoRA
    (NF4) base weight is dequantized first, so the merged weight is full precision.
    """
    import qwix

    scale = lora.alpha / lora.rank
    for _, module in nnx.iter_graph(lora_model):
        if not isinstance(module, nnx.Module):
            continue
        for name in ("w", "kernel"):
            a = getattr(module, f"{name}_lora_a", None)
            b = getattr(module, f"{name}_lora_b", None)
            if a is None or b is None:
                continue
            weight = getattr(module, name)
            if isinstance(weight, nnx.Variable):
                base = weight.value
            else:  # QLoRA: qwix's NF4 base (a WithAux around a QArray): merge in full precision
                base = jnp.asarray(qwix.dequantize(weight.array))
                weight = nnx.Param(base)
                setattr(module, name, weight)
            delta = _lora_delta(module, name, a.value, b.value, base.shape)
            weight.value = (base + scale * delta).astype(base.dtype)
            b.value = jnp.zeros_like(b.value)


def _lora_delta(module, name, a, b, shape):
    if name == "kernel":  # nnx.Linear: [in, r] @ [r, out]
        return a @ b
    lora_str = getattr(module, f"{name}_lora_einsum_str")  # e.g. "BTD,Dr,rNH->BTNH"
    rhs = module.einsum_str.split("->")[0].split(",")[1]  # the weight's axes, e.g. "NDH"
    _, a_axes, b_axes = lora_str.split("->")[0].split(",")
    delta = jnp.einsum(f"{a_axes},{b_axes}->{rhs}", a, b)
    if delta.shape != shape:
        raise ValueError(f"LoRA delta {delta.shape} does not fit weight {shape} ({lora_str})")
    return delta
