import dataclasses

import pytest

from reasonkit import config, presets
from reasonkit.config import (
    DataConfig,
    DPOConfig,
    EvalConfig,
    GRPOConfig,
    LoraConfig,
    MeshConfig,
    ModelConfig,
    SFTConfig,
)
from reasonkit.presets import get_preset


@pytest.mark.parametrize("make, field, value", [
    (lambda: LoraConfig(rank=0, alpha=1.0), "rank", "0"),
    (lambda: MeshConfig(shape=(-1, -1)), "shape", r"\(-1, -1\)"),
    (lambda: MeshConfig(shape=(8,)), "shape", r"\(8,\)"),
    (lambda: SFTConfig(max_prompt_length=300, max_target_length=256), "max_prompt_length", "300"),
    (lambda: SFTConfig(warmup_ratio=1.5), "warmup_ratio", "1.5"),
    (lambda: GRPOConfig(num_generations=1), "num_generations", "1"),
    (lambda: GRPOConfig(loss="ppo"), "loss", "'ppo'"),
    (lambda: GRPOConfig(kl_loss_mode="k2"), "kl_loss_mode", "'k2'"),
    (lambda: GRPOConfig(show_every=-1), "show_every", "-1"),
    (lambda: GRPOConfig(show_every=2.5), "show_every", "2.5"),
    (lambda: GRPOConfig(rewards=()), "rewards", r"\(\): must be a non-empty list"),
    (lambda: GRPOConfig(rewards="format_exact"), "rewards", "'format_exact'"),
    (lambda: GRPOConfig(rewards=[["format_exact", 1.0], "answer_correct"]), r"rewards\[1\]",
     "'answer_correct': must be a \\[name, weight\\] pair"),
    (lambda: GRPOConfig(rewards=[["format_exact", "1"]]), r"rewards\[0\]", "the weight must be a finite"),
    (lambda: GRPOConfig(rewards=[["format_exact", float("nan")]]), r"rewards\[0\]", "nan"),
    (lambda: GRPOConfig(rewards=[["format_exact", True]]), r"rewards\[0\]", "True"),
    (lambda: GRPOConfig(rewards=[["", 1.0]]), r"rewards\[0\]", "''"),
    (lambda: GRPOConfig(rewards=[["format_exact", 1.0], ["format_exact", 2.0]]), r"rewards\[1\]",
     "named twice"),
    (lambda: DataConfig(domain_weights={"poetry": 1.0}), "domain_weights", "poetry"),
    (lambda: DataConfig(domain_weights={"math": 0.0}), "domain_weights", "positive"),
    (lambda: dataclasses.replace(get_preset("tiny").model, num_kv_heads=3), "num_kv_heads", "3"),
    (lambda: dataclasses.replace(get_preset("tiny").model, family="llama"), "family", "llama"),
    # counts are ints: 3.5 steps or "8" examples would fail far from the cause
    (lambda: SFTConfig(max_steps=3.5), "max_steps", "3.5"),
    (lambda: SFTConfig(batch_size="8"), "batch_size", "'8'"),
    (lambda: DPOConfig(checkpoint_every=0.5), "checkpoint_every", "0.5"),
    (lambda: DataConfig(train_size=True), "train_size", "True"),
    (lambda: EvalConfig(num_samples=4.0), "num_samples", "4.0"),
    (lambda: SFTConfig(seed=1.5), "seed", "1.5"),
    (lambda: GRPOConfig(beta="0.1"), "beta", "'0.1'"),
    (lambda: DataConfig(domain_weights=["math"]), "domain_weights", "math"),
    (lambda: DataConfig(domain_weights={"math": "2"}), "domain_weights", "math"),
    # from JSON: "false" is a truthy string, and a bare string is iterated char by char
    (lambda: LoraConfig(rank=8, alpha=8.0, qlora="false"), "qlora", "'false'"),
    (lambda: dataclasses.replace(get_preset("tiny").model, remat="no"), "remat", "'no'"),
    (lambda: DataConfig(sources="gsm8k:hf"), "sources", "'gsm8k:hf'"),
    (lambda: DataConfig(sources=("tasks", "")), "sources", "''"),
    (lambda: EvalConfig(gsm8k_test="gsm8k:hf"), "gsm8k_test", "'gsm8k:hf'.*'jsonl:<path>'"),
    (lambda: EvalConfig(gsm8k_test="jsonl"), "gsm8k_test", "'jsonl': needs the file"),
    (lambda: EvalConfig(gsm8k_test="jsonl: "), "gsm8k_test", "'jsonl: '"),
    (lambda: EvalConfig(gsm8k_test="hf:"), "gsm8k_test", "'hf:': an empty path"),
    (lambda: EvalConfig(gsm8k_test=True), "gsm8k_test", "True: must be a string or None"),
    (lambda: EvalConfig(gsm8k_test="hf", gsm8k_limit=0), "gsm8k_limit", "0"),
    (lambda: EvalConfig(gsm8k_test="hf", gsm8k_limit="100"), "gsm8k_limit", "'100'"),
    # issue 66 item 5: greedy only, the sampled subset, the held-out seed, the base cache
    (lambda: EvalConfig(num_samples=-1), "num_samples", "-1: must be an int >= 0"),
    (lambda: EvalConfig(sampled_subset=-2), "sampled_subset", "-2"),
    (lambda: EvalConfig(sampled_subset=2.5), "sampled_subset", "2.5"),
    (lambda: EvalConfig(sampled_per_prompt=0), "sampled_per_prompt", "0"),
    (lambda: EvalConfig(sampled_temperature=0.0), "sampled_temperature", "0.0"),
    (lambda: EvalConfig(sampled_temperature="0.9"), "sampled_temperature", "'0.9'"),
    (lambda: EvalConfig(cache_base="false"), "cache_base", "'false'"),
    (lambda: DataConfig(eval_seed=1.5), "eval_seed", "1.5"),
    (lambda: DataConfig(eval_seed="3"), "eval_seed", "'3'"),
])
def test_validation_names_field_and_value(make, field, value):
    with pytest.raises(ValueError, match=rf"\.{field}=.*{value}"):
        make()


def test_gsm8k_test_split_by_default_on_gemma_only():
    """Every TPU Gemma preset scores all of GSM8K's test split from the Hub; the CPU presets
    (no network) skip it, and so does "" (an override that turns it off)."""
    for name in presets.PRESETS:
        e, cpu = get_preset(name).eval, get_preset(name).hardware == "cpu"
        want = (None, None) if cpu else (("hf", None), None)
        assert (e.gsm8k_source(), e.gsm8k_limit) == want, name
        assert e.gsm8k_problems == (0 if cpu else config.GSM8K_TEST_SIZE)
    assert config.GSM8K_TEST_SIZE == 1319
    off = get_preset("gemma3-1b", **{"eval.gsm8k_test": ""}).eval
    assert off.gsm8k_source() is None and off.gsm8k_problems == 0
    quick = EvalConfig(gsm8k_test="tfds:/data/tfds", gsm8k_limit=200)
    assert (quick.gsm8k_source(), quick.gsm8k_problems) == (("tfds", "/data/tfds"), 200)
    assert EvalConfig(gsm8k_test="hf:./gsm8k", gsm8k_limit=5000).gsm8k_problems == 1319


def test_grpo_rewards_default_to_the_five_math_rewards_and_take_json_lists(monkeypatch):
    """The field keeps every run as it was: the five rewards of rewards.MATH_REWARDS, unweighted."""
    assert GRPOConfig().rewards == config.DEFAULT_REWARDS == (
        ("format_exact", 1.0), ("format_approx", 1.0), ("answer_correct", 1.0),
        ("answer_close", 1.0), ("numeric_backup", 1.0))
    assert all(get_preset(name).grpo.rewards == config.DEFAULT_REWARDS for name in presets.PRESETS)
    monkeypatch.delenv("REASONKIT_PRESET", raising=False)
    monkeypatch.setenv("REASONKIT_OVERRIDES",
                       '{"grpo.rewards": [["format_exact", 1], ["answer_correct", 2]]}')
    fmt = get_preset().grpo
    assert fmt.rewards == (("format_exact", 1.0), ("answer_correct", 2.0))
    # lists from a notebook's keyword override: the same config, hashable as any other
    again = get_preset("tiny", **{"grpo.rewards": [["format_exact", 1.0], ["answer_correct", 2.0]]}).grpo
    assert again.rewards == fmt.rewards and hash(again) == hash(fmt)
    with pytest.raises(ValueError, match=r"preset 'tiny' with overrides .*GRPOConfig\.rewards\[0\]="):
        monkeypatch.setenv("REASONKIT_OVERRIDES", '{"grpo.rewards": [["format_exact"]]}')
        get_preset()


def test_grpo_share_prompts_is_a_bool_on_in_the_tiny_preset_only():
    assert get_preset("tiny").grpo.share_prompts and not GRPOConfig().share_prompts
    assert not any(get_preset(name).grpo.share_prompts for name in presets.PRESETS if name != "tiny")
    with pytest.raises(ValueError, match=r"GRPOConfig\.share_prompts.*must be a bool"):
        GRPOConfig(share_prompts="false")


def test_grpo_length_buckets_take_json_lists_and_refuse_more_than_four_shapes():
    assert GRPOConfig().length_buckets == ((), ())  # off: every step at the max, as Tunix pads
    assert get_preset("tiny").grpo.length_buckets == ((80,), (48,))
    tiny = get_preset("tiny", **{"grpo.length_buckets": [[64, 72, 80], []]}).grpo
    assert tiny.length_buckets == ((64, 72, 80), ()) and hash(tiny)  # 4 prompt x 1 answer length
    assert GRPOConfig(length_buckets=None).length_buckets == ((), ())
    for bad, why in [([[80]], "must be \\[prompt lengths, completion lengths\\]"),
                     ([[80, 64], []], "the prompt lengths must be increasing positive ints"),
                     ([[], [0]], "the completion lengths must be increasing"),
                     ([[], ["48"]], "the completion lengths must be increasing"),
                     ([[64, 80], [48]], "3 prompt x 2 completion lengths .* are 6 shapes to compile; "
                                        "at most 4")]:
        with pytest.raises(ValueError, match=r"GRPOConfig\.length_buckets=.*" + why):
            GRPOConfig(length_buckets=bad)


def test_replace_nested_and_errors():
    p = get_preset("tiny").replace(**{"sft.max_steps": 7, "grpo.mesh.shape": (1, 1)})
    assert p.sft.max_steps == 7 and p.grpo.mesh.shape == (1, 1)
    with pytest.raises(ValueError, match="no field 'max_stepz'"):
        get_preset("tiny").replace(**{"sft.max_stepz": 7})
    with pytest.raises(ValueError, match="GRPOConfig.num_generations"):
        get_preset("tiny", **{"grpo.num_generations": 1})


def test_replace_two_fields_of_one_nested_config():
    # Each key used to rebuild grpo.mesh from the shipped one: the last key won alone.
    p = get_preset("tiny").replace(**{"grpo.mesh.shape": (2, 4), "grpo.mesh.axis_names": ("data", "model")})
    assert p.grpo.mesh == MeshConfig(shape=(2, 4), axis_names=("data", "model"))
    p = get_preset("tiny").replace(**{"sft.mesh.shape": (8,), "sft.mesh.axis_names": ("fsdp",),
                                      "sft.max_steps": 3})
    assert (p.sft.mesh.shape, p.sft.mesh.axis_names, p.sft.max_steps) == ((8,), ("fsdp",), 3)
    assert get_preset("tiny").replace(lora=LoraConfig(rank=2, alpha=2.0)).lora.rank == 2


def test_num_params_matches_gemma3_1b_order_of_magnitude():
    # Gemma 3 1B has ~1.0e9 parameters, 302M of them in the 262k x 1152 embedding.
    n = get_preset("gemma3-1b").model.num_params
    assert 0.9e9 < n < 1.1e9
    assert ModelConfig.__dataclass_params__.frozen




def test_grpo_held_out_check_settings_are_validated():
    cfg = GRPOConfig()
    assert (cfg.eval_every, cfg.eval_prompts) == (50, 32)
    assert GRPOConfig(eval_every=0).eval_every == 0  # no checks
    for kw, why in [({"eval_every": -1}, r"eval_every=-1: must be an int >= 0 \(0: never\)"),
                    ({"eval_every": 2.5}, r"eval_every=2\.5: must be an int >= 0"),
                    ({"eval_prompts": 0}, r"eval_prompts=0: must be an int >= 1"),
                    ({"eval_prompts": True}, r"eval_prompts=True: must be an int >= 1")]:
        with pytest.raises(ValueError, match=r"GRPOConfig\." + why):
            GRPOConfig(**kw)


def test_greedy_only_and_the_held_out_seed_are_valid():
    """eval.num_samples 0 is greedy only; data.eval_seed None is data.seed, as before it existed."""
    assert EvalConfig(num_samples=0).num_samples == 0
    assert EvalConfig().sampled_subset == 0 and EvalConfig().sampled_temperature is None
    assert DataConfig(seed=4).held_out_seed == 4 and DataConfig(seed=4, eval_seed=9).held_out_seed == 9
    assert get_preset("tiny", **{"data.eval_seed": 2}).data.eval_seed == 2
