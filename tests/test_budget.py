"""The memory budget: estimates by hand, advice, every preset on its hardware, XLA:CPU's items."""

import dataclasses

import pytest

from reasonkit import budget
from reasonkit.budget import memory_budget
from reasonkit.config import (
    DPOConfig,
    EvalConfig,
    GRPOConfig,
    LoraConfig,
    MeshConfig,
    ModelConfig,
    SFTConfig,
)
from reasonkit.presets import PRESETS, get_preset
from reasonkit.presets import get_preset as PRESET_OF
from reasonkit.runtime._hardware import GiB, HardwareInfo, detect, from_name

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


TOY_HW = HardwareInfo(platform="tpu", device_kind="toy", generation="toy",
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
    rows = budget.budget_table(p, v5e)
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
    hw = detect() if preset.hardware == "cpu" else from_name(preset.hardware)
    for stage in ("sft", "dpo", "grpo", "eval"):
        budget = memory_budget(preset, stage, hw=hw)
        assert budget.fits, f"{name} {stage}: {budget}"


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
        assert budget._cpu_weight_copies(p, {"fsdp": n, "tp": 1}) == 4 * (decoder + lora)
    # tensor parallelism splits the copies as it splits the weights (heads, K=4 and F over 4);
    # a LoRA factor's tp side is split, its D side (fsdp, gathered) and the rank are not
    lora_tp = 26 * 64 * (3 * (2304 + 512) + 3 * (2304 + 2304))
    p = get_preset("gemma2-2b")
    assert budget._cpu_weight_copies(p, {"fsdp": 2, "tp": 4}) == 4 * (decoder // 4 + lora_tp)
    tiny = get_preset("tiny")  # float32: XLA:CPU multiplies it as it is
    assert budget._cpu_weight_copies(tiny, {"fsdp": 1, "tp": 1}) == 0
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
    # XLA:CPU (benchmarks/results/shapes.md) and the rollout
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
