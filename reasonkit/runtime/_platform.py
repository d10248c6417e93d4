"""The notebook host this runs on: Kaggle, Colab or elsewhere; where its runs and inputs live.

Kaggle mounts what a notebook attaches under /kaggle/input (:data:`KAGGLE_INPUT`, or
``$REASONKIT_KAGGLE_INPUT`` in a simulation) in the layouts of :data:`INPUT_LAYOUTS`, and
keeps what a notebook writes under /kaggle/working; Colab keeps the runs on Google Drive
(:func:`mount_drive`). :func:`default_root` says where the runs live on each.

This is the package's own copy of what ``reasonkit_bootstrap`` (the notebooks' first cell)
also knows about Kaggle's inputs: the bootstrap runs before reasonkit is installed and
imports nothing of it, and nothing here imports the bootstrap (tests/test_session.py checks
that the two agree). Importing this module also quiets the stack's messages that are noise
in a notebook (:func:`quiet_infrastructure`), before anything imports Tunix.
"""

from __future__ import annotations

import logging
import os
import pathlib
import re
import sys
import warnings
from typing import Any, Callable, Mapping

__all__ = ["KAGGLE_WORKING", "KAGGLE_INPUT", "KAGGLE_INPUT_ENV", "INPUT_LAYOUTS", "COLAB_DRIVE",
           "COLAB_RUNS", "on_kaggle", "on_colab", "default_root", "mount_drive", "input_root",
           "input_folders", "looked_in", "quiet_infrastructure"]

# The stack's messages that are noise in a notebook and say nothing true about this setup:
# (warning category, start of its message). tqdm asks for ipywidgets (its bars print as text);
# JAX deprecates `with mesh:`, which Tunix 0.1.7's examples and ours still use.
_QUIET_WARNINGS = ((Warning, "IProgress not found"),
                   (DeprecationWarning, "`with mesh:` context manager has been deprecated"))
# absl lines (Tunix logs through absl): the TPU rollout's device scan, on any other device.
_QUIET_ABSL = ("Skipping non-TPU device",)
# C++ logs of XLA and gRPC below warnings (the TCP and platform notes of its start-up).
_QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "GRPC_VERBOSITY": "ERROR"}


def quiet_infrastructure(env: dict[str, str] | None = None) -> None:
    """Silence the messages above, and only those; a variable already set is left as it is.

    Runs when this module is imported, which is before anything of the runtime imports
    Tunix (``reasonkit.runtime`` imports this module first), so that a notebook's first
    cells print what they set up and not these.
    """
    env = os.environ if env is None else env
    for category, start in _QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(start), category=category)
    absl = logging.getLogger("absl")
    if not any(isinstance(f, _Quiet) for f in absl.filters):
        absl.addFilter(_Quiet())
    for name, value in _QUIET_ENV.items():
        env.setdefault(name, value)


class _Quiet(logging.Filter):
    """Drops the absl lines of :data:`_QUIET_ABSL`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_QUIET_ABSL)


quiet_infrastructure()

KAGGLE_WORKING = pathlib.Path("/kaggle/working")
KAGGLE_INPUT = pathlib.Path("/kaggle/input")
KAGGLE_INPUT_ENV = "REASONKIT_KAGGLE_INPUT"  # another root in its place (tests, simulations)
# Where Kaggle mounts an attached input, as globs under its input root: <slug>/ (older
# sessions, some kinds of input) and datasets/<owner>/<slug>/ or notebooks/<owner>/<slug>/
# (2026's layout), each also one folder deeper (a zip's top folder). reasonkit_bootstrap and
# the notebooks' first cell spell the same list (tests check it).
INPUT_LAYOUTS = ("*", "*/*", "datasets/*/*", "datasets/*/*/*", "notebooks/*/*", "notebooks/*/*/*")
COLAB_DRIVE = pathlib.Path("/content/drive")
COLAB_RUNS = "MyDrive/reasonkit-runs"  # the runs root on Colab, under COLAB_DRIVE


def on_kaggle(env: Mapping[str, str] | None = None) -> bool:
    """A Kaggle notebook: its kernels set ``KAGGLE_KERNEL_RUN_TYPE``; /kaggle/working exists."""
    env = os.environ if env is None else env
    return bool(env.get("KAGGLE_KERNEL_RUN_TYPE")) or KAGGLE_WORKING.is_dir()


def on_colab(env: Mapping[str, str] | None = None) -> bool:
    """A Colab runtime: its kernels set ``COLAB_RELEASE_TAG`` (and have imported google.colab)."""
    env = os.environ if env is None else env
    return bool(env.get("COLAB_RELEASE_TAG")) or (env is os.environ and "google.colab" in sys.modules)


def default_root(env: Mapping[str, str] | None = None) -> pathlib.Path:
    """``$REASONKIT_RUNS``; else /kaggle/working/runs on Kaggle; else on Colab a folder on
    Google Drive (``/content/drive/MyDrive/reasonkit-runs``: each Colab notebook gets a
    runtime of its own, whose disk the next notebook never sees); else ./runs."""
    env = os.environ if env is None else env
    if env.get("REASONKIT_RUNS"):
        return pathlib.Path(env["REASONKIT_RUNS"])
    if KAGGLE_WORKING.is_dir():
        return KAGGLE_WORKING / "runs"
    if on_colab(env):
        return COLAB_DRIVE / COLAB_RUNS
    return pathlib.Path("runs")


def mount_drive(root: pathlib.Path, mount: Callable[[str], Any] | None = None) -> bool:
    """Mount Google Drive when the runs root is on it (``/content/drive/...``); whether it did.

    On Colab the runs root is on Drive by default (:func:`default_root`). Where Drive cannot
    be mounted (access refused, or a process without Colab's notebook, such as ``!python
    -m reasonkit``, before the notebook mounted it) this stops with what to do: the next
    notebook, in a runtime of its own, would not find this one's outputs.
    """
    if COLAB_DRIVE not in pathlib.Path(root).absolute().parents or (COLAB_DRIVE / "MyDrive").is_dir():
        return False
    why = None
    if mount is None:
        try:
            from google.colab import drive  # only on Colab

            mount = drive.mount
        except ImportError:
            why = "google.colab is not importable here (not a Colab notebook's kernel)"
    if mount is not None:
        try:
            mount(str(COLAB_DRIVE))
        except Exception as e:  # noqa: BLE001 - Colab raises several kinds; all end the same way
            why = f"mounting it failed: {type(e).__name__}: {e}"
    if why or not (COLAB_DRIVE / "MyDrive").is_dir():
        raise RuntimeError(
            f"the runs root {root} is on Google Drive, which is not mounted "
            f"({why or 'no MyDrive after mounting'}). "
            "On Colab each notebook runs in a runtime of its own: a later notebook finds an earlier one's "
            "outputs only on Drive. Run this notebook's first cells and allow access to Drive, or, to keep "
            "this notebook's runs on this runtime's disk (lost with it, invisible to the other notebooks; "
            "`!python -m reasonkit run` runs every stage in one process and needs no Drive), set "
            "%env REASONKIT_RUNS=/content/runs in a cell above the first.")
    return True


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
    >>> for d in ("old/runs", "notebooks/me/earlier/runs/r"):
    ...     (root / d).mkdir(parents=True)
    >>> [str(p.relative_to(root)) for p in input_folders(root)]  # doctest: +NORMALIZE_WHITESPACE
    ['notebooks', 'old', 'notebooks/me', 'old/runs', 'notebooks/me/earlier', 'notebooks/me/earlier/runs']
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
