"""Real-shape checks: Gemma's SFT step compiles on 8 simulated devices with TPU semantics and
fits; LoRA goes on at any mesh size; base weights shard over fsdp; an indivisible batch is
refused before training."""

import collections
import json
import os
import subprocess
import sys
import textwrap

import pytest

from reasonkit import budget, shapes
from reasonkit.presets import get_preset
from reasonkit.runtime import hardware


@pytest.mark.slow
def test_gemma3_1b_sft_compiles_on_eight_devices_and_fits():
    """The compiler's per-device figure for the v5e-8 preset, constraints on, abstract weights."""
    result = shapes.check_in_subprocess("gemma3-1b", "sft", timeout=900)
    assert result["devices"] == 8 and result["mesh"] == [8, 1]
    step = result["programs"]["step"]
    assert step["peak"] == step["arguments"] + step["outputs"] - step["aliased"] + step["temporaries"]
    assert step["aliased"] > 0  # the optimizer state is donated
    assert result["peak"] <= budget.FIT_FRACTION * 16 * 2**30, shapes.describe(result)
    assert result["fits"]
    assert 0.8 <= result["ratio"] <= 1.2, shapes.describe(result)  # memory_budget agrees


_FOUR_DEVICES = textwrap.dedent("""
    import json
    import jax, numpy as np
    import qwix
    from flax import nnx
    from reasonkit import models, train
    from reasonkit.runtime import mesh as rkmesh
    from reasonkit.tunix_patches import sharding
    from reasonkit.presets import get_preset
    from tunix.sft import sharding_utils

    out = {"devices": jax.device_count()}
    p = get_preset("tiny", **{"sft.batch_size": 8, "sft.max_target_length": 48,
                              "sft.max_prompt_length": 16})
    mesh = rkmesh.stage_mesh(p, "sft")
    out["mesh"] = dict(mesh.shape)
    with sharding.tpu_sharding_constraints():
        base = models.load_model(models.resolve_source(p.model), p.model, mesh=mesh)
        provider = qwix.LoraProvider(module_path=p.lora.module_path, rank=2, alpha=2.0)
        try:  # what Tunix's own dummy input (2 rows) does under a TPU's constraints
            with mesh:
                qwix.apply_lora_to_model(base, provider, rngs=nnx.Rngs(0), **base.get_model_input())
            out["tunix_input"] = "ok"
        except Exception as err:
            out["tunix_input"] = f"{type(err).__name__}: {err}"[:300]
        stage = train.build_stage(p, "sft")  # the tiny checkpoint, LoRA on, on 4 devices

        def spec(v):
            return [e if e is None or isinstance(e, str) else list(e) for e in v.sharding.spec]

        flat = {".".join(map(str, k)): v.value for k, v in nnx.to_flat_state(nnx.state(stage.policy))}
        out["specs"] = {k: spec(flat[k]) for k in (
            "embedder.input_embedding", "layers.0.attn.q_einsum.w", "layers.0.mlp.up_proj.kernel",
            "layers.0.mlp.down_proj.kernel", "layers.0.mlp.up_proj.kernel_lora_a")}
        out["shard_rows"] = list(flat["embedder.input_embedding"].addressable_shards[0].data.shape)
        # one real step of the chunked loss, sharded, constraints on
        tok = stage.tokenizer
        rows = [([5 + i, 6], [7 + i] * (10 + 3 * i) + [1]) for i in range(8)]
        batch = train.sft_collator(p, tok)(rows)
        from tunix.sft.peft_trainer import _default_loss_fn
        from reasonkit.tunix_patches import logprobs
        with mesh:
            sharded = sharding_utils.shard_input(batch, ("fsdp",))
            inputs = train.gen_model_input_fn(tok.pad_id())
            out["tunix_loss"], out["our_loss"] = (
                float(nnx.jit(lambda m, x: fn(m, **inputs(x)))(stage.policy, sharded))
                for fn in (_default_loss_fn, logprobs.sft_loss))
            step, _ = stage.trainer.jit_train_and_eval_step()
            loss, _, norm = step(sharded)
        out["loss"], out["grad_norm"] = float(loss), float(norm)
        try:
            train.build_stage(p.replace(**{"sft.batch_size": 6}), "sft")
            out["refused"] = "no"
        except ValueError as err:
            out["refused"] = str(err)
        try:
            train.build_stage(p.replace(**{"grpo.batch_size": 3, "grpo.num_generations": 2,
                                           "grpo.mesh.shape": (-1, 1)}), "grpo", weights="abstract")
            out["grpo_refused"] = "no"
        except ValueError as err:
            out["grpo_refused"] = str(err)
    print("RESULT" + json.dumps(out))
""")


@pytest.fixture(scope="module")
def four():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _FOUR_DEVICES], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


@pytest.mark.slow
def test_lora_goes_on_at_any_mesh_size(four):
    assert four["devices"] == 4 and four["mesh"] == {"fsdp": 4, "tp": 1}
    # Tunix's 2-row dummy input does not split 4 ways under a TPU's constraints; ours does
    assert "IndivisibleError" in four["tunix_input"] or "divisible" in four["tunix_input"], \
        four["tunix_input"]
    assert 0 < four["loss"] < 20 and four["grad_norm"] > 0
    # the vocabulary-parallel chunked loss, sharded 4 ways, is Tunix's own loss
    assert four["our_loss"] == pytest.approx(four["tunix_loss"], rel=1e-5)
    assert four["loss"] == pytest.approx(four["our_loss"], rel=1e-6)


@pytest.mark.slow
def test_base_weights_are_sharded_over_fsdp(four):
    specs = four["specs"]
    assert specs["embedder.input_embedding"] == ["tp", "fsdp"]  # [V, D]: D over fsdp
    assert "fsdp" in specs["layers.0.attn.q_einsum.w"]
    assert specs["layers.0.mlp.up_proj.kernel"] == ["fsdp", "tp"]
    assert specs["layers.0.mlp.down_proj.kernel"] == ["tp", "fsdp"]
    assert specs["layers.0.mlp.up_proj.kernel_lora_a"][0] == "fsdp"
    vocab, dim = get_preset("tiny").model.vocab_size, get_preset("tiny").model.embed_dim
    assert four["shard_rows"] == [vocab, dim // 4]  # each device holds a quarter


@pytest.mark.slow
def test_a_batch_that_does_not_split_is_refused_before_training(four):
    assert four["refused"].startswith("sft.batch_size=6 does not split over the data axes")
    assert "fsdp = 4 ways" in four["refused"] and "4 or 8 (multiples of 4)" in four["refused"]
    # GRPO counts rows as batch x generations: 3 x 2 = 6 rows on 4 devices
    assert "grpo.batch_size=3 (3 x grpo.num_generations = 6 rows)" in four["grpo_refused"]
    assert "2 or 4 (multiples of 2)" in four["grpo_refused"]


def test_every_committed_check_is_within_20_percent_of_the_estimate():
    """benchmarks/results/shapes.json's compiler figures (no compiling here) against the estimate the
    current ``budget.memory_budget(..., backend="cpu")`` makes for the same stage."""
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results", "shapes.json")
    with open(path) as f:
        results = json.load(f)["results"]
    assert len(results) == 30 and not any("error" in r for r in results)
    for r in results:
        preset = get_preset(r["preset"])
        est = shapes.estimate(preset, r["stage"], r["devices"],
                              hardware.from_name(preset.hardware))
        assert 0.8 <= est["estimate"] / r["peak"] <= 1.2, (r["preset"], r["stage"], est)
        assert est["estimate_tpu"] < est["estimate"]  # XLA:CPU holds float32 copies a TPU does not
        assert est == {"estimate": r["estimate"], "estimate_tpu": r["estimate_tpu"]}, \
            "benchmarks/results/shapes.json is stale: run python -m benchmarks.speed.shapes --reestimate"


@pytest.mark.slow
def test_peak_buffers_groups_the_values_live_at_a_programs_peak(tmp_path):
    """benchmarks.speed.peak_buffers on a real dump: at the peak of ``tanh(x @ x) @ x + x.sum()``
    XLA:CPU holds the argument and one [512, 512] float32 temporary, each named by its op."""
    from benchmarks.speed import peak_buffers

    code = ("import jax, jax.numpy as jnp\n"
            "f = jax.jit(lambda x: jnp.tanh(x @ x) @ x + x.sum())\n"
            "f.lower(jax.ShapeDtypeStruct((512, 512), jnp.float32)).compile()\n")
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_dump_to={tmp_path}")
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=300)
    (live_range,) = tmp_path.glob("*jit__lambda*-live-range.txt")
    hlo = live_range.with_name(live_range.name.replace("-live-range.txt", ".txt"))
    groups = peak_buffers.peak_groups(live_range.read_text(), hlo.read_text())
    ops = collections.Counter()
    for (shape, op, _), (count, nbytes) in groups.items():
        assert shape == "f32[512,512]" and nbytes == count * 512 * 512 * 4
        ops["argument" if op == "parameter" else "temporary"] += count
    assert ops == {"argument": 1, "temporary": 1}
