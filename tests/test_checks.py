"""The notebooks' final checks (reasonkit.notebook): they pass a stage that learned, fail one that did not."""

import pytest

from reasonkit import notebook
from reasonkit.config import DPOConfig, GRPOConfig, SFTConfig
from reasonkit.notebook import StageDidNotLearn
from reasonkit.notebook import _checks as notebook_checks
from reasonkit.testing import fake_results


def _metrics(**series):
    """``{name: (steps, values)}`` as train.read_metrics returns it, one value a step."""
    return {name.replace("__", "/"): (list(range(len(v))), list(v)) for name, v in series.items()}


def test_quarters_are_the_first_and_last_quarter_means():
    assert notebook_checks.quarters([1.0, 2.0]) == (1.0, 2.0, 1)
    assert notebook_checks.quarters(list(range(12))) == (1.0, 10.0, 3)


def test_sft_check_wants_the_format_to_rise_and_the_loss_to_fall():
    no, yes = {"format_ok": False}, {"format_ok": True}
    loss = {"eval/loss": ([0, 20, 40], [4.0, 1.0, 0.2])}
    assert "format 0 -> 3 of 3" in notebook.check_sft([no] * 3, [yes] * 3, loss)
    assert "format 0 -> 2 of 3" in notebook.check_sft([no] * 3, [yes, yes, no], loss)
    with pytest.raises(StageDidNotLearn, match="format 2 of 3 before, 2 after"):
        notebook.check_sft([yes, yes, no], [yes, yes, no], loss)
    with pytest.raises(StageDidNotLearn, match="format 0 of 3 before, 1 after"):
        notebook.check_sft([no] * 3, [yes, no, no], loss)
    with pytest.raises(StageDidNotLearn, match="held-out loss 4.000 at step 0 -> 3.700"):
        notebook.check_sft([no] * 3, [yes] * 3, {"eval/loss": ([0, 20], [4.0, 3.7])})
    with pytest.raises(StageDidNotLearn, match="1 held-out loss"):
        notebook.check_sft([no] * 3, [yes] * 3, {"eval/loss": ([0], [4.0])})
    with pytest.raises(ValueError, match="same prompts"):
        notebook.check_sft([no] * 2, [yes] * 3, loss)


def test_dpo_check_wants_the_margin_to_rise_and_the_pairs_ranked():
    rising = [0.0, 0.01, 0.05, 0.1, 0.12, 0.15, 0.14, 0.16]
    good = _metrics(train__rewards__margin=rising, train__rewards__accuracy=[0.5] * 4 + [0.8] * 4)
    assert "reward margin 0.005 -> 0.150" in notebook.check_dpo(good)
    with pytest.raises(StageDidNotLearn, match="reward margin"):
        notebook.check_dpo(good | _metrics(train__rewards__margin=[0.2, 0.2, 0.1, 0.1]))  # fell
    with pytest.raises(StageDidNotLearn, match="preference accuracy 0.50"):
        notebook.check_dpo(good | _metrics(train__rewards__accuracy=[0.5] * 8))
    with pytest.raises(StageDidNotLearn, match="no 'train/rewards/margin'"):
        notebook.check_dpo({})


def test_grpo_check_wants_the_policy_moved_paid_for_correctness_and_not_worse():
    kl = [0.0, 0.0002, 0.001, 0.002, 0.003, 0.004, 0.004, 0.005]
    good = _metrics(actor__train__kl=kl, rewards__train__answer_correct=[1.0, 0.9, 1.1, 1.0] * 2)
    assert "KL 0.0001 -> 0.0045" in notebook.check_grpo(good)
    with pytest.raises(StageDidNotLearn, match="did not move"):
        notebook.check_grpo(good | _metrics(actor__train__kl=[1e-12] * 8))
    with pytest.raises(StageDidNotLearn, match="no 'rewards/train/answer_correct'"):  # format only
        notebook.check_grpo(_metrics(actor__train__kl=kl))
    verified = _metrics(actor__train__kl=kl, rewards__train__answer_verified_x2=[1.0, 0.9, 1.1, 1.0] * 2)
    assert "answer_verified_x2 0.950 -> 1.050" in notebook.check_grpo(verified)  # the verified reward counts
    jitter = [0.1 * (i % 3 - 1) for i in range(21)]
    fell = [1.5 + j for j in jitter] + [0.5 + j for j in jitter]  # 42 steps: a fall of 1, a spread of 0.1
    with pytest.raises(StageDidNotLearn, match=r"answer_correct fell from 1\.\d+ to 0\.\d+"):
        notebook.check_grpo(_metrics(actor__train__kl=[i * 1e-4 for i in range(42)],
                                   rewards__train__answer_correct=fell))
    checked = {"held_out/accuracy": ([0, 10, 20], [0.5, 0.53, 0.44])}  # 100 prompts: 2 SE = 0.1
    assert "held-out accuracy 0.500 -> 0.440 (best 0.530, two standard errors 0.100, unpaired)" in \
        notebook.check_grpo(good | checked, held_out_prompts=100)
    with pytest.raises(StageDidNotLearn, match="held-out accuracy fell from 0.500 at step 0 to 0.380"):
        notebook.check_grpo(good | {"held_out/accuracy": ([0, 10, 20], [0.5, 0.45, 0.38])},
                          held_out_prompts=100)
    with pytest.raises(StageDidNotLearn, match="1 held-out check"):
        notebook.check_grpo(good | {"held_out/accuracy": ([0], [0.3])}, held_out_prompts=100)
    with pytest.raises(ValueError, match="grpo.eval_prompts"):
        notebook.check_grpo(good | checked)


def _results(format_rates, completions):
    return {name: {"summary": {"overall": {"format_rate": rate}},
                   "rows": [{"id": i, "completion": c, "correct": c.startswith("<answer>")}
                            for i, c in enumerate(completions[name])]}
            for name, rate in format_rates.items()}


def test_stages_check_wants_each_stage_to_change_and_sft_to_beat_the_base_on_format():
    texts = {"base": ["a", "b"], "sft": ["<answer>a", "b"], "dpo": ["<answer>a", "c"], "grpo": ["x", "c"]}
    rates = {"base": 0.0, "sft": 0.9, "dpo": 0.95, "grpo": 0.95}
    stages = ["base", "sft", "dpo", "grpo"]
    line = notebook.check_stages(_results(rates, texts), stages)
    assert "base->sft 1/2, sft->dpo 1/2, dpo->grpo 1/2" in line and "base 0.0% -> SFT 90.0%" in line
    with pytest.raises(StageDidNotLearn, match="grpo: all 2 greedy completions are dpo's"):
        notebook.check_stages(_results(rates, texts | {"grpo": texts["dpo"]}), stages)
    with pytest.raises(StageDidNotLearn, match="format pass 10.0% against the base's 0.0%"):
        notebook.check_stages(_results(rates | {"sft": 0.1}, texts), stages)
    assert "format" not in notebook.check_stages(_results(rates, texts), ["base", "dpo"])  # SFT skipped


# A 32-prompt held-out block at 37.5%, before and after a stage: 12 right before.
BEFORE = [True] * 12 + [False] * 20
WORSE = [True] * 8 + [False] * 24  # 4 of the 12 now wrong, none newly right: -12.5 points
SHUFFLED = [False] * 2 + [True] * 10 + [True] * 2 + [False] * 18  # 2 lost, 2 gained: 0


def test_paired_fall_fails_a_fall_beyond_noise_and_passes_a_reshuffle():
    with pytest.raises(StageDidNotLearn, match=r"GRPO: held-out accuracy 37.5% -> 25.0% on the same 32 "
                                                r"prompts: -12.5 points, more than 2 paired standard errors"):
        notebook_checks.paired_fall(BEFORE, WORSE, "GRPO", "its start")
    assert notebook_checks.paired_fall(BEFORE, SHUFFLED, "GRPO", "its start") == \
        "held-out accuracy 37.5% -> 37.5% on 32 prompts (paired: +0.0 ± 6.3 points)"
    rows = lambda xs: [{"id": i, "correct": x} for i, x in enumerate(xs)]  # noqa: E731
    assert "+12.5" in notebook_checks.paired_fall(rows(WORSE), rows(BEFORE), "DPO", "SFT's")  # a rise
    with pytest.raises(ValueError, match="different prompts"):  # the ids must pair
        notebook_checks.paired_fall(rows(BEFORE), rows(BEFORE)[::-1], "DPO", "SFT's")
    with pytest.raises(ValueError, match="same prompts"):
        notebook_checks.paired_fall(BEFORE, WORSE[:10], "DPO", "SFT's")


def test_grpo_check_fails_a_held_out_fall_that_two_binomial_errors_allow():
    kl = [0.0001 * s for s in range(8)]
    good = _metrics(actor__train__kl=kl, rewards__train__answer_correct=[1.0, 0.9, 1.1, 1.0] * 2)
    logged = good | {"held_out/accuracy": ([0, 30], [12 / 32, 8 / 32])}  # the same fall, as logged
    assert "two standard errors 0.171, unpaired" in notebook.check_grpo(logged, held_out_prompts=32)
    with pytest.raises(StageDidNotLearn, match="-12.5 points"):  # paired, it is beyond noise
        notebook.check_grpo(logged, held_out_prompts=32, held_out=(BEFORE, WORSE))
    line = notebook.check_grpo(logged, held_out_prompts=32, held_out=(BEFORE, SHUFFLED))
    assert "(paired: +0.0 ± 6.3 points)" in line and "unpaired" not in line


def test_dpo_check_fails_a_held_out_fall_when_given_one():
    rising = [0.0, 0.01, 0.05, 0.1, 0.12, 0.15, 0.14, 0.16]
    good = _metrics(train__rewards__margin=rising, train__rewards__accuracy=[0.5] * 4 + [0.8] * 4)
    assert "held-out" not in notebook.check_dpo(good)  # DPO logged no held-out block: not judged
    with pytest.raises(StageDidNotLearn, match=r"DPO: held-out accuracy 37.5% -> 25.0% .* below SFT's"):
        notebook.check_dpo(good, held_out=(BEFORE, WORSE))  # margins rose, answers got worse
    assert "37.5% -> 37.5% on 32 prompts" in notebook.check_dpo(good, held_out=(BEFORE, SHUFFLED))


def test_stages_check_fails_a_series_that_ends_below_sft():
    results = fake_results(base=(0.0, 0.0), sft=(1.0, 0.45), dpo=(1.0, 0.38), grpo=(1.0, 0.40))
    stages = ["base", "sft", "dpo", "grpo"]
    with pytest.raises(StageDidNotLearn, match=r"GRPO: held-out accuracy 45.0% -> 40.0% on the same 100 "
                                               r"prompts: -5.0 points, .* below SFT's"):
        notebook.check_stages(results, stages)  # 5 of 100 lost, none gained: beyond noise
    within = notebook.check_stages(results | fake_results(grpo=(1.0, 0.42)), stages)  # 3 lost: noise
    assert within.endswith("grpo against SFT: held-out accuracy 45.0% -> 42.0% on 100 prompts "
                           "(paired: -3.0 ± 1.7 points)"), within
    line = notebook.check_stages(results | fake_results(grpo=(1.0, 0.47)), stages)
    assert line.endswith("(paired: +2.0 ± 1.4 points)"), line
    assert "against SFT" not in notebook.check_stages(results, ["base", "sft"])  # nothing after SFT


@pytest.mark.parametrize("config", [SFTConfig, DPOConfig, GRPOConfig])
@pytest.mark.parametrize("field", ["max_steps", "learning_rate"])
def test_a_stage_set_to_train_nothing_is_refused(config, field):
    with pytest.raises(ValueError, match=field):
        config(**{field: 0})
