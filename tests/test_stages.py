"""train.stage_run: a notebook cell makes the stage's Tunix call itself; the run directory's rules hold."""

import time

import pytest
from tunix import PeftTrainer

from reasonkit import train
from reasonkit.testing import make_run, small_preset
from reasonkit.train.stages import StageResult, StageRun


def test_a_stage_run_with_nothing_to_train_makes_no_call():
    class Refuses:
        def train(self, *args):
            raise AssertionError("called")

    loaded = StageResult("sft", 4, True, None, 0.0, {})
    StageRun("sft", False, trainer=Refuses(), learner=Refuses(), result=loaded).train()


def test_an_unknown_stage_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="unknown training stage 'ppo'"):
        with train.stage_run(small_preset(), None, "ppo"):
            pass


@pytest.mark.slow
def test_the_notebook_cell_trains_then_loads_then_retrains(tmp_path, capsys):
    preset = small_preset(**{"sft.max_steps": 2, "sft.checkpoint_every": 1})
    run = make_run(tmp_path, "cell", preset)
    with train.stage_run(preset, run, "sft") as r:  # what 03_sft's training cell writes
        assert r.trains and isinstance(r.trainer, PeftTrainer) and r.learner is None
        assert len(r.eval_batches) == 2
        r.trainer.train(r.train_batches, r.eval_batches)
    result = r.result
    assert result.finished and result.steps == 2 and run.is_finished("sft")
    assert "sft: 2 steps in" in capsys.readouterr().out  # one line, not a dict
    assert len(train.read_metrics(run, "sft")) > 0

    with train.stage_run(preset, run, "sft") as again:  # re-running the notebook loads it
        assert not again.trains and again.trainer is None
    assert again.result.finished and again.result.steps == 2 and again.result.policy is not None
    assert "already finished" in capsys.readouterr().out

    with pytest.raises(FileExistsError, match="already finished"):  # train_sft refuses, as before
        train.train_sft(preset, run)

    with train.stage_run(preset, run, "sft", retrain=True, deadline=time.time() - 1) as late:
        late.trainer.train(late.train_batches, late.eval_batches)  # out of time: no step
    assert not late.result.finished and not run.is_finished("sft")  # cleared, then stopped
    assert train.train_or_load(preset, run, "sft").finished  # resumes and completes
