"""DPO on the policy's own answers (reasonkit.train._onpolicy): fresh prompts, pairs, figures."""

import json

import numpy as np
import pytest

from reasonkit import data, models, rewards, template, train
from reasonkit.runtime import runs
from reasonkit.testing import make_run, small_preset
from reasonkit.train import _onpolicy as onpolicy

ON_POLICY = {"dpo.pairs": "on-policy", "dpo.onpolicy_prompts": 12, "dpo.onpolicy_samples": 2,
             "dpo.held_out_pairs": 4}


def test_the_config_names_the_field_and_value():
    with pytest.raises(ValueError, match=r"DPOConfig.pairs='gold': must be one of \['synthetic', "):
        small_preset(**{"dpo.pairs": "gold"})
    with pytest.raises(ValueError, match=r"DPOConfig.rpo_alpha=-0.5: must be a finite number >= 0"):
        small_preset(**{"dpo.rpo_alpha": -0.5})
    with pytest.raises(ValueError, match=r"DPOConfig.rpo_alpha=1.0: is DPO's NLL term; ORPO's"):
        small_preset(**{"dpo.rpo_alpha": 1.0, "dpo.algorithm": "orpo"})
    with pytest.raises(ValueError, match=r"DPOConfig.onpolicy_samples=0: must be a positive int"):
        small_preset(**{"dpo.onpolicy_samples": 0})
    with pytest.raises(ValueError, match=r"DPOConfig.held_out_pairs=12: must be < onpolicy_prompts=12"):
        small_preset(**{**ON_POLICY, "dpo.held_out_pairs": 12})
    tiny = small_preset()
    assert (tiny.dpo.pairs, tiny.dpo.rpo_alpha) == ("synthetic", 0.0)  # the default: as before


def test_fresh_prompts_are_apart_from_every_split_and_fit_dpo(tmp_path):
    preset = small_preset(**ON_POLICY)
    run = make_run(tmp_path, "fresh", preset)
    splits, _ = data.read_splits(run.require("data"))
    tok = models.load_tokenizer(models.resolve_source(preset.model) / "tokenizer.model")
    records = onpolicy.fresh_prompts(preset, splits, tok)
    assert len(records) == 12 and len({r["domain"] for r in records}) == 6  # in turn by domain
    seen = {template.normalize_prompt(r["prompt"]) for name in ("eval", "sft", "dpo", "grpo")
            for r in getattr(splits, name)}
    assert not seen & {template.normalize_prompt(r["prompt"]) for r in records}
    assert records == onpolicy.fresh_prompts(preset, splits, tok)  # the same every time
    for r in records:  # each gold answer is right by the checker
        assert rewards.is_correct(template.format_completion(r["reasoning"], r["answer"]), r["answer"],
                                  r["domain"])
    gsm = small_preset(**ON_POLICY, **{"data.sources": ["gsm8k:hf"]})
    with pytest.raises(ValueError, match=r"data.sources=\['gsm8k:hf'\] has no 'tasks'"):
        onpolicy.fresh_prompts(gsm, splits, tok)


def _answers(records, k=2):
    """Per record: a wrong answer of exact format, then (every other record) the gold."""
    out = []
    for i, r in enumerate(records):
        wrong = template.format_completion(r["reasoning"], "zzz 999").removesuffix("<end_of_turn>")
        right = template.format_completion(r["reasoning"], r["answer"]).removesuffix("<end_of_turn>")
        out.append([wrong, right if i % 2 == 0 else wrong][:k])
    return out


def test_pairs_are_made_once_held_out_apart_and_read_back(tmp_path, monkeypatch):
    preset = small_preset(**ON_POLICY)
    run = make_run(tmp_path, "pairs", preset)
    splits, _ = data.read_splits(run.require("data"))
    tok = models.load_tokenizer(models.resolve_source(preset.model) / "tokenizer.model")
    calls = []

    def sampled(policy, tok, records, cfg, model_cfg, k, *, seed, desc):
        calls.append((len(records), k, cfg.temperature, cfg.max_generation_length))
        return _answers(records, k)

    monkeypatch.setattr(onpolicy.contrast, "sampled", sampled)
    run.stage("dpo").mkdir(parents=True, exist_ok=True)
    trained, held = onpolicy.dpo_pairs(preset, run, None, tok, splits)
    length = min(preset.grpo.max_generation_length, preset.dpo.max_response_length - 1)
    assert calls == [(12, 2, preset.grpo.temperature, length)]  # GRPO's sampling, DPO's lengths
    assert len(held) == 4 and len(trained) == 8
    assert len({p["domain"] for p in held}) == 4  # in turn by domain
    pairs = data.read_jsonl(run.stage("dpo") / onpolicy.PAIRS_FILE)
    assert sorted(p["id"] for p in pairs) == sorted(p["id"] for p in trained + held)
    info = json.loads((run.stage("dpo") / onpolicy.SUMMARY_FILE).read_text())
    assert info == {"screened": 12, "samples": 2, "rights": {"0": 6, "1": 6}, "pairs": 12,
                    "gold_chosen": 6, "no_pair": 0, "held_out": 4, "trained": 8,
                    "pairs_by_domain": info["pairs_by_domain"]}
    for p in pairs:  # the model's own wrong answer rejected; the gold chosen where all were wrong
        assert p["rejected"].endswith("<answer>zzz 999</answer><end_of_turn>")
        assert rewards.is_correct(p["chosen"], p["answer"], p["domain"])
    assert onpolicy.dpo_pairs(preset, run, None, tok, splits) == (trained, held) and len(calls) == 1
    synthetic = small_preset()
    assert onpolicy.dpo_pairs(synthetic, run, None, tok, splits) == (splits.dpo, [])
    onpolicy.clear(run)
    with pytest.raises(FileNotFoundError, match="DPO resumes at step 2"):
        onpolicy.dpo_pairs(preset, run, None, tok, splits, step=2)
    monkeypatch.setattr(onpolicy.contrast, "sampled",
                        lambda *a, **k: [[template.format_completion("x", r["answer"])] * 2
                                         for r in a[2]])  # always right: no pair
    with pytest.raises(ValueError, match=r"0 pairs from 12 fresh prompts, none left to train on"):
        onpolicy.dpo_pairs(preset, run, None, tok, splits)


@pytest.mark.slow
def test_onpolicy_dpo_with_rpo_trains_logs_the_term_and_the_held_out_pair_figures(tmp_path, monkeypatch):
    """SFT, then DPO on on-policy pairs with RPO's term: the adapters move, train/rpo_nll is
    logged, and the held-out pair figures before the first step, every eval_every steps
    and at the end."""
    preset = small_preset(**ON_POLICY, **{"dpo.rpo_alpha": 1.0, "dpo.eval_every": 2})
    run = make_run(tmp_path, "onpolicy", preset)
    sft = train.train_sft(preset, run)
    calls = []

    def sampled(policy, tok, records, cfg, model_cfg, k, *, seed, desc):
        calls.append(len(records))
        return _answers(records, k)

    monkeypatch.setattr(onpolicy.contrast, "sampled", sampled)
    result = train.train_dpo(preset, run)
    assert result.finished and calls == [12]
    before, after = models.lora_params(sft.policy), models.lora_params(result.policy)
    assert max(float(np.abs(before[k] - after[k]).max()) for k in before) > 0
    m = train.read_metrics(run, "dpo")
    assert len(m["train/rpo_nll"][1]) >= 1 and all(v > 0 for v in m["train/rpo_nll"][1])
    for name in ("pair_accuracy", "chosen_logp_per_token", "pair_margin"):
        steps, values = m[f"held_out/{name}"]
        assert steps == [0, 2, 3] and all(np.isfinite(values)), name
    accuracy = m["held_out/pair_accuracy"][1]
    assert all(0 <= v <= 1 for v in accuracy)
    assert m["held_out/pair_margin"][1][0] == 0  # before the first step the policy is its reference
    assert all(v < 0 for v in m["held_out/chosen_logp_per_token"][1])
    assert result.stats["held_out_pairs"]["step"] == (0, 3) and result.stats["held_out_pairs"]["n"] == 4
    settings = runs.recorded_settings(run, "dpo")
    assert (settings["dpo.pairs"], settings["dpo.rpo_alpha"]) == ("on-policy", 1.0)
