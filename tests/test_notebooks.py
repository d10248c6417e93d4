"""The committed notebooks: each .ipynb runs its .py twin's code, builds its Tunix objects in a
cell, ends with a check that fails a stage that did not learn; and scripts/refresh_notebooks.py.

Cheap (no notebook is executed): nbval runs them in scripts/test.sh.
"""

import doctest
import importlib.util
import pathlib
import re
import sys

import jupytext
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from reasonkit import notebook

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYS = sorted((ROOT / "notebooks").glob("[0-9]*.py"))


def _script():
    path = ROOT / "scripts" / "refresh_notebooks.py"
    spec = importlib.util.spec_from_file_location("refresh_notebooks", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # doctest finds a module's examples through sys.modules
    spec.loader.exec_module(module)
    return module


refresh = _script()


# --- the committed notebooks -------------------------------------------------------------


def test_every_notebook_has_its_twin():
    assert len(PYS) == 6, [p.name for p in PYS]
    for py in PYS:
        assert py.with_suffix(".ipynb").is_file(), f"{py.name} has no .ipynb: jupytext --sync {py}"


@pytest.mark.parametrize("py", PYS, ids=lambda p: p.stem)
def test_committed_notebook_runs_its_py(py):
    nb = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
    have, want = refresh.code_sources(nb), refresh.py_code_sources(py)
    i = refresh.first_difference(have, want)
    assert i is None, (f"{py.with_suffix('.ipynb').name} code cell {i + 1} differs from {py.name}: "
                       f"run `jupytext --sync notebooks/{py.name}` (and refresh its outputs: "
                       "scripts/refresh_notebooks.py)")


@pytest.mark.parametrize("py", PYS, ids=lambda p: p.stem)
def test_committed_outputs_are_clean(py):
    nb = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
    assert refresh.error_of(nb) is None
    assert "widgets" not in nb.metadata
    text = py.with_suffix(".ipynb").read_text()
    assert str(ROOT) not in text, "a local path in the outputs: refresh them with the script"
    for cell in nb.cells:
        assert "execution" not in cell.metadata, "execution timestamps are not committed"
        streams = [o.get("name") if o.get("output_type") == "stream" else None
                   for o in cell.get("outputs", [])]
        assert not any(a and a == b for a, b in zip(streams, streams[1:], strict=False)), \
            "one stream split over outputs (a progress bar's every update): refresh them"


def test_committed_notebooks_stay_small():
    total = sum(py.with_suffix(".ipynb").stat().st_size for py in PYS)
    assert total <= refresh.MAX_MB * 2**20, f"{total / 2**20:.1f} MB of notebooks"


# --- scripts/refresh_notebooks.py on small notebooks written here --------------------------

PY = """# %% [markdown]
# # A notebook

# %%
x = 1
print(x)

# %%
y = x + 1
"""
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.fixture
def repo(tmp_path):
    """A checkout with notebooks/01_a.py and its synced .ipynb, and a demo run that executed it."""
    root, run = tmp_path / "repo", tmp_path / "repo" / "runs" / "demo"
    (root / "notebooks").mkdir(parents=True)
    py = root / "notebooks" / "01_a.py"
    py.write_text(PY)
    jupytext.write(jupytext.read(py), py.with_suffix(".ipynb"))
    executed = jupytext.read(py)
    one, two = [c for c in executed.cells if c.cell_type == "code"]
    one.outputs = [new_output("stream", name="stderr", text="A  10%|#\rA 100%|##########\n"),
                   new_output("stream", name="stdout", text=f"1 in {root}/runs/demo\n"),
                   new_output("display_data", data={refresh.WIDGET_MIME: {"model_id": "m"},
                                                    "text/plain": "HBox()"})]
    one.metadata["execution"] = {"iopub.execute_input": "2025-01-01T00:00:00Z"}
    one.execution_count = 1
    two.outputs = [new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"}),
                   new_output("stream", name="stdout", text="".join(f"row {i}\n" for i in range(5000)))]
    two.execution_count = 2
    executed.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    (run / "notebooks").mkdir(parents=True)
    nbformat.write(executed, run / "notebooks" / "01_a.ipynb")
    for source, _ in refresh.IMAGES.values():
        (run / source).parent.mkdir(parents=True, exist_ok=True)
        (run / source).write_bytes(b"\x89PNG fake")
    return root, run, py


def _refresh(root, run, **kw):
    return refresh.refresh(run, notebooks=root / "notebooks", root=root, **kw)


def test_refresh_copies_outputs_and_cleans_them(repo):
    root, run, py = repo
    before = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
    sizes = _refresh(root, run)
    assert set(sizes) == {"notebooks/01_a.ipynb", *refresh.IMAGES}
    nb = nbformat.read(py.with_suffix(".ipynb"), as_version=4)
    assert [c.id for c in nb.cells] == [c.id for c in before.cells]  # jupytext's cells, ids kept
    one, two = [c for c in nb.cells if c.cell_type == "code"]
    assert [o.get("text") for o in one.outputs] == ["A 100%|##########\n", "1 in runs/demo\n"]
    assert refresh.local_paths(root, root.parent / "runs")[2] == (str(root.parent / "runs"), "runs")
    assert (str(run.parent), "runs") not in refresh.local_paths(root, run.parent)  # made relative
    assert one.execution_count == 1 and "execution" not in one.metadata
    assert two.outputs[0].data["image/png"] == PNG  # images stay
    assert "characters cut by scripts/refresh_notebooks.py" in two.outputs[1].text
    assert len(two.outputs[1].text) < refresh.MAX_STREAM_CHARS + 100
    assert "widgets" not in nb.metadata
    assert refresh.has_outputs(nb) and not refresh.has_outputs(before)
    assert (root / "docs/images/stages.png").read_bytes() == b"\x89PNG fake"
    assert refresh.code_sources(nb) == refresh.py_code_sources(py)


def test_refresh_refuses_a_stale_notebook_naming_the_cell(repo):
    root, run, py = repo
    py.write_text(PY.replace("y = x + 1", "y = x + 2"))
    jupytext.write(jupytext.read(py), py.with_suffix(".ipynb"))
    committed = py.with_suffix(".ipynb").read_text()
    with pytest.raises(refresh.RefreshError, match=r"01_a.ipynb is stale: its code cell 2 \(of 2\)"):
        _refresh(root, run)
    assert py.with_suffix(".ipynb").read_text() == committed  # nothing written
    assert not (root / "docs").exists()


def test_refresh_refuses_a_committed_notebook_out_of_sync(repo):
    root, run, py = repo
    py.write_text(PY + "\n# %%\nz = 3\n")  # edited, not synced
    with pytest.raises(refresh.RefreshError, match=r"\(committed\) is stale: its code cell 3"):
        _refresh(root, run)


def test_refresh_refuses_a_failed_run_and_a_missing_image(repo):
    root, run, _ = repo
    path = run / "notebooks" / "01_a.ipynb"
    nb = nbformat.read(path, as_version=4)
    good = nbformat.writes(nb)
    nb.cells[2].outputs.append(new_output("error", ename="AssertionError", evalue="too low",
                                          traceback=[]))
    nbformat.write(nb, path)
    with pytest.raises(refresh.RefreshError, match="code cell 2: AssertionError: too low"):
        _refresh(root, run)
    path.write_text(good)
    (run / "grpo" / "grpo_curves.png").unlink()
    with pytest.raises(refresh.RefreshError, match="grpo_curves.png is missing: notebooks/05_grpo"):
        _refresh(root, run)


def test_refresh_refuses_above_the_size_limit_and_check_writes_nothing(repo):
    root, run, py = repo
    with pytest.raises(refresh.RefreshError, match=r"more than the 0.001 MB limit; largest: 01_a.ipynb"):
        _refresh(root, run, max_mb=0.001)
    committed = py.with_suffix(".ipynb").read_text()
    sizes = _refresh(root, run, write=False)
    assert sizes["notebooks/01_a.ipynb"] > len(committed)
    assert py.with_suffix(".ipynb").read_text() == committed


def test_missing_run_says_how_to_make_it(tmp_path, repo):
    root, _, _ = repo
    with pytest.raises(refresh.RefreshError, match="run bash scripts/demo.sh"):
        _refresh(root, tmp_path / "nowhere")


def test_main_reports_sizes_and_refusals(repo, capsys, monkeypatch):
    root, run, _ = repo
    monkeypatch.setattr(refresh, "ROOT", root)
    assert refresh.main(["--run", str(run), "--check", "--max-mb", "0.001"]) == 1
    assert "nothing written" in capsys.readouterr().err
    assert refresh.main(["--run", str(run), "--check"]) == 0
    assert "would write" in capsys.readouterr().out
    assert not refresh.has_outputs(nbformat.read(root / "notebooks" / "01_a.ipynb", as_version=4))


def test_the_script_examples_hold():
    # scripts/ is not collected for doctests by scripts/test.sh: run them here
    result = doctest.testmod(refresh, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 4 and not result.failed


def test_markdown_cells_do_not_count():
    a = new_notebook(cells=[new_markdown_cell("one"), new_code_cell("x = 1\n")])
    b = new_notebook(cells=[new_code_cell("x = 1"), new_markdown_cell("two")])
    assert refresh.first_difference(refresh.code_sources(a), refresh.code_sources(b)) is None


# --- what the notebooks teach: Tunix's own constructors, and final checks that can fail ----

STAGE_NOTEBOOKS = {"sft": "03_sft", "dpo": "04_dpo", "grpo": "05_grpo"}
# Each stage notebook builds its Tunix objects in a cell of its own, with these constructors.
CONSTRUCTORS = {"03_sft": ["PeftTrainer(", "TrainingConfig(", ".with_gen_model_input_fn("],
                "04_dpo": ["DPOTrainer(", "DPOTrainingConfig("],
                "05_grpo": ["RLCluster(", "ClusterConfig(", "RLTrainingConfig(", "RolloutConfig(",
                            "GRPOLearner(", "GRPOConfig("],
                "06_evaluation": ["Sampler("]}
# The function of reasonkit.notebook each notebook's last code cell calls.
FINAL_CHECKS = {"03_sft": "notebook.check_sft(", "04_dpo": "notebook.check_dpo(",
                "05_grpo": "notebook.check_grpo(", "06_evaluation": "notebook.check_stages("}
PRIVATE = re.compile(r"\.(_[A-Za-z][A-Za-z0-9_]*)")  # `obj._name`; dunders like __name__ are public


def _code_cells(name: str) -> list[str]:
    nb = jupytext.read(ROOT / "notebooks" / f"{name}.py")
    return [c.source for c in nb.cells if c.cell_type == "code"]


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_each_stage_notebook_builds_its_tunix_objects_in_a_cell(name):
    code = "\n".join(_code_cells(name))
    assert all(c in code for c in CONSTRUCTORS[name]), [c for c in CONSTRUCTORS[name] if c not in code]


# Each stage notebook builds the stage's Tunix object in train.stage_run's block and trains that
# very object: what it constructs, then what it calls.
TUNIX_CALLS = {"03_sft": ("trainer = PeftTrainer(", "trainer.train(r.batches(trainer), r.eval_batches)"),
               "04_dpo": ("trainer = DPOTrainer(", "trainer.train(r.batches(trainer))"),
               "05_grpo": ("learner = GRPOLearner(", "learner.train(r.batches(learner))")}


@pytest.mark.parametrize("name", sorted(TUNIX_CALLS))
def test_each_stage_notebook_builds_and_trains_the_tunix_object_in_one_cell(name):
    stage = {v: k for k, v in STAGE_NOTEBOOKS.items()}[name]
    built, called = TUNIX_CALLS[name]
    cells = [c for c in _code_cells(name) if called in c]
    assert len(cells) == 1, f"{name}: no cell calls {called}"
    assert built in cells[0] and cells[0].index(built) < cells[0].index(called), cells[0]
    assert f'train.stage_run(preset, run, "{stage}", retrain=RETRAIN' in cells[0], cells[0]
    code = "\n".join(_code_cells(name))
    assert f'train.train_or_load(preset, run, "{stage}"' not in code
    assert "del trainer" not in code and "del learner" not in code and '"abstract"' not in code


@pytest.mark.parametrize("py", PYS, ids=lambda p: p.stem)
def test_no_notebook_cell_reads_a_private_attribute(py):
    found = [m.group(0) for cell in _code_cells(py.stem) for m in PRIVATE.finditer(cell)]
    assert found == [], f"{py.name} reads private attributes: {found}"


@pytest.mark.parametrize("name", sorted(FINAL_CHECKS))
def test_each_notebook_ends_with_its_package_check(name):
    assert FINAL_CHECKS[name] in _code_cells(name)[-1], f"{name}'s last cell: {_code_cells(name)[-1]}"


def _not_learned_and_learned():
    """``{stage: (what a stage left that did not learn, what one that learned left)}``.

    Not learned: a stage trained at a learning rate of 1e-12, whose adapters stay at
    their start: the held-out loss and the completions unchanged, a DPO margin and a GRPO
    KL of 0 up to rounding. Learned: the shapes of the tiny preset's committed run.
    """
    steps = list(range(40))
    no, yes = {"format_ok": False}, {"format_ok": True}
    kl_moved = [0.0001 * s for s in steps]
    correct = [1.0 + 0.05 * (s % 3 - 1) for s in steps]  # flat within its noise
    rows = lambda texts: [{"id": i, "completion": t, "correct": t.endswith(("16", "pen"))}  # noqa: E731
                          for i, t in enumerate(texts)]
    texts = {"base": ["16", "pen"], "sft": ["<answer>15", "<answer>pen"],
             "dpo": ["<answer>16", "<answer>pen"], "grpo": ["<answer>16", "<answer>pen."]}
    rates = {"base": 0.0, "sft": 0.97, "dpo": 0.98, "grpo": 0.99}
    results = lambda texts, rates: {  # noqa: E731
        s: {"rows": rows(texts[s]), "summary": {"overall": {"format_rate": rates[s]}}} for s in texts}
    return {
        "sft": (([no] * 3, [no] * 3, {"eval/loss": ([0, 40], [4.06, 4.06])}),
                ([no] * 3, [yes] * 3, {"eval/loss": ([0, 40], [4.06, 0.13])})),
        "dpo": (({"train/rewards/margin": (steps, [1e-9] * 40),
                  "train/rewards/accuracy": (steps, [0.5] * 40)},),
                ({"train/rewards/margin": (steps, [0.004 * s for s in steps]),
                  "train/rewards/accuracy": (steps, [0.5] * 20 + [0.8] * 20)},)),
        "grpo": (({"actor/train/kl": (steps, [1e-12] * 40), "rewards/train/answer_correct": (steps, correct),
                   "held_out/accuracy": ([0, 20, 39], [0.35, 0.35, 0.35])}, 32),
                 ({"actor/train/kl": (steps, kl_moved), "rewards/train/answer_correct": (steps, correct),
                   "held_out/accuracy": ([0, 20, 39], [0.35, 0.37, 0.36])}, 32)),
        "stages": ((results(texts | {"dpo": texts["sft"]}, rates), list(texts)),  # DPO left SFT as it was
                   (results(texts, rates), list(texts))),
    }


@pytest.mark.parametrize("stage", ["sft", "dpo", "grpo", "stages"])
def test_each_final_check_fails_a_stage_that_did_not_learn(stage):
    not_learned, learned = _not_learned_and_learned()[stage]
    check = getattr(notebook, f"check_{stage}")
    if stage == "grpo":  # its held-out block's size: grpo.eval_prompts
        check = lambda metrics, n: notebook.check_grpo(metrics, held_out_prompts=n)  # noqa: E731
    with pytest.raises(notebook.StageDidNotLearn):
        check(*not_learned)
    assert check(*learned).startswith("checked:")


def _worse_and_not_worse():
    """``{stage: (what a stage that made held-out answers worse left, what one that did not left)}``.

    Worse: 5 of the 40 prompts right before the stage turn wrong and none turns right (-12.5
    points, beyond two paired standard errors, 10.6), though the stage learned by its own
    metrics: a DPO margin that rises, a GRPO that moved and was paid for right answers.
    Not worse: 2 turn wrong and 2 turn right. The held-out pair is per-prompt correctness.
    """
    learned = {s: args for s, (_, args) in _not_learned_and_learned().items()}
    before = [True] * 15 + [False] * 25
    worse = [True] * 10 + [False] * 30
    shuffled = [False] * 2 + [True] * 13 + [True] * 2 + [False] * 23
    rows = lambda right, tag: [{"id": i, "completion": f"{tag}{i}", "correct": c}  # noqa: E731
                               for i, c in enumerate(right)]
    stages = lambda last: {"base": {"rows": rows([False] * 40, "b"),  # noqa: E731
                                    "summary": {"overall": {"format_rate": 0.0}}},
                           "sft": {"rows": rows(before, "s"), "summary": {"overall": {"format_rate": 1.0}}},
                           "grpo": {"rows": rows(last, "g"), "summary": {"overall": {"format_rate": 1.0}}}}
    return {
        "dpo": ((*learned["dpo"], (before, worse)), (*learned["dpo"], (before, shuffled))),
        "grpo": ((*learned["grpo"], (before, worse)), (*learned["grpo"], (before, shuffled))),
        "stages": ((stages(worse), ["base", "sft", "grpo"]), (stages(shuffled), ["base", "sft", "grpo"])),
    }


@pytest.mark.parametrize("stage", ["dpo", "grpo", "stages"])
def test_each_final_check_fails_a_stage_that_made_things_worse(stage):
    """04 and 05 with the held-out pair, 06 with the stage table's rows: a fall beyond two
    paired standard errors fails; a reshuffle of which prompts are right passes."""
    worse, not_worse = _worse_and_not_worse()[stage]
    check = {"dpo": lambda metrics, pair: notebook.check_dpo(metrics, held_out=pair),
             "grpo": lambda metrics, n, pair: notebook.check_grpo(metrics, held_out_prompts=n, held_out=pair),
             "stages": notebook.check_stages}[stage]
    with pytest.raises(notebook.StageDidNotLearn, match="-12.5 points, more than 2 paired standard errors"):
        check(*worse)
    assert "(paired: +0.0 ± " in check(*not_worse)


def test_a_format_only_grpo_fails_its_check():
    steps = list(range(40))
    with pytest.raises(notebook.StageDidNotLearn, match="answer_correct"):
        notebook.check_grpo({"actor/train/kl": (steps, [0.0001 * s for s in steps]),
                           "rewards/train/format_exact": (steps, [2.9] * 40)})
