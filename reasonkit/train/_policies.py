"""The models a stage trains: base, LoRA policy and frozen reference, with real or stand-in weights.

:func:`build_models` loads them from the preset's checkpoint (the adapters restored from
the stage it starts from, :func:`reasonkit.models.load_policy`), or builds them at the
real shapes without one: random weights, each device creating only its shard, or
abstract ShapeDtypeStructs placed on the mesh (:func:`placed_abstractly`), enough to
lower and compile a step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from reasonkit import models
from reasonkit.config import ModelConfig, Preset
from reasonkit.models import tiny
from reasonkit.runtime import RunDir
from reasonkit.runtime import mesh as mesh_lib

__all__ = ["WEIGHTS", "SHAPE_TOKENIZER", "placed_abstractly", "materialised", "abstract_base",
           "build_models"]


WEIGHTS = ("checkpoint", "random", "abstract")
# A stand-in tokenizer for models built without a checkpoint: compiling a step only needs
# its special ids (pad 0, eos 1, bos 2, as Gemma's), never its vocabulary.
SHAPE_TOKENIZER = tiny.ASSET / "tokenizer.model"


def _leaf_specs(state) -> list:
    is_spec = lambda x: isinstance(x, jax.sharding.PartitionSpec) or x is None  # noqa: E731
    return jax.tree.leaves(nnx.get_partition_spec(state), is_leaf=is_spec)


def placed_abstractly(model, mesh, dtype: str | None = None):
    """``model`` (abstract or not) as ShapeDtypeStructs placed as its sharding metadata says.

    Axes that do not divide a dimension are dropped, as :func:`reasonkit.runtime._mesh.reshard`
    does; ``dtype`` recasts floating-point leaves (Tunix's Gemma 2 initialises in float32
    whatever the checkpoint's dtype).
    """
    graph, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    cast = None if dtype is None else jnp.dtype(dtype)
    out = []
    for x, spec in zip(leaves, _leaf_specs(state), strict=True):
        spec = mesh_lib.fit_spec(spec or jax.sharding.PartitionSpec(), x.shape, mesh)
        dt = cast if cast is not None and jnp.issubdtype(x.dtype, jnp.floating) else x.dtype
        out.append(jax.ShapeDtypeStruct(x.shape, dt, sharding=jax.sharding.NamedSharding(mesh, spec)))
    return nnx.merge(graph, jax.tree.unflatten(treedef, out))


def materialised(model, what, seed: int = 0, scale: float = 0.0):
    """``model`` with the abstract leaves of the ``what`` filter made real arrays, in place.

    Each is ``scale * normal`` (zeros by default), created where its sharding puts it:
    no device ever holds more than its shard.
    """
    graph, chosen, rest = nnx.split(model, what, ...)
    leaves, treedef = jax.tree.flatten(chosen)

    def make(i, x):
        def fn():
            if scale and jnp.issubdtype(x.dtype, jnp.floating):
                return (scale * jax.random.normal(jax.random.key(seed * 100_003 + i), x.shape,
                                                  jnp.float32)).astype(x.dtype)
            return jnp.zeros(x.shape, x.dtype)
        return jax.jit(fn, out_shardings=x.sharding)()

    real = [make(i, x) if isinstance(x, jax.ShapeDtypeStruct) else x for i, x in enumerate(leaves)]
    return nnx.merge(graph, jax.tree.unflatten(treedef, real), rest)


def abstract_base(cfg: ModelConfig, mesh):
    """The base model at ``cfg``'s real shapes, as ShapeDtypeStructs placed on ``mesh``."""
    return placed_abstractly(nnx.eval_shape(lambda: models.new_model(cfg)), mesh, cfg.dtype)


def build_models(preset: Preset, mesh, weights: str, *, run: RunDir | None = None,
                 started: str | None = None, seed: int = 0, reference: bool = False):
    """``(base, policy, reference or None, tokenizer, model_dir)`` on ``mesh``.

    ``weights`` is ``"checkpoint"`` (the preset's model source, adapters restored from
    ``started``), ``"random"`` (random weights at the real config, each device creating
    only its shard) or ``"abstract"`` (ShapeDtypeStructs: enough to lower and compile a
    step; the adapters are real zeros, since an optimizer must be built on them).
    Without a checkpoint the tokenizer is :data:`SHAPE_TOKENIZER` and ``model_dir`` None.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights={weights!r}: must be one of {', '.join(WEIGHTS)}")
    lora = preset.lora
    if weights == "checkpoint":  # load_policy puts the preset's optimisations in force
        base, policy, tok, model_dir = models.load_policy(preset, run, started, mesh, seed=seed)
        ref = models.frozen_reference(base, preset, run, started, mesh, seed) if reference else None
        return base, policy, ref, tok, model_dir
    models.use_optimisations(preset.optimisations)
    tok = models.load_tokenizer(SHAPE_TOKENIZER)
    base = abstract_base(preset.model, mesh)
    if weights == "random":
        base = materialised(base, nnx.Param, seed=seed, scale=0.02)
        policy = models.apply_lora(base, lora, mesh=mesh, seed=seed)
        ref = models.apply_lora(base, lora, mesh=mesh, seed=seed) if reference else None
        return base, policy, ref, tok, None

    def with_lora(model):
        lora_model = nnx.eval_shape(lambda m: models.apply_lora(m, lora, mesh=mesh, seed=seed), model)
        return materialised(placed_abstractly(lora_model, mesh), nnx.LoRAParam)

    return base, with_lora(base), with_lora(base) if reference else None, tok, None
