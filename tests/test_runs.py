import json

import pytest

from reasonkit.runs import RunDir, default_root, open_jsonl


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
