"""The session: runs root, session id and deadline, restored runs, compilation cache, start-up;
the host it runs on (runtime.platform) and the step memory it keeps (runtime.processes)."""

import json
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

import reasonkit_bootstrap as boot
from reasonkit.runtime import platform, processes, session
from reasonkit.runtime._platform import default_root
from reasonkit.tunix_patches import cpu_memory

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_default_root(monkeypatch, tmp_path):
    monkeypatch.setenv("REASONKIT_RUNS", str(tmp_path))
    assert default_root() == tmp_path
    monkeypatch.delenv("REASONKIT_RUNS")
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    assert str(default_root()) in ("runs", "/kaggle/working/runs")


def test_session_id_is_the_start_of_process_1(tmp_path):
    """A VM's process 1 starts at boot; a container's when the container (the session) starts."""
    ticks = os.sysconf("SC_CLK_TCK")
    assert session.session_id(fake_proc(tmp_path, 1_700_000_000, 300 * ticks)) == 1_700_000_300
    assert abs(session.session_id(tmp_path / "nowhere") - (time.time() - time.monotonic())) < 2
    assert session.session_id() == session.session_id()  # this machine's: stable


@pytest.mark.slow
def test_one_deadline_per_session_for_every_notebook_and_process(tmp_path, capsys):
    env = {"REASONKIT_DEADLINE_HOURS": "2"}
    first = session.session_deadline(tmp_path, env=env, now=1000.0, kaggle=False)
    assert first == 1000.0 + 2 * 3600
    assert "session deadline" in capsys.readouterr().out
    # a later notebook of the same session, an hour on: the same deadline, not 2 h from now
    assert session.session_deadline(tmp_path, env=env, now=4600.0, kaggle=False) == first
    # other hours in a later notebook count from the same start; unset, no deadline
    assert session.session_deadline(tmp_path, env={"REASONKIT_DEADLINE_HOURS": "3"}, now=4600.0,
                                 kaggle=False) == 1000.0 + 3 * 3600
    assert session.session_deadline(tmp_path, env={}, now=4600.0, kaggle=False) is None
    # another process of this session reads the same file
    code = (f"from reasonkit.runtime._session import session_deadline; print(repr(session_deadline("
            f"{str(tmp_path)!r}, env={{'REASONKIT_DEADLINE_HOURS': '2'}}, kaggle=False, quiet=True)))")
    here = session.session_deadline(tmp_path / "real", env=env, kaggle=False, quiet=True)
    out = subprocess.run([sys.executable, "-c", code.replace(str(tmp_path), str(tmp_path / "real"))],
                         capture_output=True, text=True, check=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert float(out) == here


def test_a_new_session_gets_a_fresh_deadline(tmp_path):
    """A run restored into a new session (a new start of the machine) starts a new clock."""
    env = {"REASONKIT_DEADLINE_HOURS": "2"}
    old = session.session_deadline(tmp_path, env=env, session=100, now=1000.0, kaggle=False)
    new = session.session_deadline(tmp_path, env=env, session=200, now=90_000.0, kaggle=False)
    assert (old, new) == (1000.0 + 7200, 90_000.0 + 7200)
    assert json.loads((tmp_path / "session.json").read_text())["session"] == 200


def test_kaggle_default_is_8_5_hours_from_the_session_start(tmp_path, capsys):
    got = session.session_deadline(tmp_path, env={}, session=50_000, now=50_600.0, kaggle=True)
    assert got == 50_000 + 8.5 * 3600
    assert "Kaggle's default, 8.5 h from the session's start" in capsys.readouterr().out
    # changing the hours within the session moves the deadline from the same start
    assert session.session_deadline(tmp_path, env={"REASONKIT_DEADLINE_HOURS": "1"}, session=50_000,
                                 now=50_700.0, kaggle=True) == 50_000 + 3600
    assert session.session_deadline(tmp_path / "elsewhere", env={}, kaggle=False) is None
    # a "start" two days old is not a Kaggle session's (at most 12 h): count from now
    assert session.session_deadline(tmp_path / "odd", env={}, session=0, now=172_800.0,
                                 kaggle=True) == 172_800.0 + 8.5 * 3600


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "0", "-1", "1e308", "8h", "eight"])
def test_bad_deadline_hours_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match=f"REASONKIT_DEADLINE_HOURS='{re.escape(bad)}': must be a "
                                         "positive, finite number of hours"):
        session.session_deadline(tmp_path, env={"REASONKIT_DEADLINE_HOURS": bad}, kaggle=False)
    assert not (tmp_path / "session.json").exists()


def test_restore_takes_the_furthest_copy_and_never_replaces_work_here(tmp_path):
    inputs, working = tmp_path / "input", tmp_path / "working" / "runs"
    make_run_tree(inputs / "day1" / "runs", "r", finished=("data",), files=("data/sft.jsonl",))
    make_run_tree(inputs / "day2" / "out" / "runs", "r", finished=("data", "sft"),
                  files=("data/sft.jsonl", "sft/checkpoints/240/x", "dpo/checkpoints/20/x"))
    (inputs / "day2" / "out" / "runs" / ".jax_cache").mkdir()
    (inputs / "day2" / "out" / "runs" / ".jax_cache" / "jit_step-abc").write_text("compiled")
    make_run_tree(working, "r", files=("dpo/checkpoints/40/x",))  # this session's newer DPO
    restored = session.restore_runs(working, inputs)
    assert restored == [f"restored run 'r' from {inputs / 'day2' / 'out' / 'runs' / 'r'}: it holds data, "
                        "sft finished; dpo started, not finished; copied data, sft"]
    assert (working / "r" / "sft" / "finished.json").is_file()
    assert (working / "r" / "sft" / "checkpoints" / "240" / "x").is_file()
    assert not (working / "r" / "dpo" / "checkpoints" / "20").exists()  # never mixed in
    assert (working / ".jax_cache" / "jit_step-abc").read_text() == "compiled"
    again = session.restore_runs(working, inputs)  # nothing left to restore, and it says so
    assert len(again) == 1 and again[0].endswith("is here already: nothing copied, this session's work wins")
    assert session.restore_runs(working, tmp_path / "no-inputs") == []


# An earlier notebook version's output, attached, in each of Kaggle's layouts: older sessions'
# <slug>/, 2026's notebooks/<owner>/<slug>/ (and datasets/<owner>/<slug>/ for a dataset made of
# an output), each also one folder deeper (a zip).
OUTPUTS = ["series-v3", "series-v3/output", "notebooks/me/series", "notebooks/me/series/output",
           "datasets/me/my-runs", "datasets/me/my-runs/output"]


@pytest.mark.parametrize("where", OUTPUTS)
def test_a_run_attached_in_either_kaggle_layout_is_restored_and_said_so(tmp_path, capsys, where):
    inputs = tmp_path / "kaggle" / "input"
    make_run_tree(inputs / where / "runs", "demo", finished=("data", "sft"),
                  files=("data/sft.jsonl", "sft/checkpoints/240/x", "dpo/checkpoints/15/x"))
    (inputs / "datasets" / "google" / "gsm8k").mkdir(parents=True)  # an input without runs
    start(tmp_path / "working" / "runs", inputs)
    out = capsys.readouterr().out
    assert (f"restored run 'demo' from {inputs / where / 'runs' / 'demo'}: it holds data, sft finished; "
            "dpo started, not finished; copied data, dpo, sft") in out
    assert (tmp_path / "working" / "runs" / "demo" / "sft" / "finished.json").is_file()
    assert "no earlier run" not in out


def test_no_run_in_the_inputs_names_the_places_looked_at(tmp_path, capsys):
    inputs = tmp_path / "kaggle" / "input"
    make_run_tree(inputs / "too" / "deep" / "below" / "runs", "demo", finished=("data",))  # not a layout
    (inputs / "datasets" / "google" / "gsm8k").mkdir(parents=True)
    assert start(tmp_path / "working" / "runs", inputs).restored == []
    out = capsys.readouterr().out
    assert (f"no earlier run in the Kaggle inputs: looked for runs/ in {inputs}/{{*, */*, datasets/*/*, "
            "datasets/*/*/*, notebooks/*/*, notebooks/*/*/*}") in out
    assert not (tmp_path / "working" / "runs" / "demo").exists()
    start(tmp_path / "elsewhere", tmp_path / "no-kaggle-here")  # not on Kaggle: nothing to say
    assert "no earlier run" not in capsys.readouterr().out


def test_the_input_root_comes_from_the_environment(tmp_path, monkeypatch, capsys):
    """$REASONKIT_KAGGLE_INPUT stands in for /kaggle/input (a simulation, or a test)."""
    make_run_tree(tmp_path / "in" / "notebooks" / "me" / "nb" / "runs", "r", finished=("data",))
    monkeypatch.setenv("REASONKIT_KAGGLE_INPUT", str(tmp_path / "in"))
    assert session.restore_runs(tmp_path / "runs")[0].startswith("restored run 'r' from ")


def start(root, inputs, **env):
    """:func:`session.start_session` without touching JAX's compilation cache or this process's
    memory settings."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(session, "use_compilation_cache", lambda root: pathlib.Path(root) / ".jax_cache")
        return session.start_session(root, inputs=inputs, env=env, optimisations=())


def test_compilation_cache_under_the_runs_root(tmp_path, monkeypatch):
    import jax

    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.delenv(session.MIN_COMPILE_ENV, raising=False)
    old = jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs
    try:
        path = session.use_compilation_cache(tmp_path)
        assert path == tmp_path / ".jax_cache" and path.is_dir()
        assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(path.resolve())
        assert jax.config.jax_compilation_cache_dir == str(path.resolve())  # jax was imported
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0  # every program kept
        monkeypatch.setenv(session.MIN_COMPILE_ENV, "2.5")  # the user's own threshold stays
        session.use_compilation_cache(tmp_path)
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 2.5
        monkeypatch.setenv(session.MIN_COMPILE_ENV, "one")
        with pytest.raises(ValueError, match="JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='one'"):
            session.use_compilation_cache(tmp_path)
    finally:  # the other tests compile uncached
        jax.config.update("jax_compilation_cache_dir", old[0])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", old[1])


@pytest.mark.slow
def test_a_fresh_kernel_keeps_and_then_loads_a_quick_program(tmp_path):
    """Programs that compile in milliseconds are written to the cache by one process and
    loaded from it, every one of them, by the next (as the next notebook's kernel does)."""
    script = (
        "import sys, jax, jax.numpy as jnp\n"
        "from reasonkit.runtime import session\n"
        "session.use_compilation_cache(sys.argv[1])\n"
        "seen = []\n"
        "jax.monitoring.register_event_listener(lambda event, **kw: seen.append(event))\n"
        "jax.jit(lambda x: jnp.sin(x) * 3 + 1)(jnp.arange(7.0)).block_until_ready()\n"
        "print(seen.count('/jax/compilation_cache/cache_misses'), "
        "seen.count('/jax/compilation_cache/cache_hits'))\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("JAX_COMPILATION_CACHE_DIR", session.MIN_COMPILE_ENV)}

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
    monkeypatch.setattr(session, "use_compilation_cache", lambda root: pathlib.Path(root) / ".jax_cache")
    s = session.start_session(tmp_path / "runs", inputs=tmp_path / "input",
                              env={"REASONKIT_DEADLINE_HOURS": "1"}, optimisations=())
    assert s.root == tmp_path / "runs" and (tmp_path / "runs" / "r" / "data" / "finished.json").is_file()
    assert abs(s.deadline - (time.time() + 3600)) < 60
    out = capsys.readouterr().out
    assert out.index("restored r") < out.index("runs in") < out.index("session deadline")
    assert out.index("session deadline") < out.index(  # the optimisations it was given
        "step memory: left to glibc (optimisation 'cpu step memory' is not among the preset's optimisations)")


@pytest.fixture
def drive(tmp_path, monkeypatch):
    """Colab's Drive mount point, here under tmp_path; ``mount`` makes MyDrive appear."""
    monkeypatch.setattr(platform, "COLAB_DRIVE", tmp_path / "content" / "drive")
    calls = []

    def mount(point):
        calls.append(point)
        (pathlib.Path(point) / "MyDrive").mkdir(parents=True)

    return calls, mount


def test_colab_drive_is_mounted_when_the_runs_root_is_on_it(tmp_path, drive):
    calls, mount = drive
    assert platform.mount_drive(platform.COLAB_DRIVE / "MyDrive" / "runs", mount)
    assert calls == [str(platform.COLAB_DRIVE)]
    assert not platform.mount_drive(platform.COLAB_DRIVE / "MyDrive" / "runs", mount)  # mounted already
    assert not platform.mount_drive(tmp_path / "runs", mount) and len(calls) == 1


def test_on_colab_the_runs_live_on_drive(tmp_path, drive, monkeypatch):
    monkeypatch.setattr(platform, "KAGGLE_WORKING", tmp_path / "no-kaggle")
    colab = {"COLAB_RELEASE_TAG": "release-colab-20260801"}
    assert platform.on_colab(colab) and not platform.on_colab({})
    assert platform.default_root(colab) == platform.COLAB_DRIVE / "MyDrive" / "reasonkit-runs"
    elsewhere = {**colab, "REASONKIT_RUNS": "/content/runs"}
    assert platform.default_root(elsewhere) == pathlib.Path("/content/runs")
    assert platform.default_root({}) == pathlib.Path("runs")


@pytest.mark.parametrize("mount", [None, "refused"])
def test_drive_not_mounted_stops_with_what_to_do(tmp_path, drive, mount):
    """Access refused, or a process that is no Colab notebook (``!python -m reasonkit`` before
    the notebook mounted Drive): stop, saying why the runs must be on Drive and how not to."""
    def refuse(point):
        raise ValueError("mount failed")

    with pytest.raises(RuntimeError) as e:
        platform.mount_drive(platform.COLAB_DRIVE / "MyDrive" / "reasonkit-runs",
                             refuse if mount else None)
    msg = str(e.value)
    why = "mounting it failed: ValueError: mount failed" if mount else "google.colab is not importable"
    assert why in msg
    for text in ("is on Google Drive, which is not mounted", "a later notebook finds an earlier one's "
                 "outputs only on Drive", "allow access to Drive", "%env REASONKIT_RUNS=/content/runs"):
        assert text in msg, text


def test_colab_runs_off_drive_are_said_to_stay_with_this_runtime(tmp_path, capsys):
    start(tmp_path / "runs", tmp_path / "none", COLAB_RELEASE_TAG="x")
    assert "this runtime's own disk: on Colab the next notebook runs in another runtime" in \
        capsys.readouterr().out


def fake_proc(tmp_path, btime: int, pid1_ticks: int):
    proc = tmp_path / "proc"
    (proc / "1").mkdir(parents=True)
    (proc / "stat").write_text(f"cpu  1 2 3\nbtime {btime}\nprocesses 9\n")
    fields = ["S", "0"] + ["0"] * 17 + [str(pid1_ticks), "0"]  # field 22 is the start
    (proc / "1" / "stat").write_text("1 (init (a container)) " + " ".join(fields) + "\n")
    return proc


def make_run_tree(root, name, *, finished=(), files=()):
    for stage in session.STAGES:
        (root / name / stage).mkdir(parents=True, exist_ok=True)
    for stage in finished:
        (root / name / stage / "finished.json").write_text("{}")
    for f in files:
        (root / name / f).parent.mkdir(parents=True, exist_ok=True)
        (root / name / f).write_text(f)


def test_the_stacks_noise_is_silenced_and_nothing_else(caplog):
    import logging
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        platform.quiet_infrastructure(env={})
        for category, message in [(UserWarning, "IProgress not found. Please update jupyter"),
                                  (DeprecationWarning, "`with mesh:` context manager has been deprecated"),
                                  (DeprecationWarning, "`with mesh:` something else"),
                                  (DeprecationWarning, "another deprecation")]:
            warnings.warn(message, category, stacklevel=1)
    assert [str(w.message) for w in seen] == ["`with mesh:` something else", "another deprecation"]
    absl = logging.getLogger("absl")
    with caplog.at_level(logging.WARNING, logger="absl"):
        absl.warning("Skipping non-TPU device: cpu. You might be missing jax[tpu] dependency.")
        absl.warning("Reference model and actor model are colocated but do not share the same backbone.")
    assert [r.getMessage()[:9] for r in caplog.records] == ["Reference"]
    env = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    platform.quiet_infrastructure(env=env)  # what the user set stays
    assert env == {"TF_CPP_MIN_LOG_LEVEL": "0", "GRPC_VERBOSITY": "ERROR"}
    assert sum(isinstance(f, logging.Filter) for f in absl.filters) == 1  # once, however often called


@pytest.mark.parametrize("module", ["session", "processes"])
def test_importing_the_runtime_prints_no_warning_of_the_stack(module):
    """Whichever runtime module comes first (the notebooks import the session, the trainers
    the processes), the runtime package quiets the stack before Tunix loads."""
    out = subprocess.run([sys.executable, "-W", "default", "-c", f"import reasonkit.runtime._{module}"],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    assert "IProgress" not in out.stderr and "absl" not in out.stderr, out.stderr


def test_the_package_knows_kaggles_inputs_as_the_bootstrap_does(tmp_path):
    """Two copies, so that neither imports the other: the bootstrap runs before reasonkit is
    installed, and the package never imports the bootstrap."""
    assert (platform.INPUT_LAYOUTS, str(platform.KAGGLE_INPUT), platform.KAGGLE_INPUT_ENV) == \
        (boot.INPUT_LAYOUTS, boot.KAGGLE_INPUT, boot.KAGGLE_INPUT_ENV)
    for d in ("old/zip/runs", "datasets/me/new/zip/deeper", "notebooks/me/nb/runs", "a/b/c/d/e"):
        (tmp_path / d).mkdir(parents=True)
    assert platform.input_folders(tmp_path) == boot.input_folders(tmp_path)
    assert platform.looked_in(tmp_path) == boot.looked_in(tmp_path)
    env = {boot.KAGGLE_INPUT_ENV: str(tmp_path)}
    assert platform.input_root(None, env) == boot.input_root(None, env) == tmp_path
    assert platform.input_root(None, {}) == boot.input_root(None, {}) == pathlib.Path("/kaggle/input")


# --- the step memory: the preset's optimisation "cpu step memory", for the whole process ------


@pytest.fixture
def step_memory(monkeypatch):
    """cpu_memory.keep_step_memory replaced by one that records its calls and says it kept
    the memory (this test process's allocator is left alone); no preset chosen yet."""
    calls = []

    def keep(libc=None):
        calls.append(libc)
        return "step memory: kept between steps (a stand-in)"

    monkeypatch.setattr(cpu_memory, "keep_step_memory", keep)
    for name in ("REASONKIT_PRESET", "REASONKIT_OVERRIDES"):
        monkeypatch.delenv(name, raising=False)
    return calls


def test_the_step_memory_follows_the_presets_optimisations(step_memory, monkeypatch):
    monkeypatch.setenv("REASONKIT_PRESET", "tiny")
    said = processes.keep_step_memory()  # tiny's optimisations: config.OPTIMISATIONS, with it
    assert step_memory == [None] and said.startswith("step memory: kept between steps (a stand-in); "
                                                     "optimisation 'cpu step memory', for this whole process")
    assert "a preset chosen later cannot undo it" in said and "optimisations=[]" in said
    monkeypatch.setenv("REASONKIT_OVERRIDES", '{"optimisations": []}')  # plain Tunix and JAX
    said = processes.keep_step_memory()
    assert said == ("step memory: left to glibc (optimisation 'cpu step memory' is not among the "
                    "preset's optimisations)") and len(step_memory) == 1
    monkeypatch.setenv("REASONKIT_OVERRIDES", '{"optimisations": ["attention"]}')
    assert processes.keep_step_memory().startswith("step memory: left to glibc") and len(step_memory) == 1
    # given, the optimisations win over the environment's preset
    assert processes.keep_step_memory(["cpu step memory"]).startswith("step memory: kept")
    assert len(step_memory) == 2
    monkeypatch.delenv("REASONKIT_OVERRIDES")
    assert processes.keep_step_memory(()).startswith("step memory: left to glibc") and len(step_memory) == 2


def test_auto_finds_its_optimisations_without_starting_jax(step_memory, monkeypatch):
    """"auto" picks from JAX's devices, which would start the backends the step memory must
    come before: on a CPU alone it is the CPU's preset (tiny); where JAX may use an
    accelerator the step memory does not apply, and auto's preset is not asked for."""
    monkeypatch.setattr(cpu_memory, "backends_started", lambda: False)
    monkeypatch.setattr(cpu_memory, "cpu_only", lambda: True)
    monkeypatch.setenv("REASONKIT_OVERRIDES", '{"optimisations": []}')
    assert processes.keep_step_memory().startswith("step memory: left to glibc") and step_memory == []
    monkeypatch.setattr(cpu_memory, "cpu_only", lambda: False)
    monkeypatch.setenv("REASONKIT_OVERRIDES", '{"no such field": 1}')  # might suit auto's TPU preset
    assert processes.keep_step_memory().startswith("step memory: kept") and step_memory == [None]


def test_the_session_starts_with_the_presets_step_memory(step_memory, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("REASONKIT_PRESET", "tiny")
    monkeypatch.setattr(session, "use_compilation_cache", lambda root: pathlib.Path(root) / ".jax_cache")
    session.start_session(tmp_path / "runs", inputs=tmp_path / "none", env={})
    out = capsys.readouterr().out
    assert step_memory == [None] and out.index("runs in") < out.index("step memory: kept")
    monkeypatch.setenv("REASONKIT_OVERRIDES", '{"optimisations": []}')
    session.start_session(tmp_path / "runs", inputs=tmp_path / "none", env={})
    assert "step memory: left to glibc" in capsys.readouterr().out and len(step_memory) == 1


@pytest.mark.parametrize("preset, overrides, says", [
    ("gemma9", "", "unknown preset 'gemma9'"),
    ("tiny", '{"optimisations": ["warp drive"]}', "['warp drive'] unknown"),
    ("tiny", "[1]", "REASONKIT_OVERRIDES must be a JSON object")])
def test_a_preset_that_cannot_be_stops_the_session_before_it_writes(step_memory, tmp_path, monkeypatch,
                                                                   preset, overrides, says):
    """As the notebook's get_preset() would a moment later: clearly, and before anything is
    restored or written."""
    monkeypatch.setenv("REASONKIT_PRESET", preset)
    monkeypatch.setenv("REASONKIT_OVERRIDES", overrides)
    with pytest.raises(ValueError, match=re.escape(says)):
        session.start_session(tmp_path / "runs", inputs=tmp_path / "none", env={})
    assert not (tmp_path / "runs").exists() and step_memory == []
