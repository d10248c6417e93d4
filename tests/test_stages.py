"""train.stage_run: a notebook cell builds Tunix's object and trains it; the run directory's rules hold."""

import pathlib
import time

import jax
import numpy as np
import optax
import pytest
from tunix import PeftTrainer, TrainingConfig

from reasonkit import models, train
from reasonkit.testing import make_run, small_preset


def test_an_unknown_stage_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match="unknown training stage 'ppo'"):
        with train.stage_run(small_preset(), None, "ppo"):
            pass


NOTEBOOK = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "03_sft.py"


def _training_cell() -> str:
    """03_sft's training cell, as the notebook holds it: the one that builds a PeftTrainer."""
    cells = NOTEBOOK.read_text().split("\n# %%")
    return next(c.split("\n", 1)[1] for c in cells if "PeftTrainer(" in c and "stage_run(" in c)


def _run_cell(preset, run, *, retrain=False, deadline=None, edit=("", "")):
    """Run 03_sft's training cell on ``run``, with ``edit`` (old, new) made to its text first."""
    cell = _training_cell()
    assert edit[0] in cell, edit
    cell = cell.replace(*edit).replace("deadline=run.deadline()", "deadline=DEADLINE")
    space = dict(train=train, preset=preset, run=run, RETRAIN=retrain, DEADLINE=deadline, optax=optax,
                 PeftTrainer=PeftTrainer, TrainingConfig=TrainingConfig)
    exec(compile(cell, str(NOTEBOOK), "exec"), space)
    return space["r"]


def _adapters(policy):
    return [np.asarray(x) for x in jax.tree.leaves(models.lora_params(policy))]


@pytest.mark.slow
def test_the_notebook_cell_trains_then_loads_then_retrains(tmp_path, capsys):
    preset = small_preset(**{"sft.max_steps": 2, "sft.checkpoint_every": 1})
    run = make_run(tmp_path, "cell", preset)
    start = _adapters(models.load_policy(preset, None, None, None)[1])  # fresh adapters
    r = _run_cell(preset, run)
    assert r.trains and r.reference is None and len(r.eval_batches) == 2
    result = r.result
    assert result.finished and result.steps == 2 and run.is_finished("sft")
    assert result.policy is r.trainer.model  # the cell's own trainer trained
    assert any(not np.array_equal(a, b) for a, b in zip(start, _adapters(result.policy), strict=True))
    assert "sft: 2 steps in" in capsys.readouterr().out  # one line, not a dict
    assert len(train.read_metrics(run, "sft")) > 0

    with train.stage_run(preset, run, "sft") as again:  # re-running the notebook loads it
        assert not again.trains and again.policy is None
    assert again.result.finished and again.result.steps == 2 and again.result.policy is not None
    assert "already finished" in capsys.readouterr().out

    with pytest.raises(FileExistsError, match="already finished"):  # train_sft refuses, as before
        train.train_sft(preset, run)

    late = _run_cell(preset, run, retrain=True, deadline=time.time() - 1)  # out of time: no step
    assert not late.result.finished and not run.is_finished("sft")  # cleared, then stopped
    assert train.train_or_load(preset, run, "sft").finished  # resumes and completes


@pytest.mark.slow
def test_an_argument_edited_in_the_cell_changes_what_trains(tmp_path):
    """The object the cell builds is the one that trains: an optimizer of rate 0 leaves the
    adapters where they started."""
    preset = small_preset(**{"sft.max_steps": 2, "sft.checkpoint_every": 2})
    run = make_run(tmp_path, "edited", preset)
    r = _run_cell(preset, run, edit=("train.make_optimizer(cfg)", "optax.sgd(0.0)"))
    start = _adapters(models.load_policy(preset, None, None, None)[1])  # fresh adapters
    assert r.result.steps == 2
    assert all(np.array_equal(a, b) for a, b in zip(start, _adapters(r.result.policy), strict=True))


def test_a_block_that_builds_nothing_is_refused(tmp_path):
    preset = small_preset(**{"sft.max_steps": 2})
    run = make_run(tmp_path, "empty", preset)
    with pytest.raises(RuntimeError, match="the block trained nothing"):
        with train.stage_run(preset, run, "sft"):
            pass
