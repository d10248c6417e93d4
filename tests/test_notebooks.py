"""The committed notebooks: each .ipynb runs its .py twin's code, and scripts/refresh_notebooks.py.

Cheap (no notebook is executed): nbval runs them in scripts/test.sh.
"""

import doctest
import importlib.util
import pathlib
import sys

import jupytext
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

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
