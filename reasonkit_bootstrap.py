"""Find or install reasonkit and the tested JAX stack: what the notebooks' first cell runs.

Standard library only, so it runs before anything is installed. The file ships in three
places: the top folder of this repository, the top folder of the Kaggle dataset that
``scripts/kaggle_dataset.py`` builds, and the reasonkit wheel (as a top-level module).
Each notebook's first cell finds it (the notebook's parent folder, a clone beside the
notebook, an attached Kaggle input: :data:`INPUT_LAYOUTS`), puts its folder on
``sys.path`` and calls :func:`setup`.

reasonkit comes from the first of these that exists:

1. a reasonkit Python imports already: installed (``pip install``), or from a checkout
   (``scripts/setup.sh``'s editable install, an attached one the first cell put on
   ``sys.path``), which counts as that checkout;
2. a checkout of this repository: the notebook's parent folder (after ``git clone``), a
   ``reasonkit/`` clone in the kernel's working folder (Colab's ``/content``: the first
   cell clones ``$REASONKIT_REPO`` there), or an attached Kaggle dataset made of the
   repository. It goes on ``sys.path`` (and ``PYTHONPATH``, for ``!python -m reasonkit``);
   its dependencies are installed if missing;
3. a wheel in an attached Kaggle input (``reasonkit-*.whl``): installed offline,
   ``--no-index --find-links`` that folder, which holds the stack's wheels too;
4. ``$REASONKIT_PIP``: anything ``pip install`` takes (your fork's git URL, a folder).

Otherwise it stops, names the places it looked in and the ways. Then the distributions
of :data:`TESTED` (the JAX stack, Tunix, and what reasonkit imports at a version it
depends on; plus libtpu on a TPU VM) must be those versions, whatever the image had: what
differs is installed (offline from an attached wheels dataset when there is one, else
from the package index, with pip's progress shown) and checked again, and the cell stops
naming anything still different. If one of them was imported before the install, the
cell stops and says to restart the runtime.

Its job ends there, with reasonkit importable and the stack the tested one: this module is a
standard-library leaf that imports nothing of reasonkit (in statements or by name), and
reasonkit does not import it. The notebook's next cell imports reasonkit and starts the
session (``reasonkit.runtime.start_session()``: restored runs, the deadline, the
compilation cache). What this module knows of Kaggle's inputs, the package keeps its own
copy of (``reasonkit.runtime.platform``; tests/test_session.py checks the two agree).

Kaggle mounts what a notebook attaches (*Add Input*) under ``/kaggle/input`` in two
layouts: ``<slug>/`` (older sessions, some kinds of input) and, since 2026,
``datasets/<owner>/<slug>/`` and ``notebooks/<owner>/<slug>/`` (an earlier notebook
version's output); a zip adds one folder. :func:`input_folders` lists those folders, and
only those: a few directory listings, never a walk of the input tree.

>>> requirements(tpu=False)[:2], requirements(tpu=True)[:1], requirements(tpu=True)[-1]
(['jax==0.10.2', 'jaxlib==0.10.2'], ['jax[tpu]==0.10.2'], 'libtpu==0.0.42.1')
>>> INPUT_LAYOUTS[:2], INPUT_LAYOUTS[-1]
(('*', '*/*'), 'notebooks/*/*/*')
>>> parse_requirement("google-tunix[prod]==0.1.7 ; python_version >= '3.11'")
('google-tunix', '==0.1.7')
"""

from __future__ import annotations

import dataclasses
import glob
import importlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, Mapping, Sequence

# The stack every number in the README and docs/ was measured with (requirements.txt pins the same
# versions; tests/test_bootstrap.py checks that they agree): the JAX stack and Tunix, then what
# reasonkit imports at a version it depends on. transformers: its 5.x config names
# (``rope_parameters``), which no 4.x has; math-verify and latex2sympy2_extended: the answer
# checker's parser and verifier calls; gguf: reading GGUF checkpoints.
TESTED: dict[str, str] = {
    "jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8", "qwix": "0.1.8", "optax": "0.2.8",
    "orbax-checkpoint": "0.12.8", "google-tunix": "0.1.7", "transformers": "5.12.1",
    "math-verify": "0.9.0", "latex2sympy2-extended": "1.11.0", "gguf": "0.19.0",
}
# On a TPU VM: the TPU runtime jax[tpu]==0.10.2 pins (libtpu==0.0.42.*; requirements-tpu.txt).
TPU: dict[str, str] = {"libtpu": "0.0.42.1"}
# What a TPU VM's wheels must fit (the Kaggle dataset, tests/test_bootstrap.py's resolution):
# Linux x86_64 with glibc 2.31 or newer; libtpu 0.0.42.1 needs manylinux_2_31, jaxlib 0.10.2
# manylinux_2_27. Pins that ship only as source (pure Python) are built into wheels.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(31, 16, -1)] + ["manylinux2014_x86_64"]
PYTHONS = ("3.11", "3.12")  # the wheels dataset's: Kaggle's TPU image is 3.12
# The Pythons the pinned stack resolves on (tests/test_bootstrap.py resolves it for each):
# 3.11 and 3.12 (Kaggle), 3.13 (Colab's TPU runtime since August 2026). jax 0.10.2 and
# google-tunix 0.1.7 need 3.11 or newer.
SUPPORTED = ((3, 11), (3, 12), (3, 13))
SDIST_ONLY: dict[str, tuple[str, list[str]]] = {"promise": ("2.3", ["six"])}
# The module each distribution imports as: what "imported before the install" looks for.
MODULES = {"jax": "jax", "jaxlib": "jaxlib", "flax": "flax", "qwix": "qwix", "optax": "optax",
           "orbax-checkpoint": "orbax.checkpoint", "google-tunix": "tunix", "libtpu": "libtpu",
           "transformers": "transformers", "math-verify": "math_verify",
           "latex2sympy2-extended": "latex2sympy2_extended", "gguf": "gguf"}
# The project set up here, named by this file (<project>_bootstrap.py): its distribution, its
# package, the folder a clone makes. A name to look for and install, never imported here.
PROJECT = pathlib.Path(__file__).stem.removesuffix("_bootstrap")
KAGGLE_INPUT = "/kaggle/input"
KAGGLE_INPUT_ENV = "REASONKIT_KAGGLE_INPUT"  # another root in its place (tests, simulations)
# Where Kaggle mounts an attached input, as globs under its input root: <slug>/ (older
# sessions, some kinds of input) and datasets/<owner>/<slug>/ or notebooks/<owner>/<slug>/
# (2026's layout), each also one folder deeper (a zip's top folder). The notebooks' first
# cell and reasonkit.runtime.platform spell the same list (tests check it).
INPUT_LAYOUTS = ("*", "*/*", "datasets/*/*", "datasets/*/*/*", "notebooks/*/*", "notebooks/*/*/*")
# The repository's git address: the one setting (a cell ``%env REASONKIT_REPO=...`` above the
# first). The first cell clones it where nothing else is found (Colab); docs/kaggle.md shows it,
# and the one-click links built on it, as <owner>/<repo>. No default: this project publishes no
# address of its own, so a fork needs only this.
REPO_ENV = "REASONKIT_REPO"
RESTART = ("restart the runtime (Kaggle: Run > Restart & clear cell outputs; Colab: Runtime > "
           "Restart session), then run the notebook again from the top")
WAYS = """Give the notebooks reasonkit in one of these ways:
  1. a checkout: clone the repository and open its notebooks/ (the notebook's parent folder is
     the checkout), or, on Colab, set %env REASONKIT_REPO=<the repository's git address> in a
     cell above the first: the first cell clones it into ./reasonkit;
  2. on Kaggle, Add Input: a dataset made of the repository, or the wheels dataset that
     `python scripts/kaggle_dataset.py` builds (reasonkit and the tested stack, installed offline);
  3. REASONKIT_PIP, set in a cell above: %env REASONKIT_PIP=git+<the repository's git address>
     (your fork), or a folder holding the repository;
  or `pip install` it into this environment yourself. Step by step: docs/kaggle.md."""


class SetupError(RuntimeError):
    """The setup cannot go on: the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Source:
    """Where reasonkit comes from: ``kind`` is installed, checkout, wheel or pip."""

    kind: str
    where: str  # a folder, or what pip installs
    wheels: str | None = None  # a folder of wheels to install from offline


def parse_requirement(text: str) -> tuple[str, str]:
    """``(normalised name, version specifier)`` of one requirement line (extras and markers dropped)."""
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*([^;]*)", text)
    if not m:
        raise ValueError(f"not a requirement: {text!r}")
    return normalise(m.group(1)), m.group(3).strip()


def normalise(name: str) -> str:
    """A distribution name as pip compares them: ``Orbax_Checkpoint`` is ``orbax-checkpoint``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(tpu: bool) -> list[str]:
    """The tested stack as pip requirements (``jax[tpu]`` and libtpu on a TPU VM)."""
    out = [f"{'jax[tpu]' if tpu and name == 'jax' else name}=={v}" for name, v in TESTED.items()]
    return out + ([f"{name}=={v}" for name, v in TPU.items()] if tpu else [])


def on_tpu_vm(env: Mapping[str, str] | None = None, root: str = "/") -> bool:
    """A TPU VM: v2-v4 chips appear as /dev/accel*, v5e and later as /dev/vfio/<n>."""
    env = os.environ if env is None else env
    dev = os.path.join(root, "dev")
    return bool(glob.glob(os.path.join(dev, "accel*")) or glob.glob(os.path.join(dev, "vfio", "[0-9]*"))
                or env.get("TPU_NAME") or env.get("TPU_ACCELERATOR_TYPE"))


# --- where reasonkit is -------------------------------------------------------------------


def is_checkout(folder: str | os.PathLike) -> bool:
    """``folder`` holds this repository: a pyproject.toml naming :data:`PROJECT`, and its package."""
    folder = pathlib.Path(folder)
    project = folder / "pyproject.toml"
    try:
        text = project.read_text()
    except OSError:
        return False
    return (folder / PROJECT / "__init__.py").is_file() and re.search(
        rf'(?m)^name\s*=\s*"{PROJECT}"', text) is not None


def input_root(given: str | os.PathLike | None = None,
               env: Mapping[str, str] | None = None) -> pathlib.Path:
    """Where Kaggle mounts the attached inputs: ``given``, else ``$REASONKIT_KAGGLE_INPUT``,
    else /kaggle/input."""
    env = os.environ if env is None else env
    return pathlib.Path(given if given is not None else env.get(KAGGLE_INPUT_ENV) or KAGGLE_INPUT)


def input_folders(kaggle_input: str | os.PathLike) -> list[pathlib.Path]:
    """Every folder :data:`INPUT_LAYOUTS` names under ``kaggle_input``, in that order.

    Bounded in depth: a few directory listings, whatever the inputs hold.

    >>> import tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for d in ("old/repo-main", "datasets/me/new/repo-main", "notebooks/me/earlier/runs/r"):
    ...     (root / d).mkdir(parents=True)
    >>> [str(p.relative_to(root)) for p in input_folders(root)]  # doctest: +NORMALIZE_WHITESPACE
    ['datasets', 'notebooks', 'old', 'datasets/me', 'notebooks/me', 'old/repo-main',
     'datasets/me/new', 'datasets/me/new/repo-main', 'notebooks/me/earlier', 'notebooks/me/earlier/runs']
    """
    root = pathlib.Path(kaggle_input)
    if not root.is_dir():
        return []
    found: dict[pathlib.Path, None] = {}  # ordered, without repeats
    for pattern in INPUT_LAYOUTS:
        found.update((p, None) for p in sorted(root.glob(pattern)) if p.is_dir())
    return list(found)


def looked_in(kaggle_input: str | os.PathLike) -> str:
    """The places :func:`input_folders` looks, for a message that says where nothing was.

    >>> looked_in("/kaggle/input")  # doctest: +NORMALIZE_WHITESPACE
    '/kaggle/input/{*, */*, datasets/*/*, datasets/*/*/*, notebooks/*/*, notebooks/*/*/*}'
    """
    return f"{pathlib.Path(kaggle_input)}/{{{', '.join(INPUT_LAYOUTS)}}}"


def wheel_version(path: str | os.PathLike) -> str:
    """The version in a wheel's file name: ``reasonkit-0.1.10-py3-none-any.whl`` is ``0.1.10``."""
    return pathlib.Path(path).name.split("-")[1]


def find_wheel(kaggle_input: str | os.PathLike) -> pathlib.Path | None:
    """The newest ``reasonkit-*.whl`` in an attached input (its folder holds the stack too)."""
    wheels = [w for d in input_folders(kaggle_input) for w in d.glob(f"{PROJECT}-*.whl")]
    return max(wheels, key=lambda w: [int(x) for x in re.findall(r"\d+", wheel_version(w))],
               default=None)


def locate(*, cwd: str | os.PathLike | None = None, kaggle_input: str | os.PathLike | None = None,
           env: Mapping[str, str] | None = None,
           importable: Callable[[], str | None] | None = None) -> Source:
    """Where reasonkit comes from, in the order of the module docstring.

    ``importable()`` gives the folder reasonkit imports from, or None (default: ask
    importlib). A reasonkit that imports from a checkout (the kernel runs in the
    repository's top folder, the first cell put an attached one on ``sys.path``, or an
    editable install) counts as that checkout, so that ``!python -m reasonkit`` imports
    the same code. ``kaggle_input`` defaults to :func:`input_root`'s.
    """
    env = os.environ if env is None else env
    cwd = pathlib.Path(cwd or os.getcwd()).resolve()
    inputs = input_root(kaggle_input, env)
    found = (importable or _import_folder)()
    if found:
        if is_checkout(pathlib.Path(found).parent):
            return Source("checkout", str(pathlib.Path(found).parent))
        return Source("installed", found)
    for folder in (cwd.parent, cwd, cwd / PROJECT, *input_folders(inputs)):
        if is_checkout(folder):
            return Source("checkout", str(folder))
    wheel = find_wheel(inputs)
    if wheel is not None:
        return Source("wheel", str(wheel), wheels=str(wheel.parent))
    if env.get("REASONKIT_PIP"):
        return Source("pip", env["REASONKIT_PIP"])
    raise SetupError(f"reasonkit is not installed, and there is no checkout in {cwd.parent}, {cwd} "
                     f"or {cwd / PROJECT}, nor a checkout or a reasonkit-*.whl in the Kaggle "
                     f"inputs ({looked_in(inputs)}), nor a REASONKIT_PIP.\n" + WAYS)


def _import_folder() -> str | None:
    spec = importlib.util.find_spec(PROJECT)  # where it is; finding a top-level package runs none of it
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(pathlib.Path(list(spec.submodule_search_locations)[0]).resolve())


# --- what is installed -----------------------------------------------------------------


def installed(name: str) -> tuple[str | None, str | None]:
    """``(version, url)`` of an installed distribution: url when pip installed it from a
    git repository or a URL rather than a release (``direct_url.json``), else None."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None, None
    url = None
    direct = dist.read_text("direct_url.json")
    if direct:
        info = json.loads(direct)
        if "vcs_info" in info or not info.get("url", "").endswith(".whl"):
            url = info.get("url")
            if "dir_info" in info and info["dir_info"].get("editable"):
                url = None  # an editable checkout of the project itself is fine
    return dist.version, url


def differences(wanted: Mapping[str, str],
                look: Callable[[str], tuple[str | None, str | None]] = installed) -> dict[str, str]:
    """``{name: what differs}`` for each distribution of ``wanted`` that is not that release.

    >>> found = differences({"jax": "0.10.2", "flax": "0.12.8", "qwix": "0.1.8"},
    ...                     {"jax": ("0.12.0.1", None), "flax": ("0.12.8", None),
    ...                      "qwix": ("0.1.8", "git+https://example.org/qwix")}.get)
    >>> for line in found.values(): print(line)
    jax 0.12.0.1 (tested: 0.10.2)
    qwix 0.1.8 from git+https://example.org/qwix (tested: the 0.1.8 release)
    """
    out = {}
    for name, version in wanted.items():
        have, url = look(name) or (None, None)
        if have is None:
            out[name] = f"{name} not installed (tested: {version})"
        elif have != version:
            out[name] = f"{name} {have} (tested: {version})"
        elif url:
            out[name] = f"{name} {have} from {url} (tested: the {version} release)"
    return out


Look = Callable[[str], "tuple[str | None, str | None]"]


def missing(reqs: Sequence[str], look: Look = installed) -> list[str]:
    """The requirements of ``reqs`` not installed (or, for ``==``, not at that version)."""
    out = []
    for req in reqs:
        name, spec = parse_requirement(req)
        have = (look(name) or (None, None))[0]
        if have is None or (spec.startswith("==") and have != spec[2:].strip()):
            out.append(req)
    return out


def dependencies(source: Source) -> list[str]:
    """What reasonkit needs besides itself: a checkout's ``[project] dependencies``, or the
    installed package's (pip leaves them out after ``--no-deps``); none for a wheel or
    ``$REASONKIT_PIP``, whose install brings them."""
    if source.kind == "checkout":
        import tomllib

        with open(pathlib.Path(source.where) / "pyproject.toml", "rb") as f:
            return list(tomllib.load(f)["project"].get("dependencies", []))
    if source.kind == "installed":
        try:
            reqs = importlib.metadata.requires(PROJECT) or []
        except importlib.metadata.PackageNotFoundError:
            return []
        return [r for r in reqs if "extra ==" not in r.replace("extra==", "extra ==")]
    return []


def loaded_versions(modules: Mapping[str, object] | None = None) -> dict[str, str | None]:
    """``{distribution: version in memory (None: unknown)}`` for each stack module imported."""
    modules = sys.modules if modules is None else modules
    return {name: getattr(modules[module], "__version__", None)
            for name, module in MODULES.items() if module in modules}


# --- pip ---------------------------------------------------------------------------------


def run_pip(args: Sequence[str]) -> int:
    """``python -m pip <args>``, its output printed line by line as it comes (progress shows)."""
    cmd = [sys.executable, "-m", "pip", *args]
    print("$", " ".join(cmd), flush=True)
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
    return proc.returncode


def _pip(runner: Callable[[Sequence[str]], int], args: list[str], what: str) -> None:
    if runner(args) != 0:
        raise SetupError(f"pip could not install {what} (its messages are above). Without network, "
                         "attach the wheels dataset (scripts/kaggle_dataset.py).\n" + WAYS)


def _copy_out(folder: str) -> str:
    """A copy of a source folder pip may build in (a Kaggle input is read-only)."""
    return shutil.copytree(folder, os.path.join(tempfile.mkdtemp(), PROJECT),
                           ignore=shutil.ignore_patterns(".git", ".venv", "runs", "build", ".cache"))


def install_args(source: Source | None, reqs: Sequence[str], wheels: str | None) -> list[str]:
    """pip's arguments: reasonkit from a wheel or ``$REASONKIT_PIP``, and ``reqs``; offline
    (``--no-index``) from the folder ``wheels`` when there is one."""
    args = ["install"]
    if wheels:
        args += ["--no-index", "--find-links", wheels]
    if source is not None and source.kind == "wheel":
        args.append(f"{PROJECT}=={wheel_version(source.where)}")
    elif source is not None and source.kind == "pip":
        args.append(_copy_out(source.where) if os.path.isdir(source.where) else source.where)
    return args + list(reqs)


def setup(*, cwd: str | os.PathLike | None = None, kaggle_input: str | os.PathLike | None = None,
          env: Mapping[str, str] | None = None, tpu: bool | None = None,
          pip: Callable[[Sequence[str]], int] = run_pip,
          importable: Callable[[], str | None] | None = None,
          look: Callable[[str], tuple[str | None, str | None]] = installed,
          modules: Mapping[str, object] | None = None) -> Source:
    """Find or install reasonkit and make the stack the tested one; where reasonkit comes from.

    It imports nothing of reasonkit: the notebook's next cell does, and starts the session
    there (``reasonkit.runtime.start_session()``). ``pip(args)`` runs pip and returns its exit
    code; ``look(name)`` reads what is installed (:func:`installed`); the other arguments
    locate things (:func:`locate`). Tests replace them; nothing else needs to.
    """
    env = os.environ if env is None else env
    check_python(sys.version_info[:2])
    inputs = input_root(kaggle_input, env)
    source = locate(cwd=cwd, kaggle_input=inputs, env=env, importable=importable)
    tpu = on_tpu_vm(env) if tpu is None else tpu
    wanted = {**TESTED, **(TPU if tpu else {})}
    wheel = find_wheel(inputs)
    wheels = str(wheel.parent) if wheel is not None else None
    before = {name: look(name) for name in wanted}
    loaded = loaded_versions(modules)
    print(f"reasonkit: {source.kind} ({source.where})" + ("; TPU VM" if tpu else ""), flush=True)

    if source.kind == "checkout":
        _on_path(source.where, env)
    extra = [r for r in missing(dependencies(source), look) if parse_requirement(r)[0] not in wanted]
    differ = differences(wanted, look)
    if source.kind in ("wheel", "pip") or extra or differ:
        if differ:
            print("not the tested stack: " + "; ".join(differ.values()), flush=True)
        _pip(pip, install_args(source, [*extra, *requirements(tpu)], wheels),
             "reasonkit and the tested stack")
        importlib.invalidate_caches()
        # Right version, but built from a git checkout (as some images ship): replace it.
        urls = [n for n in wanted if (look(n) or (None, None))[1]]
        if urls:
            pins = [r for r in requirements(tpu) if parse_requirement(r)[0] in urls]
            _pip(pip, install_args(None, ["--force-reinstall", "--no-deps", *pins], wheels),
                 "the tested releases")
            importlib.invalidate_caches()
    still = differences(wanted, look)
    if still:
        raise SetupError("after the install the stack is still not the tested one: "
                         + "; ".join(still.values()) + ". Restart the runtime and run this cell "
                         "again; if it persists, install those versions by hand (requirements.txt, "
                         "requirements-tpu.txt on a TPU VM).")
    # A module imported before this cell keeps running its old code, whatever pip did since.
    stale = sorted(n for n, v in loaded.items()
                   if (v is not None and v != wanted.get(n)) or look(n) != before.get(n))
    if stale:
        old = ", ".join(f"{n} {loaded[n] or before[n][0]}" for n in stale)
        raise SetupError(f"{old} {'was' if len(stale) == 1 else 'were'} imported before this cell; "
                         f"the tested versions are installed now, but this process still runs the "
                         f"old code: {RESTART}.")
    print("tested stack: " + ", ".join(f"{n} {v}" for n, v in wanted.items()), flush=True)
    importlib.invalidate_caches()  # what pip installed, importable from the next cell on
    return source


def check_python(version: tuple[int, int]) -> None:
    """Refuse a Python the pinned stack cannot use, saying what to do; warn past the newest checked.

    >>> check_python((3, 13))
    >>> check_python((3, 10))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    reasonkit_bootstrap.SetupError: reasonkit needs Python 3.11 to 3.13 (...); this is 3.10. ...
    """
    have = ".".join(map(str, version))
    if version < SUPPORTED[0]:
        raise SetupError(
            f"reasonkit needs Python 3.11 to 3.13 (jax 0.10.2 and google-tunix 0.1.7 need 3.11 or "
            f"newer); this is {have}. On a Cloud TPU VM, whose base image has 3.10, install Python "
            "3.11 and make a virtual environment with it first (docs/multihost.md, 'Install'). On "
            "Kaggle or Colab, pick a runtime with a newer Python (Colab: Runtime > Change runtime "
            "type; Kaggle: Settings > Environment, the latest).")
    if version > SUPPORTED[-1]:
        print(f"Python {have}: the pinned stack was checked on 3.11 to 3.13 only. If pip cannot "
              "install it below, use Python 3.13 or older (Colab: Runtime > Change runtime type, "
              "a pinned runtime version).", flush=True)


def _on_path(folder: str, env: Mapping[str, str]) -> None:
    """Make a checkout importable here and in subprocesses (``!python -m reasonkit``)."""
    if folder not in sys.path:
        sys.path.insert(0, folder)
    if env is os.environ:
        parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if folder not in parts:
            os.environ["PYTHONPATH"] = os.pathsep.join([folder, *parts])
    importlib.invalidate_caches()
