"""reasonkit_bootstrap: each way of finding reasonkit, the tested stack, and its pins.

No test installs anything into this environment: pip is replaced at its one seam
(``setup(pip=...)``) and its arguments are checked, what is installed is read through
``setup(look=...)``, and the real pip only resolves (``--dry-run``) or prints its version.
"""

import doctest
import inspect
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

import reasonkit_bootstrap as boot

ROOT = pathlib.Path(__file__).resolve().parents[1]
PINS = boot.requirements(tpu=False)


def test_doctests():
    assert doctest.testmod(boot, optionflags=doctest.ELLIPSIS).failed == 0


def test_the_project_is_named_by_the_bootstraps_file():
    assert boot.PROJECT == "reasonkit" and pathlib.Path(boot.__file__).name == "reasonkit_bootstrap.py"


def pinned(path: pathlib.Path) -> dict[str, str]:
    """``{name: version}`` of the ``==`` lines of a requirements file (not its ``-r`` includes)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            name, spec = boot.parse_requirement(line)
            if spec.startswith("=="):
                out[name] = spec[2:]
    return out


def test_the_pins_agree_with_the_requirements_files():
    cpu, tpu = pinned(ROOT / "requirements.txt"), pinned(ROOT / "requirements-tpu.txt")
    assert {name: cpu.get(name) for name in boot.TESTED} == boot.TESTED, "pin these in requirements.txt"
    assert set(boot.TESTED) <= set(boot.MODULES)  # each one's module, for "imported before the install"
    assert tpu == {"jax": boot.TESTED["jax"], **boot.TPU}
    assert "-r requirements.txt" in (ROOT / "requirements-tpu.txt").read_text()
    # jax[tpu] asks for the libtpu we pin
    import importlib.metadata

    wants = [r for r in importlib.metadata.requires("jax") if r.startswith("libtpu")]
    assert wants and wants[0].split(";")[0].strip() == "libtpu==0.0.42.*"
    assert boot.TPU["libtpu"].startswith("0.0.42.")


# --- where reasonkit is ------------------------------------------------------------------


def make_checkout(folder: pathlib.Path) -> pathlib.Path:
    """A stand-in of this repository: pyproject.toml, the package, the bootstrap, notebooks/."""
    (folder / "reasonkit").mkdir(parents=True)
    (folder / "notebooks").mkdir()
    shutil.copy(ROOT / "pyproject.toml", folder)
    (folder / "reasonkit" / "__init__.py").write_text('__version__ = "0.1.0"\n')
    shutil.copy(ROOT / "reasonkit_bootstrap.py", folder)
    return folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """reasonkit's wheel, built by ``pip wheel . --no-deps`` from a copy of the repository."""
    src = tmp_path_factory.mktemp("src") / "reasonkit"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "reasonkit_bootstrap.py"):
        shutil.copy(ROOT / name, src)
    shutil.copytree(ROOT / "reasonkit", src / "reasonkit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(out)],
                   cwd=src, check=True, capture_output=True)
    (found,) = out.glob("reasonkit-*.whl")
    return found


def nothing_importable():
    return None


def test_installed_comes_first(tmp_path):
    make_checkout(tmp_path / "repo")
    got = boot.locate(cwd=tmp_path / "repo" / "notebooks", kaggle_input=tmp_path,
                      importable=lambda: "/site-packages/reasonkit")
    assert got == boot.Source("installed", "/site-packages/reasonkit")


def test_a_checkout_is_the_notebooks_parent_folder(tmp_path):
    repo = make_checkout(tmp_path / "repo")
    got = boot.locate(cwd=repo / "notebooks", kaggle_input=tmp_path / "none", env={},
                      importable=nothing_importable)
    assert got == boot.Source("checkout", str(repo))


def test_a_checkout_importable_is_that_checkout(tmp_path):
    """A kernel started in the repository's top folder, an editable install, or an attached
    checkout the first cell put on sys.path: reasonkit imports from a checkout, which
    then goes on PYTHONPATH too (``!python -m reasonkit`` imports the same code)."""
    repo = make_checkout(tmp_path / "repo")
    got = boot.locate(cwd=repo, kaggle_input=tmp_path / "none", env={},
                      importable=lambda: str(repo / "reasonkit"))
    assert got == boot.Source("checkout", str(repo))


# Kaggle's layouts of an attached input under /kaggle/input: older sessions' <slug>/, 2026's
# datasets/<owner>/<slug>/ (a dataset) and notebooks/<owner>/<slug>/ (a notebook's output),
# each with a zip's extra folder.
LAYOUTS = ["reasonkit-src", "reasonkit-src/reasonkit-main", "datasets/me/reasonkit-src",
           "datasets/me/reasonkit-src/reasonkit-main", "notebooks/me/series",
           "notebooks/me/series/reasonkit-main"]


@pytest.mark.parametrize("where", LAYOUTS)
def test_a_checkout_as_a_kaggle_input_in_either_layout(tmp_path, where):
    """A dataset made of the repository, as uploaded or as GitHub's zip, in either layout."""
    repo = make_checkout(tmp_path / "input" / where)
    (tmp_path / "input" / "gemma-weights").mkdir()  # other inputs are ignored
    (tmp_path / "input" / "datasets" / "google" / "gsm8k").mkdir(parents=True)
    got = boot.locate(cwd=tmp_path / "kaggle" / "working", kaggle_input=tmp_path / "input",
                      env={"REASONKIT_PIP": "ignored: a checkout comes first"},
                      importable=nothing_importable)
    assert got == boot.Source("checkout", str(repo))
    # $REASONKIT_KAGGLE_INPUT moves the root: how a simulation (or this test) stands in for /kaggle
    got = boot.locate(cwd=tmp_path, env={"REASONKIT_KAGGLE_INPUT": str(tmp_path / "input")},
                      importable=nothing_importable)
    assert got == boot.Source("checkout", str(repo))


def test_a_clone_beside_the_notebook_is_a_checkout(tmp_path):
    """Colab: the kernel runs in /content, where the first cell cloned the repository."""
    repo = make_checkout(tmp_path / "content" / "reasonkit")
    got = boot.locate(cwd=tmp_path / "content", kaggle_input=tmp_path / "none", env={},
                      importable=nothing_importable)
    assert got == boot.Source("checkout", str(repo))


def test_the_input_search_is_bounded_in_depth(tmp_path, monkeypatch):
    """Deeper than a layout names, nothing is looked at: a dataset of a million files is a few
    directory listings, never a walk."""
    make_checkout(tmp_path / "input" / "big" / "a" / "b")  # below <slug>/<zip>/
    make_checkout(tmp_path / "input" / "datasets" / "me" / "x" / "zip" / "deeper")
    listed = []
    real_glob = pathlib.Path.glob

    def glob(self, pattern, **kw):
        listed.append(pattern)
        return real_glob(self, pattern, **kw)

    monkeypatch.setattr(pathlib.Path, "glob", glob)
    folders = boot.input_folders(tmp_path / "input")
    assert listed == list(boot.INPUT_LAYOUTS) and not any("**" in p for p in listed)
    assert max(len(f.relative_to(tmp_path / "input").parts) for f in folders) == 4
    with pytest.raises(boot.SetupError) as e:
        boot.locate(cwd=tmp_path / "nb", kaggle_input=tmp_path / "input", env={},
                    importable=nothing_importable)
    assert boot.looked_in(tmp_path / "input") in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["reasonkit-wheels", "datasets/me/reasonkit-wheels"])
def test_a_wheel_in_a_kaggle_input(tmp_path, wheel, where):
    folder = tmp_path / "input" / where
    folder.mkdir(parents=True)
    shutil.copy(wheel, folder)
    shutil.copy(wheel, folder / "reasonkit-0.0.9-py3-none-any.whl")  # an older one beside it
    got = boot.locate(cwd=tmp_path, kaggle_input=tmp_path / "input", env={"REASONKIT_PIP": "x"},
                      importable=nothing_importable)
    assert got == boot.Source("wheel", str(folder / wheel.name), wheels=str(folder))


def test_reasonkit_pip_comes_last(tmp_path):
    got = boot.locate(cwd=tmp_path, kaggle_input=tmp_path / "none",
                      env={"REASONKIT_PIP": "git+https://example.org/me/reasonkit"},
                      importable=nothing_importable)
    assert got == boot.Source("pip", "git+https://example.org/me/reasonkit")


def test_nothing_at_all_names_the_ways(tmp_path):
    with pytest.raises(boot.SetupError) as e:
        boot.locate(cwd=tmp_path / "nb", kaggle_input=tmp_path / "none", env={},
                    importable=nothing_importable)
    msg = str(e.value)
    for way in ("a checkout", "REASONKIT_REPO", "Add Input", "scripts/kaggle_dataset.py", "REASONKIT_PIP",
                "pip install", "docs/kaggle.md"):
        assert way in msg, way
    # the places it looked in, every one named
    places = (tmp_path, tmp_path / "nb", tmp_path / "nb" / "reasonkit", boot.looked_in(tmp_path / "none"))
    for place in places:
        assert str(place) in msg, place
    assert "github.com" not in msg  # no URL the project does not own


# --- setup: the tested stack ---------------------------------------------------------------


class FakeEnv:
    """What is installed (``look``) and a pip that records its arguments and installs ``then``."""

    def __init__(self, have: dict, then: dict | list[dict] | None = None, code: int = 0):
        self.have, self.code, self.calls = dict(have), code, []
        self.then = [then] if isinstance(then, dict) else list(then or [])

    def look(self, name):
        return self.have.get(boot.normalise(name), (None, None))

    def pip(self, args):
        self.calls.append(list(args))
        print("Collecting jax==0.10.2")
        if self.then:  # what this call installs
            self.have.update(self.then.pop(0))
        return self.code


TESTED = {name: (v, None) for name, v in boot.TESTED.items()}
DEPS = {n: ("1.0", None) for n in ("sentencepiece", "matplotlib", "tqdm")}


def run_setup(fake, tmp_path, source, **kw):
    importable = {"installed": lambda: "/site/reasonkit"}.get(source, nothing_importable)
    kw.setdefault("kaggle_input", tmp_path / "none")
    kw.setdefault("env", {})
    return boot.setup(cwd=kw.pop("cwd", tmp_path), tpu=kw.pop("tpu", False), pip=fake.pip,
                      look=fake.look, importable=importable, modules=kw.pop("modules", {}), **kw)


def test_the_tested_stack_installs_nothing(tmp_path, capsys):
    fake = FakeEnv({**TESTED, **DEPS, "google-tunix": ("0.1.7", None)})
    assert run_setup(fake, tmp_path, "installed").kind == "installed"
    assert fake.calls == []
    assert "tested stack: jax 0.10.2, jaxlib 0.10.2, flax 0.12.8" in capsys.readouterr().out


def test_an_image_with_other_versions_gets_the_tested_ones(tmp_path, capsys):
    """As a Python 3.12 image with jax 0.12.0.1 and flax 0.12.12: pins from the index."""
    fake = FakeEnv({**TESTED, **DEPS, "jax": ("0.12.0.1", None), "flax": ("0.12.12", None)},
                   then=TESTED)
    run_setup(fake, tmp_path, "installed")
    assert fake.calls == [["install", *PINS]]
    out = capsys.readouterr().out
    assert "not the tested stack: jax 0.12.0.1 (tested: 0.10.2); flax 0.12.12 (tested: 0.12.8)" in out
    assert "Collecting jax==0.10.2" in out  # pip's output reaches the notebook


def test_a_tpu_vm_gets_jax_tpu_and_libtpu(tmp_path):
    fake = FakeEnv({**TESTED, **DEPS}, then={"libtpu": ("0.0.42.1", None)})
    run_setup(fake, tmp_path, "installed", tpu=True)
    assert fake.calls == [["install", "jax[tpu]==0.10.2", *PINS[1:], "libtpu==0.0.42.1"]]


def test_a_release_built_from_git_is_replaced(tmp_path):
    """Some images ship tunix and qwix from their git heads under a release's version."""
    fake = FakeEnv({**TESTED, **DEPS, "google-tunix": ("0.1.7", "git+https://example.org/tunix")},
                   then=[{}, TESTED])  # pip calls the first satisfied; --force-reinstall replaces it
    run_setup(fake, tmp_path, "installed")
    assert fake.calls == [["install", *PINS],
                          ["install", "--force-reinstall", "--no-deps", "google-tunix==0.1.7"]]


def test_still_different_after_the_install_stops_naming_it(tmp_path):
    fake = FakeEnv({**TESTED, **DEPS, "qwix": ("0.2.0", None)})  # pip "succeeds", changes nothing
    with pytest.raises(boot.SetupError, match=r"still not the tested one: qwix 0\.2\.0 \(tested: 0\.1\.8\)"):
        run_setup(fake, tmp_path, "installed")


def test_pip_failing_stops_with_the_ways(tmp_path):
    fake = FakeEnv({**TESTED, **DEPS, "jax": ("0.12.0.1", None)}, code=1)
    with pytest.raises(boot.SetupError, match="pip could not install.*wheels dataset"):
        run_setup(fake, tmp_path, "installed")


@pytest.mark.parametrize("in_memory", ["0.12.0.1", None])
def test_jax_imported_before_the_install_says_restart(tmp_path, in_memory):
    class Jax:
        pass

    old = Jax()
    if in_memory:
        old.__version__ = in_memory
    fake = FakeEnv({**TESTED, **DEPS, "jax": ("0.12.0.1", None)}, then=TESTED)
    with pytest.raises(boot.SetupError, match=r"jax 0\.12\.0\.1 was imported before this cell.*restart the "
                                              r"runtime \(Kaggle: Run > Restart"):
        run_setup(fake, tmp_path, "installed", modules={"jax": old})
    assert fake.calls == [["install", *PINS]]


def test_jax_imported_at_the_tested_version_is_fine(tmp_path):
    class Jax:
        __version__ = "0.10.2"

    fake = FakeEnv({**TESTED, **DEPS})
    run_setup(fake, tmp_path, "installed", modules={"jax": Jax()})
    assert fake.calls == []


def test_a_checkout_goes_on_the_path_and_gets_its_missing_dependencies(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    repo = make_checkout(tmp_path / "repo")
    fake = FakeEnv({**TESTED, "tqdm": ("4.0", None)})
    got = run_setup(fake, tmp_path, "checkout", cwd=repo / "notebooks")
    assert got.kind == "checkout" and sys.path[0] == str(repo)
    deps = boot.dependencies(got)  # pyproject.toml's
    assert {"sentencepiece", "matplotlib", "tqdm"} <= {boot.parse_requirement(d)[0] for d in deps}
    absent = [d for d in deps if boot.parse_requirement(d)[0] not in fake.have]
    assert fake.calls == [["install", *absent, *PINS]] and "sentencepiece" in absent


def test_a_checkout_on_pythonpath_for_subprocesses(tmp_path, monkeypatch):
    """``!python -m reasonkit run`` in a later cell must import the same checkout."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    repo = make_checkout(tmp_path / "repo")
    boot.setup(cwd=repo / "notebooks", kaggle_input=tmp_path / "none", tpu=False,
               pip=FakeEnv({}).pip, look=FakeEnv({**TESTED, **DEPS}).look,
               importable=nothing_importable, modules={})
    assert os.environ["PYTHONPATH"] == os.pathsep.join([str(repo), "/elsewhere"])


def test_a_wheel_installs_offline_from_its_folder(tmp_path, wheel):
    folder = tmp_path / "input" / "wheels"
    folder.mkdir(parents=True)
    shutil.copy(wheel, folder)
    fake = FakeEnv({**TESTED, **DEPS})
    run_setup(fake, tmp_path, "wheel", kaggle_input=tmp_path / "input")
    assert fake.calls == [["install", "--no-index", "--find-links", str(folder), "reasonkit==0.1.0", *PINS]]
    # those arguments find the wheel, offline (dry run, no dependencies: nothing is installed)
    report = subprocess.run(
        [sys.executable, "-m", "pip", *fake.calls[0][:-len(PINS)], "--dry-run", "--no-deps",
         "--ignore-installed", "--quiet", "--report", "-"],
        capture_output=True, text=True, check=True).stdout
    (item,) = json.loads(report)["install"]
    assert item["metadata"]["name"] == "reasonkit" and item["download_info"]["url"].endswith(wheel.name)
    with zipfile.ZipFile(wheel) as z:  # the bootstrap ships in the wheel, with the tiny model
        names = z.namelist()
    assert "reasonkit_bootstrap.py" in names and any(n.startswith("reasonkit/assets/tiny/") for n in names)


def test_an_image_that_is_wrong_with_a_wheels_dataset_attached_installs_offline(tmp_path, wheel):
    folder = tmp_path / "input" / "wheels"
    folder.mkdir(parents=True)
    shutil.copy(wheel, folder)
    fake = FakeEnv({**TESTED, **DEPS, "optax": ("0.2.9", None)}, then=TESTED)
    run_setup(fake, tmp_path, "installed", kaggle_input=tmp_path / "input")
    assert fake.calls == [["install", "--no-index", "--find-links", str(folder), *PINS]]


def test_reasonkit_pip_a_url_as_given_a_folder_copied_out_first(tmp_path):
    fake = FakeEnv({**TESTED, **DEPS})
    run_setup(fake, tmp_path, "pip", env={"REASONKIT_PIP": "git+https://example.org/me/reasonkit"})
    assert fake.calls == [["install", "git+https://example.org/me/reasonkit", *PINS]]
    readonly = make_checkout(tmp_path / "mounted" / "src")  # not where the notebook looks
    (readonly / ".git").mkdir()
    fake = FakeEnv({**TESTED, **DEPS})
    run_setup(fake, tmp_path, "pip", env={"REASONKIT_PIP": str(readonly)})
    copy = fake.calls[0][1]
    assert copy != str(readonly) and (pathlib.Path(copy) / "pyproject.toml").is_file()
    assert not (pathlib.Path(copy) / ".git").exists()


def test_run_pip_shows_pips_output_as_it_comes(capsys):
    assert boot.run_pip(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"$ {sys.executable} -m pip --version\n") and "pip " in out


@pytest.mark.parametrize("dev, env, tpu", [([], {}, False), (["accel0"], {}, True),
                                           (["vfio/0"], {}, True), ([], {"TPU_NAME": "v"}, True)])
def test_tpu_vm_detection(tmp_path, dev, env, tpu):
    for d in dev:
        (tmp_path / "dev" / d).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "dev" / d).write_text("")
    assert boot.on_tpu_vm(env, root=str(tmp_path)) == tpu


# --- the setup cell ------------------------------------------------------------------------


def setup_cell(notebook: pathlib.Path) -> str:
    """The first code cell of a notebook's percent-format twin."""
    cells = re.split(r"^# %%.*$", notebook.read_text(), flags=re.M)
    return next(c for c in cells[1:] if not c.lstrip().startswith("# ---") and
                not all(line.startswith("#") for line in c.strip().splitlines()))


def test_every_notebook_opens_with_the_same_setup_cell():
    cells = {nb.name: setup_cell(nb) for nb in sorted((ROOT / "notebooks").glob("0*.py"))}
    assert len(cells) == 6 and len(set(cells.values())) == 1, cells.keys()
    cell = next(iter(cells.values()))
    assert "= reasonkit_bootstrap.setup()" in cell and "github.com" not in cell
    assert len(cell.strip().splitlines()) <= 25
    # it looks where the bootstrap looks: the same layouts, spelled out (it runs before the import)
    layouts = re.search(r'for p in \(\s*((?:"[^"]*",?\s*)+)\)', cell).group(1)
    assert tuple(re.findall(r'"([^"]*)"', layouts)) == boot.INPUT_LAYOUTS
    assert boot.KAGGLE_INPUT_ENV in cell and boot.REPO_ENV in cell


# What the notebooks' next cell does once the setup cell made reasonkit importable: start the
# session (the bootstrap imports nothing of reasonkit, so the setup cell starts nothing).
START_SESSION = "from reasonkit.runtime import start_session\nstart_session()\n"


def run_cell(tmp_path, cwd, env, *, until_import=True, site=False, then=""):
    """The setup cell as a script in ``cwd`` (up to its import of the bootstrap, which it then
    prints), with ``env`` and without site-packages (``-S``: nothing installed to find);
    ``then``: code run after the whole cell."""
    cell = setup_cell(ROOT / "notebooks" / "01_hardware_check.py")
    if until_import:
        cell = cell.split("source = ")[0] + "print(reasonkit_bootstrap.__file__)\n"
    cell += then
    (tmp_path / "cell.py").write_text(cell)
    base = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "REASONKIT_PIP", "REASONKIT_REPO", boot.KAGGLE_INPUT_ENV)}
    return subprocess.run([sys.executable, *([] if site else ["-S"]), str(tmp_path / "cell.py")],
                          cwd=cwd, env={**base, **env}, capture_output=True, text=True)


@pytest.mark.parametrize("where", LAYOUTS)
def test_the_setup_cell_finds_the_bootstrap_in_either_kaggle_layout(tmp_path, where):
    """From /kaggle/working, the checkout attached as an input in either layout, zipped or not."""
    repo = make_checkout(tmp_path / "kaggle" / "input" / where)
    working = tmp_path / "kaggle" / "working"
    working.mkdir()
    out = run_cell(tmp_path, working, {boot.KAGGLE_INPUT_ENV: str(tmp_path / "kaggle" / "input")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(repo / "reasonkit_bootstrap.py")


def test_the_setup_cell_clones_reasonkit_repo_beside_the_notebook(tmp_path):
    """Colab: the kernel starts in /content with nothing there; $REASONKIT_REPO is cloned into
    ./reasonkit, and the next run of the cell finds the clone instead of cloning again."""
    origin = make_checkout(tmp_path / "origin")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main"]
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"]):
        subprocess.run([*git, *cmd], cwd=origin, check=True, capture_output=True)
    content = tmp_path / "content"
    content.mkdir()
    env = {"REASONKIT_REPO": origin.as_uri(), boot.KAGGLE_INPUT_ENV: str(tmp_path / "none")}
    out = run_cell(tmp_path, content, env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("reasonkit/reasonkit_bootstrap.py")
    assert (content / "reasonkit" / "pyproject.toml").is_file()
    again = run_cell(tmp_path, content, {**env, "REASONKIT_REPO": "file:///nowhere"})
    assert again.returncode == 0 and again.stdout == out.stdout, again.stderr


@pytest.mark.slow
def test_the_setup_cell_runs_here(tmp_path):
    """In notebooks/ of this checkout: nothing to install; then, as the next cell does, a session."""
    env = {"REASONKIT_RUNS": str(tmp_path / "runs"), "PYTHONPATH": str(ROOT),
           boot.KAGGLE_INPUT_ENV: str(tmp_path / "none")}
    out = run_cell(tmp_path, ROOT / "notebooks", env, until_import=False, site=True, then=START_SESSION)
    assert out.returncode == 0, out.stderr
    assert f"reasonkit: checkout ({ROOT})" in out.stdout and "tested stack: jax 0.10.2" in out.stdout
    assert f"runs in {tmp_path / 'runs'}" in out.stdout and "$ " not in out.stdout  # no pip


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["old", "new"])
def test_kaggle_from_working_imports_the_attached_checkout_and_restores_the_earlier_run(tmp_path, layout):
    """The Kaggle simulation: this repository attached as a dataset, an earlier version's output
    (a run whose data stage finished) attached as a notebook output, 01's setup cell run from
    /kaggle/working. reasonkit comes from the dataset, and the run is restored, saying so."""
    inputs = tmp_path / "kaggle" / "input"
    dataset, output = (("reasonkit-src", "series-output") if layout == "old" else
                       ("datasets/me/reasonkit-src", "notebooks/me/series"))
    repo = inputs / dataset
    shutil.copytree(ROOT, repo, ignore=shutil.ignore_patterns(
        ".git", ".venv", "runs", "build", ".cache", "__pycache__", "*.egg-info", "notebooks", "benchmarks"))
    earlier = inputs / output / "runs" / "demo"
    for stage in ("data", "sft", "dpo", "grpo", "eval"):
        (earlier / stage).mkdir(parents=True)
    (earlier / "data" / "finished.json").write_text("{}")
    (earlier / "data" / "sft.jsonl").write_text("{}\n")
    working = tmp_path / "kaggle" / "working"
    working.mkdir()
    env = {boot.KAGGLE_INPUT_ENV: str(inputs), "REASONKIT_RUNS": str(working / "runs"),
           "REASONKIT_DEADLINE_HOURS": "1", "JAX_PLATFORMS": "cpu"}
    out = run_cell(tmp_path, working, env, until_import=False, site=True, then=START_SESSION)
    assert out.returncode == 0, out.stderr
    assert f"reasonkit: checkout ({repo})" in out.stdout, out.stdout
    assert f"restored run 'demo' from {earlier}: it holds data finished; copied data" in out.stdout
    assert (working / "runs" / "demo" / "data" / "finished.json").is_file()


def test_setup_imports_nothing_of_reasonkit_and_starts_no_session(tmp_path):
    """The bootstrap is a standard-library leaf: after setup() (here with the tested stack
    installed, as this environment has it) no module of reasonkit is loaded, and nothing was
    written; the session is the next cell's (tests/test_layout.py reads the source too)."""
    code = (
        "import sys, reasonkit_bootstrap as boot\n"
        "source = boot.setup(cwd=sys.argv[1], kaggle_input=sys.argv[2], env={}, tpu=False, modules={},\n"
        "                    look=lambda name: (boot.TESTED.get(name, '1.0'), None), pip=None)\n"
        "print(source.kind, sorted(m for m in sys.modules if m.split('.')[0] == boot.PROJECT))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REASONKIT_RUNS": str(tmp_path / "runs")}
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "notebooks"), str(tmp_path / "none")],
                         cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "checkout []", out.stdout
    assert "runs in" not in out.stdout and not (tmp_path / "runs").exists()
    assert "session" not in inspect.signature(boot.setup).parameters


def test_the_setup_cell_with_nothing_to_find_names_the_places_and_the_ways(tmp_path):
    """No checkout, no Kaggle input, no REASONKIT_REPO or REASONKIT_PIP, nothing installed."""
    out = run_cell(tmp_path, tmp_path, {boot.KAGGLE_INPUT_ENV: str(tmp_path / "none")})
    assert out.returncode != 0 and "FileNotFoundError: reasonkit_bootstrap.py is in none of" in out.stderr
    for text in ("'..'", "'reasonkit'", f"{tmp_path / 'none'}/datasets/*/*", "REASONKIT_REPO",
                 "REASONKIT_PIP", "Kaggle", "docs/kaggle.md"):
        assert text in out.stderr, text


# --- the pins resolve on Python 3.11 and 3.12 ------------------------------------------------

# boot.SDIST_ONLY: pins that ship only as a source distribution. pip resolves for another
# Python or platform from wheels alone (--only-binary=:all:), so each is stood in for by a
# wheel that holds only its metadata: the same name, version and dependencies.
# 3.11.5: soupsieve 4.1.2 needs it; Kaggle's TPU image is 3.12; Colab's TPU runtime 3.13 (Aug 2026)
PYTHONS = ("3.11.5", "3.12", "3.13")


def stub_wheel(folder: pathlib.Path, name: str, version: str, requires: list[str]) -> None:
    dist = f"{name}-{version}.dist-info"
    files = {f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
             + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
             "Tag: py3-none-any\n"}
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{dist}/RECORD", "".join(f"{p},,\n" for p in [*files, f"{dist}/RECORD"]))


@pytest.mark.slow
def test_the_pinned_tpu_stack_resolves_on_python_3_11_to_3_13(tmp_path):
    """pip resolves requirements-tpu.txt (requirements.txt + jax[tpu] + libtpu) for each Python
    from the package index, wheels only, and picks exactly the pinned versions. A dry run:
    nothing is downloaded but metadata, nothing installed (about a minute, all at once)."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name, (version, requires) in boot.SDIST_ONLY.items():
        stub_wheel(stubs, name, version, requires)
    procs = {}
    for py in PYTHONS:
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
               "--report", str(tmp_path / f"{py}.json"), "--python-version", py,
               "--only-binary=:all:", "--find-links", str(stubs), "-r", str(ROOT / "requirements-tpu.txt")]
        cmd += [arg for p in boot.PLATFORMS for arg in ("--platform", p)]
        procs[py] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    want = {**pinned(ROOT / "requirements.txt"), **pinned(ROOT / "requirements-tpu.txt")}
    assert {"jax", "libtpu", "google-tunix", "promise"} <= set(want)
    for py, proc in procs.items():
        out = proc.communicate(timeout=600)[0]
        errors = [line for line in out.splitlines() if not line.startswith("WARNING: Location")]
        assert proc.returncode == 0, f"Python {py}:\n" + "\n".join(errors[-20:])
        report = json.loads((tmp_path / f"{py}.json").read_text())
        got = {boot.normalise(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
        assert {n: got.get(n) for n in want} == want, py
        assert set(got) == set(want), f"Python {py} resolves unpinned packages: {set(got) - set(want)}"
        stubbed = [i["download_info"]["url"] for i in report["install"]
                   if boot.normalise(i["metadata"]["name"]) in boot.SDIST_ONLY]
        assert all(url.startswith(stubs.as_uri()) for url in stubbed), stubbed


# --- scripts/kaggle_dataset.py ---------------------------------------------------------------


def load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("kaggle_dataset", ROOT / "scripts" / "kaggle_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_kaggle_dataset_folder(tmp_path, wheel):
    """pip replaced by a fake that writes what each call would: the calls, the folder, and the
    bootstrap finding the wheel there as the notebooks would on Kaggle."""
    script, calls = load_script(), []

    def fake_pip(args):
        calls.append(list(args))
        dest = pathlib.Path(args[args.index("--wheel-dir" if args[0] == "wheel" else "--dest") + 1])
        if args[:2] == ["wheel", str(ROOT)]:
            shutil.copy(wheel, dest)
        elif args[0] == "wheel":
            stub_wheel(dest, "promise", "2.3", ["six"])
        else:
            py = args[args.index("--python-version") + 1].replace(".", "")
            (dest / f"jaxlib-0.10.2-cp{py}-cp{py}-manylinux_2_27_x86_64.whl").write_text("")
        return 0

    out = tmp_path / "input" / "reasonkit-wheels"
    script.build(out, "me/reasonkit-wheels", run=fake_pip)
    platforms = [a for p in boot.PLATFORMS for a in ("--platform", p)]
    assert calls == [
        ["wheel", str(ROOT), "--no-deps", "--wheel-dir", str(out)],
        ["wheel", "promise==2.3", "--no-deps", "--wheel-dir", str(out)],
        *[["download", "--dest", str(out), "--find-links", str(out), "--only-binary=:all:",
           "--python-version", py, "-r", str(ROOT / "requirements-tpu.txt"), *platforms]
          for py in ("3.11", "3.12")]]
    assert sorted(p.name for p in out.iterdir()) == [
        "dataset-metadata.json", "jaxlib-0.10.2-cp311-cp311-manylinux_2_27_x86_64.whl",
        "jaxlib-0.10.2-cp312-cp312-manylinux_2_27_x86_64.whl", "promise-2.3-py3-none-any.whl",
        wheel.name, "reasonkit_bootstrap.py"]
    meta = json.loads((out / "dataset-metadata.json").read_text())
    assert meta["id"] == "me/reasonkit-wheels" and meta["licenses"] == [{"name": "apache-2.0"}]
    # what the notebook's first cell then does with it
    source = boot.locate(cwd=tmp_path, kaggle_input=tmp_path / "input", env={},
                         importable=nothing_importable)
    assert source == boot.Source("wheel", str(out / wheel.name), wheels=str(out))
    with pytest.raises(SystemExit, match="is not empty"):
        script.build(out, "me/x", run=fake_pip)
    with pytest.raises(SystemExit, match="must be <kaggle user name>/<dataset name>"):
        script.build(tmp_path / "other", "reasonkit", run=fake_pip)
