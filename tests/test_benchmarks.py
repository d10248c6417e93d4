"""The benchmarks' cheap parts: benchmarks.grpo.seeds (held-out sets, summary; its training is the
package's), grpo_hard and grpo_diagnostics, the real_270m sweeps, speed.mfu, speed.grpo_shared,
speed.attention's ceiling, and benchmarks.common."""

import dataclasses
import doctest
import math

import jax
import pytest
from flax import nnx

from benchmarks import common
from benchmarks.exports import hf_parity  # torch and peft are imported only when it runs
from benchmarks.grpo import grpo_diagnostics, grpo_hard, seeds
from benchmarks.real_270m import real_270m_cpu, real_270m_dpo_lr, real_270m_grpo_lr
from benchmarks.speed import attention as attention_bench
from benchmarks.speed import grpo_shared, mfu
from reasonkit import data, models, template
from reasonkit.models import _checkpoint as models_checkpoint
from reasonkit.models import tiny
from reasonkit.presets import get_preset
from reasonkit.runtime import runs
from reasonkit.tunix_patches import attention


def test_heldout_sets_hold_no_training_or_pretraining_prompt(tmp_path):
    preset = get_preset("tiny")
    count = seeds.token_counter(preset)
    run = runs.RunDir.create("s", root=tmp_path)
    splits = seeds.build_data(preset, run, count)
    assert run.is_finished("data") and seeds.build_data(preset, run, count) == splits  # read back
    sets = seeds.heldout_sets(preset, splits, count, 30)
    key = lambda recs: {template.normalize_prompt(r["prompt"]) for r in recs}  # noqa: E731
    left, fresh = sets["leftover"], sets["fresh"]
    assert left[:len(splits.eval)] == list(splits.eval) and len(left) > 10 * len(splits.eval)
    assert len(key(left)) == len(left) and len(key(fresh)) == len(fresh) == 6 * 30
    assert not key(left) & key(fresh)
    trained = key(splits.sft) | key(splits.dpo) | key(splits.grpo)
    assert not trained & (key(left) | key(fresh))
    assert not key(tiny.pretraining_records()[0]) & (key(left) | key(fresh))
    limits = data.stage_limits(preset)["eval"]
    assert all(seeds._fits(r, count, limits) for r in left + fresh)
    assert {r["domain"] for r in fresh} == set(seeds.tasks.DOMAINS)


def test_a_hard_run_adds_a_hard_set_apart_from_every_split(tmp_path):
    preset = grpo_hard.hard_preset(0)
    count = seeds.token_counter(preset)
    splits = seeds.build_data(preset, runs.RunDir.create("h", root=tmp_path), count)
    sets = seeds.heldout_sets(preset, splits, count, 5, 20)
    key = lambda recs: {template.normalize_prompt(r["prompt"]) for r in recs}  # noqa: E731
    hard = sets["hard"]
    assert len(hard) == 6 * 20 and {r["id"].split("-")[-2] for r in hard} == {"d2"}
    everything = [r for name in ("eval", "sft", "dpo", "grpo", "eval_hard") for r in getattr(splits, name)]
    assert splits.eval_hard and not key(hard) & (key(everything) | key(sets["fresh"]) | key(sets["leftover"]))


def test_the_shuffled_control_permutes_each_steps_rewards_alike_for_every_function():
    fns = grpo_hard.shuffled([lambda p, c, **k: [float(t) for t in c],
                              lambda p, c, **k: [10.0 * float(t) for t in c]], seed=3)
    step = [str(i) for i in range(16)]
    a, b = fns[0](None, step), fns[1](None, step)
    assert sorted(a) == [float(i) for i in range(16)] and a != sorted(a)  # permuted
    assert b == [10 * x for x in a]  # one permutation per step, shared: the sum is permuted whole
    assert fns[0](None, step) == a and fns[0](None, step[::-1]) != a  # drawn from the step's answers
    assert [f.__name__ for f in fns] == ["<lambda>_shuffled"] * 2


def test_each_control_changes_one_thing_of_the_hard_preset():
    preset = grpo_hard.hard_preset(0)
    same = lambda a, b, but: {f.name for f in dataclasses.fields(a)  # noqa: E731
                              if getattr(a, f.name) != getattr(b, f.name)} == but
    dr = grpo_hard.control_preset(preset, "dr-grpo")
    assert dr.grpo.loss == "dr-grpo" and same(dr.grpo, preset.grpo, {"loss"}) and dr.sft == preset.sft
    fading = grpo_hard.control_preset(preset, "fading")
    assert [name for name, _ in fading.grpo.rewards] == ["answer_verified", "format_exact_fading"]
    assert same(fading.grpo, preset.grpo, {"rewards"})
    assert grpo_hard.control_preset(preset, "shuffled") is preset  # its change is in the rewards' order
    for name in ("rs-sft", "gold-sft"):
        sft = grpo_hard.control_preset(preset, name).sft
        # as many examples as GRPO's prompts, at lengths that hold a difficulty-2 prompt and answer
        assert sft.max_steps * sft.batch_size == preset.grpo.max_steps * preset.grpo.batch_size
        assert sft.max_prompt_length >= preset.grpo.max_prompt_length
        assert sft.max_target_length >= preset.grpo.max_prompt_length + preset.grpo.max_generation_length
        assert sft.learning_rate == grpo_hard.CONTROL_SFT["sft.learning_rate"]


def test_rejection_sampling_keeps_each_verified_answer_once():
    recs = [{"prompt": "7 - 3 - 3?", "answer": "1", "domain": "math", "reasoning": "gold"},
            {"prompt": "Which is larger, 8 or 2?", "answer": "8", "domain": "general", "reasoning": "g"}]
    right = "<reasoning>7 - 3 = 4. 4 - 3 = 1.</reasoning>\n<answer>1</answer>"
    lucky = "<reasoning>7 - 3 = 5. 5 - 3 = 1.</reasoning>\n<answer>1</answer>"  # a false step
    other = "<reasoning>7 - 3 = 4. So 4 - 3 = 1.</reasoning>\n<answer>1</answer>"
    big = "<reasoning>8 > 2.</reasoning>\n<answer>8</answer>"
    texts = [right, lucky, right, other, "8", "<answer>2</answer>", big, big]
    kept, info = grpo_hard.keep_verified(recs, texts, per_prompt=4)
    assert [(r["prompt"][:4], r["reasoning"]) for r in kept] == [
        ("7 - ", "7 - 3 = 4. 4 - 3 = 1."), ("7 - ", "7 - 3 = 4. So 4 - 3 = 1."), ("Whic", "8 > 2.")]
    assert info == {"sampled": 8, "verified": 5, "distinct_kept": 3, "prompts_with_one": 2}
    assert all(r["domain"] == src["domain"] for r, src in zip(kept, [recs[0], recs[0], recs[1]], strict=True))
    with pytest.raises(ValueError, match="7 texts for 2 prompts x 4"):
        grpo_hard.keep_verified(recs, texts[:7], per_prompt=4)


def test_the_verdict_reads_the_preregistered_stop_rules():
    diag = {"results": {"sft": {"2": {"math": {"greedy": 3.0, "pass_at_k_verified": 2.0},
                                      "coding": {"greedy": 8.0, "pass_at_k_verified": 15.0}}}}}
    one = {"0": {"grpo_minus_sft": {"hard": 3.9, "fresh": 0.0}}}
    assert grpo_hard.verdict({"results": one}, diag) == {
        "headroom_points": {"math": -1.0, "coding": 7.0}, "headroom_stops": True,
        "pilot_stops": True, "targets_met": False}
    five = {str(s): {"grpo_minus_sft": {"hard": 10.0 + s, "fresh": -0.4}} for s in range(5)}
    assert grpo_hard.verdict({"results": five}, None) == {"pilot_stops": False, "targets_met": True}
    five["4"]["grpo_minus_sft"]["hard"] = 4.9  # one seed under +5
    assert not grpo_hard.verdict({"results": five}, None)["targets_met"]


def test_diagnostics_vote_among_self_consistent_samples():
    records = [{"domain": "math", "answer": "5"}, {"domain": "math", "answer": "5"}]
    right = "<reasoning>2 + 3 = 5.</reasoning>\n<answer>5</answer>"
    wrong = "<reasoning>2 + 3 = 6.</reasoning>\n<answer>6</answer>"  # its own step is false
    inconsistent = "<reasoning>2 + 4 = 6.</reasoning>\n<answer>7</answer>"  # concludes 6, says 7
    votes = grpo_diagnostics.self_consistent_vote(records, [[right, wrong, wrong], [inconsistent] * 3])
    assert votes.tolist() == [True, False]  # the two wrong answers do not count; nothing left to vote
    got = grpo_diagnostics.verdicts(records, [[right, wrong], [right, inconsistent]],
                                    grpo_diagnostics.rewards.is_verified)
    assert got.tolist() == [[True, False], [True, False]]


def test_summary_and_table():
    results = {s: {st: {"fresh": base + d} for st, d in (("sft", 0), ("dpo", -1), ("grpo", g))}
               for s, base, g in ((0, 40.0, 1.0), (1, 42.0, 2.0), (2, 41.0, 0.0))}
    summary = seeds.summarize(results, {"fresh": 100})
    assert summary["fresh"]["sft"] == {"mean": 41.0, "sd": 1.0}
    assert summary["fresh"]["grpo_minus_sft"] == {"per_seed": [1.0, 2.0, 0.0], "mean": 1.0, "sd": 1.0}
    text = seeds.table(results, summary, {"fresh": 100})
    assert "| grpo - sft | +1.00 | +2.00 | +0.00 | +1.00 ± 1.00 |" in text
    one = seeds.summarize({0: results[0]}, {"fresh": 100})
    assert math.isnan(one["fresh"]["sft"]["sd"])
    by_domain = {s: {"sft": {"fresh": {"math": 10.0, "coding": 50.0}},
                     "grpo": {"fresh": {"math": 10.0 + s, "coding": 40.0}}} for s in (1, 3)}
    gains = seeds.domain_gains(by_domain, {"fresh": 100})
    assert gains == {"fresh": {"math": 2.0, "coding": -10.0}}
    assert "by domain, mean over seeds: math +2.00, coding -10.00" in seeds.table(
        results, summary, {"fresh": 100}, gains)


def test_seed_preset_takes_the_environment_overrides_but_keeps_its_seed(monkeypatch):
    assert get_preset("tiny").grpo.max_steps != 7
    monkeypatch.setenv("REASONKIT_OVERRIDES", '{"grpo.max_steps": 7, "sft.seed": 9}')
    p = seeds.seed_preset(4)
    assert (p.grpo.max_steps, p.sft.seed, p.dpo.seed, p.grpo.seed) == (7, 4, 4, 4)
    assert seeds.seed_preset(4, quick=True).grpo.max_steps == 2  # --quick wins over the variable
    monkeypatch.setenv("REASONKIT_OVERRIDES", '{"grpo.max_step": 7}')
    with pytest.raises(ValueError, match="max_step"):
        seeds.seed_preset(0)


@pytest.mark.parametrize("name", list(hf_parity.CASES))
def test_hf_parity_cases_are_checkpoints_the_loader_accepts(tmp_path, name):
    # benchmarks.exports.hf_parity compares them with transformers / PEFT where torch is installed.
    family, shapes, extra = hf_parity.CASES[name]
    cfg = hf_parity.case_config(family, shapes)
    tokenizer = models.resolve_source(get_preset("tiny").model) / "tokenizer.model"
    hf_parity.write_checkpoint(tmp_path / "c", cfg, extra, tokenizer)
    assert models_checkpoint.check_checkpoint_dir(tmp_path / "c", cfg) == cfg


@pytest.mark.slow
def test_attention_ceiling_leaves_the_attention_core_out_and_puts_it_back():
    """benchmarks.speed.attention's "none": the step traced without softmax (the ceiling),
    the real attention back for every later trace, and compare() times it beside chunked."""
    real = attention.attend
    m = attention_bench.at_width(get_preset("tiny").model, 128)
    model = attention.use(models.new_model(m, seed=0), "chunked")
    x = attention_bench.batch(2, 64, m.vocab_size)
    texts = {}
    graphdef, params = nnx.split(model)
    for impl in ("chunked", attention_bench.NONE):  # a fresh function each: a trace of its own
        with attention_bench.tracing_as(impl):
            texts[impl] = jax.jit(lambda p, x: nnx.merge(graphdef, p)(
                x["tokens"], x["positions"], None, x["mask"])[0]).lower(params, x).as_text()
        assert attention.attend is real
    assert "exponential" in texts["chunked"] and "exponential" not in texts[attention_bench.NONE]
    t = attention_bench.compare(m, get_preset("tiny").lora, 2, 64, 1, ("chunked", attention_bench.NONE))
    assert set(t) == {"chunked", "none"} and all(v > 0 for v in t.values())
    assert attention.attend is real


def test_rotated_puts_every_implementation_in_every_place():
    impls = ("tunix", "chunked", "none")
    orders = [common.rotated(impls, i) for i in range(6)]
    assert orders[0] == list(impls) and orders[3] == orders[0]
    for place in range(3):  # each implementation is timed first, second and third alike
        assert sorted(o[place] for o in orders) == sorted(2 * impls)


@pytest.mark.slow
def test_mfu_times_each_variant_on_the_same_weights_and_counts_the_model_flops():
    """benchmarks.speed.mfu on the tiny preset: every variant computes the same loss, the FLOPs
    are the step's, and a CPU (no peak in the table) gets no MFU but a fraction of matmul."""
    r = mfu.measure("tiny", batch=2, seq=64, steps=2, impls=("chunked", "tunix"), remats=(True, False),
                    log=lambda s: None)
    assert set(r["variants"]) == {"chunked+remat", "tunix+remat", "chunked", "tunix"}
    assert r["not_compiled"] == []
    assert r["model_step_flops"] == attention_bench.sft_step_flops(get_preset("tiny").model, 2, 64)
    losses = [v["loss"] for v in r["variants"].values()]
    assert max(losses) - min(losses) <= 1e-5 * abs(losses[0]) and 0 < losses[0] < 10
    for v in r["variants"].values():
        assert v["mfu"] is None and v["seconds_per_step"] > 0
        assert v["fraction_of_matmul"] == pytest.approx(r["model_step_flops"] / v["seconds_per_step"]
                                                        / r["matmul_flops_per_s"])
    assert "| chunked+remat |" in mfu.table(r)


@pytest.mark.slow
def test_mfu_traces_a_variant_per_loss_chunk_size_and_restores_the_packages():
    """``--chunk-mib``: each size is its own variant (16 chunks of 4 positions here against
    the package's one), with the same loss; ``logprobs.CHUNK_BYTES`` is the package's after."""
    from reasonkit.tunix_patches import logprobs

    before = logprobs.CHUNK_BYTES
    r = mfu.measure("tiny", batch=2, seq=64, steps=1, impls=("tunix",), remats=(False,),
                    chunk_mibs=(None, 1 / 64), log=lambda s: None)
    assert set(r["variants"]) == {"tunix", "tunix+chunk0.015625M"}
    a, b = (v["loss"] for v in r["variants"].values())
    assert a == pytest.approx(b, rel=1e-6) and 0 < a < 10
    assert logprobs.CHUNK_BYTES == before


@pytest.mark.slow
def test_mfu_leaves_out_a_variant_that_has_not_compiled_by_the_deadline():
    import time

    r = mfu.measure("tiny", batch=2, seq=64, steps=1, impls=("chunked",), remats=(False,),
                    deadline=time.perf_counter(), log=lambda s: None)
    assert r["not_compiled"] == ["chunked"] and r["variants"] == {}
    assert "| variant |" in mfu.table(r)


@pytest.mark.slow
def test_mfu_times_both_loss_paths_and_names_a_variant_that_fails():
    """The gradient taken in the forward and jax.checkpoint's recompute give the same loss;
    a variant that cannot be built (an unknown attention) is named with its error, and
    the others are still timed."""
    r = mfu.measure("tiny", batch=2, seq=64, steps=1, impls=("chunked", "flash"), remats=(False,),
                    losses=("forward", "recompute"), only=("chunked", "chunked+recompute", "flash"),
                    log=lambda s: None)
    assert set(r["variants"]) == {"chunked", "chunked+recompute"}
    assert list(r["failed"]) == ["flash"] and r["failed"]["flash"].startswith(
        "ValueError: attention.use: impl='flash'")
    assert r["variants"]["chunked"]["loss"] == r["variants"]["chunked+recompute"]["loss"]
    assert "| flash | failed: ValueError" in mfu.table(r)


def test_compile_concurrently_reports_a_compile_that_fails():
    class Broken:
        def compile(self):
            raise RuntimeError("no kernel for this")

    errors = {}
    done, waiting = common.compile_concurrently(
        {"ok": jax.jit(lambda x: x + 1).lower(1.0), "broken": Broken()}, 60, errors=errors)
    assert list(done) == ["ok"] and waiting == []
    assert errors == {"broken": "RuntimeError: no kernel for this"}
    with pytest.raises(RuntimeError, match="no kernel"):  # without a dict, as before
        common.compile_concurrently({"broken": Broken()}, 60)


@pytest.mark.slow
def test_grpo_shared_times_both_ways_and_they_agree():
    """benchmarks.speed.grpo_shared on a small GRPO shape (2 prompts x 8 answers, 96 + 24): the
    batch is groups of equal prompts, and both programs give every row's log-probs."""
    from reasonkit.testing import small_preset
    from reasonkit.tunix_patches import sampling

    prompt, answer = grpo_shared.grpo_batch(2, 8, 96, 24, 512)
    assert sampling.is_grouped(prompt, 8) and not sampling.is_grouped(prompt, 16)
    assert (answer == 1).sum() == 16  # one EOS per row
    r = grpo_shared.measure(small_preset(), steps=1, log=lambda s: None)
    assert (r["rows"], r["group"], r["prompt"], r["answer"]) == (16, 8, 96, 24)
    assert r["not_compiled"] == []
    for part in ("update", "reference"):
        row = r["parts"][part]
        assert row["group_1"]["seconds"] > 0 and row["group_8"]["seconds"] > 0
        assert row["max_logp_diff"] < 1e-4 and row["speedup"] > 0
    assert "| update |" in grpo_shared.table(r)


def test_gpu_stages_records_what_the_package_predicts_for_gemma3_270m_on_an_h200():
    """benchmarks/results/gpu_stages.json (a lent H200) sets its tries beside the time model and budget."""
    import json

    from reasonkit import budget
    from reasonkit.runtime import hardware

    recorded = json.loads(common.result_path("gpu_stages.json").read_text())
    preset, hw = get_preset(recorded["preset"]), hardware.from_name("gpu-h200-1")
    model = hardware.time_model(preset, hw)
    steps = {c.stage: c.steps for c in model.costs}
    for stage in ("sft", "dpo", "grpo"):
        assert recorded["predicted"]["seconds_per_step"][stage] == pytest.approx(
            model.seconds(stage) / steps[stage], rel=1e-9)
        # the machine reported its own memory; the table's differs in the allocator's reserve
        assert recorded["predicted"]["peak_bytes"][stage] == pytest.approx(
            budget.memory_budget(preset, stage, 1, hw).total, rel=0.05)
    assert recorded["runs"] and all("settings" in r and "result" in r for r in recorded["runs"])


def test_the_dpo_rate_sweep_names_what_to_run_first(tmp_path):
    with pytest.raises(SystemExit, match=r"no finished data and SFT stages: run "
                                         r"python -m benchmarks.real_270m.real_270m_cpu --root .* first"):
        real_270m_dpo_lr.main(["--root", str(tmp_path)])
    assert not any(tmp_path.iterdir())  # nothing written, nothing branched


def test_the_grpo_rate_sweep_names_what_to_run_first(tmp_path):
    with pytest.raises(SystemExit, match=r"no finished data, SFT and DPO stages: run "
                                         r"python -m benchmarks.real_270m.real_270m_cpu --root .* first"):
        real_270m_grpo_lr.main(["--root", str(tmp_path)])
    assert not any(tmp_path.iterdir())  # nothing written, nothing branched


def test_the_grpo_rate_sweep_holds_out_fresh_prompts_of_every_domain(tmp_path):
    preset = get_preset("tiny")
    splits = seeds.build_data(preset, runs.RunDir.create("s", root=tmp_path), seeds.token_counter(preset))
    held = real_270m_grpo_lr.fresh_held_out(splits, 5)
    key = lambda recs: {template.normalize_prompt(r["prompt"]) for r in recs}  # noqa: E731
    assert len(held) == len(key(held)) == 5 * len(seeds.tasks.DOMAINS)
    assert {r["domain"] for r in held} == set(seeds.tasks.DOMAINS)
    assert not key(held) & (key(splits.sft) | key(splits.dpo) | key(splits.grpo) | key(splits.eval))
    assert all(r["reasoning"] and r["answer"] for r in held)  # the gold answers' loss needs both


def test_the_real_series_compares_its_stages_on_the_saved_answers(tmp_path):
    """--compare-only: paired differences, per-domain accuracy and lengths from a finished run's
    answers, added to the JSON, which keeps what it had; a run with no answers is named."""
    import json

    out = tmp_path / "real.json"
    out.write_text(json.dumps({"preset": "gemma3-270m-cpu", "n": 4}))
    with pytest.raises(SystemExit, match=r"no completions for \['base', 'sft', 'dpo', 'grpo'\]"):
        real_270m_cpu.main(["--root", str(tmp_path), "--out", str(out), "--compare-only"])
    right = {"base": [0, 0, 0, 0], "sft": [1, 1, 0, 1], "dpo": [1, 0, 0, 1], "grpo": [1, 0, 1, 1]}
    saved = tmp_path / "runs" / "e2e" / "eval"
    saved.mkdir(parents=True)
    for stage, marks in right.items():
        rows = [{"id": f"p{i}", "domain": "math" if i < 2 else "coding", "format_ok": True,
                 "reason": "ok", "correct": bool(c), "lenient": bool(c), "partial": float(c),
                 "pass_at_k": False, "maj_at_k": False, "length": 10 + c}
                for i, c in enumerate(marks)]
        (saved / f"completions_{stage}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert real_270m_cpu.main(["--root", str(tmp_path), "--out", str(out), "--compare-only"]) == 0
    got = json.loads(out.read_text())
    assert got["preset"] == "gemma3-270m-cpu" and got["n"] == 4
    paired = got["paired_accuracy"]
    assert list(paired) == ["sft - base", "dpo - sft", "grpo - dpo", "grpo - sft"]
    assert paired["sft - base"] == {"n": 4, "mean": 75.0, "se": 25.0}
    assert paired["dpo - sft"]["mean"] == -25.0 and paired["grpo - sft"]["mean"] == 0.0
    assert got["accuracy_by_domain"]["dpo"] == {"coding": 0.5, "math": 0.5}
    assert got["mean_length"] == {"base": 10.0, "sft": 10.8, "dpo": 10.5, "grpo": 10.8}


def test_the_benchmarks_examples_hold():
    """The docstring examples of the benchmarks this file imports (pytest collects only reasonkit's)."""
    for module in (common, seeds, grpo_hard, grpo_diagnostics, real_270m_dpo_lr):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert not result.failed, module.__name__
    assert doctest.testmod(grpo_hard).attempted >= 3  # shuffled, keep_verified, verdict
