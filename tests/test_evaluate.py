import dataclasses
import json

import numpy as np
import pytest

from reasonkit import data, evaluate, models, rewards, tasks, template
from reasonkit.config import get_preset

GOOD = "<reasoning>3 * 4 = 12.</reasoning>\n<answer>12</answer><end_of_turn>"


@pytest.mark.parametrize("completion, fmt, correct, reason", [
    (GOOD, True, True, "ok"),
    ("<reasoning>x</reasoning>\n<answer>13</answer>", True, False, "ok"),
    ("<reasoning>x</reasoning>\n<answer>6 + 6</answer>", True, True, "ok"),   # its value
    ("<reasoning>x</reasoning>\n<answer>10 + 2 = 13</answer>", True, False, "ok"),  # sides disagree
    ("So the answer is 12.", False, False, "no_answer_tag"),
    ("<answer>12</answer>", False, True, "ok"),  # right answer, wrong format
    ("<reasoning>x</reasoning><answer>12 or 13</answer>", True, False, "hedged"),
    ("<reasoning>x</reasoning><answer>12", False, False, "unclosed_tag"),
])
def test_score_one_completion(completion, fmt, correct, reason):
    row = evaluate.score({"domain": "math", "answer": "12"}, completion)
    assert (row["format_ok"], row["correct"], row["reason"]) == (fmt, correct, reason)


def test_pass_and_majority_at_k():
    rec = {"domain": "math", "answer": "12", "prompt": "p", "id": 1}
    samples = [["<answer>11</answer>", "<answer>12</answer>", "<answer>11</answer>"]]
    row = evaluate.score_stage([rec], ["<answer>11</answer>"], samples)[0]
    assert (row["correct"], row["pass_at_k"], row["maj_at_k"]) == (False, True, False)
    samples = [["<answer>12</answer>", "<answer> 12 </answer>", "<answer>11</answer>"]]
    assert evaluate.score_stage([rec], ["x"], samples)[0]["maj_at_k"] is True


def test_majority_votes_by_value():
    # Three of five samples say twelve, written three ways: maj@k must count them as one.
    rec = {"domain": "math", "answer": "12", "prompt": "p", "id": 1}
    samples = [[f"<answer>{a}</answer>" for a in ("13", "13", "12", "12.0", "$12.00")]]
    row = evaluate.score_stage([rec], ["<answer>13</answer>"], samples)[0]
    assert (row["correct"], row["pass_at_k"], row["maj_at_k"]) == (False, True, True)
    assert evaluate.majority(["13", "13", "12", "12.0", "$12.00"], "math") == "12"
    assert evaluate.majority(["x = 5", "5 apples", "6", "6"], "math") == "x = 5"  # tie: first
    assert evaluate.majority(["Paris", "paris.", "Rome"], "general") == "Paris"
    assert evaluate.majority([None, "", "  "]) is None
    # one pass by canonical key, then keys the checker still calls equal merge
    assert evaluate.majority(["0.5", "7", "50%", "7", "1/2"], "math") == "0.5"
    assert evaluate.majority(["2 + 2", "4", "2", "2"], "math") == "2 + 2"  # 2 + 2 votes for 4


@pytest.mark.parametrize("pred, gold", [("40", "42"), ("49%", "0.5"), ("0.05", "0"), ("$46", "50")])
def test_partial_accuracy_is_the_training_reward_s_closeness(pred, gold):
    row = evaluate.score({"domain": "math", "answer": gold}, f"<answer>{pred}</answer>")
    close = rewards.answer_close(None, [f"<answer>{pred}</answer>"], answer=[gold])[0]
    assert close > 0 and row["partial"] == pytest.approx(close / rewards.CLOSE_MAX_SCORE, abs=1e-6)


def test_score_of_a_missing_completion():
    row = evaluate.score({"domain": "math", "answer": "12"}, None)
    assert (row["format_ok"], row["correct"], row["reason"], row["length"]) == (
        False, False, "no_answer_tag", 0)


def test_stage_with_no_rows_is_tabulated():
    res = {"base": {"summary": evaluate.summarize([]), "rows": []}, **results_of(sft=(0.5, 0.5))}
    table = evaluate.stage_table(res, k=1)
    assert "| base | 0 | - | - | - | - | - | - |" in table.splitlines()
    assert "sft vs base: accuracy not measured (n = 0, 100)" in evaluate.describe_changes(res)


def results_of(**stages):
    """Fake stage results: a fraction ``acc`` answered right, ``fmt`` well formatted."""
    out = {}
    for stage, (fmt, acc) in stages.items():
        rows = []
        for i in range(100):
            ans = "12" if i < 100 * acc else "13"
            text = (f"<reasoning>r</reasoning><answer>{ans}</answer>" if i < 100 * fmt
                    else f"<answer>{ans}</answer>")  # readable answer, no reasoning block
            rec = {"domain": ["math", "general"][i % 2], "answer": "12", "prompt": f"q{i}", "id": i}
            rows += evaluate.score_stage([rec], [text], [[text]])
        out[stage] = {"summary": evaluate.summarize(rows), "rows": rows}
    return out


def test_summary_table_and_what_regressed(tmp_path):
    res = results_of(grpo=(0.95, 0.75), base=(0.0, 0.1), dpo=(0.7, 0.5), sft=(0.9, 0.4))
    assert evaluate.ordered(res) == ["base", "sft", "dpo", "grpo"]
    assert res["sft"]["summary"]["overall"]["format_rate"] == pytest.approx(0.9)
    assert set(res["sft"]["summary"]["per_domain"]) == {"math", "general"}
    assert res["base"]["summary"]["overall"]["failures"] == {}  # readable, just unformatted
    table = evaluate.stage_table(res, k=1)
    assert [line.split("|")[1].strip() for line in table.splitlines()[2:]] == [
        "base", "sft", "dpo", "grpo"]
    lines = evaluate.describe_changes(res)
    assert "dpo vs sft: format pass REGRESSED 90.0% -> 70.0% (-20.0 points)" in lines
    assert "grpo vs dpo: accuracy improved 50.0% -> 75.0% (+25.0 points)" in lines
    evaluate.write_results(res, tmp_path, {"num_samples": 1})
    saved = json.loads((tmp_path / "results.json").read_text())
    assert list(saved["stages"]) == ["base", "sft", "dpo", "grpo"]
    assert (tmp_path / "stage_table.md").read_text().startswith("| stage |")
    assert len((tmp_path / "completions_dpo.jsonl").read_text().splitlines()) == 100
    for plot in (evaluate.plot_stages, evaluate.plot_domains, evaluate.plot_lengths):
        plot(res, path=tmp_path / f"{plot.__name__}.png")
        assert (tmp_path / f"{plot.__name__}.png").stat().st_size > 1000
    assert "**math**" in evaluate.side_by_side(res, n=2)


def test_small_moves_are_called_noise():
    res = results_of(base=(0.5, 0.50), sft=(0.5, 0.53))
    assert ("sft vs base: accuracy unchanged within noise (50.0% -> 53.0%)"
            in evaluate.describe_changes(res))


def test_judge_counts_failures():
    rows = [{"prompt": "p", "completion": "c", "gold": "g"}] * 3
    calls = iter([{"reasoning": 5}, {"reasoning": 11}, RuntimeError("api down")])

    def judge_fn(p, c, g):
        got = next(calls)
        if isinstance(got, Exception):
            raise got
        return got

    assert evaluate.judge(rows, judge_fn) == {"reasoning": 5.0, "judged": 1, "skipped": 2}


def test_evaluate_the_tiny_base_model_for_real(capsys):
    preset = get_preset("tiny", **{"eval.batch_size": 4, "eval.num_samples": 2,
                                   "eval.max_generation_length": 24})
    model, tok, _ = models.load_base(preset.model)
    records = tasks.generate_all(1, seed=123)  # 6 prompts: the last batch is topped up
    res = evaluate.evaluate_model(model, tok, records, preset.model, preset.eval, stage="base")
    rows, overall = res["rows"], res["summary"]["overall"]
    assert len(rows) == 6 and overall["n"] == 6
    assert all(0 < r["length"] <= 25 for r in rows)
    assert overall["format_rate"] == 0.0  # the base model never saw the tags: it answers in prose
    assert np.isfinite(overall["mean_length"])
    greedy_only = dataclasses.replace(preset.eval, num_samples=1)
    again = evaluate.evaluate_model(model, tok, records[:4], preset.model, greedy_only)
    assert [r["completion"] for r in again["rows"]] == [r["completion"] for r in rows[:4]]
    shown = evaluate.show_completions(model, tok, records[:4], preset.model, greedy_only, "base")
    assert [r["completion"] for r in shown] == [r["completion"] for r in rows[:4]]
    printed = capsys.readouterr().out
    assert printed.count("--- base · ") == 4 and f"(gold {records[0]['answer']!r})" in printed
    # A prompt over eval.max_prompt_length is refused up front, by position and text,
    # instead of Tunix's cache-size error halfway through the run.
    short = dataclasses.replace(greedy_only, max_prompt_length=60)  # records 1-3 fit in 60
    long = {**records[2], "prompt": records[2]["prompt"] + " Why?" * 20}
    refused = r"1 of 3 prompts .*max_prompt_length=60 .*prompt 1, has \d+ and ends .*Why\?"
    with pytest.raises(ValueError, match=refused):
        evaluate.evaluate_model(model, tok, [records[1], long, records[3]], preset.model, short)
    # The data splits' prompt budget (data.too_long) counts the BOS the way evaluation
    # does: a prompt the splits keep at exactly the budget is evaluated, one token over
    # is dropped by both.
    count = lambda text: len(tok.EncodeAsIds(text))
    n = count(template.format_prompt(records[1]["prompt"])) + 1
    assert data.too_long(records[1], count, data.Limits(prompt=n)) is None
    at = dataclasses.replace(greedy_only, max_prompt_length=n)
    assert evaluate.evaluate_model(model, tok, records[1:2], preset.model, at)["rows"][0][
        "completion"] == rows[1]["completion"]
    assert data.too_long(records[1], count, data.Limits(prompt=n - 1)) is not None
    with pytest.raises(ValueError, match=f"has {n} and ends"):
        evaluate.evaluate_model(model, tok, records[1:2], preset.model,
                                dataclasses.replace(at, max_prompt_length=n - 1))


def test_pick_examples_prefers_the_named_domains_and_fills_in():
    recs = [{"id": f"{d}{i}", "domain": d} for i in range(2)
            for d in ("general", "summarization", "math", "science")]
    assert [r["id"] for r in evaluate.pick_examples(recs)] == ["math0", "summarization0", "general0"]
    assert [r["id"] for r in evaluate.pick_examples(recs, prefer=("science",), n=2)] == [
        "science0", "general0"]
    assert evaluate.pick_examples([]) == []


# --- a run's evaluation (06_evaluation and python -m reasonkit run) ---------------------------


def test_evaluate_run_every_finished_stage_then_save(tmp_path, monkeypatch, capsys):
    """The base model and each finished stage, in order, freed in between; saved and marked."""
    from reasonkit import runs

    preset = get_preset("tiny")
    run = runs.RunDir.create("e", root=tmp_path)
    recs = [{"id": str(i), "domain": "math", "source": "t", "prompt": f"{i} + 1?",
             "reasoning": "r", "answer": str(i + 1)} for i in range(3)]
    data.write_splits(data.Splits(eval=recs, sft=recs, dpo=[], grpo=recs), data.DataReport(),
                      run.stage("data"))
    run.mark_finished("data")
    run.mark_finished("sft", steps=2)
    run.mark_finished("grpo", steps=2)  # DPO skipped
    assert evaluate.stages_to_evaluate(run) == ["base", "sft", "grpo"]
    loaded = []
    monkeypatch.setattr(evaluate, "load_stage", lambda p, r, name, mesh: (loaded.append(name), None))
    monkeypatch.setattr(evaluate.train, "free", lambda: loaded.append("free"))

    def fake_evaluate(model, tok, records, model_cfg, cfg, *, stage):
        rows = evaluate.score_stage(records, [GOOD if stage != "base" else "12"] * len(records),
                                    [[] for _ in records])
        return {"stage": stage, "summary": evaluate.summarize(rows), "rows": rows}

    monkeypatch.setattr(evaluate, "evaluate_model", fake_evaluate)
    results, seconds = evaluate.evaluate_run(preset, run, mesh="a mesh")
    assert loaded == ["base", "free", "sft", "free", "grpo", "free"]
    assert list(results) == list(seconds) == ["base", "sft", "grpo"]
    assert "grpo  format pass 100.0%" in capsys.readouterr().out
    out = evaluate.save_run(run, preset, results, seconds)
    assert sorted(p.name for p in out.iterdir()) == [
        "completions_base.jsonl", "completions_grpo.jsonl", "completions_sft.jsonl", "finished.json",
        "results.json", "stage_table.md"]
    assert run.finished_info("eval")["stages"] == ["base", "sft", "grpo"]
    assert json.loads((out / "results.json").read_text())["settings"]["num_samples"] == 4
