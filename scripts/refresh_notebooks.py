"""Commit a demo run's results: its executed notebooks (outputs and figures) and the README's images.

    bash scripts/demo.sh                        # runs/demo/notebooks/*.ipynb, runs/demo/<stage>/...
    python scripts/refresh_notebooks.py         # -> notebooks/*.ipynb, docs/images/*.png
    python scripts/refresh_notebooks.py --check # the same checks, nothing written

For each ``notebooks/NN_name.py`` it takes the executed ``<run>/notebooks/NN_name.ipynb``
and copies its outputs into the committed ``notebooks/NN_name.ipynb``, so a reader sees
every table and figure on GitHub before running anything. It refuses (and writes
nothing) when an executed notebook is stale (its code cells differ from the ``.py``: the
first differing cell is named), holds an error, or when what it would write exceeds
``--max-mb`` (5 MB). What is not worth committing goes: per-cell execution timestamps,
widget state, the ``\\r`` updates of progress bars (only the last state of each line is
kept, as a terminal shows it), the middle of a very long stream (with a note saying how
much), and this machine's paths (the checkout's becomes relative, the home directory ``~``).
Images stay.

It also copies the figures the README shows (:data:`IMAGES`) from the run to docs/images/.
"""

from __future__ import annotations

import argparse
import copy
import os
import pathlib
import sys
from typing import Any, Iterable, Sequence

import jupytext
import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_MB = 5.0
MAX_STREAM_CHARS = 6000  # per stream output, after progress bars are collapsed
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# README image -> where the demo run writes it (the notebook that saves it, to name on a miss)
IMAGES = {
    "docs/images/stages.png": ("eval/stages.png", "06_evaluation"),
    "docs/images/grpo_curves.png": ("grpo/grpo_curves.png", "05_grpo"),
}


class RefreshError(Exception):
    """Why the notebooks were not refreshed; nothing was written."""


# --- comparing code cells --------------------------------------------------------------


def code_sources(nb: Any) -> list[str]:
    """The source of every code cell, in order, trailing whitespace ignored."""
    return [cell.source.rstrip() for cell in nb.cells if cell.cell_type == "code"]


def py_code_sources(path: str | os.PathLike) -> list[str]:
    """The code cells of a Jupytext percent-format ``.py``, as its paired ``.ipynb`` holds them."""
    return code_sources(jupytext.read(path))


def first_difference(a: Sequence[str], b: Sequence[str]) -> int | None:
    """The index of the first cell where ``a`` and ``b`` differ (a missing cell counts); None if equal.

    >>> first_difference(["x = 1", "y = 2"], ["x = 1", "y = 3"]), first_difference(["a"], ["a"])
    (1, None)
    >>> first_difference(["a"], ["a", "b"])
    1
    """
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _excerpt(cells: Sequence[str], i: int) -> str:
    if i >= len(cells):
        return "(no such cell)"
    lines = cells[i].splitlines() or [""]
    return lines[0][:100] + (" ..." if len(lines) > 1 or len(lines[0]) > 100 else "")


def check_same_code(nb: Any, py: pathlib.Path, what: str) -> None:
    """Raise :class:`RefreshError` naming ``what`` and its first code cell that differs from ``py``."""
    have, want = code_sources(nb), py_code_sources(py)
    i = first_difference(have, want)
    if i is not None:
        raise RefreshError(
            f"{what} is stale: its code cell {i + 1} (of {len(have)}) differs from {py.name}'s "
            f"(of {len(want)}):\n  {what}: {_excerpt(have, i)}\n  {py.name}: {_excerpt(want, i)}")


# --- cleaning outputs --------------------------------------------------------------------


def collapse_carriage_returns(text: str) -> str:
    """Each line as a terminal shows it: only what follows its last ``\\r`` (progress bars).

    >>> collapse_carriage_returns("SFT  10%|#  \\rSFT  50%|#####\\rSFT 100%|##########\\ndone\\n")
    'SFT 100%|##########\\ndone\\n'
    """
    lines = text.split("\n")
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines)


def truncate_middle(text: str, max_chars: int) -> str:
    """``text``, or its head and tail with a note of how many characters were cut between them.

    >>> print(truncate_middle("".join(f"line {i}\\n" for i in range(100)), 40))
    line 0
    line 1
    [... 760 characters cut by scripts/refresh_notebooks.py ...]
    line 98
    line 99
    <BLANKLINE>
    """
    if len(text) <= max_chars:
        return text
    head = text[:max_chars // 2]
    head = head[:head.rfind("\n") + 1] or head  # whole lines where there are some
    tail = text[-(max_chars // 2):]
    tail = tail[tail.find("\n") + 1:] if "\n" in tail[:-1] else tail
    cut = len(text) - len(head) - len(tail)
    return f"{head}[... {cut} characters cut by scripts/refresh_notebooks.py ...]\n{tail}"


def _join(text: Any) -> str:
    return "".join(text) if isinstance(text, list) else text


def merge_streams(outputs: Iterable[Any]) -> list[Any]:
    """Consecutive outputs of one stream as one, as a notebook shows them.

    A kernel sends each progress-bar update as its own output, starting with ``\\r``:
    merged, :func:`collapse_carriage_returns` keeps the bar's last state only.

    >>> outs = [{"output_type": "stream", "name": "stderr", "text": "eval   0%"},
    ...         {"output_type": "stream", "name": "stderr", "text": "\\reval 100%\\n"},
    ...         {"output_type": "stream", "name": "stdout", "text": "done\\n"}]
    >>> [(o["name"], collapse_carriage_returns(o["text"])) for o in merge_streams(outs)]
    [('stderr', 'eval 100%\\n'), ('stdout', 'done\\n')]
    """
    merged: list[Any] = []
    for out in outputs:
        last = merged[-1] if merged else None
        if (out.get("output_type") == "stream" and last is not None
                and last.get("output_type") == "stream" and last.get("name") == out.get("name")):
            last["text"] = _join(last.get("text", "")) + _join(out.get("text", ""))
        else:
            merged.append(copy.deepcopy(out))
    return merged


def clean_outputs(outputs: Iterable[Any], *, max_chars: int = MAX_STREAM_CHARS,
                  replace: Sequence[tuple[str, str]] = ()) -> list[Any]:
    """Outputs worth committing: one output per stream run, progress bars collapsed, long
    streams cut, widgets and their state dropped, ``replace`` pairs (a local path -> a
    portable one) applied to text; images kept."""
    def portable(text: str) -> str:
        for old, new in replace:
            text = text.replace(old, new)
        return text

    shown = []  # streams as a terminal leaves them; a bar that cleared itself is gone
    for out in merge_streams(outputs):
        if out.get("output_type") == "stream":
            out["text"] = collapse_carriage_returns(_join(out.get("text", "")))
            if not out["text"].strip():
                continue
        shown.append(out)
    kept = []
    for out in merge_streams(shown):  # what was either side of a cleared bar is one run
        if out.get("output_type") == "stream":
            out["text"] = truncate_middle(portable(out["text"]), max_chars)
        elif out.get("output_type") in ("display_data", "execute_result"):
            data = out.get("data", {})
            if WIDGET_MIME in data:  # a live widget (a progress bar); its state is not committed
                continue
            for mime in list(data):
                if mime.startswith("text/"):
                    data[mime] = portable(_join(data[mime]))
        kept.append(out)
    return kept


def error_of(nb: Any) -> str | None:
    """``"cell N: Name: message"`` for the first code cell with an error output, else None."""
    for n, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), 1):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"code cell {n}: {out.get('ename')}: {out.get('evalue', '')[:200]}"
    return None


def with_outputs(committed: Any, executed: Any, *, max_chars: int = MAX_STREAM_CHARS,
                 replace: Sequence[tuple[str, str]] = ()) -> Any:
    """``committed`` (cells, ids, metadata as Jupytext keeps them) with ``executed``'s outputs.

    Code cells are matched in order: check both with :func:`check_same_code` first.
    Execution timestamps and widget state are left behind.
    """
    nb = copy.deepcopy(committed)
    ran = [c for c in executed.cells if c.cell_type == "code"]
    mine = [c for c in nb.cells if c.cell_type == "code"]
    if len(ran) != len(mine):
        raise RefreshError(f"{len(ran)} executed code cells for {len(mine)} committed ones")
    for cell, source in zip(mine, ran, strict=True):
        cell.outputs = clean_outputs(source.get("outputs", []), max_chars=max_chars, replace=replace)
        cell.execution_count = source.get("execution_count")
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb


def has_outputs(nb: Any) -> bool:
    """Whether any code cell of ``nb`` holds an output (a refreshed notebook does)."""
    return any(cell.get("outputs") for cell in nb.cells if cell.cell_type == "code")


# --- the whole refresh ---------------------------------------------------------------------


def local_paths(root: pathlib.Path = ROOT, runs: pathlib.Path | None = None) -> list[tuple[str, str]]:
    """This machine's paths and what to write instead: the checkout (relative), a runs folder
    outside it (``runs``), then home (``~``)."""
    pairs = [(f"{root}/", ""), (str(root), ".")]
    if runs is not None and not runs.is_relative_to(root):
        pairs.append((str(runs), "runs"))
    home = str(pathlib.Path.home())
    if home not in ("", "/"):
        pairs.append((home, "~"))
    return pairs


def refresh(run: pathlib.Path, *, notebooks: pathlib.Path | None = None,
            root: pathlib.Path | None = None, max_mb: float = MAX_MB,
            max_chars: int = MAX_STREAM_CHARS, write: bool = True,
            images: dict[str, tuple[str, str]] | None = None) -> dict[str, int]:
    """Check everything, then (``write``) copy the outputs and images; ``{path: bytes}`` of each.

    Nothing is written unless every notebook and image passes: a stale or failed executed
    notebook, a committed ``.ipynb`` out of sync with its ``.py``, a missing image or a
    total above ``max_mb`` raises :class:`RefreshError` saying which and what to do.
    ``root`` is the checkout (default: this one), ``notebooks`` its notebooks folder.
    """
    images = IMAGES if images is None else images
    root = ROOT if root is None else root
    notebooks = root / "notebooks" if notebooks is None else notebooks
    executed_dir = run / "notebooks"
    pys = sorted(notebooks.glob("[0-9]*.py"))
    if not pys:
        raise RefreshError(f"no notebooks/*.py under {notebooks}")
    replace = local_paths(root, run.resolve().parent)
    out: dict[pathlib.Path, bytes] = {}
    for py in pys:
        ipynb, executed_path = py.with_suffix(".ipynb"), executed_dir / f"{py.stem}.ipynb"
        if not executed_path.is_file():
            raise RefreshError(f"{executed_path} is missing: run bash scripts/demo.sh (it executes "
                               f"every notebook into {executed_dir})")
        executed = nbformat.read(executed_path, as_version=4)
        committed = nbformat.read(ipynb, as_version=4)
        check_same_code(committed, py, f"{ipynb.relative_to(notebooks.parent)} (committed)")
        check_same_code(executed, py, str(executed_path))
        failed = error_of(executed)
        if failed:
            raise RefreshError(f"{executed_path} failed in {failed}: fix it and run the demo again")
        out[ipynb] = nbformat.writes(with_outputs(committed, executed, max_chars=max_chars,
                                                  replace=replace)).encode() + b"\n"
    for target, (source, notebook) in images.items():
        path = run / source
        if not path.is_file():
            raise RefreshError(f"{path} is missing: notebooks/{notebook} writes it; run the demo to the end")
        out[root / target] = path.read_bytes()
    total = sum(map(len, out.values()))
    if total > max_mb * 2**20:
        largest = sorted(out, key=lambda p: -len(out[p]))[:3]
        raise RefreshError(
            f"{total / 2**20:.1f} MB to write, more than the {max_mb:g} MB limit; largest: "
            + ", ".join(f"{p.name} {len(out[p]) / 2**20:.2f} MB" for p in largest)
            + " (fewer or smaller figures, or a lower --max-stream-chars)")
    if write:
        for path, content in out.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.partial")
            tmp.write_bytes(content)
            os.replace(tmp, path)
    return {str(p.relative_to(root)) if p.is_relative_to(root) else str(p): len(b) for p, b in out.items()}


def default_run() -> pathlib.Path:
    """``$REASONKIT_RUNS/$REASONKIT_RUN``, as scripts/demo.sh sets them: ``runs/demo`` by default."""
    return pathlib.Path(os.environ.get("REASONKIT_RUNS") or ROOT / "runs") / (
        os.environ.get("REASONKIT_RUN") or "demo")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=pathlib.Path, default=None,
                        help="the demo run's directory (default: $REASONKIT_RUNS/$REASONKIT_RUN, runs/demo)")
    parser.add_argument("--max-mb", type=float, default=MAX_MB, help="refuse to write more than this")
    parser.add_argument("--max-stream-chars", type=int, default=MAX_STREAM_CHARS,
                        help="keep the head and tail of longer stream outputs")
    parser.add_argument("--check", action="store_true", help="check only; write nothing")
    args = parser.parse_args(argv)
    run = args.run or default_run()
    try:
        sizes = refresh(run, max_mb=args.max_mb, max_chars=args.max_stream_chars, write=not args.check)
    except RefreshError as e:
        print(f"refresh_notebooks: nothing written: {e}", file=sys.stderr)
        return 1
    for path, n in sizes.items():
        print(f"{n / 1024:8.1f} KB  {path}")
    total = sum(sizes.values())
    verb = "would write" if args.check else "wrote"
    print(f"{verb} {total / 2**20:.2f} MB in {len(sizes)} files (limit {args.max_mb:g} MB) from {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
