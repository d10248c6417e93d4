import json
import os
import pathlib
import re
import subprocess
import sys
import time
import warnings

import pytest

from reasonkit import runs
from reasonkit.config import get_preset
from reasonkit.runs import RunDir, default_root, open_jsonl
from reasonkit.testing import make_run, small_preset

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_layout_and_finish_marker(tmp_path):
    run = RunDir.create("r1", root=tmp_path)
    for stage in ("data", "sft", "dpo", "grpo", "eval"):
        assert (tmp_path / "r1" / stage).is_dir()
    with pytest.raises(FileNotFoundError, match="run notebooks/03_sft first"):
        run.require("sft")
    run.mark_finished("sft", steps=3)
    assert run.require("sft") == tmp_path / "r1" / "sft"
    assert run.finished_info("sft")["steps"] == 3
    assert not (tmp_path / "r1" / "sft" / "finished.json.tmp").exists()
    path = run.write_json("sft", "settings.json", {"shape": (1, 2)})
    assert json.loads(path.read_text()) == {"shape": [1, 2]}
    assert not path.with_name("settings.json.tmp").exists()


def test_metrics_round_trip(tmp_path):
    run = RunDir.create("r", root=tmp_path)
    assert run.read_metrics("sft") == []
    run.append_metrics("sft", {"step": 1, "loss": 2.5})
    run.append_metrics("sft", {"step": 2, "loss": 2.0})
    assert [r["loss"] for r in run.read_metrics("sft")] == [2.5, 2.0]
    json.loads((tmp_path / "r" / "sft" / "metrics.jsonl").read_text().splitlines()[0])


@pytest.mark.parametrize("bad", ["", "a/b", ".."])
def test_bad_run_names(tmp_path, bad):
    with pytest.raises(ValueError, match="plain directory name"):
        RunDir.create(bad, root=tmp_path)


def test_unknown_stage(tmp_path):
    with pytest.raises(ValueError, match="unknown stage 'rl'"):
        RunDir.create("r", root=tmp_path).stage("rl")


def test_default_root(monkeypatch, tmp_path):
    monkeypatch.setenv("REASONKIT_RUNS", str(tmp_path))
    assert default_root() == tmp_path
    monkeypatch.delenv("REASONKIT_RUNS")
    assert str(default_root()) in ("runs", "/kaggle/working/runs")


def test_a_line_cut_short_by_a_killed_kernel(tmp_path):
    """The cut line is skipped with a warning; the resumed run's lines stay readable."""
    run = RunDir.create("r", root=tmp_path)
    run.append_metrics("sft", {"step": 1, "loss": 2.5})
    path = tmp_path / "r" / "sft" / "metrics.jsonl"
    with open(path, "a") as f:
        f.write('{"step": 2, "lo')  # the kernel died here
    run.append_metrics("sft", {"step": 2, "loss": 2.0})  # the resumed run
    with pytest.warns(UserWarning, match=r"metrics.jsonl:2: skipped a line that is not JSON"):
        rows = run.read_metrics("sft")
    assert rows == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.0}]
    with open_jsonl(path) as f:  # a whole last line is left as it is
        f.write("{}\n")
    assert path.read_text().endswith('"loss": 2.0}\n{}\n')


# --- the session -------------------------------------------------------------------------

def fake_proc(tmp_path, btime: int, pid1_ticks: int):
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "stat").write_text(f"cpu  1 2 3\nbtime {btime}\nprocesses 9\n")
    fields = ["S", "0"] + ["0"] * 17 + [str(pid1_ticks), "0"]  # field 22 is the start
    (proc / "1" / "stat").write_text("1 (init (a container)) " + " ".join(fields) + "\n")
    return proc


def test_session_id_is_the_start_of_process_1(tmp_path):
    """A VM's process 1 starts at boot; a container's when the container (the session) starts."""
    ticks = os.sysconf("SC_CLK_TCK")
    assert runs.session_id(fake_proc(tmp_path, 1_700_000_000, 300 * ticks)) == 1_700_000_300
    assert abs(runs.session_id(tmp_path / "nowhere") - (time.time() - time.monotonic())) < 2
    assert runs.session_id() == runs.session_id()  # this machine's: stable


def test_one_deadline_per_session_for_every_notebook_and_process(tmp_path, capsys):
    env = {"REASONKIT_DEADLINE_HOURS": "2"}
    first = runs.session_deadline(tmp_path, env=env, now=1000.0, kaggle=False)
    assert first == 1000.0 + 2 * 3600
    assert "session deadline" in capsys.readouterr().out
    # a later notebook of the same session, an hour on: the same deadline, not 2 h from now
    assert runs.session_deadline(tmp_path, env=env, now=4600.0, kaggle=False) == first
    # other hours in a later notebook count from the same start; unset, no deadline
    assert runs.session_deadline(tmp_path, env={"REASONKIT_DEADLINE_HOURS": "3"}, now=4600.0,
                                 kaggle=False) == 1000.0 + 3 * 3600
    assert runs.session_deadline(tmp_path, env={}, now=4600.0, kaggle=False) is None
    # another process of this session reads the same file
    code = (f"from reasonkit.runs import session_deadline; print(repr(session_deadline("
            f"{str(tmp_path)!r}, env={{'REASONKIT_DEADLINE_HOURS': '2'}}, kaggle=False, quiet=True)))")
    here = runs.session_deadline(tmp_path / "real", env=env, kaggle=False, quiet=True)
    out = subprocess.run([sys.executable, "-c", code.replace(str(tmp_path), str(tmp_path / "real"))],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert float(out) == here


def test_a_new_session_gets_a_fresh_deadline(tmp_path):
    """A run restored into a new session (a new start of the machine) starts a new clock."""
    env = {"REASONKIT_DEADLINE_HOURS": "2"}
    old = runs.session_deadline(tmp_path, env=env, session=100, now=1000.0, kaggle=False)
    new = runs.session_deadline(tmp_path, env=env, session=200, now=90_000.0, kaggle=False)
    assert (old, new) == (1000.0 + 7200, 90_000.0 + 7200)
    assert json.loads((tmp_path / "session.json").read_text())["session"] == 200


def test_kaggle_default_is_8_5_hours_from_the_session_start(tmp_path, capsys):
    got = runs.session_deadline(tmp_path, env={}, session=50_000, now=50_600.0, kaggle=True)
    assert got == 50_000 + 8.5 * 3600
    assert "Kaggle's default, 8.5 h from the session's start" in capsys.readouterr().out
    # changing the hours within the session moves the deadline from the same start
    assert runs.session_deadline(tmp_path, env={"REASONKIT_DEADLINE_HOURS": "1"}, session=50_000,
                                 now=50_700.0, kaggle=True) == 50_000 + 3600
    assert runs.session_deadline(tmp_path / "elsewhere", env={}, kaggle=False) is None
    # a "start" two days old is not a Kaggle session's (at most 12 h): count from now
    assert runs.session_deadline(tmp_path / "odd", env={}, session=0, now=172_800.0,
                                 kaggle=True) == 172_800.0 + 8.5 * 3600


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "0", "-1", "1e308", "8h", "eight"])
def test_bad_deadline_hours_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match=f"REASONKIT_DEADLINE_HOURS='{re.escape(bad)}': must be a "
                                         "positive, finite number of hours"):
        runs.session_deadline(tmp_path, env={"REASONKIT_DEADLINE_HOURS": bad}, kaggle=False)
    assert not (tmp_path / "session.json").exists()


def test_the_run_directory_gives_its_sessions_deadline(tmp_path, monkeypatch):
    monkeypatch.setenv("REASONKIT_DEADLINE_HOURS", "3")
    run = RunDir.create("r", root=tmp_path)
    assert run.deadline() == runs.session_deadline(tmp_path, quiet=True)
    assert abs(run.deadline() - (time.time() + 3 * 3600)) < 60


def make_run_tree(root, name, *, finished=(), files=()):
    for stage in runs.STAGES:
        (root / name / stage).mkdir(parents=True, exist_ok=True)
    for stage in finished:
        (root / name / stage / "finished.json").write_text("{}")
    for f in files:
        (root / name / f).parent.mkdir(parents=True, exist_ok=True)
        (root / name / f).write_text(f)


def test_restore_takes_the_furthest_copy_and_never_replaces_work_here(tmp_path):
    inputs, working = tmp_path / "input", tmp_path / "working" / "runs"
    make_run_tree(inputs / "day1" / "runs", "r", finished=("data",), files=("data/sft.jsonl",))
    make_run_tree(inputs / "day2" / "out" / "runs", "r", finished=("data", "sft"),
                  files=("data/sft.jsonl", "sft/checkpoints/240/x", "dpo/checkpoints/20/x"))
    (inputs / "day2" / "out" / "runs" / ".jax_cache").mkdir()
    (inputs / "day2" / "out" / "runs" / ".jax_cache" / "jit_step-abc").write_text("compiled")
    make_run_tree(working, "r", files=("dpo/checkpoints/40/x",))  # this session's newer DPO
    restored = runs.restore_runs(working, inputs)
    assert len(restored) == 1 and restored[0].startswith("r (data, sft) from ")
    assert "day2" in restored[0]
    assert (working / "r" / "sft" / "finished.json").is_file()
    assert (working / "r" / "sft" / "checkpoints" / "240" / "x").is_file()
    assert not (working / "r" / "dpo" / "checkpoints" / "20").exists()  # never mixed in
    assert (working / ".jax_cache" / "jit_step-abc").read_text() == "compiled"
    assert runs.restore_runs(working, inputs) == []  # nothing left to restore
    assert runs.restore_runs(working, tmp_path / "no-inputs") == []


def test_compilation_cache_under_the_runs_root(tmp_path, monkeypatch):
    import jax

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv(runs.MIN_COMPILE_ENV, raising=False)
    old = jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs
    try:
        path = runs.use_compilation_cache(tmp_path)
        assert path == tmp_path / ".jax_cache" and path.is_dir()
        assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(path.resolve())
        assert jax.config.jax_compilation_cache_dir == str(path.resolve())  # jax was imported
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0  # every program kept
        monkeypatch.setenv(runs.MIN_COMPILE_ENV, "2.5")  # the user's own threshold stays
        runs.use_compilation_cache(tmp_path)
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 2.5
        monkeypatch.setenv(runs.MIN_COMPILE_ENV, "one")
        with pytest.raises(ValueError, match="JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='one'"):
            runs.use_compilation_cache(tmp_path)
    finally:  # the other tests compile uncached
        jax.config.update("jax_compilation_cache_dir", old[0])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", old[1])


def test_a_fresh_kernel_keeps_and_then_loads_a_quick_program(tmp_path):
    """Programs that compile in milliseconds are written to the cache by one process and
    loaded from it, every one of them, by the next (as the next notebook's kernel does)."""
    script = (
        "import sys, jax, jax.numpy as jnp\n"
        "from reasonkit import runs\n"
        "runs.use_compilation_cache(sys.argv[1])\n"
        "seen = []\n"
        "jax.monitoring.register_event_listener(lambda event, **kw: seen.append(event))\n"
        "jax.jit(lambda x: jnp.sin(x) * 3 + 1)(jnp.arange(7.0)).block_until_ready()\n"
        "print(seen.count('/jax/compilation_cache/cache_misses'), "
        "seen.count('/jax/compilation_cache/cache_hits'))\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_COMPILATION_CACHE_DIR", runs.MIN_COMPILE_ENV)}

    def kernel() -> tuple[int, int]:
        out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, check=True,
                             capture_output=True, text=True, cwd=pathlib.Path(__file__).parents[1])
        misses, hits = map(int, out.stdout.split()[-2:])
        return misses, hits

    misses, hits = kernel()
    assert misses >= 2 and hits == 0  # the arange and the function, each well under 1 s
    assert len(list((tmp_path / ".jax_cache").iterdir())) == misses
    assert kernel() == (0, misses)


def test_start_session_restores_then_caches_then_fixes_the_deadline(tmp_path, monkeypatch, capsys):
    make_run_tree(tmp_path / "input" / "prev" / "runs", "r", finished=("data",))
    monkeypatch.setattr(runs, "use_compilation_cache", lambda root: pathlib.Path(root) / ".jax_cache")
    s = runs.start_session(tmp_path / "runs", inputs=tmp_path / "input",
                           env={"REASONKIT_DEADLINE_HOURS": "1", "REASONKIT_KEEP_STEP_MEMORY": "0"})
    assert s.root == tmp_path / "runs" and (tmp_path / "runs" / "r" / "data" / "finished.json").is_file()
    assert abs(s.deadline - (time.time() + 3600)) < 60
    out = capsys.readouterr().out
    assert out.index("restored r") < out.index("runs in") < out.index("session deadline")
    assert "step memory: left to glibc (REASONKIT_KEEP_STEP_MEMORY=0)" in out  # the env it was given


def test_colab_drive_is_mounted_when_the_runs_root_is_on_it(tmp_path):
    mounted = []
    if not (runs.COLAB_DRIVE / "MyDrive").is_dir():
        assert runs.mount_drive(runs.COLAB_DRIVE / "MyDrive" / "runs", mounted.append)
        assert mounted == [str(runs.COLAB_DRIVE)]
    assert not runs.mount_drive(tmp_path / "runs", mounted.append)
    assert len(mounted) <= 1


def test_default_run_name_is_the_run_or_the_preset(tmp_path, monkeypatch):
    monkeypatch.delenv("REASONKIT_RUN", raising=False)
    monkeypatch.setenv("REASONKIT_PRESET", "gemma3-1b")
    assert RunDir.create(root=tmp_path).name == "gemma3-1b"
    monkeypatch.delenv("REASONKIT_PRESET")
    assert RunDir.create(root=tmp_path).name == "tiny"  # auto, on this CPU
    monkeypatch.setenv("REASONKIT_RUN", "mine")
    assert RunDir.create(root=tmp_path).name == "mine"


def test_build_data_writes_once_then_reads_back(tmp_path):
    preset = get_preset("tiny", **{"data.num_records": 12, "data.eval_per_domain": 2,
                                   "data.train_size": 24})
    run = RunDir.create("d", root=tmp_path)
    words = lambda text: len(text.split())  # noqa: E731 - a stand-in tokenizer
    splits, report = runs.build_data(run, preset, words)
    assert run.is_finished("data") and splits.sizes()["eval"] == 12
    assert run.finished_info("data")["preset"] == "tiny"
    again, _ = runs.build_data(run, preset.replace(**{"data.seed": 1}), words)
    assert again == splits  # finished: read back, not rebuilt
    rebuilt, _ = runs.build_data(run, preset.replace(**{"data.seed": 1}), words, rebuild=True)
    assert rebuilt != splits and runs.build_data(run, preset, words)[0] == rebuilt


def test_only_process_0_writes_the_run_files(tmp_path, monkeypatch):
    run = RunDir.create("multi", root=tmp_path)
    assert runs.process_index() == 0 and runs.is_writer()  # one process (this one)
    assert runs.from_writer(True) is True and runs.sync("nothing to wait for") is None
    monkeypatch.setattr(runs, "process_index", lambda: 1)  # as process 1 of a multi-host run
    assert not runs.is_writer()
    run.write_json("sft", "settings.json", {"lr": 1})
    run.append_metrics("sft", {"event": "train/loss", "step": 1, "value": 2.0})
    run.mark_finished("sft", steps=1)
    runs.session_deadline(tmp_path, env={"REASONKIT_DEADLINE_HOURS": "1"}, session=1, now=0.0,
                          kaggle=False, quiet=True)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    monkeypatch.setattr(runs, "process_index", lambda: 0)
    run.mark_finished("sft", steps=1)
    assert run.finished_info("sft")["steps"] == 1


# --- a stage's lifecycle -------------------------------------------------------------------

def test_stage_settings_name_the_override_to_put_back(tmp_path):
    preset = small_preset()
    run = make_run(tmp_path, "settings", preset)
    s = runs.stage_settings(preset, run, "sft", None)
    assert s["sft.learning_rate"] == preset.sft.learning_rate and s["lora.rank"] == preset.lora.rank
    assert not {"sft.mesh", "sft.checkpoint_every", "model.remat"} & set(s)
    assert len(s["data.split_sha1"]) == 40 and s["started_from"] is None
    for key in ("sft.learning_rate", "lora.rank", "model.dtype"):  # each a Preset.replace key
        other = preset.replace(**{key: {"sft.learning_rate": 1e-3, "lora.rank": 4,
                                        "model.dtype": "bfloat16"}[key]})
        assert [c.split(":")[0] for c in runs.settings_diff(
            s, runs.stage_settings(other, run, "sft", None))] == [key]


def test_grpo_skipping_an_unfinished_dpo_says_so(tmp_path):
    """Skipping DPO is fine; skipping one that a deadline stopped half-way is likely a slip."""
    run = RunDir.create("skip", root=tmp_path)
    run.mark_finished("sft", steps=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert runs.start_from(run, "grpo") == "sft"  # no DPO at all: nothing to say
        (runs.checkpoint_dir(run, "dpo") / "0" / "model_params").mkdir(parents=True)
        assert runs.start_from(run, "grpo") == "sft"  # stopped before its first step
    (runs.checkpoint_dir(run, "dpo") / "2" / "model_params").mkdir(parents=True)
    with pytest.warns(UserWarning, match=r"dpo of run 'skip' stopped at step 2 without finishing: "
                                         r"grpo starts from the sft adapters.*notebooks/04_dpo"):
        assert runs.start_from(run, "grpo") == "sft"
    run.mark_finished("dpo", steps=3)
    assert runs.start_from(run, "grpo") == "dpo"


def test_retraining_a_stage_names_the_later_stages_it_leaves_behind(tmp_path):
    run = RunDir.create("stale", root=tmp_path)
    run.write_json("dpo", "settings.json", {"started_from": "sft"})
    run.write_json("grpo", "settings.json", {"started_from": "dpo"})
    with pytest.warns(UserWarning, match=r"retraining sft of run 'stale': dpo and grpo started "
                                         r"from its old adapters.*retrain=True"):
        runs.begin_stage(run, "sft", overwrite=True)
    run.write_json("grpo", "settings.json", {"started_from": "sft"})  # GRPO skipped DPO
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        runs.begin_stage(run, "dpo", overwrite=True)  # nothing started from DPO's adapters


def test_grpo_settings_record_the_rewards_and_an_older_run_reads_as_the_default(tmp_path):
    preset = small_preset()
    run = make_run(tmp_path, "rewards", preset)
    s = runs.stage_settings(preset, run, "grpo", None)
    assert s["grpo.rewards"] == [[name, 1.0] for name in (
        "format_exact", "format_approx", "answer_correct", "answer_close", "numeric_backup")]
    assert "grpo.show_every" not in s  # printing is bookkeeping: free to change on a resume
    fmt = preset.replace(**{"grpo.rewards": [["format_exact", 1.0], ["format_approx", 1.0]]})
    assert runs.settings_diff(s, runs.stage_settings(fmt, run, "grpo", None)) == [
        "grpo.rewards: " + repr(s["grpo.rewards"]) + " -> [['format_exact', 1.0], ['format_approx', 1.0]]"]
    # A run recorded before the field existed trained with the default: the same settings.
    run.write_json("grpo", "settings.json", {k: v for k, v in s.items() if k != "grpo.rewards"})
    assert runs.settings_changes(run, "grpo", s) == []
    assert runs.settings_changes(run, "grpo", runs.stage_settings(fmt, run, "grpo", None)) == [
        "grpo.rewards: " + repr(s["grpo.rewards"]) + " -> [['format_exact', 1.0], ['format_approx', 1.0]]"]
    run.write_json("sft", "settings.json", {"sft.max_steps": 4})  # not GRPO's: nothing added
    assert runs.settings_changes(run, "sft", {"sft.max_steps": 4}) == []


def test_a_grpo_run_recorded_before_length_buckets_reads_as_padded_to_the_max(tmp_path):
    preset = small_preset()
    run = make_run(tmp_path, "buckets", preset)
    s = runs.stage_settings(preset, run, "grpo", None)
    assert s["grpo.length_buckets"] == [[80], [48]]
    off = preset.replace(**{"grpo.length_buckets": [[], []]})
    run.write_json("grpo", "settings.json", {k: v for k, v in s.items() if k != "grpo.length_buckets"})
    assert runs.settings_changes(run, "grpo", runs.stage_settings(off, run, "grpo", None)) == []
    assert runs.settings_changes(run, "grpo", s) == ["grpo.length_buckets: [[], []] -> [[80], [48]]"]


def test_branch_copies_finished_stages_and_refuses_what_it_would_mix(tmp_path, capsys):
    run = RunDir.create("main", root=tmp_path)
    for stage in ("data", "sft", "dpo"):
        (run.stage(stage) / "checkpoints" / "2").mkdir(parents=True)
        (run.stage(stage) / "checkpoints" / "2" / "weights").write_text(stage)
        run.mark_finished(stage, steps=2)
    (run.stage("grpo") / "metrics.jsonl").write_text("{}\n")  # not branched
    with pytest.raises(FileNotFoundError, match=r"stage 'grpo' of run 'main' has not finished.*05_grpo"):
        runs.branch(run, "main-try", stages=("data", "grpo"))
    assert not (tmp_path / "main-try").exists()  # refused before anything was made
    with pytest.raises(ValueError, match="another name than 'main'"):
        runs.branch(run, "main")
    other = runs.branch(run, "main-try")
    assert other.path == tmp_path / "main-try" and "copied data, sft, dpo" in capsys.readouterr().out
    for stage in ("data", "sft", "dpo"):
        assert other.is_finished(stage)
        assert (other.stage(stage) / "checkpoints" / "2" / "weights").read_text() == stage
    assert not any(other.stage("grpo").iterdir()) and not other.is_finished("grpo")
    # The notebook run again: the copies are there, and what the branch trained since stays.
    other.mark_finished("grpo", steps=1)
    assert runs.branch(run, "main-try").is_finished("grpo")
    assert "data, sft, dpo already there" in capsys.readouterr().out
    # The source's DPO trained again: the branch's copy is another DPO; mixing them is refused.
    time.sleep(1.1)  # finished_at has a resolution of a second
    run.mark_finished("dpo", steps=3)
    with pytest.raises(FileExistsError, match=r"run 'main-try' already has a dpo stage that is not "
                                              r"run 'main''s .*delete .*main-try to branch 'main' again"):
        runs.branch(run, "main-try")
