"""A few real Tunix steps per stage on the tiny model: adapters move, the base does not."""

import dataclasses
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from reasonkit import data, evaluate, models, rewards, template, train
from reasonkit.config import SFTConfig
from reasonkit.models import _adapters as models_adapters
from reasonkit.presets import get_preset
from reasonkit.runtime import compiles, runs
from reasonkit.runtime._hardware import format_duration
from reasonkit.runtime._runs import RunDir
from reasonkit.testing import SMALL, make_run, small_preset
from reasonkit.train import _batches as train_batches
from reasonkit.train import _build as train_build
from reasonkit.train import _metrics as train_metrics
from reasonkit.train import _optim as train_optim
from reasonkit.train import _stages as train_stages
from reasonkit.train import clock as train_clock
from reasonkit.tunix_patches import grpo, loss_swap, private


@pytest.fixture(scope="module")
def preset():
    return small_preset()


def run_after(src, root, name, preset, *stages):
    """A new run with its own data stage and ``stages`` copied from the run ``src``."""
    run = make_run(root, name, preset)
    for stage in stages:
        shutil.copytree(src.stage(stage), run.stage(stage), dirs_exist_ok=True)
    return run


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, preset):
    """SFT -> DPO -> GRPO, a few steps each, in one run directory."""
    run = make_run(tmp_path_factory.mktemp("runs"), "pipe", preset)
    base = models.base_params(models.load_model(models.resolve_source(preset.model), preset.model))
    fresh = models.lora_params(models.load_policy(preset, None, None, None)[1])
    results = {"sft": train.train_sft(preset, run)}
    results["dpo"] = train.train_dpo(preset, run)
    results["grpo"] = train.train_grpo(preset, run)
    return run, base, fresh, results


def changed(a, b):
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def assert_base_untouched(policy, base):
    after = models.base_params(policy)
    for k in base:
        np.testing.assert_array_equal(after[k], base[k], err_msg=k)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["sft", "dpo", "grpo"])
def test_each_stage_moves_the_adapters_and_not_the_base(pipeline, preset, stage):
    run, base, fresh, results = pipeline
    result = results[stage]
    assert result.finished and result.steps == getattr(preset, stage).max_steps
    assert run.is_finished(stage) and runs.latest_step(run, stage) == result.steps
    assert changed(fresh, models.lora_params(result.policy)) > 0
    assert_base_untouched(result.policy, base)


@pytest.mark.slow
def test_hand_off_chain_and_metrics(pipeline):
    run, _, _, results = pipeline
    assert results["sft"].started_from is None
    assert results["dpo"].started_from == "sft" and results["grpo"].started_from == "dpo"
    # each stage starts from the previous stage's adapters, then moves away from them
    assert changed(models.lora_params(results["sft"].policy),
                   models.lora_params(results["dpo"].policy)) > 0
    sft, dpo, grpo = (train.read_metrics(run, s) for s in ("sft", "dpo", "grpo"))
    assert len(sft["train/loss"][1]) == 4 and all(np.isfinite(sft["train/loss"][1]))
    assert "train/rewards/margin" in dpo and "train/rewards/accuracy" in dpo
    assert "train/odds_ratio" not in dpo  # ORPO's term (test_orpo_is_a_config_switch)
    for fn in ("format_exact", "answer_correct", "numeric_backup"):
        assert f"rewards/train/{fn}" in grpo
    # the KL reference is the policy GRPO starts from (DPO's adapters), not the raw base:
    # before the first update they are the same model
    assert abs(grpo["actor/train/kl"][1][0]) < 1e-3


@pytest.mark.slow
def test_restored_adapters_reproduce_the_stage(pipeline, preset):
    run, _, _, results = pipeline
    _, policy, _, _ = models.load_policy(preset, run, "dpo", None)
    want = models.lora_params(results["dpo"].policy)
    got = models.lora_params(policy)
    assert changed(want, got) == 0


@pytest.mark.slow
def test_finished_stage_is_not_silently_retrained(pipeline, preset):
    run, _, _, _ = pipeline
    with pytest.raises(FileExistsError, match="already finished.*overwrite=True"):
        train.train_sft(preset, run)


@pytest.mark.slow
def test_orpo_is_a_config_switch(pipeline, preset, tmp_path):
    sft_run, base, _, results = pipeline
    p = preset.replace(**{"dpo.algorithm": "orpo"})
    run = run_after(sft_run, tmp_path, "orpo", p, "sft")
    result = train.train_dpo(p, run)
    assert result.finished and result.started_from == "sft"
    assert changed(models.lora_params(results["sft"].policy), models.lora_params(result.policy)) > 0
    assert_base_untouched(result.policy, base)
    assert "train/odds_ratio" in train.read_metrics(run, "dpo")  # ORPO's own term, not DPO's


@pytest.mark.slow
def test_dpo_before_sft_says_which_notebook(tmp_path, preset):
    run = make_run(tmp_path, "nosft", preset)
    with pytest.raises(FileNotFoundError, match="run notebooks/03_sft first"):
        train.train_dpo(preset, run)


def dies_at(batch_index: int):
    """``train_clock.until`` that raises on the stream's ``batch_index``-th batch, as a dying kernel."""
    real_until = train_clock.until

    def until(stream, deadline, margin_s=120.0, **kwargs):
        for i, batch in enumerate(real_until(stream, deadline, margin_s, **kwargs)):
            if i == batch_index:
                raise KeyboardInterrupt("kernel died")
            yield batch

    return until


def slow_saves(monkeypatch, seconds: float) -> None:
    """Orbax renames a finished save into place ``seconds`` late, in its background thread."""
    from orbax.checkpoint._src.checkpointers import async_checkpointer

    commit = async_checkpointer._on_commit_callback

    def late(*args, **kwargs):
        time.sleep(seconds)
        return commit(*args, **kwargs)

    monkeypatch.setattr(async_checkpointer, "_on_commit_callback", late)


@pytest.mark.slow
def test_resume_after_a_crash_ends_like_an_uninterrupted_run(tmp_path, preset, monkeypatch):
    p = preset.replace(**{"sft.max_steps": 6, "sft.checkpoint_every": 2})
    whole = train.train_sft(p, make_run(tmp_path, "whole", p))

    run = make_run(tmp_path, "crashed", p)
    monkeypatch.setattr(train.clock, "until", dies_at(5))  # mid-step 6, last checkpoint at 4
    slow_saves(monkeypatch, 3.0)  # step 4's save is still being written when step 6 dies
    with pytest.raises(KeyboardInterrupt):
        train.train_sft(p, run)
    assert not run.is_finished("sft") and runs.latest_step(run, "sft") == 4
    monkeypatch.undo()
    # Resuming with another learning rate would mix two runs: refused, nothing lost.
    with pytest.raises(ValueError, match=r"checkpoint at step 4 .*sft\.learning_rate: 0\.003 -> "
                                         r"0\.001.*overwrite=True"):
        train.train_sft(p.replace(**{"sft.learning_rate": 1e-3}), run)
    assert runs.latest_step(run, "sft") == 4 and not run.is_finished("sft")
    # How often it checkpoints or logs does not change what it learns: free to change.
    resumed = train.train_sft(p.replace(**{"sft.checkpoint_every": 3, "sft.log_every": 1}), run)
    assert resumed.finished and resumed.steps == 6
    assert changed(models.lora_params(whole.policy), models.lora_params(resumed.policy)) < 1e-5


def test_an_interrupt_is_not_hidden_by_a_save_that_fails_to_land():
    class BrokenDisk:
        def close(self):
            raise OSError("disk full")

    with pytest.raises(KeyboardInterrupt) as stop, train_stages.saves_land_on_interrupt(BrokenDisk()):
        raise KeyboardInterrupt
    assert "was lost: OSError('disk full')" in stop.value.__notes__[0]


def test_deadline_stops_the_stream_cleanly(monkeypatch):
    clock = iter(range(0, 1000, 10))  # every call to time.time() advances 10 s
    monkeypatch.setattr(train.clock.time, "time", lambda: next(clock))
    got = list(train_clock.until(range(100), deadline=200, margin_s=50))
    assert 0 < len(got) < 100  # stopped early, with room for a step and the checkpoint
    assert list(train_clock.until(range(5), deadline=None)) == list(range(5))


def test_take_gives_the_first_n_and_reads_no_further():
    read = []

    def stream():
        for i in range(10):
            read.append(i)
            yield i

    assert list(train.take(stream(), 3)) == [0, 1, 2] and read == [0, 1, 2]
    read.clear()
    assert list(train.take(stream(), 0)) == [] and read == []
    assert list(train.take(range(2), np.int64(5))) == [0, 1]


@pytest.mark.parametrize("n, error, match", [
    (-1, ValueError, r"take: n=-1 is negative; expected an int >= 0"),
    (2.0, TypeError, r"take: n=2\.0 is a float; expected an int >= 0"),
    (True, TypeError, r"take: n=True is a bool; expected an int >= 0"),
    (None, TypeError, r"take: n=None is a NoneType; expected an int >= 0"),
    ("3", TypeError, r"take: n='3' is a str; expected an int >= 0"),
])
def test_take_refuses_a_bad_n_at_the_call(n, error, match):
    with pytest.raises(error, match=match):
        train.take(range(5), n)  # not iterated: the call itself raises


def test_take_refuses_a_stream_that_is_not_iterable():
    with pytest.raises(TypeError, match=r"take: stream is a int; expected an iterable"):
        train.take(5, 2)


@pytest.mark.parametrize("skip", [0, 3])
def test_eta_after_warm_up_from_the_measured_steps(monkeypatch, capsys, skip):
    """The first step compiles (50 s), the others take 2 s; a resumed run skips ``skip`` batches
    at no cost. Once two steady steps ran, one line gives their time and the ETA."""
    clock = [0.0]
    monkeypatch.setattr(train.clock.time, "time", lambda: clock[0])
    for i in train_clock.until(range(40), deadline=1000, margin_s=0, total=40, skip=skip, name="SFT"):
        if i >= skip:
            clock[0] += 50 if i == skip else 2
    left, now = 40 - skip - 3, 50 + 2 + 2  # measured at the 4th real batch
    assert capsys.readouterr().out.splitlines() == [
        f"SFT: 2.00 s/step after warm-up; {left} steps left, {format_duration(2 * left)}: ends "
        f"{format_duration(1000 - now - 2 * left)} before the deadline"]
    list(train_clock.until(range(10), deadline=None, total=10))
    assert capsys.readouterr().out.endswith("; no deadline set\n")


@pytest.mark.slow
def test_time_budget_stop_leaves_a_resumable_checkpoint(tmp_path, preset):
    run = make_run(tmp_path, "budget", preset)
    result = train.train_sft(preset, run, deadline=time.time() - 1)  # already out of time
    assert not result.finished and not run.is_finished("sft")
    assert train.train_sft(preset, run).finished  # the next session resumes and completes


@pytest.mark.slow
def test_grpo_rewards_come_from_the_config_and_a_wrong_name_is_refused_up_front(tmp_path, preset):
    built = train.build_stage(preset.replace(**{"grpo.rewards": [["format_exact", 1.0],
                                                                 ["answer_correct", 2.0]]}),
                              "grpo", weights="abstract")
    assert [fn.__name__ for fn in built.learner.reward_manager.reward_fns] == [
        "format_exact", "answer_correct_x2"]
    assert train.build_stage(preset, "grpo", weights="abstract").learner.reward_manager.reward_fns == \
        rewards.MATH_REWARDS  # the default: Tunix logs rewards/<name> as it always did
    run = make_run(tmp_path, "typo", preset)
    with pytest.raises(ValueError, match=r"grpo\.rewards\[0\]: unknown reward 'format'; known: "):
        train.train_grpo(preset.replace(**{"grpo.rewards": [["format", 1.0]]}), run)
    assert not (run.stage("grpo") / "settings.json").exists()  # refused before anything started


@pytest.mark.slow
def test_grpo_logs_the_groups_that_teach_nothing_and_shows_an_answer(pipeline, preset, tmp_path, capsys):
    """Every step logs rewards/frac_zero_std, as computed from that step's rewards; with
    show_every=1 every step prints one answer and what each reward gave it."""
    p = preset.replace(**{"grpo.show_every": 1})
    run = run_after(pipeline[0], tmp_path, "zero-std", p, "sft", "dpo")
    steps_rewards, n = [], p.grpo.batch_size * p.grpo.num_generations

    def first_prompt_only(prompts, completions, **kwargs):
        """The first prompt's answers score their length (a spread), the other prompts' 0 (none)."""
        scores = [float(len(c)) if q == prompts[0] else 0.0
                  for q, c in zip(prompts, completions, strict=True)]
        if len(scores) == n:  # a step's rollouts, not the printout scoring one answer again
            steps_rewards.append(scores)
        return scores

    train.train_grpo(p, run, reward_fns=[first_prompt_only])
    logged = train.read_metrics(run, "grpo")["rewards/train/frac_zero_std"][1]
    want = [rewards.frac_zero_std(r, p.grpo.num_generations) for r in steps_rewards]
    assert len(want) == p.grpo.max_steps and logged == pytest.approx(want)
    assert all(0.0 <= v <= 1.0 for v in logged)
    out = capsys.readouterr().out
    assert out.count("--- GRPO step ") == p.grpo.max_steps, out
    assert re.search(r"rewards: first_prompt_only \d+\.00; sum \d+ \(its group of 8: ", out), out


def test_frac_zero_std_and_the_printout_of_one_answer():
    summed = np.array([3.0, 3.0, 0.0, 1.5])  # 2 prompts x G = 2
    assert rewards.frac_zero_std(summed, 2) == 0.5 and rewards.frac_zero_std(summed, 4) == 0.0
    with pytest.raises(ValueError, match=r"\(4,\) rewards do not split into groups of num_generations=3"):
        rewards.frac_zero_std(summed, 3)
    prompt = template.format_prompt("What is 6 * 7?")
    answers = ["<reasoning>6 * 7 = 42</reasoning><answer>42</answer>", "41", "x", "y"]
    text = train_metrics.show_answer(7, [prompt] * 4, answers, summed, {"answer": np.array(["42"] * 4)},
                             [rewards.format_exact, rewards.answer_correct], num_generations=2, tail=30)
    assert text.splitlines() == [
        "--- GRPO step 7: one sampled answer of 4",
        "prompt ends: ...'wer> </answer>.\\nWhat is 6 * 7?'",  # its last 30 characters
        "answer: '<reasoning>6 * 7 = 42</reasoning><answer>42</answer>'",
        "rewards: format_exact 3.00, answer_correct 3.00; sum 3 (its group of 2: 3 3)"]


def test_grpo_loss_variants_are_selectable(preset):
    from tunix.rl.grpo import dapo_learner, drgrpo_learner, grpo_learner

    for loss, cls in [("grpo", grpo_learner.GRPOLearner), ("gspo-token", grpo_learner.GRPOLearner),
                      ("dapo", dapo_learner.DAPOLearner), ("dr-grpo", drgrpo_learner.DrGRPOLearner)]:
        learner, algo = train_build.grpo_algorithm(preset.replace(**{"grpo.loss": loss}))
        assert learner is cls and algo.num_generations == preset.grpo.num_generations
    algo = train_build.grpo_algorithm(preset.replace(**{"grpo.loss": "gspo-token"}))[1]
    assert algo.loss_algo == "gspo-token"


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["gspo-token", "dapo", "dr-grpo"])
def test_each_grpo_loss_variant_trains(pipeline, preset, tmp_path, loss):
    """Tunix's other policy losses train too, from the same DPO adapters as "grpo".

    Same seed and start, so the first step's rollouts are the pipeline's: the gradient
    norms show the switch reached the loss. DAPO's token-mean equals GRPO's per-answer mean
    when a step's answers are all as long (here every answer of step 1 has 16 tokens), and
    step 1's learning rate is 0 (warm-up), so step 2 starts where step 1 did: DAPO runs a
    third step, where GRPO's KL term (DAPO has none) pulls on a policy that has moved.
    """
    src, base, _, results = pipeline
    p = preset.replace(**{"grpo.loss": loss})
    if loss == "dapo":
        p, src = p.replace(**{"grpo.max_steps": 3}), run_after(src, tmp_path, "grpo3", preset, "sft", "dpo")
        train.train_grpo(preset.replace(**{"grpo.max_steps": 3}), src)
    run = run_after(src, tmp_path, loss, p, "sft", "dpo")
    result = train.train_grpo(p, run)
    assert result.finished and result.started_from == "dpo"
    assert changed(models.lora_params(results["dpo"].policy), models.lora_params(result.policy)) > 0
    assert_base_untouched(result.policy, base)
    norms = train.read_metrics(run, "grpo")["actor/train/grad_norm"][1]
    default = train.read_metrics(src, "grpo")["actor/train/grad_norm"][1]  # same first rollouts
    assert np.all(np.isfinite(norms)) and norms[0] > 0  # a later step may teach nothing (equal rewards)
    if loss == "gspo-token":  # on-policy (ratio 1), its gradient is GRPO's
        assert norms[0] == pytest.approx(default[0], rel=1e-4)
    else:  # token-mean and no KL term (DAPO), no std normalisation (Dr. GRPO): another gradient
        assert any(abs(a - b) > 0.02 * b for a, b in zip(norms, default, strict=True)), (norms, default)


def says_gold(prompts, completions, answer, **kwargs):
    """1 when the row's own gold number appears anywhere in the completion (tags or not)."""
    return [float(re.search(rf"(?<!\d){re.escape(g)}(?!\d)", c) is not None)
            for c, g in zip(completions, answer, strict=True)]


@pytest.mark.slow
def test_grpo_climbs_a_verifiable_reward(tmp_path, preset):
    """Not just "the adapters moved": GRPO makes rewarded answers more likely.

    Four prompts the barely fine-tuned base answers right about half the time when
    sampling; a reward that checks each row's own gold answer (so it also catches
    answers that reach the reward misaligned with their completions). Twelve steps take
    the sampled hit rate from about 0.5 to about 0.9 here.
    """
    questions = {"How many km are in 9000 m?": "9", "How many kg are in 5000 g?": "5",
                 "A sled has a mass of 8 g and a volume of 4 cm3. What is its density in g/cm3?": "2",
                 "A bus goes 27 m in 9 s. What is its speed in m/s?": "3"}
    preset = preset.replace(**{"grpo.max_steps": 12, "grpo.checkpoint_every": 12,
                               "grpo.batch_size": 4, "grpo.num_generations": 8,
                               "grpo.learning_rate": 3e-3, "grpo.warmup_ratio": 0.0,
                               "grpo.max_generation_length": 32})
    run = make_run(tmp_path, "climb", preset)
    rows = [{"id": f"q{i}", "domain": "science", "source": "test", "prompt": q, "reasoning": "",
             "answer": a} for i, (q, a) in enumerate(questions.items())]
    (run.stage("data") / "grpo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    train.train_sft(preset, run)  # GRPO starts from a finished SFT stage; 4 steps barely move it
    sampling = dataclasses.replace(preset.eval, batch_size=16, max_generation_length=32,
                                   temperature=0.9)

    def hit_rate(model, tok):
        sampler = evaluate.make_sampler(model, tok, preset.model, sampling)
        hits = []
        for q, gold in questions.items():
            out = evaluate.generate(sampler, [template.format_prompt(q)] * 16, sampling,
                                    models.stop_token_ids(tok), sample=True, seed=7)
            hits += says_gold(None, out, [gold] * 16)
        return float(np.mean(hits))

    _, before_model, tok, _ = models.load_policy(preset, run, "sft", None)
    before = hit_rate(before_model, tok)
    after = hit_rate(train.train_grpo(preset, run, reward_fns=[says_gold]).policy, tok)
    curve = train.read_metrics(run, "grpo")["rewards/train/says_gold"][1]
    assert 0.2 < before < 0.8, before  # room to climb, and something to reinforce
    assert after > before + 0.2, (before, after, curve)
    assert np.mean(curve[-4:]) > np.mean(curve[:4]), curve


def test_grpo_kl_term_pulls_towards_the_reference(preset):
    """Tunix's default "kl" estimator has a gradient that ignores the reference; ours does not."""
    from tunix.rl import common

    for loss in ("grpo", "dr-grpo"):
        algo = train_build.grpo_algorithm(preset.replace(**{"grpo.loss": loss}))[1]
        assert algo.kl_loss_mode == "low_var_kl"
    logp = jnp.array([-1.0, -2.0, -0.5])

    def grad(mode, ref):
        return jax.grad(lambda x: common.compute_kl_divergence(x, ref, mode).sum())(logp)

    near, far = logp + 0.01, logp - 1.0
    assert jnp.allclose(grad("kl", near), grad("kl", far))  # why we do not use Tunix's default
    assert not jnp.allclose(grad("low_var_kl", near), grad("low_var_kl", far))
    assert jnp.allclose(grad("low_var_kl", logp), 0.0)  # no pull at the reference itself


def test_schedule_warms_up_then_decays():
    s = train.schedule(SFTConfig(max_steps=100, warmup_ratio=0.1, learning_rate=1.0))
    assert float(s(0)) == 0.0 and abs(float(s(10)) - 1.0) < 1e-6 and float(s(100)) < 1e-6
    assert float(s(5)) == pytest.approx(0.5) and float(s(55)) < float(s(20))


def test_no_warmup_means_the_first_step_learns():
    """warmup_ratio=0 once still gave step 0 a learning rate of 0: one step (or a whole
    max_steps=1 run) that changed nothing."""
    for steps in (1, 10):
        s = train.schedule(SFTConfig(max_steps=steps, warmup_ratio=0.0, learning_rate=1.0))
        assert float(s(0)) == 1.0 and float(s(steps)) < 1e-6


def test_optimizer_follows_the_schedule_from_its_state():
    """The learning rate each update logs is optax's warm-up + cosine, and the schedule's
    numbers live in the state: runs of other lengths or peaks compile one update."""
    steps = {}
    for max_steps, warmup, lr in ((40, 0.1, 3e-3), (7, 0.5, 1e-2), (5, 0.0, 1e-3)):
        cfg = SFTConfig(max_steps=max_steps, warmup_ratio=warmup, learning_rate=lr)
        n = train_optim.schedule_numbers(cfg)
        want = optax.warmup_cosine_decay_schedule(0.0, n["peak"], n["warmup"], n["total"], 0.0)
        opt, params = train.make_optimizer(cfg), {"w": jnp.ones(3)}
        state, update = opt.init(params), jax.jit(opt.update)
        for i in range(max_steps + 2):
            _, state = update(params, state, params)
            got = float(state.hyperparams["learning_rate"])
            assert got == pytest.approx(float(want(i)), abs=1e-6 * lr), (max_steps, i)
            assert got == pytest.approx(float(train.schedule(cfg)(i)), abs=1e-6 * lr)
        assert int(state.count) == max_steps + 2
        steps[max_steps] = update.lower(params, state, params).as_text()
    assert len(set(steps.values())) == 1  # one program for all three schedules


@pytest.mark.slow
def test_merged_export_matches_the_lora_model(pipeline, preset, tmp_path):
    run, _, _, results = pipeline
    out = train.export(results["grpo"], preset, run)
    assert out == {"adapter": run.stage("grpo") / "adapter", "merged": run.stage("grpo") / "merged"}
    assert (out["merged"] / "model.safetensors").is_file() and (out["merged"] / "tokenizer.json").is_file()
    assert (out["adapter"] / "adapter_model.safetensors").is_file()
    from test_models import TOKENS, forward  # tests/ is on sys.path under pytest

    want = forward(results["grpo"].policy, TOKENS)
    got = forward(models.load_model(out["merged"], preset.model), TOKENS)
    np.testing.assert_allclose(got, want, atol=1e-4)
    # Another stage on request, adapters only (a merged model of a real preset is gigabytes).
    assert list(train.export(results["sft"], preset, run, merged=False)) == ["adapter"]
    assert not (run.stage("sft") / "merged").exists()


@pytest.mark.slow
def test_train_or_load_loads_a_finished_stage(pipeline, preset):
    run, _, _, results = pipeline
    loaded = train.train_or_load(preset, run, "dpo")
    assert loaded.finished and loaded.steps == preset.dpo.max_steps and loaded.started_from == "sft"
    assert changed(models.lora_params(results["dpo"].policy), models.lora_params(loaded.policy)) == 0
    with pytest.raises(ValueError, match="unknown training stage 'ppo'"):
        train.train_or_load(preset, run, "ppo")


@pytest.mark.slow
def test_reloading_a_stage_trained_with_other_settings_says_so(pipeline, preset):
    run, _, _, _ = pipeline
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        train.train_or_load(preset, run, "grpo")
    assert not [w for w in seen if "other settings" in str(w.message)]  # the same settings
    with pytest.warns(UserWarning, match=r"grpo\.max_steps: 2 -> 200.*retrain=True"):
        loaded = train.train_or_load(preset.replace(**{"grpo.max_steps": 200}), run, "grpo")
    assert loaded.steps == preset.grpo.max_steps  # the old run's adapters, as it says


def test_deadline_margin_counts_the_trainers_step_not_just_the_batch_fetch(monkeypatch):
    """Fetching a batch takes no time here, each step 100 s: no step may end past the deadline."""
    clock = [0.0]
    monkeypatch.setattr(train.clock.time, "time", lambda: clock[0])
    ends = []
    for _ in train_clock.until(range(100), deadline=1000, margin_s=0):
        clock[0] += 100  # the step the trainer runs on this batch
        ends.append(clock[0])
    assert 8 <= len(ends) and ends[-1] <= 1000, ends


@pytest.mark.slow
def test_grpo_out_of_time_before_its_first_step_stops_cleanly(tmp_path, preset):
    """Tunix's learner raises StopIteration on an empty stream; SFT and DPO's trainers stop."""
    p = preset.replace(**{"sft.max_steps": 1, "grpo.max_steps": 1})
    run = make_run(tmp_path, "late", p)
    train.train_sft(p, run)
    result = train.train_grpo(p, run, deadline=time.time() - 1)  # already out of time
    assert not result.finished and result.steps == 0 and not run.is_finished("grpo")
    assert train.train_grpo(p, run).finished  # the next session resumes and completes


@pytest.mark.slow
def test_a_stage_does_not_start_from_adapters_of_another_model_or_lora(tmp_path, preset):
    """Not Orbax's "set strict=False" about a shape, nor another alpha restored in silence."""
    run = make_run(tmp_path, "handoff", preset)
    other = preset.replace(**{"lora.rank": 4, "lora.alpha": 4.0})
    run.write_json("sft", "settings.json", runs.stage_settings(other, run, "sft", None))
    run.mark_finished("sft", steps=4)
    for stage in (train.train_dpo, train.train_grpo):
        with pytest.raises(ValueError, match=r"starts from the 'sft' adapters.*lora\.alpha: 4\.0 -> "
                                             r"16\.0; lora\.rank: 4 -> 8.*retrain=True"):
            stage(preset, run)
    assert not (run.stage("dpo") / "settings.json").exists()  # refused before anything started
    runs.check_hand_off(run, "dpo", runs.stage_settings(other, run, "dpo", "sft"))  # same: no complaint


@pytest.mark.slow
def test_an_interrupted_stage_stops_listening_for_metrics(tmp_path, preset, monkeypatch):
    """Tunix unregisters nothing when training raises: its listeners heard every later metric."""
    run = make_run(tmp_path, "stopped", preset)
    monkeypatch.setattr(train.clock, "until", dies_at(0))
    with pytest.raises(KeyboardInterrupt):
        train.train_sft(preset, run)
    jax.monitoring.record_scalar("train/loss", 123.0, step=1)  # the next stage, same kernel
    assert not [row for row in run.read_metrics("sft") if row.get("value") == 123.0]


def test_an_empty_split_and_a_missing_checkpoint_say_what_to_do(tmp_path, preset):
    with pytest.raises(ValueError, match=r"the dpo split is empty\. data/data_report\.json"):
        next(train_batches.epochs([], seed=0, split="dpo"))
    run = RunDir.create("nockpt", root=tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint of stage 'sft' .*run notebooks/03_sft "
                                                r"for run 'nockpt'"):
        models.load_policy(preset, run, "sft", None)


# --- several JAX processes -----------------------------------------------------------------
#
# What a multi-host slice (v5e-16, v4-32) runs, on this machine: two JAX processes with 2
# simulated CPU devices each, joined by a localhost coordinator (gloo collectives), train
# SFT on one global 4-device mesh into one run directory. Each process runs the same file
# as a script (the __main__ block below), as does a single process on 4 devices.

TWO_STEPS = {**SMALL, "sft.max_steps": 2, "sft.checkpoint_every": 2,
             "sft.warmup_ratio": 0.0}  # no warm-up: both steps learn
# The two runs add the same float32 numbers in another order (the gradient's all-reduce runs
# over gloo between the processes, inside XLA in one process): the losses agree to the last
# bit, the gradient norms to ~1e-6. Adam divides each gradient entry by its own size, so an
# entry whose gradient is near Adam's eps (1e-8; lora_a's is tiny at step 2, being
# proportional to lora_b, one step old) turns that into an absolute difference of up to
# about lr x (rounding difference / eps). Measured: 1.6e-5 at most, in 10% of the entries
# (lr 3e-3). A wrong batch or a lost gradient shard moves entries by a whole update (~lr):
# lr / 30 tells the two apart.
MULTI_TOL = 1e-4
MULTI_TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _gathered(x) -> np.ndarray:
    """The whole of a (global) array, on every process."""
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def _adapters(model, prefix: str = "") -> dict[str, np.ndarray]:
    """``models.lora_params``, for arrays spread over several processes too."""
    from flax import nnx

    return {prefix + ".".join(map(str, k)): _gathered(v.get_value())
            for k, v in nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))}


def _multihost_worker(root: str, name: str, out: str, restore: str = "") -> None:
    """One JAX process: SFT's 2 steps into ``<root>/<name>``; what it saw and wrote into ``out``.

    With ``restore``: then, once that run's SFT finished, its adapters restored onto this model.
    """
    from tunix.sft import sharding_utils

    from reasonkit.runtime import mesh

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    mesh.init_distributed()  # $JAX_COORDINATOR_ADDRESS, $JAX_NUM_PROCESSES, $JAX_PROCESS_ID; alone: no-op
    run = RunDir.create(name, root=root)
    # Every file this process writes in the run, Orbax's checkpoints aside (written together).
    writes, prefix = [], str(run.path.resolve()) + os.sep

    def audit(event, args):
        if event == "open" and isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR):
            paths = args[:1]
        elif event in ("os.rename", "os.replace"):
            paths = args[1:2]
        elif event in ("os.remove", "os.truncate", "shutil.rmtree"):
            paths = args[:1]
        else:
            return
        for path in paths:
            if isinstance(path, (str, bytes, os.PathLike)):
                path = os.path.abspath(os.fsdecode(path))
                if path.startswith(prefix) and "/checkpoints" not in path[len(prefix) - 1:]:
                    writes.append(path[len(prefix):])

    fed, shard_input = [], sharding_utils.shard_input

    def recording(batch, axes):  # what each train / eval step gets, as one global array
        placed = shard_input(batch, axes)
        fed.append(_gathered(placed["input_tokens"]))
        return placed

    sharding_utils.shard_input = recording
    sys.addaudithook(audit)
    preset = get_preset("tiny", **TWO_STEPS)
    result = train.train_sft(preset, run)
    lora = _adapters(result.policy)
    train.export(result, preset, run)
    if restore:  # a checkpoint written by two processes, read by one on another mesh
        other = RunDir.create(restore, root=root)
        for _ in range(MULTI_TIMEOUT_S):
            if other.is_finished("sft"):
                break
            time.sleep(1)
        models_adapters.restore_lora(result.policy, other, "sft")
        lora.update(_adapters(result.policy, f"{restore}/"))
    me = f"p{jax.process_index()}"
    np.savez(pathlib.Path(out) / f"{me}.npz", **{f"lora/{k}": v for k, v in lora.items()},
             **{f"fed/{i}": x for i, x in enumerate(fed)})
    (pathlib.Path(out) / f"{me}.json").write_text(json.dumps({
        "processes": jax.process_count(), "devices": jax.device_count(),
        "mesh": dict(mesh.mesh_of(result.policy).shape), "steps": result.steps, "writes": writes}))


def _start_workers(tmp_path, port):
    """The single process on 4 devices and the two processes of 2, all at once (2 cores).

    The single process then restores the two processes' checkpoint onto its own mesh.
    """
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("JAX_") and k not in ("XLA_FLAGS", "REASONKIT_OVERRIDES")}
    env["PYTHONPATH"] = os.pathsep.join([str(pathlib.Path(__file__).resolve().parents[1]),
                                         env.get("PYTHONPATH", "")])
    env["JAX_PLATFORMS"] = "cpu"
    procs = {}
    for name, devices, process in (("one", 4, None), ("two", 2, 0), ("two", 2, 1)):
        out = tmp_path / f"out-{name}"
        out.mkdir(exist_ok=True)
        extra = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
        if process is not None:
            extra.update(JAX_COORDINATOR_ADDRESS=f"localhost:{port}", JAX_NUM_PROCESSES="2",
                         JAX_PROCESS_ID=str(process))
        log = tmp_path / f"{name}-{process}.log"
        with open(log, "w") as f:
            procs[log] = subprocess.Popen(
                [sys.executable, __file__, "--multihost-worker", str(tmp_path / "runs"), name, str(out),
                 "two" if process is None else ""],
                env={**env, **extra}, stdout=f, stderr=subprocess.STDOUT)
    return procs


def _wait_all(procs, timeout_s):
    """Wait for every process; on the first failure or the timeout, kill the rest."""
    deadline = time.monotonic() + timeout_s
    try:
        while any(p.poll() is None for p in procs.values()):
            failed = [log for log, p in procs.items() if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
    bad = {log: p.returncode for log, p in procs.items() if p.returncode != 0}
    assert not bad, "\n\n".join(f"{log.name}: exit {code} (-9: killed after the first failure or "
                                 f"{timeout_s} s)\n{log.read_text()[-3000:]}" for log, code in bad.items())


@pytest.mark.slow
def test_sft_on_two_processes_equals_one_process_on_four_devices(tmp_path):
    p = get_preset("tiny", **TWO_STEPS)
    dirs = {name: make_run(tmp_path / "runs", name, p) for name in ("one", "two")}
    _wait_all(_start_workers(tmp_path, _free_port()), MULTI_TIMEOUT_S)

    info = {f: json.loads((tmp_path / f).read_text())
            for f in ("out-one/p0.json", "out-two/p0.json", "out-two/p1.json")}
    one, two0, two1 = (dict(np.load(tmp_path / f.replace(".json", ".npz"))) for f in info)
    assert [(i["processes"], i["devices"], i["mesh"], i["steps"]) for i in info.values()] == \
        [(1, 4, {"fsdp": 4, "tp": 1}, 2)] + [(2, 4, {"fsdp": 4, "tp": 1}, 2)] * 2
    # Every step on two processes saw the batch one process saw: 4 rows, not each twice.
    fed = sorted(k for k in one if k.startswith("fed/"))
    assert fed == sorted(k for k in two0 if k.startswith("fed/")) and len(fed) >= 2
    for k in fed:
        assert one[k].shape[0] == p.sft.batch_size
        np.testing.assert_array_equal(two0[k], one[k], err_msg=k)
    # The same adapters, up to the order of the gradient's sums; and they moved (b starts at 0).
    lora = sorted(k for k in two0 if k.startswith("lora/"))
    assert lora == sorted(k for k in one if k.startswith("lora/") and not k.startswith("lora/two/"))
    diff = max(float(np.abs(two0[k] - one[k]).max()) for k in lora)
    moved = max(float(np.abs(one[k]).max()) for k in lora if k.endswith("_b"))
    print(f"two processes vs one: max |diff| {diff:.3g}; largest lora_b entry {moved:.3g}")
    assert diff <= MULTI_TOL and moved > 10 * MULTI_TOL
    assert all(np.array_equal(two0[k], two1[k]) for k in lora)
    # The checkpoint both processes wrote restores (in the single process, on its mesh) to
    # exactly those adapters.
    run = dirs["two"]
    assert run.is_finished("sft") and runs.latest_step(run, "sft") == 2
    for k in lora:
        np.testing.assert_array_equal(one[k.replace("lora/", "lora/two/")], two0[k], err_msg=k)
    # The exports (gathered from both processes' shards) hold the same weights too.
    from safetensors.numpy import load_file

    for f in ("adapter/adapter_model.safetensors", "merged/model.safetensors"):
        a, b = (load_file(dirs[name].stage("sft") / f) for name in ("one", "two"))
        assert a.keys() == b.keys()
        assert max(float(np.abs(a[k] - b[k]).max()) for k in a) <= MULTI_TOL, f
    # Process 0 wrote the run's files; process 1 none (its checkpoint shards aside).
    written = set(info["out-two/p0.json"]["writes"])
    assert {"sft/settings.json", "sft/finished.json", "sft/metrics.jsonl",
            "sft/adapter/adapter_model.safetensors", "sft/merged/model.safetensors"} <= written
    assert info["out-two/p1.json"]["writes"] == []
    assert train.read_metrics(run, "sft")["train/loss"][0] == [1, 2]


if __name__ == "__main__" and sys.argv[1:2] == ["--multihost-worker"]:
    _multihost_worker(*sys.argv[2:6])


def test_export_once_keeps_an_export_that_is_there(tmp_path, monkeypatch, capsys):
    run = RunDir.create("exp", root=tmp_path)
    result = train.StageResult("grpo", 2, True, "dpo", 0.0, {})
    calls = []
    monkeypatch.setattr(train_stages, "export", lambda r, p, rd: calls.append(r.stage) or {"adapter": "new"})
    assert train.export_once(result, "a preset", run) == {"adapter": "new"} and calls == ["grpo"]
    for name in ("adapter/adapter_model.safetensors", "merged/model.safetensors"):
        (run.stage("grpo") / name).parent.mkdir(parents=True, exist_ok=True)
        (run.stage("grpo") / name).write_text("x")
    assert train.export_once(result, "a preset", run) == {
        "adapter": run.stage("grpo") / "adapter", "merged": run.stage("grpo") / "merged"}
    assert calls == ["grpo"] and "already exported:" in capsys.readouterr().out
    assert train.export_once(result, "a preset", run, again=True) == {"adapter": "new"}
    assert calls == ["grpo", "grpo"]


@pytest.mark.slow
def test_grpo_length_buckets_train_on_the_numbers_of_the_step_padded_to_the_max(tmp_path, preset):
    """A step at its (prompt, answer) bucket gives the padded-to-the-max step's log-probs and losses.

    One real step of the learner (Tunix's own rollout, reference and old-policy forwards),
    cut to the buckets, against the same tokens padded back to 96 + 64: the reference's
    and the old policy's log-probs on the answers' columns and the loss of every variant
    that trims ("grpo", "gspo-token", "dapo") agree; dr-grpo's loss divides by the width,
    which is why it keeps its answers at the max.
    """
    from tunix.rl import function_registry
    from tunix.rl.common import TrainExample

    p = preset.replace(**{"grpo.max_generation_length": 64, "grpo.num_iterations": 2,
                          "grpo.length_buckets": [[80], [48]]})
    splits, _ = data.read_splits(make_run(tmp_path, "buckets", p).require("data"))
    stage = train.build_stage(p, "grpo")
    learner, cluster, n = stage.learner, stage.cluster, p.grpo.batch_size * p.grpo.num_generations
    for name in ("_rollout_micro_batch_size", "_compute_logps_micro_batch_size"):
        private.set_tunix_private(learner, name, p.grpo.batch_size)  # as learner.train() sets them
    batch, _ = train.grpo_batches(train.grpo_records(splits.grpo), p, stage.tokenizer)
    batch = {k: np.repeat(v, p.grpo.num_generations, axis=0) for k, v in next(iter(batch)).items()}
    with stage.mesh, compiles.CompileCounter() as counter:
        cut = private.tunix_private(learner, "_generate_and_compute_advantage")(batch)
    assert counter.step_shapes == {"('grpo', 80, 48)"}
    assert cut.prompt_ids.shape == (n, 80) and cut.completion_ids.shape == (n, 48)
    assert 0 < grpo.used_width(cut.completion_ids, 0) <= 48  # the answers' columns all kept
    assert cut.ref_per_token_logps.shape == cut.old_per_token_logps.shape == (n, 48)

    def pad(x, before, after, value=0):
        return None if x is None else jnp.pad(x, ((0, 0), (before, after)), constant_values=value)

    full = TrainExample(prompt_ids=pad(cut.prompt_ids, 16, 0), prompt_mask=pad(cut.prompt_mask, 16, 0),
                        completion_ids=pad(cut.completion_ids, 0, 16),
                        completion_mask=pad(cut.completion_mask, 0, 16), advantages=cut.advantages,
                        ref_per_token_logps=pad(cut.ref_per_token_logps, 0, 16),
                        old_per_token_logps=pad(cut.old_per_token_logps, 0, 16))
    with stage.mesh:  # outside a step the forwards are Tunix's, at the width given
        ref = cluster.get_ref_per_token_logps(prompt_tokens=full.prompt_ids,
                                              completion_tokens=full.completion_ids,
                                              pad_id=0, eos_id=1, micro_batch_size=n)
        old = cluster.get_old_per_token_logps(prompt_tokens=full.prompt_ids,
                                              completion_tokens=full.completion_ids, micro_batch_size=n)
        mask = np.asarray(cut.completion_mask)
        for got, want in ((cut.ref_per_token_logps, ref), (cut.old_per_token_logps, old)):
            assert want.shape == (n, 64)
            np.testing.assert_allclose(np.where(mask, got, 0), np.where(mask, want[:, :48], 0),
                                       atol=2e-3)
        policy_loss = loss_swap.chunked(function_registry.get_policy_loss_fn("grpo"))  # every variant's
        shared_loss = loss_swap.chunked(function_registry.get_policy_loss_fn("grpo"), p.grpo.num_generations)
        for loss in ("grpo", "gspo-token", "dapo", "dr-grpo"):
            algo = train_build.grpo_algorithm(p.replace(**{"grpo.loss": loss}))[1]
            algo.temperature = learner.algo_config.temperature  # as the learner sets it
            assert grpo.cuts_answers(algo) == (loss != "dr-grpo")
            short, long = (policy_loss(stage.policy, ex, algo_config=algo, pad_id=0, eos_id=1)[0]
                           for ex in (cut, full))
            if loss == "grpo":  # each prompt run once for its group: the same loss
                shared = shared_loss(stage.policy, cut, algo_config=algo, pad_id=0, eos_id=1)[0]
                assert float(shared) == pytest.approx(float(short), rel=1e-4, abs=1e-6)
            if loss == "dr-grpo":  # sum over the answer / its padded width: 64 / 48 apart
                assert float(short) == pytest.approx(float(long) * 64 / 48, rel=1e-3, abs=1e-6)
            else:
                assert float(short) == pytest.approx(float(long), rel=1e-3, abs=1e-5), loss


@pytest.mark.slow
def test_grpo_resume_samples_and_ends_like_an_uninterrupted_run(tmp_path, preset, monkeypatch):
    """GRPO samples fresh noise each step (reseed_rollouts); a resumed run must draw the same."""
    p = preset.replace(**{"grpo.max_steps": 3})
    first = make_run(tmp_path, "whole", p)
    train.train_sft(p, first)
    run = run_after(first, tmp_path, "crashed", p, "sft")
    whole = train.train_grpo(p, first)
    monkeypatch.setattr(train.clock, "until", dies_at(2))  # step 3's batch
    with pytest.raises(KeyboardInterrupt):
        train.train_grpo(p, run)
    # The learner fetches a step's batch before the previous step's checkpoint is written.
    assert not run.is_finished("grpo") and 1 <= runs.latest_step(run, "grpo") < 3
    monkeypatch.undo()
    resumed = train.train_grpo(p, run)
    assert resumed.finished and resumed.steps == 3
    assert changed(models.lora_params(whole.policy), models.lora_params(resumed.policy)) < 1e-5


@pytest.mark.slow
def test_every_stage_trains_on_plain_tunix(tmp_path, preset):
    """With every optimisation patch off, SFT, DPO and GRPO are Tunix's as shipped, and learn."""
    from qwix._src.providers import lora as qwix_lora

    from reasonkit.tunix_patches import attention, lora_delta

    p = preset.replace(**{"sft.max_steps": 2, "dpo.max_steps": 2, "grpo.max_steps": 1, "optimisations": []})
    run = make_run(tmp_path, "plain", p)
    base = models.base_params(models.load_model(models.resolve_source(p.model), p.model))
    fresh = models.lora_params(models.load_policy(p, None, None, None)[1])
    assert qwix_lora._compute_lora_delta is not lora_delta.flat_lora_delta
    try:
        for stage in ("sft", "dpo", "grpo"):
            result = train.train_or_load(p, run, stage)
            assert result.finished and attention.impl_of(result.policy) == "tunix"
            assert changed(fresh, models.lora_params(result.policy)) > 0, stage
            assert_base_untouched(result.policy, base)
            assert qwix_lora._compute_lora_delta is not lora_delta.flat_lora_delta
    finally:
        models.use_optimisations(preset.optimisations)  # the process-wide patch back for later tests


def test_held_out_check_logs_keeps_the_best_and_warns_when_reward_and_accuracy_part(
        tmp_path, monkeypatch, capsys):
    """The check's bookkeeping, with the generation faked: accuracy and reward per check, the
    best (ties: the earliest) saved with its step, the alarm printed and flagged."""
    from reasonkit.train import held_out

    run = RunDir.create("alarm", root=tmp_path)
    records = [{"id": f"m{i}", "domain": "math", "prompt": f"{i} + 1?", "answer": str(i + 1)}
               for i in range(4)]
    answers = {0: ["1", "2", "3", "4"], 5: ["1", "2", "3", "4"], 10: ["1", "0", "0", "0"]}
    step_of = {}

    def texts(self, prompts, desc):
        return [f"<reasoning>r</reasoning>\n<answer>{a}</answer>" for a in answers[step_of["now"]]]

    monkeypatch.setattr(held_out.HeldOutCheck, "_texts", texts)
    monkeypatch.setattr(held_out, "_flat_lora", lambda policy: {"lora_a": np.full(2, policy)})
    check = held_out.HeldOutCheck(0, None, records, small_preset(), run, fresh=True)

    def at(step, reward_from=None, reward=None):
        if reward_from is not None:  # the steps' rewards Tunix logged since the last check
            for s in range(reward_from, step):
                run.append_metrics("grpo", {"event": "rewards/train/sum", "step": s, "value": reward})
        step_of["now"] = step
        check.policy = step  # what the saved adapters hold
        return check(step)

    first = at(0)
    assert (first.accuracy, first.reward, first.alarm) == (1.0, None, False)
    second = at(5, 0, 1.0)
    assert (second.accuracy, second.reward, second.alarm) == (1.0, 1.0, False)
    third = at(10, 5, 2.0)
    assert (third.accuracy, third.reward, third.alarm) == (0.25, 2.0, True)
    out = capsys.readouterr().out
    assert "GRPO held-out check, step 10: accuracy 25.0% (1 of 4)" in out
    assert ("WARNING: GRPO step 10: the reward rose (1.000 -> 2.000) while held-out accuracy fell "
            "(100.0% -> 25.0% of 4 prompts") in out
    m = train.read_metrics(run, "grpo")
    assert m["held_out/accuracy"] == ([0, 5, 10], [1.0, 1.0, 0.25])
    assert m["held_out/alarm"] == ([0, 5, 10], [0.0, 0.0, 1.0])
    assert m["held_out/reward"] == ([5, 10], [1.0, 2.0])
    info = held_out.best_info(run)
    assert (info["step"], info["accuracy"], info["ids"]) == (0, 1.0, ["m0", "m1", "m2", "m3"])
    from safetensors.numpy import load_file
    assert load_file(str(run.stage("grpo") / "best" / "adapters.safetensors"))["lora_a"].tolist() == [0, 0]
    summary = held_out.progress(run)
    assert summary["accuracy"] == (1.0, 0.25) and summary["alarms"] == [10] and summary["checks"] == 3
    # a stage trained again from step 0 starts without the old best
    held_out.HeldOutCheck(0, None, records, small_preset(), run, fresh=True)
    assert held_out.best_info(run) is None


def test_held_out_check_measures_its_training_prompts_beside_the_held_out_ones(tmp_path, monkeypatch,
                                                                               capsys):
    from reasonkit.train import held_out

    run = RunDir.create("seen", root=tmp_path)
    unseen = [{"id": f"u{i}", "domain": "math", "prompt": f"{i} + 1?", "answer": str(i + 1)}
              for i in range(4)]
    seen = [{"id": f"s{i}", "domain": "math", "prompt": f"{i} + 9?", "answer": str(i + 9)}
            for i in range(8)]

    def texts(self, prompts, desc):  # every training prompt right, one held-out prompt of four
        answers = ([str(i + 9) for i in range(len(prompts))] if desc.startswith("training")
                   else ["1", "0", "0", "0"])
        return [f"<reasoning>r</reasoning>\n<answer>{a}</answer>" for a in answers]

    monkeypatch.setattr(held_out.HeldOutCheck, "_texts", texts)
    monkeypatch.setattr(held_out, "_flat_lora", lambda policy: {"lora_a": np.zeros(2)})
    check = held_out.HeldOutCheck(0, None, unseen, small_preset(), run, fresh=True,
                                  trained=held_out.held_out_block(seen, 6))
    reading = check(0)
    assert (reading.accuracy, reading.trained) == (0.25, 1.0)
    assert train.read_metrics(run, "grpo")["held_out/trained_accuracy"] == ([0], [1.0])
    out = capsys.readouterr().out
    assert "accuracy 25.0% (1 of 4), format 100.0%; on 6 of its training prompts 100.0%" in out
    plain = held_out.HeldOutCheck(0, None, unseen, small_preset(), run, fresh=True)
    assert plain(5).trained is None  # no training block: nothing logged for it
    assert train.read_metrics(run, "grpo")["held_out/trained_accuracy"] == ([0], [1.0])


def test_held_out_block_takes_each_domain_in_turn_and_no_training_prompt(tmp_path, preset):
    from reasonkit.train import held_out

    run = make_run(tmp_path, "block", preset)
    splits, _ = data.read_splits(run.require("data"))
    block = held_out.held_out_block(splits.eval, 8)
    assert len(block) == min(8, len(splits.eval))
    assert len({r["domain"] for r in block}) == min(len(block), len({r["domain"] for r in splits.eval}))
    trained = {r["prompt"] for r in splits.grpo + splits.sft + splits.dpo}
    assert not trained & {r["prompt"] for r in block}
    assert held_out.for_run(preset.replace(**{"grpo.eval_every": 0}), run, None, None) is None


@pytest.mark.slow
def test_grpo_held_out_checks_keep_the_best_and_change_no_step_of_training(tmp_path, preset, capsys):
    """GRPO with held-out checks trains exactly as without them (same adapters, bit for bit);
    the checks are logged at the start, every eval_every steps and the end, the best adapters
    load, each reward's zero-std fraction is logged, and progress lines show the current step."""
    from reasonkit.train import held_out

    p = preset.replace(**{"grpo.max_steps": 3, "grpo.eval_every": 2})
    first = make_run(tmp_path, "checked", p)
    train.train_sft(p, first)
    plain_run = run_after(first, tmp_path, "unchecked", p, "sft")
    checked = train.train_grpo(p, first)
    out = capsys.readouterr().out
    unchecked = train.train_grpo(p.replace(**{"grpo.eval_every": 0}), plain_run)
    assert changed(models.lora_params(checked.policy), models.lora_params(unchecked.policy)) == 0.0
    m = train.read_metrics(first, "grpo")
    steps, accuracy = m["held_out/accuracy"]
    assert steps == [0, 2, 3] and "held_out/accuracy" not in train.read_metrics(plain_run, "grpo")
    info = held_out.best_info(first)
    assert info["step"] == steps[int(np.argmax(accuracy))] and info["accuracy"] == max(accuracy)
    assert checked.stats["held_out"]["checks"] == 3 and checked.stats["held_out"]["seconds"] > 0
    best, _, loaded = held_out.load_best(p, first)
    assert loaded["step"] == info["step"]
    if info["step"] == 0:  # the adapters GRPO started from
        start = models.load_policy(p, first, "sft", None)[1]
        assert changed(models.lora_params(best), models.lora_params(start)) == 0.0
    for name in ("", "/correct", "/answer_correct", "/format_exact"):
        assert len(m[f"rewards/train/frac_zero_std{name}"][0]) == 3, name
    assert re.search(r"GRPO held-out check, step 0: accuracy \d+\.\d% \(\d+ of \d+\)", out), out
    assert re.search(r"GRPO step 3/3: loss -?[\d.e-]+, lr [\d.e-]+, kl [\d.e-]+, reward [\d.e-]+, "
                     r"correct [\d.e-]+", out), out
    assert checked.stats["compiles"]["after_warmup"] <= 1, checked.stats["compiles"]  # jit(equal) once


# --- GRPO on harder prompts: the data stage's draw, the contrast pass (train/contrast.py) ---

HARD = {"grpo.difficulty": 2, "grpo.keep_contrast": True, "grpo.num_generations": 2,
        "grpo.max_prompt_length": 128, "eval.max_prompt_length": 128}


def test_a_hard_run_checks_on_eval_hard_and_refuses_splits_of_another_difficulty(tmp_path, preset):
    from reasonkit.train import contrast, held_out

    hard = small_preset(**HARD)
    run = make_run(tmp_path, "hard", hard)
    splits, _ = data.read_splits(run.require("data"))
    assert splits.eval_hard and {r["id"].split("-")[-2] for r in splits.grpo} == {"d2"}
    block = held_out.held_out_block(splits.eval_hard, hard.grpo.eval_prompts)
    check = held_out.for_run(hard, run, None, None, splits=splits)
    assert [r["id"] for r in check.records] == [r["id"] for r in block]
    with pytest.raises(ValueError, match=r"grpo.difficulty=1, but the data stage drew GRPO's "
                                         r"prompts at difficulty d2: run the data stage \(02\) again"):
        contrast.check_difficulty(preset, splits)
    plain, _ = data.read_splits(make_run(tmp_path, "plain", preset).require("data"))
    with pytest.raises(ValueError, match="grpo.difficulty=2, but the data stage drew GRPO's prompts "
                                         "at difficulty the data's"):
        contrast.check_difficulty(hard, plain)
    contrast.check_difficulty(hard, splits)  # the draw it asks for


def test_the_contrast_pass_keeps_prompts_with_contrast_once_and_for_every_resume(tmp_path, monkeypatch):
    from reasonkit.train import contrast

    hard = small_preset(**HARD)
    run = make_run(tmp_path, "contrast", hard)
    splits, _ = data.read_splits(run.require("data"))
    calls = []

    def rights(policy, tok, records, preset):
        calls.append(len(records))
        return [i % 3 for i in range(len(records))]  # 0, 1, 2 right of G = 2: keep the 1s

    monkeypatch.setattr(contrast, "rights", rights)
    run.stage("grpo").mkdir(parents=True, exist_ok=True)
    kept = contrast.grpo_prompts(hard, run, None, None, splits)
    assert [r["id"] for r in kept] == [r["id"] for i, r in enumerate(splits.grpo) if i % 3 == 1]
    info = json.loads((run.stage("grpo") / contrast.SUMMARY_FILE).read_text())
    assert (info["screened"], info["kept"]) == (len(splits.grpo), len(kept))
    assert contrast.grpo_prompts(hard, run, None, None, splits) == kept and calls == [len(splits.grpo)]
    off = hard.replace(**{"grpo.keep_contrast": False})
    assert contrast.grpo_prompts(off, run, None, None, splits) == splits.grpo
    (run.stage("grpo") / contrast.PROMPTS_FILE).unlink()
    monkeypatch.setattr(contrast, "rights", lambda policy, tok, records, preset: [0] * len(records))
    with pytest.raises(ValueError, match=r"gets none of GRPO's \d+ prompts right 1 to 1 times of 2 "
                                         r"\(\d+ all wrong, 0 all right\): nothing to train on"):
        contrast.grpo_prompts(hard, run, None, None, splits)
    assert not (run.stage("grpo") / contrast.PROMPTS_FILE).exists()


@pytest.mark.slow
def test_the_contrast_pass_samples_as_the_rollouts_do(tmp_path):
    from reasonkit.train import contrast

    hard = small_preset(**HARD, **{"grpo.max_generation_length": 8})
    records = data.read_splits(make_run(tmp_path, "r", hard).require("data"))[0].grpo[:3]
    _, policy, tok, _ = models.load_policy(hard, None, None, None)
    first = contrast.rights(policy, tok, records, hard)
    assert first == contrast.rights(policy, tok, records, hard)  # seeded: the same pass
    assert all(0 <= c <= hard.grpo.num_generations for c in first)


def _dpo_batch(preset, tok, n: int):
    """``n`` pairs of tiny math records (the gold against a wrong answer), as DPO's collator pads them."""
    from reasonkit import collate, tasks

    recs = tasks.generate("math", n, seed=0)
    pairs = [{"prompt": r["prompt"], "chosen": template.format_completion(r["reasoning"], r["answer"]),
              "rejected": template.format_completion(r["reasoning"], "0")} for r in recs]
    return next(collate.batches(train.dpo_examples(pairs, tok), n, train.dpo_collator(preset, tok)))


def test_rpo_loss_is_tunixs_dpo_loss_plus_alpha_times_the_chosen_nll(preset):
    """rpo_alpha = 0 builds the same trainer as before (Tunix's DPO loss, chunked) and its
    loss equals Tunix's DPO loss; rpo_alpha > 0 adds alpha times the chosen answers' NLL
    per token, logged as train/rpo_nll."""
    from flax import nnx
    from tunix.sft.dpo.dpo_trainer import dpo_loss_fn

    _, policy, tok, _ = models.load_policy(preset, None, None, None)
    _, reference, _, _ = models.load_policy(preset, None, None, None)
    # the policy off its reference
    nnx.update(policy, jax.tree.map(lambda x: x + 0.01, nnx.state(policy, nnx.LoRAParam)))
    batch = _dpo_batch(preset, tok, 2)
    plain = train_build.dpo_trainer(preset, policy, reference)
    assert plain.loss_fn.__wrapped__ is dpo_loss_fn  # rpo_alpha = 0: the program as before
    assert loss_swap.RPO_METRIC not in private.tunix_private(plain, "_aux_metrics_to_log")
    alpha = 0.5
    rpo = train_build.dpo_trainer(preset.replace(**{"dpo.rpo_alpha": alpha}), policy, reference)
    assert loss_swap.RPO_METRIC in private.tunix_private(rpo, "_aux_metrics_to_log")
    example = private.tunix_private(plain, "_prepare_inputs")(batch)
    inputs = plain.gen_model_input_fn(example)
    loss, aux = plain.loss_fn(policy, **inputs)
    with loss_swap.chunked_log_probs():
        tunix_loss, _ = dpo_loss_fn(policy, **inputs)
        zero, _ = loss_swap.rpo_loss_fn(policy, **inputs, rpo_alpha=0.0)
    assert float(zero) == float(loss) == float(tunix_loss)
    rpo_loss, rpo_aux = rpo.loss_fn(policy, **inputs)
    got = loss_swap.pair_log_probs(plain, batch)
    nll = float(np.mean(-got["chosen"] / got["chosen_tokens"]))
    assert float(rpo_aux[loss_swap.RPO_METRIC]) == pytest.approx(nll, rel=1e-5)
    assert float(rpo_loss) == pytest.approx(float(loss) + alpha * nll, rel=1e-6)
    assert float(rpo_aux["rewards/margin"]) == pytest.approx(float(aux["rewards/margin"]), rel=1e-6)
    assert float(aux["rewards/margin"]) != 0  # the policy differs from its reference


def test_rpo_on_plain_tunix_is_refused_before_the_stage_opens(tmp_path, preset):
    p = preset.replace(**{"optimisations": [], "dpo.rpo_alpha": 1.0})
    run = RunDir.create("plain-rpo", root=tmp_path)
    with pytest.raises(ValueError, match=r"dpo.rpo_alpha=1.0: RPO's NLL term .* runs Tunix as it ships "
                                         r"\(optimisations=\[\]\)\. Set dpo.rpo_alpha=0 .* or put "
                                         r"'chunked log-probs' in optimisations"):
        train.train_dpo(p, run)
    assert not (run.stage("dpo") / runs.SETTINGS_FILE).exists()
    with pytest.raises(ValueError, match="dpo.rpo_alpha=1.0"):  # the notebook's r.patch refuses too
        train_build.patch_dpo_trainer(object(), p)


def test_held_out_checks_keep_their_verdicts_per_prompt_for_a_paired_comparison(tmp_path):
    """Each check appends its verdict per prompt; the first and the last are what 05's final
    check compares, paired; a retrain clears them with the stage."""
    from reasonkit.train import held_out

    run = RunDir.create("paired", root=tmp_path)
    assert held_out.first_and_last(run) is None  # no check yet
    path = run.stage("grpo") / held_out.CHECKS_FILE
    rows = [{"id": f"p{i}", "correct": i % 2 == 0} for i in range(4)]
    path.write_text("".join(json.dumps({"step": s, "rows": rows}) + "\n" for s in (0, 50, 100)))
    first, last = held_out.first_and_last(run)
    assert first == last == rows and sorted(held_out.per_prompt(run)) == [0, 50, 100]
    path.write_text(json.dumps({"step": 0, "rows": rows}) + "\n"
                    + json.dumps({"step": 9, "rows": rows[::-1]}) + "\n")
    assert held_out.first_and_last(run) is None  # another block: nothing to pair
