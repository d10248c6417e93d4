"""What the benchmarks share: where results go, writing one, the compile-and-time harness, clocks.

Every benchmark runs as a module from the repository root, so that ``reasonkit`` and
``benchmarks`` both import as packages, installed or not::

    python -m benchmarks.<topic>.<name> --help

Each writes its JSON into :data:`RESULTS` (``benchmarks/results/<name>.json``, named
after the module that writes it) unless given ``--out``. Only the standard library here:
a benchmark may set an environment variable (``JAX_PLATFORMS``) before it imports JAX.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import pathlib
import resource
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository
RESULTS = ROOT / "benchmarks" / "results"  # every committed result, one folder


def result_path(name: str) -> pathlib.Path:
    """Where the result ``name`` (a file name, e.g. ``"seeds.json"``) is kept.

    >>> result_path("seeds.json").relative_to(ROOT).as_posix()
    'benchmarks/results/seeds.json'
    """
    return RESULTS / name


def write_json(path: str | os.PathLike, result: Any, *, indent: int = 1, default=None) -> pathlib.Path:
    """Write ``result`` as indented JSON with a final newline (the folder made if missing)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=indent, default=default) + "\n")
    return path


def error_text(e: BaseException, limit: int = 600) -> str:
    """``Type: message``, cut to ``limit`` characters, for a benchmark's JSON.

    >>> error_text(ValueError("no"))
    'ValueError: no'
    """
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= limit else text[:limit] + " ..."


def compile_concurrently(lowered: dict, timeout: float | None,
                         errors: dict | None = None) -> tuple[dict, list]:
    """Compile every lowered program at once (XLA compiles outside the GIL): ({key:
    (compiled, seconds from the start)} of those done within ``timeout`` seconds, the
    keys of those still compiling, sorted). :func:`finish` exits without waiting for them.
    With ``errors`` (a dict), a compile that fails puts its error there by its key
    instead of raising."""
    if not lowered:
        return {}, []
    pool = concurrent.futures.ThreadPoolExecutor(len(lowered))
    t0 = time.perf_counter()
    jobs = {pool.submit(low.compile): key for key, low in lowered.items()}
    done, _ = concurrent.futures.wait(jobs, timeout=timeout)
    pool.shutdown(wait=False)
    compiled = {}
    for j in done:
        if errors is not None and j.exception() is not None:
            errors[jobs[j]] = error_text(j.exception())
        else:
            compiled[jobs[j]] = (j.result(), time.perf_counter() - t0)
    return compiled, sorted(set(lowered) - set(compiled) - set(errors or ()), key=str)


def finish(result: dict[str, Any], text: str, out: str | os.PathLike | None) -> None:
    """Print a benchmark's table, write its JSON to ``out``, and exit at once if a compile
    is still running in its thread (it would hold the interpreter's exit)."""
    print(text, flush=True)
    if out:
        write_json(out, result)
    if result["not_compiled"]:
        os._exit(0)


def rotated(items, i: int) -> list:
    """``items`` started at position ``i`` (mod its length): alternating in one fixed order
    favours a position (on this 2-core CPU, whichever of two equal-speed SFT steps ran
    first after each matmul sample read 6 to 9% faster), so each round starts one place
    later and every item takes every place.

    >>> rotated(["a", "b", "c"], 4), rotated([], 1)
    (['b', 'c', 'a'], [])
    """
    items = list(items)
    k = i % len(items) if items else 0
    return items[k:] + items[:k]


def clock() -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its children), to subtract."""
    t = os.times()
    return time.perf_counter(), t.user + t.system + t.children_user + t.children_system


def peak_rss_gib() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
