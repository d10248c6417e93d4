"""Hardware detection, the peak table, the matmul benchmark and the memory budget."""

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

from reasonkit import hardware as hwmod
from reasonkit.config import (
    PRESETS,
    DPOConfig,
    EvalConfig,
    GRPOConfig,
    LoraConfig,
    MeshConfig,
    ModelConfig,
    SFTConfig,
    get_preset,
)
from reasonkit.config import get_preset as PRESET_OF
from reasonkit.hardware import GiB, from_name, memory_budget

ROOT = pathlib.Path(__file__).resolve().parents[1]

# --- detection -----------------------------------------------------------------------------


def test_detect_on_cpu():
    hw = hwmod.detect()
    assert (hw.platform, hw.generation, hw.device_count, hw.process_count) == ("cpu", "cpu",
                                                                              1, 1)
    assert hw.device_kind == "cpu"
    assert hw.memory_source == "host RAM" and hw.memory_per_device > 2**28
    assert hw.peak_flops_per_device is None  # measured, not tabulated
    assert hw.name == "cpu-1" and "cpu" in hw.summary()
    with pytest.raises(dataclasses.FrozenInstanceError):
        hw.device_count = 8


@pytest.mark.parametrize("platform, kind, gen", [
    ("tpu", "TPU v2", "v2"), ("tpu", "TPU v3", "v3"), ("tpu", "TPU v4", "v4"),
    ("tpu", "TPU v5 lite", "v5e"), ("tpu", "TPU v5e", "v5e"), ("tpu", "TPU v5", "v5p"),
    ("tpu", "TPU v5p", "v5p"), ("tpu", "TPU v6 lite", "v6e"), ("tpu", "TPU v6e", "v6e"),
    ("gpu", "NVIDIA H100 80GB HBM3", "h100"), ("gpu", "NVIDIA A100-SXM4-40GB", "a100"),
    ("gpu", "Tesla T4", "t4"), ("gpu", "NVIDIA L4", "l4"), ("gpu", "NVIDIA H200", "h200"),
    ("cpu", "cpu", "cpu"),
])
def test_generation_of(platform, kind, gen):
    assert hwmod.generation_of(platform, kind) == gen


def test_peak_table_per_device():
    # v3 exposes 2 cores per chip: half of a chip's 123 TFLOP/s and 32 GiB per device
    assert hwmod.PEAK_TABLE["v3"] == (16 * GiB, 61.5e12)
    assert hwmod.PEAK_TABLE["v5e"] == (16 * GiB, 197e12)
    assert hwmod.PEAK_TABLE["v5p"][1] == 459e12 and hwmod.PEAK_TABLE["v6e"][1] == 918e12
    assert hwmod._gpu_memory("a100", "NVIDIA A100-SXM4-80GB") == 80 * GiB
    for gen, kind in hwmod.DEVICE_KINDS.items():  # the representative kinds round-trip
        platform = "tpu" if gen.startswith("v") else "gpu"
        assert hwmod.generation_of(platform, kind) == gen


def test_from_name():
    hw = from_name("tpu-v5e-8")
    assert (hw.platform, hw.generation, hw.device_count) == ("tpu", "v5e", 8)
    assert hw.memory_per_device == 16 * GiB and hw.peak_flops_per_device == 197e12
    assert from_name("gpu-h100-1").memory_per_device == 80 * GiB
    assert from_name("cpu-4").device_count == 4
    for preset in ("gemma3-1b", "gemma3-1b-v3-8", "gemma2-2b", "gemma3-270m"):
        assert from_name(get_preset(preset).hardware).name == get_preset(preset).hardware
    with pytest.raises(ValueError, match="unknown hardware name 'tpu-v9-8'"):
        from_name("tpu-v9-8")


@pytest.mark.parametrize("name", ["cpu-0", "tpu-v5e-0", "gpu-h100-0"])
def test_from_name_refuses_zero_devices(name):
    with pytest.raises(ValueError, match=f"{name}.*device count must be >= 1"):
        from_name(name)


def test_matmul_benchmark():
    r = hwmod.matmul_benchmark(n=128, repeats=2, inner=4)
    assert r["flops_per_s"] > 0 and r["seconds"] > 0
    assert r["dtype"] == "float32" and r["peak_flops_per_s"] is None
    assert r["flops_per_s"] == pytest.approx(2 * 128**3 * 4 / r["seconds"])


def test_format_bytes():
    assert hwmod.format_bytes(0) == "0 B"
    assert hwmod.format_bytes(32 * 1024 * 262144 * 4) == "32.0 GiB"
    assert hwmod.format_bytes(238 * 2**20) == "238 MiB"
    assert hwmod.format_bytes(6.5 * GiB) == "6.50 GiB"
    # three significant digits, also where rounding carries into the next digit or unit
    assert hwmod.format_bytes(2**20 - 1) == "1.00 MiB"
    assert hwmod.format_bytes(GiB - 2**20) == "1023 MiB"
    assert hwmod.format_bytes(9.996 * 1024) == "10.0 KiB"
    assert hwmod.format_bytes(99.96 * 2**20) == "100 MiB"


# A program whose temporaries (two [2048, 4096] float32 cumulative sums, 66 MiB) are one block
# larger than glibc maps from its heap by default; the median call's minor page faults (kept,
# an odd call still finds the heap laid out otherwise and faults the block in once more).
_STEP_MEMORY = """
import json, resource, sys
from reasonkit import hardware
said = hardware.keep_step_memory(env={"REASONKIT_KEEP_STEP_MEMORY": sys.argv[1]})
import jax, jax.numpy as jnp

@jax.jit
def f(x):
    a = jnp.cumsum(x, 0)
    return (jnp.cumsum(a.T, 0)[::64, ::64] * x.T[::64, ::64]).sum()

x = jnp.ones((2048, 4096), jnp.float32) / 4096
outs, faults = [f(x).item()], []
for _ in range(8):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    outs.append(f(x).item())
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"said": said, "faults": sorted(faults)[4], "outs": outs,
                  "temp": f.lower(x).compile().memory_analysis().temp_size_in_bytes}))
"""


def test_kept_step_memory_ends_the_page_faults_of_each_call_and_changes_no_number():
    def process(keep: str) -> dict:
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", _STEP_MEMORY, keep], env=env, cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out.splitlines()[-1])

    kept, fresh = process("1"), process("0")
    assert kept["said"].startswith("step memory: kept between steps"), kept["said"]
    assert fresh["said"] == "step memory: left to glibc (REASONKIT_KEEP_STEP_MEMORY=0)"
    assert kept["temp"] > 64 * 2**20  # over what glibc would keep without being asked
    pages = kept["temp"] / 4096
    assert fresh["faults"] > pages / 2  # glibc maps the block fresh for every call...
    assert kept["faults"] < pages / 50  # ...and kept, the next call finds it there
    assert kept["outs"] == fresh["outs"]  # the same numbers, bit for bit


class _Libc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_keep_step_memory_leaves_a_process_whose_backends_already_started():
    import jax

    jax.devices()  # started; the CPU client reads the flag only when it starts, so setting
    async_dispatch = jax.config.read("jax_cpu_enable_async_dispatch")  # it now changes nothing
    jax.config.update("jax_cpu_enable_async_dispatch", True)
    try:
        libc = _Libc()
        said = hwmod.keep_step_memory(env={}, libc=libc)
        assert "backends started before keep_step_memory" in said and libc.calls == []
        said = hwmod.keep_step_memory(env={"REASONKIT_KEEP_STEP_MEMORY": "0"}, libc=libc)
        assert said.endswith("(REASONKIT_KEEP_STEP_MEMORY=0)") and libc.calls == []
    finally:
        jax.config.update("jax_cpu_enable_async_dispatch", async_dispatch)


def test_cpu_only_without_a_setting_looks_for_an_accelerator_runtime(monkeypatch):
    import importlib.util

    assert hwmod.cpu_only("") is True  # this venv: jaxlib alone
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "libtpu"
                        else real(name, *a))
    assert hwmod.cpu_only("") is False and hwmod.cpu_only("cpu") is True


# --- the budget by hand ------------------------------------------------------------------

# L=2, V=100, D=8, F=16, H=2, K=1, h=4, fp32; rank-2 LoRA on all six projections
TOY_MODEL = ModelConfig(family="gemma3", source="tiny", num_layers=2, vocab_size=100,
                        embed_dim=8, hidden_dim=16, num_heads=2, head_dim=4,
                        num_kv_heads=1, sliding_window=4, dtype="float32",
                        attention="tunix")  # every layer's [B, H, T, T], as Tunix holds them


def toy_preset():
    p = get_preset("tiny")
    return dataclasses.replace(
        p, name="toy", model=TOY_MODEL, lora=LoraConfig(rank=2, alpha=2.0),
        sft=SFTConfig(mesh=MeshConfig(shape=(-1, 1)), batch_size=4, max_prompt_length=4,
                      max_target_length=10),
        dpo=DPOConfig(mesh=MeshConfig(shape=(-1, 1)), batch_size=2, max_prompt_length=4,
                      max_response_length=6),
        grpo=GRPOConfig(mesh=MeshConfig(shape=(1, -1)), batch_size=2, num_generations=2,
                        max_prompt_length=4, max_generation_length=6),
        eval=EvalConfig(batch_size=3, max_prompt_length=4, max_generation_length=6))


TOY_HW = hwmod.HardwareInfo(platform="tpu", device_kind="toy", generation="toy",
                            device_count=2, memory_per_device=100_000, memory_source="table",
                            peak_flops_per_device=None)


def test_toy_num_params():
    # embedding 100*8 + 2 layers * (attention 8*4*(2*2 + 2*1) + MLP 3*8*16)
    assert TOY_MODEL.num_params == 800 + 2 * (192 + 384) == 1952


def test_budget_by_hand_sft_fsdp():
    b = memory_budget(toy_preset(), "sft", hw=TOY_HW)
    assert b.mesh_shape == (2, 1) and b.phase == "train"
    # every weight splits 2 ways over fsdp; 4 bytes each
    base = 1952 // 2 * 4
    # LoRA a [in, 2] follows the input's axis (fsdp: D/2), b [2, out] the output's (tp=1):
    #   q 2*(4+8), kv 2*(4+8), o 2*(8+4), gate 2*(4+16), up 2*(4+16), down 2*(16+4)
    lora = 2 * (24 + 24 + 24 + 40 + 40 + 40) * 4 * 4  # 2 layers, fp32, param+grad+2 moments
    # 4 sequences / fsdp 2 = 2 per device, 10 tokens: 20 tokens
    per_token_layer = 6 * 8 + 3 * 16 + 4 * (2 + 1) * 4  # = 144 elements
    act = 20 * 2 * per_token_layer * 4
    scores = 2 * 2 * 2 * 2 * 10 * 10 * 4  # seqs x layers x copies x heads x T x T x 4 B
    # log-probs a chunk at a time: all 4 rows x all 10 positions (one chunk) x the device's
    # 50 of the 100 vocabulary entries x 4 B, four such float32 buffers, plus that slice of
    # the embedding (50 x D = 8, fp32) the chunk is multiplied with
    logits = 4 * 4 * 10 * 50 * 4 + 50 * 8 * 4
    returned = base + lora // 4  # the step returns base + LoRA params (not donated)
    assert b.items == {"base params": base, "LoRA params + grads + Adam": lora,
                       "activations": act, "attention scores": scores, "logits": logits,
                       "returned model state": returned}
    assert (base, lora, act, scores, logits, returned) == (3904, 6144, 23040, 6400, 33600, 5440)
    assert b.total == 78528 and b.capacity == 100_000
    assert b.fits  # 78528 <= 0.9 * 100000
    assert b.advice() == []


def test_budget_by_hand_grpo_tensor_parallel():
    b = memory_budget(toy_preset(), "grpo", hw=TOY_HW)
    assert b.mesh_shape == (1, 2) and b.phase == "train"
    # tp=2 splits heads, F and the vocabulary; the single KV head is replicated
    base = (400 + 2 * (32 + 64 + 32 + 64 + 64 + 64)) * 4
    lora = 2 * (2 * (8 + 4) + 2 * (8 + 8) + 2 * (4 + 8) + 3 * 2 * (8 + 8)) * 16
    tokens = 2 * 2 * 10  # 2 prompts x 2 generations, prompt 4 + generation 6
    train = {"activations": tokens * 2 * 144 * 4 // 2,
             "attention scores": 4 * 2 * 2 * 2 * 100 * 4 // 2,
             "logits": 4 * 4 * 6 * 50 * 4 + 50 * 8 * 4,  # 4 rows x 6 completion positions x V/2
             "returned model state": base + lora // 4}
    rollout = {"KV cache": 4 * 2 * 2 * 1 * 4 * 10 * 4,  # seqs x (k,v) x L x K x h x S x 4 B
               "prefill logits": 4 * 1 * 50 * 4}  # seqs x the last position x V/tp x 4 B
    assert b.items == {"base params": base, "LoRA params + grads + Adam": lora, **train}
    assert b.off_peak == rollout
    assert (base, lora) == (4160, 5632)


def test_chunked_attention_holds_one_query_block_of_one_layer():
    p = toy_preset()
    tunix = memory_budget(p, "sft", hw=TOY_HW).items["attention scores"]
    chunked = memory_budget(dataclasses.replace(p, model=dataclasses.replace(
        TOY_MODEL, attention="chunked")), "sft", hw=TOY_HW).items["attention scores"]
    assert tunix == 2 * 2 * 2 * 2 * 10 * 10 * 4  # seqs x layers x copies x heads x T x T x 4 B
    assert chunked == 2 * 1 * 2 * 2 * 10 * 10 * 4  # one layer; one block: 10 has no divisor <= 64 but 10
    # rows of 1024 (the Gemma presets' SFT): blocks of 64 queries against up to 1024 keys
    g = get_preset("gemma3-1b")
    tunix_g = memory_budget(dataclasses.replace(g, model=dataclasses.replace(g.model, attention="tunix")),
                            "sft").items["attention scores"]
    assert memory_budget(g, "sft").items["attention scores"] * 1024 // 64 == tunix_g


def test_budget_dpo_and_eval_shapes():
    p = toy_preset()
    dpo = memory_budget(p, "dpo", hw=TOY_HW)
    # DPO: chosen + rejected = 2 x 2 sequences of 4 + 6 tokens: same tokens as SFT's 4 x 10
    sft = memory_budget(p, "sft", hw=TOY_HW)
    assert dpo.items["logits"] == sft.items["logits"]
    ev = memory_budget(p, "eval", hw=TOY_HW)
    assert ev.mesh_shape == (1, 2) and ev.phase == "generate"
    assert set(ev.items) == {"base params", "LoRA params", "KV cache", "prefill logits"}
    assert ev.items["KV cache"] == 3 * 2 * 2 * 1 * 4 * 10 * 4
    assert ev.items["LoRA params"] * 4 == memory_budget(
        p, "grpo", hw=TOY_HW).items["LoRA params + grads + Adam"]


def test_base_params_match_num_params_on_one_device():
    one = dataclasses.replace(TOY_HW, device_count=1)
    for name in ("tiny", "gemma3-270m", "gemma3-1b-v5e-1", "gemma2-2b"):
        p = get_preset(name, **{"sft.mesh": MeshConfig(shape=(1, 1))})
        nbytes = 2 if p.model.dtype == "bfloat16" else 4
        b = memory_budget(p, "sft", n_devices=1, hw=one)
        assert b.items["base params"] == p.model.num_params * nbytes


def test_logits_scale_with_vocab():
    p = toy_preset()
    big = p.replace(**{"model.vocab_size": 1000})
    small_b, big_b = (memory_budget(x, "sft", hw=TOY_HW) for x in (p, big))
    assert big_b.items["logits"] == 10 * small_b.items["logits"]
    assert big_b.items["activations"] == small_b.items["activations"]
    # the example from the docs: 32 x 1024 x 262144 x 4 B = 32 GiB per fp32 copy
    assert 32 * 1024 * 262144 * 4 == 32 * GiB


def test_remat_and_qlora_shrink_their_items():
    p = get_preset("gemma3-1b", **{"model.remat": False})
    v5e = from_name("tpu-v5e-8")
    b = memory_budget(p, "sft", hw=v5e)
    r = memory_budget(p.replace(**{"model.remat": True}), "sft", hw=v5e)
    # remat keeps the residual stream (6 D a token, bf16) of every layer, not the 3 F +
    # heads: 13.8 KB instead of 65.5 KB a token per layer
    assert r.items["activations"] == pytest.approx(b.items["activations"] * 6 * 1152 * 2 / (
        (6 * 1152 + 3 * 6912 + 4 * (4 + 1) * 256) * 2), rel=1e-6)
    assert r.items["logits"] == b.items["logits"]
    q = memory_budget(p.replace(**{"lora.qlora": True}), "sft", hw=v5e)
    assert q.items["base params"] < 0.6 * b.items["base params"]  # embedding stays bf16


def test_gemma3_1b_on_v5e_8():
    p, v5e = get_preset("gemma3-1b"), from_name("tpu-v5e-8")
    sft = memory_budget(p, "sft", hw=v5e)
    assert sft.mesh_shape == (8, 1)
    # log-probs in chunks of 64 positions: 32 rows x 64 x 262144 / 8 x 4 B = 256 MiB, 4 buffers,
    # and the device's 32768 rows of the embedding, whole along D = 1152, bf16 (72 MiB)
    assert sft.items["logits"] == 4 * 256 * 2**20 + 262144 // 8 * 1152 * 2
    assert sft.items["base params"] == pytest.approx(p.model.num_params * 2 / 8, rel=1e-6)
    rows = hwmod.budget_table(p, v5e)
    assert [r["stage"] for r in rows] == ["sft", "dpo", "grpo", "eval"]
    assert rows[3]["fits"] and rows[3]["activations"] == 0 and rows[3]["KV cache"] > 0


def test_advice_when_it_does_not_fit():
    p = get_preset("gemma2-2b", **{"model.remat": False, "dpo.batch_size": 32})
    v5e = from_name("tpu-v5e-8")
    b = memory_budget(p, "dpo", hw=v5e)
    assert not b.fits
    advice = b.advice()
    assert advice and all(a.total < b.total for a in advice)
    assert [a.total for a in advice] == sorted(a.total for a in advice)
    changes = " | ".join(a.change for a in advice)
    for what in ("batch_size", "max_response_length", "remat", "qlora"):
        assert what in changes
    for a in advice:  # each estimate is a re-run of the budget on the changed preset
        again = memory_budget(p.replace(**a.overrides), "dpo", hw=v5e)
        assert again.total == a.total and again.fits == a.fits
    assert any(a.fits for a in advice)
    assert "does NOT fit" in str(b) and "fits" in str(advice[0])


def test_combined_advice_when_no_single_change_fits():
    tight = dataclasses.replace(TOY_HW, memory_per_device=30_000)
    b = memory_budget(toy_preset(), "sft", hw=tight)
    advice = b.advice()
    assert not b.fits and not any(a.fits for a in advice[:-1])
    last = advice[-1]
    assert last.fits and last.change.startswith("together:")
    assert memory_budget(toy_preset().replace(**last.overrides), "sft",
                         hw=tight).total == last.total


def test_budget_errors():
    with pytest.raises(ValueError, match="stage='rl'"):
        memory_budget(toy_preset(), "rl", hw=TOY_HW)
    with pytest.raises(ValueError, match=r"\(2, 4\) uses 8 devices but 2 are available"):
        memory_budget(get_preset("gemma3-1b"), "grpo", hw=TOY_HW)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_fits_the_hardware_it_was_sized_for(name):
    preset = PRESET_OF(name)
    hw = hwmod.detect() if preset.hardware == "cpu" else from_name(preset.hardware)
    for stage in ("sft", "dpo", "grpo", "eval"):
        budget = memory_budget(preset, stage, hw=hw)
        assert budget.fits, f"{name} {stage}: {budget}"


# --- the time model ------------------------------------------------------------------------


def test_stage_flops_by_hand():
    """tiny: SFT 16 x 160 tokens, DPO 2 x 8 x (96 + 64), GRPO 8 x 8 rollouts of 96 + 64, eval 96."""
    p = get_preset("tiny")  # no remat: a training pass is 2 forwards (the base gets no weight grads)
    m, fwd = p.model, hwmod.forward_flops
    sft, dpo, grpo, ev = hwmod.stage_costs(p)
    assert (sft.steps, sft.train_flops, sft.generate_flops) == (240, 2 * fwd(m, 16 * 160, 160), 0)
    assert dpo.train_flops == (2 + 1) * fwd(m, 2 * 8 * 160, 160)  # + the reference's forward
    gen = fwd(m, 64 * 96, 96) + fwd(m, 64 * 64, 160)  # prefill, then 64 tokens over the cache
    assert (grpo.train_flops, grpo.generate_flops) == ((2 + 1) * fwd(m, 64 * 160, 160), gen)
    assert ev.steps == 4 and ev.generate_flops == 5 * (fwd(m, 96 * 96, 96) + fwd(m, 96 * 64, 160))
    orpo = hwmod.stage_costs(p.replace(**{"dpo.algorithm": "orpo", "grpo.beta": 0.0}))
    assert orpo[1].train_flops == 2 * fwd(m, 2 * 8 * 160, 160)  # no reference model
    assert orpo[2].train_flops == 2 * fwd(m, 64 * 160, 160)  # beta 0: no reference forward


def test_time_model_counts_the_gsm8k_test_split():
    """gemma3-1b: every evaluated stage also decodes GSM8K's 1319 test problems greedily."""
    p = get_preset("gemma3-1b")  # eval: batch 32, prompts 256 + 512 generated, 480 held out, 4 samples
    m, fwd = p.model, hwmod.forward_flops
    gen = lambda seqs: fwd(m, seqs * 256, 256) + fwd(m, seqs * 512, 768)  # prefill, then decode
    held_out = 5 * gen(480)  # greedy + 4 sampled
    ev = hwmod.stage_costs(p)[3]
    assert (ev.steps, ev.generate_flops) == (4, held_out + gen(1344))  # 1319 in full batches of 32
    assert ev.note == "held-out 480 x 5 + GSM8K test 1319 x 1"
    off = hwmod.stage_costs(p.replace(**{"eval.gsm8k_test": None}))[3]
    assert (off.generate_flops, off.note) == (held_out, "")
    assert hwmod.stage_costs(p.replace(**{"eval.gsm8k_limit": 40}))[3].generate_flops == held_out + gen(64)
    assert hwmod.stage_costs(p, gsm8k_prompts=0)[3].generate_flops == held_out
    tm = hwmod.time_model(p, from_name("tpu-v5e-8"))
    assert "| eval (held-out 480 x 5 + GSM8K test 1319 x 1) | 4 | 0 + 5.93e+03 |" in tm.report()
    assert tm.seconds("eval") == pytest.approx(4 * (held_out + gen(1344)) / (8 * 197e12 * 0.05))


def test_remat_costs_one_more_forward():
    p = get_preset("gemma3-1b")  # remat on
    assert hwmod.stage_costs(p)[0].train_flops == 3 * hwmod.forward_flops(p.model, 32 * 1024, 1024)


def test_time_model_seconds_and_verdict():
    p = get_preset("gemma3-1b")
    tm = hwmod.time_model(p, from_name("tpu-v5e-8"))
    assert tm.peak == 8 * 197e12
    sft = hwmod.stage_costs(p)[0]
    assert tm.seconds("sft") == pytest.approx(1000 * sft.train_flops / (8 * 197e12 * 0.3))
    assert tm.total() == pytest.approx(sum(tm.seconds(s) for s in ("sft", "dpo", "grpo", "eval")))
    fits = tm.report(seconds_left=8.5 * 3600)
    assert "x an assumed utilisation: 30% training, 5% sampling" in fits and ": fits;" in fits
    assert "the table's peak of 8 x TPU v5 lite" in fits
    tight = tm.report(seconds_left=60, stages=("grpo", "eval"))
    assert "does NOT fit" in tight and "| sft |" not in tight and "| grpo | 800 |" in tight


def test_time_model_on_a_cpu_measures_its_peak():
    tm = hwmod.time_model(get_preset("tiny"), from_name("cpu-1"))
    assert tm.peak > 1e8 and "the measured matmul rate of 1 x cpu" in tm.report()
    assert "12% training" in tm.report()


# --- what XLA:CPU holds beyond a TPU (backend="cpu") -----------------------------------------


def _xla_cpu_items(b):
    return {k: v for k, v in b.items.items() if k.startswith("XLA:CPU")}


@pytest.mark.parametrize("stage", ["sft", "dpo", "grpo", "eval"])
def test_tpu_estimate_is_the_cpu_one_less_its_xla_cpu_items(stage):
    p, v5e = get_preset("gemma2-2b"), from_name("tpu-v5e-8")
    tpu, cpu = (memory_budget(p, stage, hw=v5e, backend=k) for k in ("tpu", "cpu"))
    assert tpu.backend == "tpu" and not _xla_cpu_items(tpu)
    assert _xla_cpu_items(cpu) and "as XLA:CPU compiles it" in str(cpu)
    # the accelerator's items are the same on both; XLA:CPU only adds its own
    assert {k: v for k, v in cpu.items.items() if k in tpu.items} == tpu.items
    assert cpu.total > tpu.total
    assert memory_budget(p, stage, hw=v5e).total == tpu.total  # "tpu" is the default


def test_float32_weight_copies_are_every_decoder_weight_and_lora_factor():
    """On an FSDP mesh each copy is whole (made after the all-gather): 4 B x every decoder
    parameter (the embedding is its own item) + every LoRA parameter, whatever the mesh size."""
    m = get_preset("gemma2-2b").model  # D=2304, F=9216, H=8, K=4, h=256, L=26, rank 64
    decoder = m.num_params - m.vocab_size * m.embed_dim
    lora = 26 * 64 * ((2304 + 8 * 256) + (2304 + 2 * 4 * 256) + (8 * 256 + 2304)
                      + 3 * (2304 + 9216))
    for n in (1, 8):
        p = get_preset("gemma2-2b", **{"sft.mesh": MeshConfig(shape=(n, 1))})
        assert hwmod._cpu_weight_copies(p, {"fsdp": n, "tp": 1}) == 4 * (decoder + lora)
    # tensor parallelism splits the copies as it splits the weights (heads, K=4 and F over 4);
    # a LoRA factor's tp side is split, its D side (fsdp, gathered) and the rank are not
    lora_tp = 26 * 64 * (3 * (2304 + 512) + 3 * (2304 + 2304))
    p = get_preset("gemma2-2b")
    assert hwmod._cpu_weight_copies(p, {"fsdp": 2, "tp": 4}) == 4 * (decoder // 4 + lora_tp)
    tiny = get_preset("tiny")  # float32: XLA:CPU multiplies it as it is
    assert hwmod._cpu_weight_copies(tiny, {"fsdp": 1, "tp": 1}) == 0
    b = memory_budget(tiny, "sft", hw=from_name("cpu-1"), backend="cpu")
    assert _xla_cpu_items(b) == {}


def test_a_single_kv_head_is_broadcast_to_the_query_heads():
    """Tunix's einsum broadcasts a single KV head's cache to all H query heads and XLA:CPU
    keeps every layer's; with K > 1 it groups the query heads instead: no copy."""
    v5e = from_name("tpu-v5e-8")
    g3 = memory_budget(get_preset("gemma3-1b"), "eval", hw=v5e, backend="cpu")  # H=4, K=1
    assert g3.items["XLA:CPU KV per query head"] == 3 * g3.items["KV cache"]
    g2 = memory_budget(get_preset("gemma2-2b"), "eval", hw=v5e, backend="cpu")  # H=8, K=4
    assert g2.items["XLA:CPU KV per query head"] == 0
    # the gemma3-1b rollout's 52 bf16 [16, 768, 4, 256] (1.2 GiB) = cache + 3 more copies;
    # with the prefill's logits at the last position only, the update is GRPO's peak on
    # XLA:CPU (3.15 GiB against the rollout's 2.93, benchmarks/shapes.md) and the rollout
    # is the phase off it
    grpo = memory_budget(get_preset("gemma3-1b"), "grpo", hw=v5e, backend="cpu")
    assert grpo.phase == "train"
    assert (grpo.off_peak["KV cache"] + grpo.off_peak["XLA:CPU KV per query head"]
            == 52 * 16 * 768 * 4 * 256 * 2)


def test_weights_at_the_start_count_only_beyond_the_activations():
    """Two moments compete for XLA:CPU's peak: the item is the weights' excess, never < 0."""
    v5e = from_name("tpu-v5e-8")
    for name, stage, weights_win in (("gemma2-2b", "sft", True), ("gemma3-1b", "grpo", False)):
        b = memory_budget(get_preset(name), stage, hw=v5e, backend="cpu")
        train = b.items if b.phase == "train" else b.off_peak
        assert (train["XLA:CPU f32 weights at start"] > 0) == weights_win
    # more rows grow the activations, not the weights' moment: the peak moves to them
    p = get_preset("gemma2-2b")
    big = memory_budget(p.replace(**{"sft.batch_size": 256}), "sft", hw=v5e, backend="cpu")
    assert big.items["XLA:CPU f32 weights at start"] == 0


def test_backend_errors():
    with pytest.raises(ValueError, match="backend='gpu'"):
        memory_budget(toy_preset(), "sft", hw=TOY_HW, backend="gpu")
