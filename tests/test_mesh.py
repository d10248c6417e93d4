"""Mesh shapes, Auto axis types, per-stage layouts and resharding.

Tests that need several devices run in one subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (the flag only works before JAX
initialises), so the rest of the suite keeps its single CPU device.
"""

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from reasonkit.config import MeshConfig
from reasonkit.presets import get_preset
from reasonkit.runtime import mesh as rkmesh

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# --- shapes (no devices needed) ------------------------------------------------------------


@pytest.mark.parametrize("shape, n, expected", [
    ((-1, 1), 8, (8, 1)),
    ((1, -1), 8, (1, 8)),
    ((2, -1), 8, (2, 4)),
    ((-1, 4), 8, (2, 4)),
    ((2, 4), 8, (2, 4)),
    ((-1, 1), 1, (1, 1)),
    ((1, 1), 1, (1, 1)),
    ((-1,), 6, (6,)),
])
def test_resolve_shape(shape, n, expected):
    assert rkmesh.resolve_shape(shape, n) == expected


def test_resolve_shape_must_use_every_device():
    with pytest.raises(ValueError) as err:
        rkmesh.resolve_shape((4, 1), 8)
    msg = str(err.value)
    assert msg.startswith("mesh shape (4, 1) uses 4 devices but 8 are available")
    for shape in ["(8, 1)", "(4, 2)", "(2, 4)", "(1, 8)", "-1"]:
        assert shape in msg


def test_resolve_shape_errors():
    with pytest.raises(ValueError, match=r"\(2, 4\) uses 8 devices but 1 are available"):
        rkmesh.resolve_shape((2, 4), 1)
    with pytest.raises(ValueError, match="not divisible by 3"):
        rkmesh.resolve_shape((3, -1), 8)
    with pytest.raises(ValueError, match="at most one entry may be -1"):
        rkmesh.resolve_shape((-1, -1), 8)
    with pytest.raises(ValueError, match="positive ints or -1"):
        rkmesh.resolve_shape((0, 8), 8)


def test_factorizations():
    assert rkmesh.factorizations(8) == [(8, 1), (4, 2), (2, 4), (1, 8)]
    assert rkmesh.factorizations(4, 3)[:3] == [(4, 1, 1), (2, 2, 1), (2, 1, 2)]
    assert all(a * b == 12 for a, b in rkmesh.factorizations(12))


def test_make_mesh_single_device_is_auto():
    m = rkmesh.make_mesh(MeshConfig(shape=(-1, 1)))
    assert dict(m.shape) == {"fsdp": 1, "tp": 1}
    assert m.axis_types == (jax.sharding.AxisType.Auto,) * 2
    with pytest.raises(ValueError, match="uses 8 devices but 1 are available"):
        rkmesh.make_mesh((2, 4))
    with pytest.raises(ValueError, match="one axis name per entry"):
        rkmesh.make_mesh((1, 1, 1))


def test_make_mesh_refuses_repeated_axis_names():
    # jax.make_mesh would merge them into one axis of the wrong size: Mesh('a': 1)
    with pytest.raises(ValueError, match=r"distinct, got \('a', 'a'\)"):
        rkmesh.make_mesh((1, 1), axis_names=("a", "a"))


def test_stage_mesh_config_eval_uses_grpo_layout():
    p = get_preset("gemma3-1b")
    assert rkmesh.stage_mesh_config(p, "sft").shape == (-1, 1)
    assert rkmesh.stage_mesh_config(p, "eval") == p.grpo.mesh
    with pytest.raises(ValueError, match="stage='rl'"):
        rkmesh.stage_mesh_config(p, "rl")
    tiny = rkmesh.stage_mesh(get_preset("tiny"), "eval")
    assert dict(tiny.shape) == {"fsdp": 1, "tp": 1}


def test_recommended_layouts():
    for name in ("gemma3-1b", "gemma2-2b"):
        lay = rkmesh.recommended_layouts(get_preset(name), 8)
        assert lay["sft"].shape == lay["dpo"].shape == (8, 1)
        assert lay["grpo"].shape == lay["eval"].shape == (2, 4)
        assert "FSDP" in lay["sft"].why and "tensor parallel" in lay["grpo"].why
        # the presets already use these layouts
        p = get_preset(name)
        assert rkmesh.resolve_shape(p.grpo.mesh.shape, 8) == lay["grpo"].shape
    # Gemma 3 270M has 4 heads / 1 KV head: tp = 4 at most even on 8 devices
    assert rkmesh.recommended_layouts(get_preset("gemma3-270m"), 8)["grpo"].shape == (2, 4)
    one = rkmesh.recommended_layouts(get_preset("gemma3-1b"), 1)
    assert {lay.shape for lay in one.values()} == {(1, 1)}
    # a batch that does not split 8 ways keeps fsdp at what it can
    p = get_preset("gemma3-1b", **{"sft.batch_size": 4})
    assert rkmesh.recommended_layouts(p, 8)["sft"].shape == (4, 2)


def test_fit_spec_drops_axes_that_do_not_divide():
    P = jax.sharding.PartitionSpec
    m = rkmesh.make_mesh((1, 1))
    assert rkmesh.fit_spec(P("tp", "fsdp"), (4, 6), m) == P("tp", "fsdp")
    assert rkmesh.fit_spec(P("data"), (4,), m) == P()  # axis not on this mesh
    with pytest.raises(ValueError, match="does not fit"):
        rkmesh.fit_spec(P("data"), (4,), m, strict=True)


def test_reshard_pytree_single_device():
    import jax.numpy as jnp

    m = rkmesh.make_mesh((1, 1))
    tree = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(3)}
    out = rkmesh.reshard(tree, m)
    assert out["w"].sharding.mesh == m and (out["w"] == tree["w"]).all()
    assert rkmesh.mesh_of(out) == m


def test_reshard_pytree_with_none_leaves():
    # None is an empty subtree (optax states, a layer without bias): it stays None
    import jax.numpy as jnp

    m = rkmesh.make_mesh((1, 1))
    tree = {"w": jnp.arange(6.0).reshape(2, 3), "b": None, "rest": (None, jnp.ones(2))}
    out = rkmesh.reshard(tree, m)
    assert out["b"] is None and out["rest"][0] is None
    assert out["w"].sharding.mesh == m and (out["w"] == tree["w"]).all()
    assert out["rest"][1].sharding.mesh == m


def test_init_distributed_single_host_is_noop():
    assert rkmesh.init_distributed({}) is False
    assert rkmesh.init_distributed({"TPU_WORKER_HOSTNAMES": "localhost"}) is False
    assert rkmesh._is_multi_process({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"})
    assert rkmesh._is_multi_process({"TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3"})
    assert rkmesh._is_multi_process({"JAX_NUM_PROCESSES": "2"})
    assert not rkmesh._is_multi_process({"JAX_NUM_PROCESSES": "1", "SLURM_NTASKS": "x"})
    assert rkmesh.init_distributed() is False  # this test machine is one host


def test_host_copy_is_numpy_and_leaves_the_original_alone():
    import jax.numpy as jnp
    from flax import nnx

    lin = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
    copy = rkmesh.host_copy(lin)
    assert isinstance(copy.kernel.get_value(), np.ndarray)
    assert isinstance(lin.kernel.get_value(), jax.Array)
    np.testing.assert_array_equal(copy.kernel.get_value(), lin.kernel.get_value())
    tree = rkmesh.host_copy({"w": jnp.arange(3.0), "none": None, "n": 2})
    assert isinstance(tree["w"], np.ndarray) and tree["none"] is None and tree["n"] == 2


def test_init_distributed_passes_what_it_is_given(monkeypatch):
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: calls.append(kwargs))

    def init(*args, **kwargs):
        monkeypatch.setattr(rkmesh, "_DISTRIBUTED", False)
        return rkmesh.init_distributed(*args, **kwargs)

    env = {"JAX_COORDINATOR_ADDRESS": "localhost:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}
    assert init(env) is True
    assert calls[-1] == {"coordinator_address": "localhost:1234", "num_processes": 2, "process_id": 1}
    assert init(env, process_id=0) and calls[-1]["process_id"] == 0  # arguments win
    assert init({}, coordinator_address="10.0.0.1:8476", num_processes=4, process_id=3)
    assert calls[-1] == {"coordinator_address": "10.0.0.1:8476", "num_processes": 4, "process_id": 3}
    # a TPU slice: JAX finds the coordinator, the count and this host's index itself
    assert init({"TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3"}) and calls[-1] == {}
    n = len(calls)
    assert init(env, num_processes=1) is False and len(calls) == n  # one process: nothing to join
    with pytest.raises(ValueError, match="JAX_PROCESS_ID='one': must be an integer"):
        init({**env, "JAX_PROCESS_ID": "one"})

    def no_count(**kwargs):
        raise ValueError("Number of processes must be defined.")

    monkeypatch.setattr(jax.distributed, "initialize", no_count)
    with pytest.raises(ValueError, match=r"defined\. \(given coordinator_address='h:1'\).*JAX_NUM_PROCESSES"):
        init({"JAX_COORDINATOR_ADDRESS": "h:1"})


@pytest.fixture
def slice_of(monkeypatch):
    """A Cloud TPU VM whose metadata server lists ``hosts`` workers (0: no server reached)."""
    asked = []

    def make(hosts: int, chips: bool = True):
        endpoints = ",".join(f"10.0.0.{i}" for i in range(hosts)) if hosts else None
        monkeypatch.setattr(rkmesh, "_tpu_chips_here", lambda dev="/dev": chips)
        monkeypatch.setattr(rkmesh, "_tpu_metadata", lambda key, env, timeout_s=2.0:
                            asked.append(key) or endpoints)
        return asked

    return make


def test_a_tpu_pod_slice_joins_as_jax_does_by_default(monkeypatch, slice_of):
    """A v5e-16 made with gcloud: no variable names the hosts, the metadata server does (as JAX's
    GceTpuCluster reads it). init_distributed then calls jax.distributed.initialize() with no
    arguments, and JAX finds the coordinator, the count and this host's index itself."""
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(rkmesh, "_DISTRIBUTED", False)
    asked = slice_of(hosts=4)
    assert rkmesh.tpu_slice_hosts({}) == 4 and asked == ["worker-network-endpoints"]
    assert rkmesh.init_distributed({}) is True and calls == [{}]


@pytest.mark.parametrize("hosts, chips, env", [
    (1, True, {}),  # a single-host TPU VM (a Kaggle v5e-8, a Colab v5e-1, a v3-8)
    (0, True, {}),  # no metadata server reached (no network to it)
    (4, False, {}),  # no TPU chip here: the metadata server is not asked
    (4, True, {"TPU_SKIP_MDS_QUERY": "1"}),  # JAX found no TPU chip and said so
    (4, True, {"TPU_WORKER_HOSTNAMES": "localhost"}),  # GKE's list wins: one host
])
def test_one_host_never_initialises(monkeypatch, slice_of, hosts, chips, env):
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: pytest.fail("initialised"))
    monkeypatch.setattr(rkmesh, "_DISTRIBUTED", False)
    asked = slice_of(hosts, chips)
    assert rkmesh.tpu_slice_hosts(env) == 1 and rkmesh.init_distributed(env) is False
    assert asked == ([] if not chips or env else ["worker-network-endpoints"] * 2)


def test_tpu_metadata_unreachable_is_none():
    """Nothing listens there: no attribute, and quickly (JAX's own query would retry for seconds)."""
    assert rkmesh._tpu_metadata("worker-network-endpoints", {"GCE_METADATA_IP": "127.0.0.1:9"},
                                timeout_s=1.0) is None


def test_multislice_is_several_processes():
    assert rkmesh._is_multi_process({"MEGASCALE_NUM_SLICES": "2"})
    assert not rkmesh._is_multi_process({"MEGASCALE_NUM_SLICES": "1"})
    assert rkmesh._is_multi_process({"TPU_PROCESS_ADDRESSES": "h0:8476,h1:8476"})


# --- eight fake CPU devices, in a subprocess ----------------------------------------------

_EIGHT_DEVICES = textwrap.dedent("""
    import json, warnings
    import jax, jax.numpy as jnp, numpy as np
    from flax import nnx
    from jax.sharding import PartitionSpec as P
    from reasonkit.runtime import mesh as rkmesh
    from reasonkit.presets import get_preset

    out = {"n_devices": jax.device_count()}
    for shape in [(8, 1), (2, 4), (1, 8), (-1, 2)]:
        m = rkmesh.make_mesh(shape)
        out[str(shape)] = [list(m.shape.values()), [t.name for t in m.axis_types],
                           sorted(d.id for d in m.devices.flat)]
    p = get_preset("gemma3-1b")
    out["stage_shapes"] = {s: list(rkmesh.stage_mesh(p, s).shape.values())
                           for s in rkmesh.STAGES}
    fsdp, tp = rkmesh.make_mesh((8, 1)), rkmesh.make_mesh((2, 4))

    def spec(x):  # PartitionSpec as a JSON list
        return [e if e is None or isinstance(e, str) else list(e) for e in x.sharding.spec]

    def specs(model):
        st = nnx.state(model)
        return {jax.tree_util.keystr(k): spec(v)
                for k, v in jax.tree_util.tree_leaves_with_path(st)}

    def meshes(model):
        return {str(dict(v.sharding.mesh.shape)) for v in jax.tree.leaves(nnx.state(model))}

    # nnx.Linear with ("fsdp", "tp") metadata
    # (flax shards a variable with metadata as it is created, so create it on a mesh)
    with jax.set_mesh(rkmesh.make_mesh((1, 8))):
        lin = nnx.Linear(16, 8, rngs=nnx.Rngs(0),
                         kernel_init=nnx.with_partitioning(nnx.initializers.lecun_normal(),
                                                           ("fsdp", "tp")))
    before = np.asarray(lin.kernel.value)
    rkmesh.reshard(lin, fsdp)
    out["linear_fsdp"] = [spec(lin.kernel.value),
                          list(lin.kernel.value.addressable_shards[0].data.shape)]
    rkmesh.reshard(lin, tp)
    k = lin.kernel.value
    out["linear_tp"] = [spec(k), list(k.addressable_shards[0].data.shape),
                        bool(np.array_equal(np.asarray(k), before)),
                        rkmesh.mesh_of(lin) == tp]

    # a batch every process holds whole, as one global array: rows over fsdp where they divide
    batch = {"ids": np.arange(24).reshape(8, 3), "odd": np.arange(6), "text": np.array(["a"] * 8)}
    placed = rkmesh.global_batch(batch, fsdp)
    stream = iter([batch])
    out["global_batch"] = [spec(placed["ids"]), list(placed["ids"].addressable_shards[0].data.shape),
                           bool(np.array_equal(placed["ids"], batch["ids"])), spec(placed["odd"]),
                           placed["text"] is batch["text"], rkmesh.global_batches(stream, fsdp) is stream]

    # a pytree keeps each array's spec
    tree = jax.device_put({"a": jnp.arange(32.0).reshape(8, 4)},
                          jax.sharding.NamedSharding(fsdp, P("fsdp")))
    moved = rkmesh.reshard(tree, tp)
    out["tree"] = [spec(moved["a"]), moved["a"].sharding.mesh == tp,
                   bool(np.array_equal(moved["a"], tree["a"]))]

    # a tiny Tunix Gemma 3 + LoRA: SFT layout (8, 1) -> GRPO layout (2, 4)
    from tunix.models.gemma3 import model as g3
    cfg = g3.ModelConfig(num_layers=2, num_embed=64, embed_dim=32, hidden_dim=64,
                         num_heads=2, head_dim=16, num_kv_heads=1, sliding_window_size=16,
                         param_dtype=jnp.float32)
    base = g3.Gemma3(cfg, rngs=nnx.Rngs(0))
    rkmesh.reshard(base, fsdp)
    tokens, positions = jnp.array([[2, 5, 7, 9]]), jnp.arange(4)[None]
    mask = jnp.tril(jnp.ones((1, 4, 4), bool))
    # with LoRA adapters, as SFT / DPO hand it to GRPO (qwix shards them like their weight)
    import qwix
    provider = qwix.LoraProvider(module_path=".*_einsum|.*_proj", rank=4, alpha=4.0)
    with jax.set_mesh(fsdp):
        gm = qwix.apply_lora_to_model(base, provider, tokens, positions, None, mask,
                                      rngs=nnx.Rngs(1))
    out["lora_count"] = sum(isinstance(v, nnx.LoRAParam) for _, v in nnx.iter_graph(gm))
    out["gemma_fsdp_specs"] = specs(gm)
    out["gemma_fsdp_meshes"] = sorted(meshes(gm))
    values = [np.asarray(x) for x in jax.tree.leaves(nnx.state(gm))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rkmesh.reshard(gm, tp)
    out["gemma_warnings"] = [str(w.message) for w in caught]
    out["gemma_tp_specs"] = specs(gm)
    out["gemma_tp_meshes"] = sorted(meshes(gm))
    out["gemma_same_values"] = all(np.array_equal(a, np.asarray(b)) for a, b in
                                   zip(values, jax.tree.leaves(nnx.state(gm))))
    try:
        rkmesh.reshard(gm, tp, strict=True)
        out["strict"] = "no error"
    except ValueError as err:
        out["strict"] = str(err)
    # Tunix's own hand-off on the same model: fails where the heads do not split
    from tunix.rl.reshard import reshard_model_to_mesh
    rkmesh.reshard(gm, fsdp)
    try:
        reshard_model_to_mesh(gm, tp)
        out["tunix"] = "ok"
    except Exception as err:
        out["tunix"] = type(err).__name__
    print("RESULT" + json.dumps(out))
""")


@pytest.fixture(scope="module")
def eight():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _EIGHT_DEVICES], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


@pytest.mark.slow
def test_make_mesh_on_eight_devices(eight):
    assert eight["n_devices"] == 8
    for shape, dims in [("(8, 1)", [8, 1]), ("(2, 4)", [2, 4]), ("(1, 8)", [1, 8]),
                        ("(-1, 2)", [4, 2])]:
        got_dims, types, ids = eight[shape]
        assert got_dims == dims
        assert types == ["Auto", "Auto"]
        assert ids == list(range(8))
    assert eight["stage_shapes"] == {"sft": [8, 1], "dpo": [8, 1], "grpo": [2, 4],
                                     "eval": [2, 4]}


@pytest.mark.slow
def test_reshard_linear(eight):
    assert eight["linear_fsdp"] == [["fsdp", "tp"], [2, 8]]
    spec, shard, same, on_tp = eight["linear_tp"]
    assert spec == ["fsdp", "tp"] and shard == [8, 2]
    assert same and on_tp


@pytest.mark.slow
def test_global_batch_splits_rows_over_fsdp_and_one_process_keeps_its_stream(eight):
    # [spec, shard shape, same values, spec of 6 rows on 8 devices, text untouched, stream untouched]
    assert eight["global_batch"] == [["fsdp"], [1, 3], True, [], True, True]


@pytest.mark.slow
def test_reshard_pytree_keeps_spec(eight):
    assert eight["tree"] == [["fsdp"], True, True]


@pytest.mark.slow
def test_reshard_gemma3_fsdp_to_tp(eight):
    fsdp, tp = eight["gemma_fsdp_specs"], eight["gemma_tp_specs"]
    emb = "['embedder']['input_embedding'].value"
    q = "['layers'][0]['attn']['q_einsum']['w'].value"
    up = "['layers'][0]['mlp']['up_proj']['kernel'].value"
    assert fsdp[emb] == tp[emb] == ["tp", "fsdp"]
    assert tp[up] == ["fsdp", "tp"]
    # 2 query heads cannot split over tp=4: that dimension is replicated, with a warning
    assert fsdp[q] == ["tp", "fsdp"] and tp[q] == [None, "fsdp"]
    # LoRA a [D, r] follows the weight's input axis, b [r, F] its output axis
    assert eight["lora_count"] == 2 * 6 * 2
    assert tp[up.replace("kernel", "kernel_lora_a")] == ["fsdp"]
    assert tp[up.replace("kernel", "kernel_lora_b")] == [None, "tp"]
    assert any("do not divide" in w for w in eight["gemma_warnings"])
    assert "does not fit" in eight["strict"]
    assert eight["gemma_fsdp_meshes"] == ["{'fsdp': 8, 'tp': 1}"]
    assert eight["gemma_tp_meshes"] == ["{'fsdp': 2, 'tp': 4}"]
    assert eight["gemma_same_values"]
    # Tunix's reshard_model_to_mesh keeps every axis and fails on this model
    assert eight["tunix"] != "ok"


# --- two processes: what a pod does after init_distributed, checkpoints included -----------

_TWO_PROCESSES = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    import orbax.checkpoint as ocp
    from jax.sharding import NamedSharding, PartitionSpec as P
    from orbax.checkpoint._src.checkpointers.async_checkpointer import AsyncCheckpointer
    from reasonkit.presets import get_preset
    from reasonkit.runtime import mesh as rkmesh
    from reasonkit.train._build import _checkpointing

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    joined = rkmesh.init_distributed()  # $JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES, $JAX_PROCESS_ID
    m = rkmesh.make_mesh((4, 1))  # both processes' devices
    whole = np.arange(8.0).reshape(4, 2)
    x = jax.make_array_from_callback(whole.shape, NamedSharding(m, P("fsdp")), lambda i: whole[i])
    # The checkpoint manager as a stage builds it (Tunix's item handlers, the stage's options)
    options = _checkpointing(get_preset("tiny").sft)
    manager = ocp.CheckpointManager(sys.argv[1], options=options,
                                    item_handlers={"model_params": ocp.PyTreeCheckpointHandler()})
    manager.save(0, args=ocp.args.Composite(model_params=ocp.args.PyTreeSave({"x": x})), force=True)
    manager.wait_until_finished()
    back = manager.restore(0, args=ocp.args.Composite(model_params=ocp.args.PyTreeRestore(
        {"x": jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)})))
    from jax.experimental import multihost_utils
    got = multihost_utils.process_allgather(back["model_params"]["x"], tiled=True)
    print("RESULT" + json.dumps({"joined": joined, "processes": jax.process_count(),
          "async": isinstance(manager._checkpointer, AsyncCheckpointer),
          "enable_async": options.enable_async_checkpointing,
          "equal": bool((np.asarray(got) == whole).all())}))
    manager.close()
""")


@pytest.mark.slow
def test_two_processes_join_and_write_an_async_checkpoint_together(tmp_path):
    """A pod's checkpointing mode on two processes: init_distributed joins them, and Orbax
    0.12.8 writes asynchronously with more than one process (it does not refuse it: its
    background commit waits at barriers of JAX's distributed client, which only exists once
    jax.distributed is initialised), with the options every stage uses; it restores whole."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_") and k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-c", _TWO_PROCESSES, str(tmp_path / "ckpt")],
                              env={**env, "JAX_PROCESS_ID": str(i)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            outs.append(json.loads([x for x in out.splitlines() if x.startswith("RESULT")][-1][6:]))
    finally:
        for p in procs:
            p.kill()
    assert outs == [{"joined": True, "processes": 2, "async": True, "enable_async": True,
                     "equal": True}] * 2
