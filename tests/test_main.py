"""python -m reasonkit run: the series in one process, resuming, against one deadline.

Training, evaluation and the tokenizer are replaced by fakes that write what the real ones
would (finished.json, the merged model, results): what is tested is the order, the
skipping, the stops at the deadline and the resume. The data stage and the time model
run for real on a small tiny preset.
"""

import json
import pathlib
import time

import pytest

from reasonkit import __main__ as cli
from reasonkit import evaluate, models, train
from reasonkit.presets import get_preset
from reasonkit.runtime import hardware, runs, session

ROOT = pathlib.Path(__file__).resolve().parents[1]


class Words:
    """A stand-in tokenizer: one token a word."""

    def EncodeAsIds(self, text):  # noqa: N802 - SentencePiece's name
        return text.split()


@pytest.fixture
def series(tmp_path, monkeypatch):
    """The command with fakes at its seams; ``state`` says what ran and sets the deadline."""
    state = {"calls": [], "deadline": None, "stop_in": set()}
    state["preset"] = get_preset("tiny", **{"data.num_records": 12, "data.eval_per_domain": 2,
                                            "data.train_size": 24})

    monkeypatch.setattr(session, "start_session", lambda optimisations=None: session.Session(
        tmp_path, state["deadline"], [], tmp_path / ".jax_cache"))
    monkeypatch.setattr(cli, "get_preset", lambda name=None: state["preset"])
    monkeypatch.setattr(models, "read_platform_secrets", lambda: [])
    monkeypatch.setattr(models, "resolve_source", lambda cfg: tmp_path)
    monkeypatch.setattr(models, "load_tokenizer", lambda path, vocab_size: Words())
    monkeypatch.setattr(hardware, "detect", lambda: hardware.from_name("cpu-1"))
    monkeypatch.setattr(hardware, "matmul_benchmark", lambda: {"flops_per_s": 1e11})
    monkeypatch.setattr(models, "free", lambda: None)

    def train_or_load(p, run, stage, *, retrain=False, deadline=None):
        state["calls"].append(stage)
        if run.is_finished(stage):
            return train.StageResult(stage, 5, True, None, 0.0, {})
        if stage in state["stop_in"]:
            state["stop_in"].discard(stage)
            return train.StageResult(stage, 2, False, None, 1.0, {})
        run.mark_finished(stage, steps=5)
        return train.StageResult(stage, 5, True, None, 1.0, {})

    def export(result, p, run, gguf=None):
        state["calls"].append("export")
        files = [("adapter", "adapter_model.safetensors"), ("merged", "model.safetensors")]
        for kind, name in files + ([("gguf", f"model-{gguf}.gguf")] if gguf else []):
            (run.stage("grpo") / kind).mkdir(exist_ok=True)  # what train.exported looks for
            (run.stage("grpo") / kind / name).write_text("")
        return run.stage("grpo") / "merged"

    def evaluate_run(p, run, stages):
        state["calls"].append("eval:" + ",".join(stages))
        rows = evaluate.score_stage([{"domain": "math", "answer": "1", "prompt": "p"}], ["1"], [[]])
        results = {s: {"stage": s, "summary": evaluate.summarize(rows), "rows": rows} for s in stages}
        if p.eval.gsm8k_test:  # what evaluate.evaluate_gsm8k returns: one problem, lenient only
            gsm8k = [evaluate.score_gsm8k({"answer": "3"}, "2 + 1 = 3")]
            for s in stages:
                results[s]["gsm8k"] = {"stage": s, "summary": evaluate.summarize_gsm8k(gsm8k), "rows": gsm8k}
        return results, {s: 1.0 for s in stages}

    monkeypatch.setattr(train, "train_or_load", train_or_load)
    monkeypatch.setattr(train, "export", export)
    monkeypatch.setattr(evaluate, "evaluate_run", evaluate_run)
    monkeypatch.delenv("REASONKIT_RUN", raising=False)
    state["run"] = runs.RunDir(tmp_path / "tiny")
    return state


def test_a_fresh_series_runs_every_stage_in_order(series, capsys):
    assert cli.main(["run"]) == 0
    assert series["calls"] == ["sft", "dpo", "grpo", "export", "eval:base,sft,dpo,grpo"]
    out = capsys.readouterr().out
    assert "time model: steps x FLOPs per step / (0.1 TFLOP/s, the measured matmul rate" in out
    assert "| sft | 240 |" in out and "| eval | 4 |" in out
    assert "| stage | n | format pass |" in out and out.rstrip().endswith(f"done: {series['run'].path}")
    run = series["run"]
    assert all(run.is_finished(s) for s in runs.STAGES)
    assert (run.stage("eval") / "stages.png").is_file()


def test_a_deadline_stop_then_a_new_session_resumes_where_it_stopped(series, capsys):
    series["stop_in"] = {"dpo"}
    assert cli.main(["run"]) == cli.STOPPED
    assert series["calls"] == ["sft", "dpo"]
    assert "dpo stopped at step 2 for the deadline" in capsys.readouterr().out
    series["calls"].clear()
    assert cli.main(["run"]) == 0  # the next session
    assert series["calls"] == ["dpo", "grpo", "export", "eval:base,sft,dpo,grpo"]
    assert "sft: finished earlier (5 steps)" in capsys.readouterr().out
    series["calls"].clear()
    assert cli.main(["run"]) == 0  # nothing left to do
    assert series["calls"] == []
    out = capsys.readouterr().out
    assert "eval: current" in out and "| sft |" not in out.split("time model")[1].split("total")[0]


def test_no_stage_starts_too_close_to_the_deadline(series, capsys):
    series["deadline"] = time.time() + 60
    assert cli.main(["run"]) == cli.STOPPED
    assert series["calls"] == []
    out = capsys.readouterr().out
    assert "does NOT fit" in out and "sft: not started" in out
    assert series["run"].is_finished("data")  # the data stage is cheap: it ran


def test_an_exported_model_is_made_once_even_when_grpo_finished_in_an_earlier_session(series):
    run = series["run"]
    assert cli.main(["run"]) == 0
    (run.stage("grpo") / "merged" / "model.safetensors").unlink()  # that session died before it
    series["calls"].clear()
    assert cli.main(["run"]) == 0
    assert series["calls"] == ["grpo", "export"]  # loads the finished adapters, exports


def test_the_export_includes_the_gguf_file_and_a_run_without_it_exports_again(series):
    run = series["run"]
    assert cli.main(["run"]) == 0
    assert (run.stage("grpo") / "gguf" / f"model-{cli.GGUF}.gguf").is_file()
    (run.stage("grpo") / "gguf" / f"model-{cli.GGUF}.gguf").unlink()  # exported before GGUF exports
    series["calls"].clear()
    assert cli.main(["run"]) == 0
    assert series["calls"] == ["grpo", "export"]


def test_push_dry_run_lists_the_export_and_refuses_an_incomplete_one(tmp_path, capsys, monkeypatch):
    from test_publish import TINY, clear_credentials, write_export  # tests/ is on sys.path under pytest

    clear_credentials(tmp_path, monkeypatch)
    out = write_export(tmp_path / "gguf", TINY.model)
    assert cli.main(["push", str(out), "--to", "hf:me/reasonkit-tiny", "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"dry run: {out} (gguf export, licence apache-2.0)") and "HF_TOKEN" in printed
    assert cli.main(["push", str(out), "--to", "hf:me/reasonkit-tiny"]) == cli.REFUSED  # no token
    assert "push refused: cannot push" in capsys.readouterr().err
    (out / "LICENSE").unlink()
    assert cli.main(["push", str(out), "--to", "hf:me/x", "--dry-run"]) == cli.REFUSED
    assert "missing LICENSE" in capsys.readouterr().err
    for argv in (["push", str(out)], ["push", "--to", "hf:me/x"], ["run", "--to", "hf:me/x"],
                 ["plan", str(out)]):
        with pytest.raises(SystemExit):
            cli.main(argv)
    assert "push needs an export directory and --to" in capsys.readouterr().err


def test_plan_only_prints_the_time_model(series, capsys):
    assert cli.main(["plan"]) == 0
    assert series["calls"] == [] and "| grpo | 200 |" in capsys.readouterr().out


def test_the_gsm8k_test_split_is_planned_for_and_its_table_printed(series, capsys, tmp_path):
    rows = [{"question": f"{i} + 1?", "answer": f"{i} + 1 = <<{i}+1={i + 1}>>{i + 1}\n#### {i + 1}"}
            for i in range(3)]
    test = tmp_path / "test.jsonl"
    test.write_text("".join(json.dumps(r) + "\n" for r in rows))
    series["preset"] = series["preset"].replace(**{"eval.gsm8k_test": f"jsonl:{test}"})
    assert cli.main(["run"]) == 0
    out = capsys.readouterr().out
    assert "| eval (held-out 12 x 5 + GSM8K test 3 x 1) | 4 |" in out  # the time model counts it
    table = (series["run"].stage("eval") / "gsm8k_table.md").read_text()
    assert table.startswith("| stage | n | GSM8K test, strict / lenient |") and table in out
    assert "| grpo | 1 | 0.0% / 100.0% |" in out


def test_an_unreadable_gsm8k_source_stops_the_series_before_training(series, tmp_path):
    series["preset"] = series["preset"].replace(**{"eval.gsm8k_test": f"jsonl:{tmp_path / 'nope.jsonl'}"})
    with pytest.raises(RuntimeError, match=r"eval.gsm8k_test='jsonl:.*nope.jsonl': GSM8K's test split "
                                           r"could not be read \(FileNotFoundError.*or skip it"):
        cli.main(["run"])
    assert series["calls"] == []  # not hours later, at the evaluation


# --- the time model against the tiny demo, and the measured ETA a stage prints ---------------

# The tiny demo's stage times as measured (docs/performance.md), each with the matmul rate of
# its machine, which the time model divides by on a CPU:
# - 2026-11-27, 9m47s ("The whole demo"): SFT 105 s, DPO 25 s, GRPO 273 s; that machine read
#   438 to 485 GFLOP/s ("The GRPO and SFT steps, old path against new"): the middle, 460;
# - 2026-11-27, 13m48s ("The page faults ended", kept step memory): SFT 104.9 s, GRPO 418.3 s,
#   with 189.3 GFLOP/s (benchmarks/results/step_memory.json, runs.kept.sft.matmul_flops_per_s).
DEMOS = [(460e9, {"sft": 105.0, "dpo": 25.0, "grpo": 273.0}), (None, {"sft": 104.9, "grpo": 418.3})]
# Within a factor of 3 either way: the model assumes one utilisation for the tiny model on
# every CPU (0.12 of the matmul rate) where the two machines ran the SFT step at 0.24 and
# 0.44 of theirs, and it runs every GRPO answer to the maximum length, where the tiny
# model's stop early.
TOLERANCE = 3.0


@pytest.mark.parametrize("peak, measured", DEMOS)
def test_the_time_model_is_within_a_factor_of_3_of_the_tiny_demo(peak, measured):
    if peak is None:
        memory = json.loads((ROOT / "benchmarks" / "results" / "step_memory.json").read_text())
        peak = memory["runs"]["kept"]["sft"]["matmul_flops_per_s"]
    model = hardware.TimeModel(hardware.stage_costs(get_preset("tiny")), peak, "cpu", "recorded")
    ratios = {stage: model.seconds(stage) / seconds for stage, seconds in measured.items()}
    assert all(1 / TOLERANCE <= r <= TOLERANCE for r in ratios.values()), ratios
    assert ratios["grpo"] >= 1  # GRPO's estimate is an upper bound: answers at their maximum length


# The real Gemma 3 270M's series on a 2-core CPU (benchmarks/results/real_270m_cpu.json), and the
# matmul rate its plan measured before it started (its log: 0.188 TFLOP/s; docs/results.md).
REAL_PEAK = 188e9


def test_the_time_model_of_a_gemma_on_a_cpu_is_the_real_270m_series():
    """The plan of the whole series is an upper bound within 1.5x of its measured time, each
    stage within 2x. It decodes every answer to its maximum length, where trained stages stop
    early; loading, compiling and SFT's held-out checks come on top, and weigh most in the
    short stages. Two runs of the same stages on this machine differed by 10-19% (docs/results.md),
    so a tighter bound would test the machine."""
    real = json.loads((ROOT / "benchmarks" / "results" / "real_270m_cpu.json").read_text())
    model = hardware.time_model(get_preset(real["preset"]), hardware.from_name("cpu-1"),
                                peak=REAL_PEAK)
    assert "40% training, 60% sampling" in model.report()  # the cpu-gemma row, not the tiny one
    stages = ("sft", "dpo", "grpo", "eval")
    ratios = {stage: model.seconds(stage) / real["times_s"][stage] for stage in stages}
    assert all(1 / 2 <= r <= 2 for r in ratios.values()), ratios
    assert 1 <= model.total() / sum(real["times_s"][s] for s in stages) <= 1.5


class Counter:
    """What :func:`train.clock.until` reads of a CompileCounter: compilations, shapes seen."""

    count, shapes, step_shapes = 0, 0, set()


def test_grpo_eta_leaves_out_the_steps_that_compile(monkeypatch, capsys):
    """GRPO as it ran: the first step compiles (50 s), the next two each compile a new length
    bucket (40 s), the rest take 2 s. The ETA comes from the steady steps; the compiling ones
    are named apart. (Timing the two steps after the first gave 40 s a step: the 89-minute ETA
    of a 7-minute stage.)"""
    clock, counter = [0.0], Counter()
    counter.step_shapes = set()
    monkeypatch.setattr(train.clock.time, "time", lambda: clock[0])
    for i in train.clock.until(range(200), deadline=None, margin_s=0, total=200, name="GRPO",
                               counter=counter):
        if i == 0:
            clock[0] += 50
            counter.count += 30
        elif i in (1, 2):  # a new bucket: the step reports its shape and compiles for it
            clock[0] += 40
            counter.step_shapes.add(f"bucket {i}")
            counter.count += 3
        else:
            clock[0] += 2
    assert capsys.readouterr().out.splitlines() == [
        "GRPO: 2.00 s/step after warm-up (not counted: 3 steps that compiled, 2.2 min); 195 steps "
        "left, 6.5 min; no deadline set"]


def test_the_eta_reads_a_real_compile_counter_watching_the_stream(monkeypatch, capsys):
    """As a stage wires them (``counter.watch(until(..., counter=counter))``): a step that
    reports a new shape (GRPO's buckets, ``compiles.step_shape``) is warm-up."""
    from reasonkit.runtime import compiles

    clock = [0.0]
    monkeypatch.setattr(train.clock.time, "time", lambda: clock[0])
    with compiles.CompileCounter() as counter:
        stream = counter.watch(train.clock.until(range(50), None, 0, total=50, name="GRPO",
                                                 counter=counter))
        for i in stream:
            if i in (1, 2):
                compiles.step_shape(("bucket", i))
            clock[0] += {0: 50, 1: 20, 2: 20}.get(i, 1)
    assert capsys.readouterr().out.splitlines()[0].startswith(
        "GRPO: 1.00 s/step after warm-up (not counted: 3 steps that compiled, 90 s); 45 steps left")


def test_the_step_memory_follows_the_preset_named_on_the_command_line(monkeypatch):
    """``--preset`` decides the session's process-wide optimisations, before JAX starts;
    without one (or "auto") the session reads them from the environment itself."""
    asked = []
    monkeypatch.setattr(session, "start_session", lambda optimisations=None: asked.append(optimisations))
    cli._start_session("tiny")
    cli._start_session(None)
    cli._start_session("auto")
    assert asked == [get_preset("tiny").optimisations, None, None]
