import dataclasses
from collections import Counter

import pytest

from reasonkit import presets
from reasonkit.presets import get_preset


class FakeDevice:
    def __init__(self, platform, kind):
        self.platform, self.device_kind = platform, kind


@pytest.mark.parametrize("name", sorted(presets.PRESETS))
def test_every_preset_builds_and_is_frozen(name):
    p = get_preset(name)
    assert p.name == name
    assert p.sft.max_prompt_length < p.sft.max_target_length
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.sft.batch_size = 1  # type: ignore[misc]


def test_gemma_presets_follow_the_write_up():
    """The write-up's settings, but for the SFT rate, measured on the real 270M (docs/presets.md)."""
    p = get_preset("gemma2-2b")
    assert (p.lora.rank, p.sft.learning_rate, p.dpo.learning_rate, p.grpo.learning_rate) == (
        64, 2e-4, 3e-6, 3e-6)
    for t in ("q_einsum", "kv_einsum", "attn_vec_einsum", "gate_proj", "up_proj", "down_proj"):
        assert t in p.lora.module_path
    assert p.sft.mesh.axis_names == ("fsdp", "tp") and p.sft.mesh.shape == (-1, 1)
    assert p.grpo.mesh.shape[1] > 1  # tensor parallel for rollouts
    assert 0.05 <= p.sft.warmup_ratio <= 0.1


def test_auto_is_default_tiny_on_a_cpu_and_env_selects(monkeypatch, capsys):
    monkeypatch.delenv("REASONKIT_PRESET", raising=False)
    assert get_preset().name == "tiny"
    assert capsys.readouterr().out.startswith("preset 'auto' picked 'tiny' for 1 x cpu;")
    monkeypatch.setenv("REASONKIT_PRESET", "gemma3-270m")
    assert get_preset().name == "gemma3-270m"
    assert capsys.readouterr().out == ""  # named, not picked: no banner


@pytest.mark.parametrize("kind, n, name, v3", [("TPU v5 lite", 8, "gemma3-1b", False),
                                               ("TPU v3", 8, "gemma3-1b-v3-8", True),
                                               ("TPU v5 lite", 1, "gemma3-1b-v5e-1", False)])
def test_auto_on_a_tpu_says_what_it_picked_and_that_it_is_untested(monkeypatch, capsys, kind, n,
                                                                   name, v3):
    import jax

    monkeypatch.setattr(jax, "devices", lambda: [FakeDevice("tpu", kind)] * n)
    monkeypatch.delenv("REASONKIT_PRESET", raising=False)
    assert presets.preset_name(banner=True) == name
    out = capsys.readouterr().out
    assert f"picked {name!r} for {n} x {kind} (untested: no Gemma preset has run on a TPU" in out
    assert ("JAX's own TPU CI does not cover v3" in out) == v3


def test_every_tpu_preset_says_it_is_untested():
    """The CPU presets (tiny, and the real Gemma 3 270M on a CPU) run in this repository's tests."""
    cpu = {name for name in presets.PRESETS if get_preset(name).hardware == "cpu"}
    assert cpu == {"tiny", "gemma3-270m-cpu"}
    assert set(presets.UNTESTED) == set(presets.PRESETS) - cpu
    for name in presets.PRESETS:
        assert ("(untested)" in get_preset(name).description) == (name not in cpu)


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown preset 'nope'.*gemma3-1b.*tiny"):
        get_preset("nope")


def test_auto_on_this_cpu_is_tiny():
    assert get_preset("auto").name == "tiny"


def test_env_overrides_change_the_env_preset(monkeypatch):
    monkeypatch.delenv("REASONKIT_PRESET", raising=False)
    monkeypatch.delenv("REASONKIT_OVERRIDES", raising=False)
    shipped = get_preset("tiny").grpo.max_steps
    assert shipped not in (300, 7)
    monkeypatch.setenv("REASONKIT_OVERRIDES",
                       '{"grpo.max_steps": 300, "grpo.learning_rate": 5e-4, "grpo.mesh.shape": [1, 1]}')
    p = get_preset()
    assert (p.grpo.max_steps, p.grpo.learning_rate, p.grpo.mesh.shape) == (300, 5e-4, (1, 1))
    assert get_preset(**{"grpo.max_steps": 7}).grpo.max_steps == 7  # keywords win
    assert get_preset("tiny").grpo.max_steps == shipped  # a preset by name ignores the variable
    monkeypatch.setenv("REASONKIT_OVERRIDES", "  ")
    assert get_preset().grpo.max_steps == shipped


@pytest.mark.parametrize("text, match", [
    ('{"sft.max_steps": 5,}', r"REASONKIT_OVERRIDES is not valid JSON .*char 20.*max_steps"),
    ('["sft.max_steps", 5]', "must be a JSON object"),
    ('{"sft.max_stepz": 5}', r"preset 'tiny' with overrides .*no field 'max_stepz'"),
    ('{"grpo.num_generations": 1}', r"GRPOConfig.num_generations=1"),
    ('{"sft.max_steps": 3.5}', r"SFTConfig.max_steps=3.5: must be a positive int"),
    ('{"sft": {"max_steps": 5}}', r"Preset.sft=\{'max_steps': 5\}: must be a SFTConfig.*'sft.max_steps'"),
    ('{"grpo.mesh": [1, 1]}', r"GRPOConfig.mesh=\(1, 1\): must be a MeshConfig.*'grpo.mesh.shape'"),
    ('{"sft.max_steps.x": 5}', r"SFTConfig.max_steps is 240, not a config: no field 'x'"),
])
def test_env_overrides_errors_say_what_and_where(monkeypatch, text, match):
    monkeypatch.delenv("REASONKIT_PRESET", raising=False)
    monkeypatch.setenv("REASONKIT_OVERRIDES", text)
    with pytest.raises(ValueError, match=match):
        get_preset()


def test_the_real_cpu_preset_evaluates_1008_prompts_greedy_and_samples_a_subset():
    """gemma3-270m-cpu (issue 66 item 5): 168 held-out prompts a domain, greedy only, and the
    sampled accuracy of 2 samples each of 252 prompts at GRPO's temperature; tiny keeps its
    evaluation as it was (its stage table must not move)."""
    from reasonkit import data, evaluate, tasks

    p = get_preset("gemma3-270m-cpu")
    assert (p.data.eval_per_domain, p.data.eval_seed, p.eval.num_samples) == (168, None, 0)
    assert (p.eval.sampled_subset, p.eval.sampled_per_prompt, p.eval.sampled_temperature) == (252, 2, None)
    assert evaluate.sampled_decoding(p.eval, p.grpo).temperature == p.grpo.temperature == 0.9
    splits, report = data.build_splits(tasks.generate_all(p.data.num_records, seed=p.data.seed), p.data)
    assert len(splits.eval) == 1008 and set(report.eval.values()) == {168} and not report.notes
    subset = evaluate.sampled_subset(splits.eval, p.eval.sampled_subset)
    assert len(subset) == 252 and set(Counter(splits.eval[i]["domain"] for i in subset).values()) == {42}
    tiny = get_preset("tiny")
    assert (tiny.eval.num_samples, tiny.eval.sampled_subset, tiny.data.eval_seed) == (4, 0, None)
    assert evaluate.sampled_decoding(tiny.eval, tiny.grpo) is None
