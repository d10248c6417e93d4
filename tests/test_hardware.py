"""Hardware detection, the peak table, the matmul benchmark, step memory and the time model."""

import dataclasses
import pathlib

import pytest

from reasonkit.presets import get_preset
from reasonkit.runtime import hardware as hwmod
from reasonkit.runtime._hardware import GiB, from_name

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
