import dataclasses
import json
import types

import numpy as np
import pytest

from reasonkit import data, evaluate, models, notebook, rewards, tasks, template
from reasonkit.config import DataConfig
from reasonkit.notebook import _show as notebook_show
from reasonkit.presets import get_preset
from reasonkit.testing import fake_results

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


def test_majority_merges_what_the_checker_calls_equal_under_other_keys():
    assert evaluate.majority([12, "13", 12.0, "$12", "13"], "math") == "12"  # ints and floats vote
    assert evaluate.majority([7, 7, None, float("nan"), "8"]) == "7"
    assert evaluate.majority(["1/3", "7", "0.333333333333", "7", "0.3333333333"], "math") == "1/3"
    assert evaluate.majority(["\\sqrt{4}", "3", "2", "3"], "math") == "\\sqrt{4}"  # symbolic meets 2
    assert evaluate.majority(["3", "2", "3", "\\sqrt{4}", "x + 1", "1 + x"], "math") == "3"
    assert evaluate.majority(["x + 1", "2", "1 + x"], "math") == "x + 1"
    assert evaluate.majority(["odd", "5", "\\text{odd}"], "math") == "odd"  # text meets math by words
    assert evaluate.majority(["1 + 1 = 42", "5", "1 + 1 = 42"], "math") == "1 + 1 = 42"
    for bad in ([True], [["12"]], [b"12"]):
        with pytest.raises(TypeError, match="majority: answer 0 is "):
            evaluate.majority(bad)


@pytest.mark.parametrize("domain, make", [
    ("math", str), ("math", lambda i: f"{i / 8:.3f}"), ("general", str),
    ("general", lambda i: f"word {i} " + "abcdefghij"[i % 10] * 3)])
def test_majority_over_2000_distinct_answers_is_fast(domain, make, monkeypatch):
    """Grouping is by key and index, not pairwise: 2000 distinct answers meet the checker
    a handful of times, not 2 million (the pairwise scan took 13 to 50 s here)."""
    import time

    found = [make(i) for i in range(2000)] + [make(1234)]
    start = time.perf_counter()
    assert evaluate.majority(found, domain) == make(1234)
    first = time.perf_counter() - start  # the checker reads each answer: ~0.1 ms apiece
    calls = []
    check = evaluate.answers.check_answer
    monkeypatch.setattr(evaluate.answers, "check_answer", lambda *a: calls.append(a) or check(*a))
    start = time.perf_counter()
    assert evaluate.majority(found, domain) == make(1234)
    assert len(calls) <= 10 and time.perf_counter() - start < 1.0, (len(calls), first)


def test_a_completion_that_is_not_text_is_counted_wrong():
    rec = {"domain": "math", "answer": "12", "prompt": "p", "id": "r1"}
    for completion in (12, ["<answer>12</answer>"], 1.5):
        row = evaluate.score(rec, completion)
        assert (row["format_ok"], row["correct"], row["reason"], row["answer"]) == (
            False, False, "not_text", None)
    assert evaluate.score(rec, b"<answer>12</answer>")["correct"] is True
    rows = evaluate.score_stage([rec], [12], [["<answer>12</answer>", 12]], count_tokens=len)
    assert rows[0]["reason"] == "not_text" and rows[0]["pass_at_k"] is True
    assert evaluate.summarize(rows)["overall"]["failures"] == {"not_text": 1}


def test_a_record_without_a_gold_is_named():
    recs = [{"domain": "math", "answer": "12", "prompt": "p", "id": "r1"},
            {"domain": "math", "prompt": "q", "id": "r2"}]
    with pytest.raises(ValueError, match=r"record 1 \(id 'r2'\) has no gold 'answer'; its keys: "
                                         r"\['domain', 'id', 'prompt'\]"):
        evaluate.score_stage(recs, ["x", "y"], [[], []])
    with pytest.raises(ValueError, match=r"the record \(id 'r2'\) has no gold 'answer'"):
        evaluate.score(recs[1], "x")
    with pytest.raises(TypeError, match="record 0 is str, not a record"):
        evaluate.score_stage(["12"], ["x"], [[]])


@pytest.mark.parametrize("pred, gold", [("40", "42"), ("49%", "0.5"), ("0.05", "0"), ("$46", "50")])
def test_partial_accuracy_is_the_training_reward_s_closeness(pred, gold):
    row = evaluate.score({"domain": "math", "answer": gold}, f"<answer>{pred}</answer>")
    close = rewards.answer_close(None, [f"<answer>{pred}</answer>"], answer=[gold])[0]
    assert close > 0 and row["partial"] == pytest.approx(close / rewards.CLOSE_MAX_SCORE, abs=1e-6)


def test_score_of_a_missing_completion():
    row = evaluate.score({"domain": "math", "answer": "12"}, None)
    assert (row["format_ok"], row["correct"], row["reason"], row["length"]) == (
        False, False, "no_answer_tag", 0)


def test_a_stage_with_no_rows_is_not_compared():
    res = {"base": {"summary": evaluate.summarize([]), "rows": []}, **fake_results(sft=(0.5, 0.5))}
    assert "sft vs base: accuracy not measured (n = 0, 100)" in notebook.describe_changes(res)


def test_summary_and_what_regressed(tmp_path):
    res = fake_results(grpo=(0.95, 0.75), base=(0.0, 0.1), dpo=(0.7, 0.5), sft=(0.9, 0.4))
    assert evaluate.ordered(res) == ["base", "sft", "dpo", "grpo"]
    assert res["sft"]["summary"]["overall"]["format_rate"] == pytest.approx(0.9)
    assert set(res["sft"]["summary"]["per_domain"]) == {"math", "general"}
    assert res["base"]["summary"]["overall"]["failures"] == {}  # readable, just unformatted
    lines = notebook.describe_changes(res)
    assert "dpo vs sft: format pass REGRESSED 90.0% -> 70.0% (-20.0 points)" in lines
    assert "grpo vs dpo: accuracy improved 50.0% -> 75.0% (+25.0 points)" in lines
    evaluate.write_results(res, tmp_path, {"num_samples": 1})
    saved = json.loads((tmp_path / "results.json").read_text())
    assert list(saved["stages"]) == ["base", "sft", "dpo", "grpo"]
    assert len((tmp_path / "completions_dpo.jsonl").read_text().splitlines()) == 100


def test_small_moves_are_called_noise():
    res = fake_results(base=(0.5, 0.50), sft=(0.5, 0.53))
    assert ("sft vs base: accuracy unchanged within noise (50.0% -> 53.0%)"
            in notebook.describe_changes(res))


def test_a_paired_difference_is_tighter_than_an_unpaired_one_and_needs_the_same_prompts():
    before = [{"id": i, "correct": i % 2 == 0} for i in range(200)]
    after = [dict(r, correct=r["correct"] or r["id"] % 10 == 1) for r in before]  # 20 more right
    d = evaluate.paired_difference(before, after)
    assert d == {"n": 200, "mean": 10.0, "se": 2.13}
    assert 2 * d["se"] < notebook.noise_points(0.5, 0.6, 200, 200)  # pairing removes the shared part
    with pytest.raises(ValueError, match="different prompts .*200 and 199 rows"):
        evaluate.paired_difference(before, after[1:])
    with pytest.raises(ValueError, match="ids differ"):
        evaluate.paired_difference(before, after[::-1])


def test_judge_counts_failures():
    rows = [{"prompt": "p", "completion": "c", "gold": "g"}] * 3
    calls = iter([{"reasoning": 5}, {"reasoning": 11}, RuntimeError("api down")])

    def judge_fn(p, c, g):
        got = next(calls)
        if isinstance(got, Exception):
            raise got
        return got

    assert notebook.judge(rows, judge_fn) == {"reasoning": 5.0, "judged": 1, "skipped": 2}


@pytest.mark.slow
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
    sampler = evaluate.make_sampler(model, tok, preset.model, greedy_only)  # reused below: compiled once
    again = evaluate.evaluate_model(model, tok, records[:4], preset.model, greedy_only, sampler=sampler)
    assert [r["completion"] for r in again["rows"]] == [r["completion"] for r in rows[:4]]
    shown = notebook.show_completions(model, tok, records[:4], preset.model, greedy_only, "base")
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
    # GSM8K's test problems through the real sampler: the held-out set's prompt and greedy
    # decoding; a prompt over the budget is counted (too long: wrong), not refused or dropped.
    gsm8k = [{"id": f"gsm8k-test-{i}", "prompt": r["question"], "answer": a}
             for i, (r, a) in enumerate(zip(GSM8K_TEST[:2], ("18", "3"), strict=True))]
    assert greedy_only.max_prompt_length == 96  # the robe's prompt has 90 tokens, Janet's 215
    got = evaluate.evaluate_gsm8k(model, tok, gsm8k, preset.model, greedy_only, stage="base",
                                  sampler=sampler)
    assert [r["reason"] for r in got["rows"]][0] == "prompt_too_long" and got["summary"]["too_long"] == 1
    as_math = [{"domain": "math", "prompt": gsm8k[1]["prompt"], "answer": "3"}]
    same = evaluate.evaluate_model(model, tok, as_math, preset.model, greedy_only, sampler=sampler)["rows"][0]
    assert got["rows"][1]["completion"] == same["completion"] and got["rows"][1]["length"] == same["length"]
    assert got["summary"]["n"] == 2 and 0 < got["rows"][1]["length"] <= 25


def test_pick_examples_prefers_the_named_domains_and_fills_in():
    recs = [{"id": f"{d}{i}", "domain": d} for i in range(2)
            for d in ("general", "summarization", "math", "science")]
    assert [r["id"] for r in notebook.pick_examples(recs)] == ["math0", "summarization0", "general0"]
    assert [r["id"] for r in notebook.pick_examples(recs, prefer=("science",), n=2)] == [
        "science0", "general0"]
    assert notebook.pick_examples([]) == []


# --- a run's evaluation (06_evaluation and python -m reasonkit run) ---------------------------


def test_evaluate_run_every_finished_stage_then_save(tmp_path, monkeypatch, capsys):
    """The base model and each finished stage, in order, freed in between; saved and marked."""
    from reasonkit.runtime import runs

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
    monkeypatch.setattr(evaluate.models, "free", lambda: loaded.append("free"))
    monkeypatch.setattr(evaluate, "make_sampler", lambda *args: "a sampler")

    def fake_evaluate(model, tok, records, model_cfg, cfg, *, stage, sampler, **kw):
        assert sampler == "a sampler"
        rows = evaluate.score_stage(records, [GOOD if stage != "base" else "12"] * len(records),
                                    [[] for _ in records])
        return {"stage": stage, "summary": evaluate.summarize(rows), "rows": rows}

    monkeypatch.setattr(evaluate, "evaluate_model", fake_evaluate)
    results, seconds = evaluate.evaluate_run(preset, run, mesh="a mesh")
    assert loaded == ["base", "free", "sft", "free", "grpo", "free"]
    assert list(results) == list(seconds) == ["base", "sft", "grpo"]
    assert "grpo  format pass 100.0%" in capsys.readouterr().out
    out = evaluate.save_run(run, preset, results, seconds, files=notebook.eval_tables(results, k=4))
    assert sorted(p.name for p in out.iterdir()) == [
        "completions_base.jsonl", "completions_grpo.jsonl", "completions_sft.jsonl", "finished.json",
        "results.json", "stage_table.md"]
    assert (out / "stage_table.md").read_text().startswith("| stage | n | format pass |")
    assert run.finished_info("eval")["stages"] == ["base", "sft", "grpo"]
    assert json.loads((out / "results.json").read_text())["settings"]["num_samples"] == 4


def test_evaluate_run_scores_the_hard_block_beside_the_held_out_set(tmp_path, monkeypatch):
    from reasonkit.runtime import runs

    preset = get_preset("tiny")
    run = runs.RunDir.create("h", root=tmp_path)
    recs = [{"id": str(i), "domain": "math", "source": "t", "prompt": f"{i} + 1?",
             "reasoning": "r", "answer": str(i + 1)} for i in range(3)]
    hard = [dict(r, id=f"hard{i}", prompt=f"{i} + 2 + 3?") for i, r in enumerate(recs[:2])]
    data.write_splits(data.Splits(eval=recs, sft=recs, dpo=[], grpo=recs, eval_hard=hard),
                      data.DataReport(), run.stage("data"))
    run.mark_finished("data")
    run.mark_finished("sft", steps=2)
    seen = []
    monkeypatch.setattr(evaluate, "load_stage", lambda p, r, name, mesh: (None, None))
    monkeypatch.setattr(evaluate.models, "free", lambda: None)
    monkeypatch.setattr(evaluate, "make_sampler", lambda *args: "a sampler")

    def fake_evaluate(model, tok, records, model_cfg, cfg, *, stage, sampler, **kw):
        seen.append((stage, [r["id"] for r in records]))
        rows = evaluate.score_stage(records, [GOOD] * len(records), [[GOOD, "x"] for _ in records])
        return {"stage": stage, "summary": evaluate.summarize(rows), "rows": rows}

    monkeypatch.setattr(evaluate, "evaluate_model", fake_evaluate)
    results, _ = evaluate.evaluate_run(preset, run, ["sft"], mesh="a mesh")
    assert seen == [("sft", ["0", "1", "2"]), ("sft, hard", ["hard0", "hard1"])]
    assert results["sft"]["hard"]["summary"]["overall"]["n"] == 2
    assert [r["samples_right"] for r in results["sft"]["hard"]["rows"]] == [0, 0]  # GOOD answers 12
    evaluate.write_results(results, tmp_path / "eval", {})
    assert (tmp_path / "eval" / "hard_completions_sft.jsonl").is_file()
    assert json.loads((tmp_path / "eval" / "results.json").read_text())["hard"]["sft"]["overall"]["n"] == 2


# --- GSM8K's test split: strict / lenient, from files in the real formats ---------------------

# Three problems of GSM8K's test split in its own layout ("#### answer" closes the solution).
GSM8K_TEST = [
    {"question": "Janet’s ducks lay 16 eggs per day. She eats three for breakfast every morning and "
                 "bakes muffins for her friends every day with four. She sells the remainder at the "
                 "farmers' market daily for $2 per fresh duck egg. How much in dollars does she make "
                 "every day at the farmers' market?",
     "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = "
               "$<<9*2=18>>18 every day at the farmer’s market.\n#### 18"},
    {"question": "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts "
                 "in total does it take?",
     "answer": "It takes 2/2=<<2/2=1>>1 bolt of white fiber\nSo the total amount of fabric is "
               "2+1=<<2+1=3>>3 bolts of fabric\n#### 3"},
    {"question": "Josh decides to try flipping a house.  He buys a house for $80,000 and then puts in "
                 "$50,000 in repairs.  This increased the value of the house by 150%.  How much "
                 "profit did he make?",
     "answer": "The cost of the house and repairs came out to 80,000+50,000=$<<80000+50000=130000>>"
               "130,000\nHe increased the value of the house by 80,000*1.5=<<80000*1.5=120000>>"
               "120,000\nSo the new value of the house is 120,000+80,000=$<<120000+80000=200000>>"
               "200,000\nSo he made a profit of 200,000-130,000=$<<200000-130000=70000>>70,000"
               "\n#### 70,000"},
]


@pytest.mark.parametrize("gold, completion, strict, lenient, reason", [
    ("18", "<reasoning>16 - 3 - 4 = 9 eggs, 9 * 2 = 18.</reasoning>\n<answer>18</answer><end_of_turn>",
     True, True, "ok"),
    ("18", "<reasoning>16 - 3 = 13, 13 * 2 = 26.</reasoning>\n<answer>$26</answer>", False, False, "ok"),
    ("18", "She sells 16 - 3 - 4 = 9 eggs for 9 * 2 = 18 dollars.", False, True, "no_answer_tag"),
    ("18", "So she makes $\\boxed{18}$ dollars. Check: 18 / 2 = 9 eggs.", False, True, "no_answer_tag"),
    ("70000", "<reasoning>200,000 - 130,000</reasoning>\n<answer>$70,000</answer>", True, True, "ok"),
    ("70000", "<answer>70000</answer>", True, True, "ok"),  # right, though the format is not
    ("3", "<reasoning>2 + 1</reasoning>\n<answer>3 or 4</answer>", False, False, "hedged"),
    ("3", "<reasoning>2 + 1 = 3</reasoning>\n<answer>3", False, True, "unclosed_tag"),  # cut off
    ("3", "2 + 1 = 3 bolts. No wait, it is 4.", False, False, "no_answer_tag"),  # the last number
    ("3", None, False, False, "no_answer_tag"),
])
def test_gsm8k_strict_needs_the_tag_lenient_reads_free_text(gold, completion, strict, lenient, reason):
    row = evaluate.score_gsm8k({"answer": gold, "id": "g", "prompt": "q"}, completion)
    assert (row["strict"], row["lenient"], row["reason"]) == (strict, lenient, reason)
    assert row["format_ok"] == (completion is not None and completion.startswith("<reasoning>")
                                and "</answer>" in completion)
    # strict is the held-out set's accuracy, scored by the same function
    assert row["strict"] == evaluate.score({"domain": "math", "answer": gold}, completion)["correct"]


def test_gsm8k_summary_and_table_count_too_long_prompts_as_wrong():
    rec = {"answer": "3", "id": "gsm8k-test-1", "prompt": "q"}
    rows = [evaluate.score_gsm8k(rec, t) for t in ("<reasoning>r</reasoning>\n<answer>3</answer>",
                                                   "so 3", "<answer>4</answer>")]
    rows.append(evaluate.too_long_row(rec, 300))
    s = evaluate.summarize_gsm8k(rows)
    assert (s["n"], s["strict"], s["lenient"], s["format_rate"], s["too_long"]) == (4, 0.25, 0.5, 0.25, 1)
    assert rows[-1]["reason"] == "prompt_too_long" and rows[-1]["prompt_tokens"] == 300
    assert evaluate.summarize_gsm8k([]) == {"n": 0, "too_long": 0}
    res = {"sft": {"gsm8k": {"summary": s}}, "base": {"gsm8k": {"summary": evaluate.summarize_gsm8k([])}},
           "dpo": {}}  # a stage evaluated without GSM8K has no row
    table = notebook.gsm8k_table(res).splitlines()
    assert table[0].startswith("| stage | n | GSM8K test, strict / lenient | ± 1 s.e. |")
    assert table[2:] == ["| base | 0 | - | - | - | 0 | - |",
                         "| sft | 4 | 25.0% / 50.0% | 25.0 | 25.0% | 1 | 1.7 |"]  # length: words
    assert evaluate.gsm8k_line(s) == ("GSM8K test, strict / lenient: 25.0% / 50.0% of 4 "
                                      "(1 prompt too long: counted wrong)")


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_gsm8k_test_split_from_each_source(tmp_path, monkeypatch):
    """The config's spec reads the test split: the original JSONL, a local copy in the Hub's
    layout (parquet, as openai/gsm8k ships), and TFDS's builder (array_record, no TensorFlow)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from reasonkit.config import EvalConfig

    assert evaluate.load_gsm8k_test(EvalConfig()) is None
    test = write_jsonl(tmp_path / "test.jsonl", GSM8K_TEST)
    with_junk = write_jsonl(tmp_path / "junk.jsonl", GSM8K_TEST + [{"question": "q?", "answer": "no marker"}])
    records, report = evaluate.load_gsm8k_test(EvalConfig(gsm8k_test=f"jsonl:{with_junk}"))
    assert [(r["id"], r["answer"]) for r in records] == [
        ("gsm8k-test-0", "18"), ("gsm8k-test-1", "3"), ("gsm8k-test-2", "70000")]
    assert report.drops.counts == {"no #### answer line": 1}  # counted, as every source's drops
    records, report = evaluate.load_gsm8k_test(EvalConfig(gsm8k_test=f"jsonl:{test}", gsm8k_limit=2))
    assert [r["answer"] for r in records] == ["18", "3"]
    assert report.notes == ["the first 2 of 3 problems (eval.gsm8k_limit)"]

    hub = tmp_path / "gsm8k" / "main"
    hub.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(GSM8K_TEST[:1]), hub / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(GSM8K_TEST[1:]), hub / "test-00000-of-00001.parquet")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    records, _ = evaluate.load_gsm8k_test(EvalConfig(gsm8k_test=f"hf:{hub.parent}"))
    assert [r["answer"] for r in records] == ["3", "70000"]  # the test file, not train

    tfds_gsm8k = pytest.importorskip("tensorflow_datasets.text.gsm8k.gsm8k")
    monkeypatch.setattr(tfds_gsm8k.Gsm8k, "_split_generators",
                        lambda self, dl_manager: {"test": self._generate_examples(test)})
    records, report = evaluate.load_gsm8k_test(EvalConfig(gsm8k_test=f"tfds:{tmp_path / 'tfds'}"))
    assert sorted(r["answer"] for r in records) == ["18", "3", "70000"] and report.kept == 3

    junk = write_jsonl(tmp_path / "none.jsonl", [{"question": "q?", "answer": "none"}])
    with pytest.raises(ValueError, match=r"eval.gsm8k_test='jsonl:.*none.jsonl': no GSM8K test problem"):
        evaluate.load_gsm8k_test(EvalConfig(gsm8k_test=f"jsonl:{junk}"))


class FakeSampler:
    """Tunix's sampler as evaluation calls it: ``.tokenizer.encode`` and a call returning
    ``.text``; replies by the question in the prompt, and records each call's shape."""

    def __init__(self, tok, replies):
        self.tokenizer = types.SimpleNamespace(encode=tok.EncodeAsIds)
        self.replies, self.calls = replies, []

    def __call__(self, batch, max_generation_steps, max_prompt_length, eos_tokens, seed=None, **kw):
        self.calls.append((len(batch), max_prompt_length, seed))
        assert all(len(self.tokenizer.encode(p)) + 1 <= max_prompt_length for p in batch)
        return types.SimpleNamespace(text=[next((r for q, r in self.replies.items() if q in p), "?")
                                           for p in batch])


def test_evaluate_run_scores_the_gsm8k_test_split_beside_the_held_out_set(tmp_path, monkeypatch,
                                                                            capsys, tiny_dir):
    """The tiny preset with a small local GSM8K file: the code path of the Gemma presets' "hf"."""
    from reasonkit.runtime import runs

    test = write_jsonl(tmp_path / "test.jsonl", GSM8K_TEST)
    # 160 tokens hold the robe's and Josh's prompts, not Janet's (215 with the tiny tokenizer)
    preset = get_preset("tiny", **{"eval.gsm8k_test": f"jsonl:{test}", "eval.max_prompt_length": 160,
                                   "eval.num_samples": 1})
    run = runs.RunDir.create("g", root=tmp_path)
    recs = [{"id": str(i), "domain": "math", "source": "t", "prompt": f"{i} + 1?", "reasoning": "r",
             "answer": str(i + 1)} for i in range(3)]
    data.write_splits(data.Splits(eval=recs, sft=recs, dpo=[], grpo=recs), data.DataReport(),
                      run.stage("data"))
    run.mark_finished("data")
    run.mark_finished("sft", steps=2)
    tok = models.load_tokenizer(tiny_dir / "tokenizer.model", vocab_size=512)
    replies = {"base": {"A robe": "2 + 1 = 3 bolts", "Josh": "He made 70,000 - 130,000."},
               "sft": {"A robe": "<reasoning>2 / 2 = 1, 2 + 1 = 3</reasoning>\n<answer>3</answer>",
                       "Josh": "<reasoning>200,000 - 130,000</reasoning>\n<answer>$70,000</answer>",
                       "+ 1?": "<reasoning>r</reasoning>\n<answer>1</answer>"}}
    samplers = []

    def make_sampler(model, tokenizer, model_cfg, cfg):
        samplers.append(FakeSampler(tokenizer, replies[model]))
        return samplers[-1]

    monkeypatch.setattr(evaluate, "load_stage", lambda p, r, name, mesh: (name, tok))
    monkeypatch.setattr(evaluate, "make_sampler", make_sampler)
    monkeypatch.setattr(evaluate.models, "free", lambda: None)
    results, seconds = evaluate.evaluate_run(preset, run, mesh="a mesh")
    assert list(results) == ["base", "sft"] and len(samplers) == 2  # one sampler a stage, shared
    # per stage: held-out greedy + 1 sampled pass (3 prompts, 1 batch each), then GSM8K (2 of 3)
    assert [(n, seed is None) for n, _, seed in samplers[0].calls] == [(16, True), (16, False), (16, True)]
    base, sft = results["base"]["gsm8k"], results["sft"]["gsm8k"]
    assert [(r["id"], r["strict"], r["lenient"], r["reason"]) for r in base["rows"]] == [
        ("gsm8k-test-0", False, False, "prompt_too_long"), ("gsm8k-test-1", False, True, "no_answer_tag"),
        ("gsm8k-test-2", False, False, "no_answer_tag")]  # 130,000 is an operand: no answer
    assert [(r["strict"], r["lenient"]) for r in sft["rows"]] == [(False, False), (True, True), (True, True)]
    assert (sft["summary"]["n"], sft["summary"]["too_long"], sft["summary"]["source"]) == (
        3, 1, f"gsm8k:jsonl:{test}")
    assert base["rows"][0]["prompt_tokens"] == 215
    out = capsys.readouterr().out
    assert f"GSM8K test: 3 problems from gsm8k:jsonl:{test}\n" in out
    assert ("sft   format pass 100.0%  accuracy  33.3%" in out and "      GSM8K test, strict / lenient: "
            "66.7% / 66.7% of 3 (1 prompt too long: counted wrong)" in out)

    saved = evaluate.save_run(run, preset, results, seconds, files=notebook.eval_tables(results))
    assert sorted(p.name for p in saved.glob("*gsm8k*")) == [
        "gsm8k_completions_base.jsonl", "gsm8k_completions_sft.jsonl", "gsm8k_table.md"]
    table = (saved / "gsm8k_table.md").read_text().splitlines()
    assert [line.split(" | ")[:3] for line in table[2:]] == [
        ["| base", "3", "0.0% / 33.3%"], ["| sft", "3", "66.7% / 66.7%"]]
    summary = json.loads((saved / "results.json").read_text())
    assert summary["gsm8k"]["sft"]["strict"] == pytest.approx(2 / 3)
    assert summary["settings"]["gsm8k_test"] == f"jsonl:{test}"
    lines = (saved / "gsm8k_completions_sft.jsonl").read_text().splitlines()
    assert [json.loads(line)["completion"] for line in lines][1] == replies["sft"]["A robe"]
    # evaluated again without it: nothing of GSM8K is left behind to be read as current
    plain = {s: {k: v for k, v in r.items() if k != "gsm8k"} for s, r in results.items()}
    evaluate.save_run(run, preset, plain, seconds, files=notebook.eval_tables(plain))
    assert not list(saved.glob("*gsm8k*")) and "gsm8k" not in json.loads(
        (saved / "results.json").read_text())


# --- GRPO's groups (05_grpo) -------------------------------------------------------------


def test_group_advantages_are_tunix_grpo_advantages():
    from tunix.rl.algo_core import compute_advantages

    rewards = np.random.default_rng(0).choice([0.0, 1.5, 3.0, 5.0, 8.0], size=32)
    rewards[:8] = 5.0  # one group whose answers all score the same
    ours = notebook.group_advantages(rewards, 8)
    np.testing.assert_allclose(ours, compute_advantages(rewards, 8), rtol=1e-6, atol=1e-9)
    assert not ours[:8].any()  # no spread, no advantage: that group moves nothing
    np.testing.assert_allclose(ours.reshape(4, 8).mean(axis=1), 0.0, atol=1e-9)
    with pytest.raises(ValueError, match=r"\(6,\) rewards do not split into groups of num_generations=4"):
        notebook.group_advantages(rewards[:6], 4)
    with pytest.raises(ValueError, match="num_generations=1; a group needs at least 2"):
        notebook.group_advantages(rewards, 1)


def test_rollout_groups_samples_g_answers_a_prompt_and_scores_them(monkeypatch, tiny_dir):
    tok = models.load_tokenizer(tiny_dir / "tokenizer.model", vocab_size=512)
    preset = get_preset("tiny", **{"grpo.num_generations": 4, "grpo.temperature": 0.8})
    answers = ["<reasoning>2 + 2 = 4</reasoning>\n<answer>4</answer>", "<answer>5</answer>", "4", "?"]
    calls = []

    class Sampler:
        tokenizer = types.SimpleNamespace(encode=tok.EncodeAsIds)

        def __call__(self, batch, max_generation_steps, max_prompt_length, eos_tokens, seed=None, **kw):
            calls.append((list(batch), max_generation_steps, max_prompt_length, seed, kw))
            return types.SimpleNamespace(text=[answers[i % 4] for i in range(len(batch))])

    monkeypatch.setattr(notebook_show, "make_sampler", lambda *args: Sampler())
    batch = {"prompts": np.array(["What is 2 + 2?", "What is 3 + 3?", "unused"]),
             "answer": np.array(["4", "6", "0"]), "domain": np.array(["math"] * 3)}
    out = notebook.rollout_groups("a model", tok, batch, preset, rewards.MATH_REWARDS, prompts=2, seed=7)
    (prompts, steps, length, seed, kw), = calls  # one batch: 2 prompts x G = 4
    assert prompts == ["What is 2 + 2?"] * 4 + ["What is 3 + 3?"] * 4
    assert (steps, length, seed) == (preset.grpo.max_generation_length, preset.grpo.max_prompt_length,
                                     7 * 100_003)
    assert kw == {"temperature": 0.8, "top_p": preset.grpo.top_p, "top_k": preset.grpo.top_k}
    assert out["completions"] == answers * 2
    assert out["rewards"]["answer_correct"] == [3.0, 0.0, 0.0, 0.0] + [0.0] * 4
    np.testing.assert_allclose(out["total"], np.sum(list(out["rewards"].values()), axis=0))
    np.testing.assert_allclose(out["advantages"], notebook.group_advantages(out["total"], 4))
    assert out["advantages"][0] > 0 > out["advantages"][3]  # the right answer leads its group
    assert len(notebook.rollout_groups("a model", tok, batch, preset, rewards.MATH_REWARDS,
                                       prompts=5)["completions"]) == 3 * 4  # the batch has 3 rows


SCORED = ["<reasoning>6 * 7 = 42.</reasoning>\n<answer>42</answer>", "<answer>41 or 42</answer>",
          "The answer is 42.", "<reasoning>x</reasoning>\n<answer>42</answer><answer>42</answer>",
          "<reasoning>6 * 7</reasoning>\n<answer>43</answer>", "<answer> 42.0 </answer>", ""]


@pytest.mark.parametrize("completion", SCORED)
def test_score_reads_the_answer_tag_once_with_the_rewards_verdict(completion, monkeypatch):
    calls = []
    real = template.extract_answer
    # the one reader both use (rewards.extract) calls it under this name
    monkeypatch.setattr(rewards, "extract_answer", lambda *a, **k: calls.append(1) or real(*a, **k))
    row = evaluate.score({"domain": "math", "answer": "42"}, completion)
    assert len(calls) == 1
    monkeypatch.undo()
    assert row["correct"] == rewards.is_correct(completion, "42", "math")


# --- issue 66 item 5: greedy only, the base cache, sampled accuracy, seeds, word answers ---------


def test_greedy_only_leaves_pass_and_maj_at_k_unmeasured_not_zero():
    rec = {"domain": "math", "answer": "12", "prompt": "p", "id": 1}
    rows = evaluate.score_stage([rec, dict(rec, id=2)], [GOOD, "<answer>13</answer>"], [[], []])
    assert [(r["pass_at_k"], r["maj_at_k"], r["samples"]) for r in rows] == [(None, None, 0)] * 2
    overall = evaluate.summarize(rows)["overall"]
    assert "pass_at_k" not in overall and "maj_at_k" not in overall and overall["accuracy"] == 0.5
    res = {"sft": {"summary": evaluate.summarize(rows), "rows": rows}}
    row = notebook.stage_table(res, k=0).splitlines()[2]
    assert row.endswith(f"| - | - | {overall['mean_length']:.1f} |")  # shown as not measured, not 0%
    notebook.plot_stages(res, k=0)  # draws, a bar left out for each column not measured


class CountingSampler:
    """A sampler that answers every prompt with the question's number plus one (right), greedy
    or sampled alike, and counts its calls with their temperature (None: greedy)."""

    def __init__(self, tok):
        self.tokenizer = types.SimpleNamespace(encode=tok.EncodeAsIds)
        self.calls = []

    def __call__(self, batch, max_generation_steps, max_prompt_length, eos_tokens, seed=None, **kw):
        self.calls.append((len(batch), kw.get("temperature")))
        right = [int(p.split(" + 1?")[0].split()[-1]) + 1 for p in batch]
        return types.SimpleNamespace(text=[f"<reasoning>r</reasoning>\n<answer>{n}</answer>" for n in right])


def _run_with_splits(tmp_path, name="c", n=6):
    from reasonkit.runtime import runs

    run = runs.RunDir.create(name, root=tmp_path)
    recs = [{"id": str(i), "domain": ["math", "general"][i % 2], "source": "t", "prompt": f"{i} + 1?",
             "reasoning": "r", "answer": str(i + 1)} for i in range(n)]
    cfg = DataConfig(seed=3, eval_seed=5)
    report = data.DataReport(settings={"seed": cfg.seed, "eval_seed": cfg.held_out_seed})
    data.write_splits(data.Splits(eval=recs, sft=recs, dpo=[], grpo=recs), report, run.stage("data"))
    run.mark_finished("data")
    return run


def test_the_base_s_completions_are_cached_and_re_scored(tmp_path, monkeypatch, tiny_dir):
    """A second evaluation of the base reads its completions from the runs root's cache (no model
    loaded, no generate call); a changed decoding setting misses it; the scores come from the
    cached completions, read again by the checker of now."""
    tok = models.load_tokenizer(tiny_dir / "tokenizer.model", vocab_size=512)
    run = _run_with_splits(tmp_path)
    samplers, loaded = [], []

    def load_stage(preset, run, name, mesh):
        loaded.append(name)
        return "model", tok

    monkeypatch.setattr(evaluate, "load_stage", load_stage)
    monkeypatch.setattr(evaluate, "make_sampler",
                        lambda *a: samplers.append(CountingSampler(tok)) or samplers[-1])
    monkeypatch.setattr(evaluate.models, "free", lambda: None)
    preset = get_preset("tiny", **{"eval.num_samples": 1})
    first, _ = evaluate.evaluate_run(preset, run, ["base"], mesh="m")
    assert loaded == ["base"] and len(samplers[0].calls) == 2  # greedy + 1 sampled round, 1 batch each
    cached = list((tmp_path / ".eval_cache").glob("base-*.json"))
    assert len(cached) == 1
    again, _ = evaluate.evaluate_run(preset, run, ["base"], mesh="m")
    assert loaded == ["base"] and len(samplers) == 1  # read from the cache: no load, no sampler
    assert again["base"]["summary"] == first["base"]["summary"]
    assert again["base"]["rows"] == first["base"]["rows"]
    # scores are recomputed from the completions: an edited completion is scored as it now reads
    texts = json.loads(cached[0].read_text())
    texts["greedy"][0] = "So the answer is 1."  # record 0: 0 + 1 = 1, in prose
    cached[0].write_text(json.dumps(texts))
    edited, _ = evaluate.evaluate_run(preset, run, ["base"], mesh="m")
    row = edited["base"]["rows"][0]
    assert (row["correct"], row["lenient"], row["reason"]) == (False, True, "no_answer_tag")
    # another decoding setting is another key: generated afresh, kept beside the first
    hotter = get_preset("tiny", **{"eval.num_samples": 1, "eval.temperature": 0.9})
    evaluate.evaluate_run(hotter, run, ["base"], mesh="m")
    assert loaded == ["base", "base"] and len(samplers) == 2 and len(samplers[1].calls) == 2
    assert len(list((tmp_path / ".eval_cache").glob("base-*.json"))) == 2
    # a trained stage is never cached; cache_base off generates afresh
    off = get_preset("tiny", **{"eval.num_samples": 1, "eval.cache_base": False})
    evaluate.evaluate_run(off, run, ["base"], mesh="m")
    assert loaded == ["base"] * 3 and len(samplers) == 3


def test_greedy_only_with_sampled_accuracy_on_a_subset_and_the_seeds(tmp_path, monkeypatch, tiny_dir):
    """eval.num_samples 0 draws no pass@k samples; the subset's samples are drawn at GRPO's
    temperature and their mean accuracy sits beside greedy accuracy; results.json records the
    seeds (data.seed, data.eval_seed, eval.seed)."""
    tok = models.load_tokenizer(tiny_dir / "tokenizer.model", vocab_size=512)
    run = _run_with_splits(tmp_path, n=20)
    samplers = []
    monkeypatch.setattr(evaluate, "load_stage", lambda p, r, name, mesh: ("model", tok))
    monkeypatch.setattr(evaluate, "make_sampler",
                        lambda *a: samplers.append(CountingSampler(tok)) or samplers[-1])
    monkeypatch.setattr(evaluate.models, "free", lambda: None)
    preset = get_preset("tiny", **{"eval.num_samples": 0, "eval.sampled_subset": 4,
                                   "eval.sampled_per_prompt": 3, "eval.seed": 2})
    results, seconds = evaluate.evaluate_run(preset, run, ["base"], mesh="m")
    # greedy (20 prompts, 2 batches of 16), then 3 rounds of the 4-prompt subset at GRPO's T
    assert samplers[0].calls == [(16, None)] * 2 + [(16, preset.grpo.temperature)] * 3
    summary = results["base"]["summary"]
    o = summary["overall"]
    assert "pass_at_k" not in o
    assert (o["accuracy"], o["sampled_accuracy"], o["sampled_prompts"]) == (1.0, 1.0, 4)
    assert summary["sampled"] == {"prompts": 4, "per_prompt": 3, "temperature": 0.9, "top_p": 1.0,
                                  "top_k": 50, "accuracy": 1.0, "greedy_accuracy": 1.0}
    subset = [r["id"] for r in results["base"]["rows"] if "sampled_accuracy" in r]
    assert subset == ["0", "1", "2", "3"]  # math and general in turn
    assert summary["per_domain"]["math"]["sampled_prompts"] == 2
    out = evaluate.save_run(run, preset, results, seconds, files=notebook.eval_tables(results, k=0))
    saved = json.loads((out / "results.json").read_text())
    assert saved["seeds"] == {"data.seed": 3, "data.eval_seed": 5, "eval.seed": 2}
    assert saved["stages"]["base"]["sampled"]["accuracy"] == 1.0
    assert "| - | - |" in (out / "stage_table.md").read_text()
    # the subset is sampled at eval.sampled_temperature when it is set
    cooler = preset.replace(**{"eval.sampled_temperature": 0.3})
    evaluate.evaluate_run(cooler, run, ["base"], mesh="m")
    assert samplers[-1].calls[-1] == (16, 0.3)


@pytest.mark.parametrize("gold, domain, completion, lenient", [
    ("Tom", "general", "Tom is older than Dan. So the answer is Tom.", True),
    ("Tom", "general", "Tom is older than Dan. So the answer is Dan.", False),
    ("red", "instruction", "Answer: red", True),
    ("red", "instruction", "**Answer:** red", True),
    ("12", "math", "The answer is 12.", True),
    ("fig", "summarization", "apple 2, plum 3, fig 1. Least often: fig. So the answer is fig.", True),
    ("blue cake egg", "instruction", "By first letters. So the answer is blue, cake, egg.", True),
    # hedged, denied, several candidates: nothing is credited
    ("Tom", "general", "The answer is Tom or Dan.", False),
    ("Tom", "general", "The answer is maybe Tom, maybe Dan.", False),
    ("Tom", "general", "The answer is not Tom.", False),
    ("Tom", "general", "The answer is Tom. No wait, the answer is Dan.", False),
    ("Tom", "general", "The answer is Dan. No wait, the answer is Tom.", False),
    ("Tom", "general", "The answer is Tom. The answer is Tom.", True),  # the same twice: one answer
    ("Tom", "general", "So the answer is Tom. He is 12.", False),  # a number after: read as before
    ("Tom", "math", "So the answer is Tom.", False),  # the numeric domains read numbers only
    ("3", "summarization", "peach 3, lime 3. So the answer is 3 times.", True),
])
def test_lenient_accuracy_reads_word_answers_stated_in_prose(gold, domain, completion, lenient):
    row = evaluate.score({"domain": domain, "answer": gold}, completion)
    assert (row["correct"], row["lenient"], row["reason"]) == (False, lenient, "no_answer_tag")


def test_the_lenient_reader_keeps_every_verdict_of_the_checker_corpus():
    """benchmarks/checker/checker_cases.jsonl's free-text cases, read by evaluation's lenient reader
    under each case's domain and under a text domain: every verdict the numeric reader gave
    stands, and no wrong answer is credited under the case's own domain."""
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "checker" / "checker_cases.jsonl"
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    free = [c for c in cases if c["comparable"] and c["mode"] == "free_text"]
    assert len(free) >= 80
    with evaluate.answers.strict():
        for case in free:
            gold, domain = case.get("gold_answer", case["gold"]), case.get("domain", "math")
            before = evaluate.answers.final_answer(case["pred"])
            old = before is not None and evaluate.answers.check_answer(domain, before, gold)
            new = evaluate.score({"domain": domain, "answer": gold}, case["pred"])["lenient"]
            assert new == old, case["id"]
            assert case["expected"] or not new, case["id"]
            old = before is not None and evaluate.answers.check_answer("general", before, gold)
            assert evaluate.score({"domain": "general", "answer": gold}, case["pred"])["lenient"] == old
