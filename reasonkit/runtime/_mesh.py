"""The one place mesh axes live: resolve shapes, build meshes, per-stage layouts, reshard.

Every stage runs on a 2D mesh with axes ``("fsdp", "tp")``:

- ``fsdp`` shards parameters, gradients, optimizer state *and the batch* (each device
  holds 1/fsdp of the weights and all-gathers a layer just before using it);
- ``tp`` (tensor parallel) splits attention heads and MLP features, so a layer's
  weights never move and only activations are all-reduced.

Training (SFT, DPO) wants FSDP: big batches, one all-gather per layer per step.
Generation (GRPO rollouts, evaluation) reads every weight at every decoded token;
FSDP would all-gather the whole model per token, tensor parallelism does not.

A shape must use every device; one entry may be -1 ("the rest"):

>>> resolve_shape((-1, 1), 8), resolve_shape((2, -1), 8), resolve_shape((1, 1), 1)
((8, 1), (2, 4), (1, 1))
>>> resolve_shape((4, 1), 8)
Traceback (most recent call last):
...
ValueError: mesh shape (4, 1) uses 4 devices but 8 are available;
use (8, 1), (4, 2), (2, 4), (1, 8) or put -1 in one axis, e.g. (-1, 1)
"""

from __future__ import annotations

import glob
import math
import os
import urllib.request
import warnings
from typing import Any, Iterable, NamedTuple, Sequence

import jax
import numpy as np

from reasonkit.config import TRAIN_STAGES, MeshConfig, Preset

__all__ = ["AXIS_NAMES", "STAGES", "DATA_AXES", "factorizations", "resolve_shape", "make_mesh",
           "stage_mesh_config", "stage_mesh", "Layout", "recommended_layouts", "data_ways",
           "check_batch", "fit_spec", "reshard", "mesh_of", "host_copy", "tpu_slice_hosts",
           "init_distributed", "global_batch", "global_batches"]

AXIS_NAMES = ("fsdp", "tp")
STAGES = (*TRAIN_STAGES, "eval")  # the stages with a mesh of their own
# The axes a batch's rows are split over: Tunix's ``TrainingConfig.data_sharding_axis`` and
# its models' activation constraints (``act_btd = ("fsdp", None, "tp")``) both say fsdp.
DATA_AXES = ("fsdp",)


# --- shapes ------------------------------------------------------------------------------

def factorizations(n_devices: int, ndim: int = 2) -> list[tuple[int, ...]]:
    """Every shape of ``ndim`` positive ints whose product is ``n_devices``, fsdp-first.

    >>> factorizations(8)
    [(8, 1), (4, 2), (2, 4), (1, 8)]
    >>> factorizations(1), factorizations(6, 1)
    ([(1, 1)], [(6,)])
    """
    if ndim == 1:
        return [(n_devices,)]
    out = []
    for first in sorted((d for d in range(1, n_devices + 1) if n_devices % d == 0),
                        reverse=True):
        out += [(first, *rest) for rest in factorizations(n_devices // first, ndim - 1)]
    return out


def _shape_hint(n_devices: int, ndim: int) -> str:
    shapes = ", ".join(str(s) for s in factorizations(n_devices, ndim))
    example = (-1,) + (1,) * (ndim - 1)
    return f"use {shapes} or put -1 in one axis, e.g. {example}"


def resolve_shape(shape: Sequence[int], n_devices: int) -> tuple[int, ...]:
    """``shape`` with its -1 filled in; raises ``ValueError`` unless it uses every device."""
    shape = tuple(shape)
    if not shape or any(isinstance(s, bool) or not isinstance(s, (int, np.integer))
                        or (s < 1 and s != -1) for s in shape):
        raise ValueError(f"mesh shape {shape}: entries must be positive ints or -1")
    if sum(s == -1 for s in shape) > 1:
        raise ValueError(f"mesh shape {shape}: at most one entry may be -1")
    if n_devices < 1:
        raise ValueError(f"n_devices={n_devices}: need at least one device")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if n_devices % known:
            raise ValueError(
                f"mesh shape {shape} cannot use {n_devices} devices: {n_devices} is not "
                f"divisible by {known}; {_shape_hint(n_devices, len(shape))}")
        return tuple(n_devices // known if s == -1 else int(s) for s in shape)
    if known != n_devices:
        raise ValueError(
            f"mesh shape {shape} uses {known} devices but {n_devices} are available; "
            f"{_shape_hint(n_devices, len(shape))}")
    return tuple(int(s) for s in shape)


# --- meshes ------------------------------------------------------------------------------

def make_mesh(mesh_config_or_shape: MeshConfig | Sequence[int] | None = None,
              axis_names: Sequence[str] | None = None,
              devices: Sequence[Any] | None = None) -> jax.sharding.Mesh:
    """A mesh over ``devices`` (default: all) whose axes all have ``AxisType.Auto``.

    Tunix 0.1.7's ``PeftTrainer`` fails while sharding the optimizer on a mesh with
    JAX's default ``Explicit`` axes, so every mesh in reasonkit is built here.

    >>> m = make_mesh((-1, 1))
    >>> dict(m.shape), [t.name for t in m.axis_types]
    ({'fsdp': 1, 'tp': 1}, ['Auto', 'Auto'])
    """
    if mesh_config_or_shape is None:
        mesh_config_or_shape = MeshConfig()  # (-1, 1): FSDP over every device
    if isinstance(mesh_config_or_shape, MeshConfig):
        shape = mesh_config_or_shape.shape
        names = tuple(axis_names or mesh_config_or_shape.axis_names)
    else:
        shape = tuple(mesh_config_or_shape)
        names = tuple(axis_names or AXIS_NAMES[:len(shape)])
    if len(names) != len(shape):
        raise ValueError(f"mesh shape {shape} needs one axis name per entry, got {names}")
    if len(set(names)) != len(names):  # jax would silently merge the repeated axis
        raise ValueError(f"mesh axis names must be distinct, got {names}")
    devices = list(jax.devices() if devices is None else devices)
    shape = resolve_shape(shape, len(devices))
    axis_type = getattr(jax.sharding, "AxisType", None)
    if axis_type is None:  # jax < 0.5 has no axis types: every axis behaves as Auto
        from jax.experimental import mesh_utils

        return jax.sharding.Mesh(mesh_utils.create_device_mesh(shape, devices), names)
    types = (axis_type.Auto,) * len(shape)
    if hasattr(jax, "make_mesh"):  # knows TPU topologies: neighbours on the ICI ring
        return jax.make_mesh(shape, names, axis_types=types, devices=devices)
    return jax.sharding.Mesh(np.asarray(devices).reshape(shape), names, axis_types=types)


def stage_mesh_config(preset: Preset, stage: str) -> MeshConfig:
    """The mesh a stage runs on; evaluation is generation-heavy, so it reuses GRPO's."""
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}: must be one of {', '.join(STAGES)}")
    return getattr(preset, "grpo" if stage == "eval" else stage).mesh


def stage_mesh(preset: Preset, stage: str,
               devices: Sequence[Any] | None = None) -> jax.sharding.Mesh:
    """The mesh for ``stage`` in ("sft", "dpo", "grpo", "eval") over ``devices``."""
    return make_mesh(stage_mesh_config(preset, stage), devices=devices)


class Layout(NamedTuple):
    """A mesh shape and the one-line reason for it."""

    shape: tuple[int, int]
    why: str


def _divides(size: int, *dims: int) -> bool:
    return all(d % size == 0 for d in dims)


def _tp_ok(model, tp: int) -> bool:
    """Can Tunix's default sharding split this model's heads and features ``tp`` ways?"""
    kv_ok = model.num_kv_heads == 1 or model.num_kv_heads % tp == 0  # 1 KV head: replicated
    return kv_ok and _divides(tp, model.num_heads, model.hidden_dim, model.vocab_size,
                              model.embed_dim)


def recommended_layouts(preset: Preset, n_devices: int) -> dict[str, Layout]:
    """Per-stage mesh shapes for ``n_devices``, each with a one-line why.

    >>> from reasonkit.presets import get_preset
    >>> for stage, (shape, why) in recommended_layouts(get_preset("gemma3-1b"), 8).items():
    ...     print(stage, shape)
    sft (8, 1)
    dpo (8, 1)
    grpo (2, 4)
    eval (2, 4)
    >>> recommended_layouts(get_preset("tiny"), 1)["grpo"].shape
    (1, 1)
    """
    model = preset.model
    if n_devices == 1:
        one = Layout((1, 1), "one device: nothing to shard")
        return {stage: one for stage in STAGES}
    layouts = {}
    divisors = [d for d in range(1, n_devices + 1) if n_devices % d == 0]
    for stage in ("sft", "dpo"):
        batch = getattr(preset, stage).batch_size
        fsdp = max((d for d in divisors if batch % d == 0 and model.embed_dim % d == 0
                    and _tp_ok(model, n_devices // d)), default=n_devices)
        shape = (fsdp, n_devices // fsdp)
        if shape[1] == 1:
            why = (f"FSDP over all {n_devices} devices: params, grads, Adam state and the "
                   f"batch of {batch} each split {fsdp} ways, one all-gather per layer")
        else:
            why = (f"FSDP {fsdp} (the most that divides batch {batch} and embed_dim "
                   f"{model.embed_dim}) x tensor parallel {shape[1]} for the other devices")
        layouts[stage] = Layout(shape, why)
    rollouts = preset.grpo.batch_size * preset.grpo.num_generations
    tp = max((t for t in divisors if _tp_ok(model, t) and rollouts % (n_devices // t) == 0),
             default=1)
    shape = (n_devices // tp, tp)
    if tp == 1:
        why = (f"FSDP over all {n_devices} devices: {model.num_heads} heads / "
               f"{model.num_kv_heads} KV heads do not split {n_devices} ways with "
               f"{rollouts} rollouts")
    else:
        why = (f"tensor parallel {tp} over the {model.num_heads} heads keeps weight shards "
               f"resident during decoding (FSDP would all-gather every weight per token); "
               f"fsdp {shape[0]} splits the {rollouts} rollouts")
    layouts["grpo"] = Layout(shape, why)
    layouts["eval"] = Layout(shape, "GRPO's layout: evaluation is generation too, and the "
                                    "model is already sharded that way")
    return {stage: layouts[stage] for stage in STAGES}


# --- batches -----------------------------------------------------------------------------

def data_ways(mesh: jax.sharding.Mesh | None) -> int:
    """How many ways ``mesh`` splits a batch's rows (the product of its ``DATA_AXES``)."""
    if mesh is None:
        return 1
    return math.prod(int(mesh.shape.get(a, 1)) for a in DATA_AXES)


def check_batch(batch: int, mesh: jax.sharding.Mesh | None, what: str, *, repeat: int = 1,
                how: str = "") -> None:
    """Refuse a batch whose ``batch x repeat`` rows do not split evenly over the data axes.

    Tunix's ``shard_input`` replicates such a batch on every device without a word (and
    its models' activation constraints fail on a TPU), so a stage checks before it trains.
    ``repeat`` counts the rows each example becomes (DPO: chosen + rejected, GRPO: its
    generations).

    >>> check_batch(6, make_mesh((1, 1)), "sft.batch_size")  # one device: anything goes
    >>> import types
    >>> check_batch(6, types.SimpleNamespace(shape={"fsdp": 4, "tp": 1}), "sft.batch_size")
    Traceback (most recent call last):
    ...
    ValueError: sft.batch_size=6 does not split over the data axes of the mesh {'fsdp': 4,
    'tp': 1} (fsdp = 4 ways): Tunix would replicate the whole batch on every device. The
    nearest sizes that split: 4 or 8 (multiples of 4), or a mesh whose fsdp divides 6.
    """
    ways = data_ways(mesh)
    rows = batch * repeat
    if rows % ways == 0:
        return
    step = ways // math.gcd(ways, repeat)  # batch sizes that work are its multiples
    below = batch // step * step
    nearest = " or ".join(str(n) for n in (below, below + step) if n > 0)
    axes = " x ".join(f"{a} = {int(mesh.shape.get(a, 1))}" for a in DATA_AXES)
    rows_text = f" ({how} = {rows} rows)" if how else ""
    raise ValueError(
        f"{what}={batch}{rows_text} does not split over the data axes of the mesh "
        f"{dict(mesh.shape)} ({axes} ways): Tunix would replicate the whole batch on every "
        f"device. The nearest sizes that split: {nearest} (multiples of {step}), or a mesh "
        f"whose fsdp divides {rows}.")


# --- resharding --------------------------------------------------------------------------

def _entry_axes(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, (tuple, list)) else (entry,)


def fit_spec(spec: jax.sharding.PartitionSpec, shape: Sequence[int],
             mesh: jax.sharding.Mesh, *, strict: bool = False) -> jax.sharding.PartitionSpec:
    """``spec`` with each axis that does not apply on ``mesh`` dropped (that dim replicated).

    An axis is dropped when the mesh lacks it or its size does not divide the dimension
    (e.g. 2 attention heads on ``tp=4``); ``strict=True`` raises instead.
    """
    P = jax.sharding.PartitionSpec
    if len(spec) > len(shape):
        raise ValueError(f"partition spec {spec} has more entries than shape {tuple(shape)}")
    entries = []
    for dim, entry in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)),
                          strict=True):
        axes = _entry_axes(entry)
        size = math.prod(mesh.shape.get(a, 0) for a in axes) if axes else 1
        if axes and (size == 0 or dim % size):
            if strict:
                raise ValueError(f"partition spec {spec} does not fit shape {tuple(shape)} "
                                 f"on mesh {dict(mesh.shape)}")
            entries.append(None)
        else:
            entries.append(entry)
    while entries and entries[-1] is None:
        entries.pop()
    return P(*entries)


def _is_spec(x: Any) -> bool:
    return isinstance(x, jax.sharding.PartitionSpec) or x is None


def reshard(tree_or_model: Any, mesh: jax.sharding.Mesh, *, strict: bool = False) -> Any:
    """Move an nnx model (in place) or a pytree of arrays onto ``mesh``, keeping specs.

    For an ``nnx.Module`` or ``nnx.State`` each variable keeps the partition spec of its
    sharding metadata (``nnx.get_partition_spec``); for other pytrees each array keeps
    the spec of its current ``NamedSharding`` (anything else is replicated). Axes that
    do not divide a dimension on the new mesh are dropped with a warning (``strict``
    raises instead). This is the SFT/DPO (fsdp) -> GRPO (fsdp x tp) hand-off.

    Unlike ``tunix.rl.reshard.reshard_model_to_mesh`` it survives 2 heads on ``tp=4``,
    and it also applies the specs when the arrays already sit on ``mesh`` but
    replicated: Tunix's returns early then, and that is how a freshly built model or
    ``qwix.apply_lora_to_model``'s adapters and NF4 codes arrive (Tunix turns off
    flax's shard-on-creation). Call it after building or adding LoRA on a mesh.
    Returns the model (updated in place) or the new pytree.
    """
    from flax import nnx

    model = tree_or_model if isinstance(tree_or_model, nnx.Module) else None
    if model is not None:
        tree = nnx.state(model)
    else:
        tree = tree_or_model
    leaves, treedef = jax.tree.flatten(tree)  # None entries are empty subtrees: no leaf
    if isinstance(tree, nnx.State):
        spec_leaves = jax.tree.leaves(nnx.get_partition_spec(tree), is_leaf=_is_spec)
    else:
        spec_leaves = [
            x.sharding.spec
            if isinstance(getattr(x, "sharding", None), jax.sharding.NamedSharding) else None
            for x in leaves]
    if len(spec_leaves) != len(leaves):
        raise ValueError(f"found {len(spec_leaves)} partition specs for {len(leaves)} arrays")
    dropped, shardings = [], []
    for leaf, spec in zip(leaves, spec_leaves, strict=True):
        spec = spec if spec is not None else jax.sharding.PartitionSpec()
        shape = np.shape(leaf)
        fitted = fit_spec(spec, shape, mesh, strict=strict)
        if _drops(spec, fitted):
            dropped.append(f"{tuple(shape)}: {spec} -> {fitted}")
        shardings.append(jax.sharding.NamedSharding(mesh, fitted))
    if dropped:
        warnings.warn(f"reshard onto {dict(mesh.shape)} replicated {len(dropped)} "
                      f"dimension(s) that do not divide: {'; '.join(dropped[:4])}",
                      stacklevel=2)
    moved = jax.tree.unflatten(treedef, jax.device_put(leaves, shardings))
    if model is None:
        return moved
    nnx.update(model, moved)
    return model


def _drops(spec, fitted) -> bool:
    padded = tuple(fitted) + (None,) * (len(tuple(spec)) - len(tuple(fitted)))
    return any(_entry_axes(a) and not _entry_axes(b) for a, b in zip(spec, padded, strict=True))


def mesh_of(tree_or_model: Any) -> jax.sharding.Mesh | None:
    """The mesh a model's (or pytree's) arrays live on, or ``None`` if not on one."""
    from flax import nnx

    tree = nnx.state(tree_or_model) if isinstance(tree_or_model, nnx.Module) else tree_or_model
    meshes = {x.sharding.mesh for x in jax.tree.leaves(tree)
              if isinstance(getattr(x, "sharding", None), jax.sharding.NamedSharding)}
    if len(meshes) > 1:
        raise ValueError(f"arrays live on {len(meshes)} different meshes")
    return meshes.pop() if meshes else None


def host_copy(tree_or_model: Any) -> Any:
    """A copy of a model (or pytree) whose arrays are numpy and whole, on every process.

    On several processes each holds only its shards of an array: every process must call
    this (each array is gathered, one at a time, from the processes that hold it). For
    exports, and whatever else reads whole arrays on the host. The original is untouched.
    """
    from flax import nnx
    from jax.experimental import multihost_utils

    def whole(x: Any) -> Any:
        if not isinstance(x, jax.Array):
            return x
        if x.is_fully_addressable:
            return np.asarray(x)
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    if isinstance(tree_or_model, nnx.Module):
        graph, state = nnx.split(tree_or_model)
        return nnx.merge(graph, jax.tree.map(whole, state))
    return jax.tree.map(whole, tree_or_model)


# --- multi-host --------------------------------------------------------------------------

def _count(env: Any, name: str) -> int:
    try:
        return int(env.get(name, "") or 0)
    except ValueError:
        return 0


def _is_multi_process(env: Any) -> bool:
    """Does the environment describe more than one host process?"""
    return bool(
        env.get("JAX_COORDINATOR_ADDRESS")
        or _count(env, "JAX_NUM_PROCESSES") > 1
        or len(_listed_tpu_workers(env)) > 1
        or env.get("MEGASCALE_COORDINATOR_ADDRESS")
        or _count(env, "MEGASCALE_NUM_SLICES") > 1
        or _count(env, "SLURM_NTASKS") > 1
        or _count(env, "OMPI_COMM_WORLD_SIZE") > 1
    )


def _listed_tpu_workers(env: Any) -> list[str]:
    """The slice's hosts as GKE lists them (JAX's GkeTpuCluster reads the same variables)."""
    names = env.get("TPU_PROCESS_ADDRESSES") or env.get("TPU_WORKER_HOSTNAMES") or ""
    return [h for h in names.split(",") if h.strip()]


METADATA = "http://{host}/computeMetadata/v1/instance/attributes/{key}"


def _tpu_metadata(key: str, env: Any, timeout_s: float = 2.0) -> str | None:
    """An attribute of this Cloud TPU VM from Google's metadata server, or None (none, or no
    server: not a Cloud TPU VM, or no network to it). What JAX's GceTpuCluster asks too."""
    url = METADATA.format(host=env.get("GCE_METADATA_IP") or "metadata.google.internal", key=key)
    try:
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read().decode() if response.status == 200 else None
    except (OSError, ValueError):  # URLError, timeouts and refused connections are OSErrors
        return None


def _tpu_chips_here(dev: str = "/dev") -> bool:
    """TPU chips on this host: v2-v4 appear as /dev/accel*, v5e and later as /dev/vfio/<n>."""
    return bool(glob.glob(os.path.join(dev, "accel*")) or glob.glob(os.path.join(dev, "vfio", "[0-9]*")))


def tpu_slice_hosts(env: Any = None) -> int:
    """How many hosts (TPU VMs) this TPU slice spans, found where JAX's TPU cluster detection
    looks; 1 on a single host and off TPUs.

    GKE lists the workers in ``TPU_WORKER_HOSTNAMES`` (or ``TPU_PROCESS_ADDRESSES``). A
    Cloud TPU VM made with ``gcloud compute tpus tpu-vm create`` sets no such variable: its
    metadata server lists them (``worker-network-endpoints``), asked only on a host with
    TPU chips and unless ``TPU_SKIP_MDS_QUERY`` is set (JAX sets it where it finds no chip).

    >>> tpu_slice_hosts({"TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3"}), tpu_slice_hosts({"TPU_SKIP_MDS_QUERY": "1"})
    (4, 1)
    """
    env = os.environ if env is None else env
    listed = _listed_tpu_workers(env)
    if listed:
        return len(listed)
    if env.get("TPU_SKIP_MDS_QUERY") is not None or not _tpu_chips_here():
        return 1
    endpoints = _tpu_metadata("worker-network-endpoints", env) or ""
    return max(1, len([w for w in endpoints.split(",") if w.strip()]))


_DISTRIBUTED = False
_ENV_INTS = {"num_processes": "JAX_NUM_PROCESSES", "process_id": "JAX_PROCESS_ID"}


def _env_int(env: Any, name: str) -> int | None:
    text = str(env.get(name, "") or "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: must be an integer") from None


def init_distributed(env: Any = None, *, coordinator_address: str | None = None,
                     num_processes: int | None = None, process_id: int | None = None) -> bool:
    """Join the other processes of a multi-host run (``jax.distributed.initialize``); a no-op on one host.

    Must run before anything touches ``jax.devices()``. Returns whether it initialised
    (``False`` on a single host, e.g. a Kaggle TPU v5e-8 or a Colab v5e-1). Never raises on
    a single host; on a pod a failure is re-raised with a hint.

    On a TPU pod slice (v5e-16, v4-32: :func:`tpu_slice_hosts` finds more than one host,
    as JAX's own detection does) it calls ``jax.distributed.initialize()`` with no
    arguments, as JAX does by default there: JAX reads the coordinator, the number of
    hosts and this host's index from the slice itself. Elsewhere give the coordinator
    (process 0's ``host:port``), the number of processes and this process's index, as
    arguments or as ``$JAX_COORDINATOR_ADDRESS``, ``$JAX_NUM_PROCESSES`` and
    ``$JAX_PROCESS_ID`` (arguments win); Slurm and Open MPI are found from their own
    variables. One process (``num_processes=1``) has nothing to join.

    >>> init_distributed({}), init_distributed({"JAX_NUM_PROCESSES": "1"})
    (False, False)
    """
    global _DISTRIBUTED
    if _DISTRIBUTED:
        return True
    env = os.environ if env is None else env
    kwargs = {"coordinator_address": coordinator_address or env.get("JAX_COORDINATOR_ADDRESS") or None,
              "num_processes": num_processes, "process_id": process_id}
    for key, name in _ENV_INTS.items():
        if kwargs[key] is None:
            kwargs[key] = _env_int(env, name)
    if kwargs["num_processes"] == 1:
        return False
    given = any(v is not None for v in kwargs.values())
    if not given and not _is_multi_process(env) and tpu_slice_hosts(env) == 1:
        return False
    try:  # what is not given JAX finds itself (TPU slices, Slurm, Open MPI)
        jax.distributed.initialize(**{k: v for k, v in kwargs.items() if v is not None})
    except RuntimeError as err:
        if "only be called once" in str(err):  # the user initialised it already
            _DISTRIBUTED = True
            return True
        raise RuntimeError(f"{err}: call reasonkit.runtime._mesh.init_distributed() first thing, "
                           "before any jax.devices() / array creation") from err
    except ValueError as err:  # e.g. a coordinator without the number of processes
        given = ", ".join(f"{k}={v!r}" for k, v in kwargs.items() if v is not None) or "nothing"
        raise ValueError(
            f"{err} (given {given}): outside a TPU slice / Slurm / Open MPI pass coordinator_address, "
            "num_processes and process_id, or set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and "
            "JAX_PROCESS_ID, the same address and count on every process") from err
    _DISTRIBUTED = True
    return True


# --- batches on a mesh over several processes ----------------------------------------------

def global_batch(batch: Any, mesh: jax.sharding.Mesh,
                 data_axes: Sequence[str] = ("fsdp",)) -> Any:
    """A host batch that every process holds whole -> global arrays, rows split over ``data_axes``.

    Tunix places a numpy batch with ``jax.make_array_from_process_local_data``, which
    takes each process's numpy array as *its own slice*: on 2 processes a batch of 4 rows
    that every process built would become a global batch of 8 (each row twice). Every
    process here builds the same deterministic batch stream, so the batch is placed as
    one global array instead, and each device gets its rows of it::

        batch rows   0 1 2 3           mesh fsdp=4 over 2 processes
        device       0 1 2 3           process 0 holds devices 0, 1; process 1 holds 2, 3

    The sharding is Tunix's (``shard_input`` with ``data_sharding_axis=data_axes``: dimension
    ``i`` over ``data_axes[i]``) where the sizes divide, else replicated; jax arrays are
    left alone, and so is what is not a numeric array (GRPO's prompt text).

    >>> m = make_mesh((1, 1))
    >>> out = global_batch({"ids": np.arange(6).reshape(2, 3)}, m)
    >>> out["ids"].sharding.spec, np.asarray(out["ids"]).tolist()
    (P('fsdp',), [[0, 1, 2], [3, 4, 5]])
    """
    P = jax.sharding.PartitionSpec
    spec = P(*data_axes)

    def place(x: Any) -> Any:
        if isinstance(x, jax.Array) or not isinstance(x, (np.ndarray, np.generic)) \
                or x.dtype.kind not in "biuf":
            return x
        split = x.ndim >= len(spec) and all(
            n % math.prod(mesh.shape[a] for a in _entry_axes(entry)) == 0
            for n, entry in zip(x.shape[:len(spec)], spec, strict=True))
        sharding = jax.sharding.NamedSharding(mesh, spec if split else P())
        return jax.make_array_from_process_local_data(sharding, x, x.shape)

    return jax.tree.map(place, batch)


def global_batches(stream: Iterable[Any], mesh: jax.sharding.Mesh,
                   data_axes: Sequence[str] = ("fsdp",)) -> Iterable[Any]:
    """``stream`` with each batch placed by :func:`global_batch` when ``mesh`` spans several
    processes; on one process the stream itself, untouched (Tunix places numpy batches then)."""
    if not mesh.is_multi_process:
        return stream
    return (global_batch(b, mesh, data_axes) for b in stream)
