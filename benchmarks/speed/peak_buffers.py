"""What fills a compiled program's peak: the values XLA holds live at it, grouped.

Dump a check's compiled programs, then read the dump (run from the repository root):

    XLA_FLAGS=--xla_dump_to=/tmp/dump python -m reasonkit.shapes gemma3-1b rollout
    python -m benchmarks.speed.peak_buffers /tmp/dump

XLA writes, for each program, ``*-live-range.txt`` (every value live at the peak of its
buffer assignment, with bytes) beside the optimised HLO (which op made each value, its
shape and dtype, and the JAX operation it came from). This prints, for every program
whose live values exceed ``--min-gib``, those values grouped by (shape, op, JAX
operation), largest first: how docs/presets.md#memory attributes the compiler's peak
item by item. The values live at the peak sum to a little less than the compiler's
``memory_analysis()`` peak (its temporaries are one heap-packed buffer).
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re

LIVE = re.compile(r"Live ranges at \d+ \(peak\):\n(.*?)\n  Stack trace", re.S)
VALUE = re.compile(r"^\s+(\S+?)\{[0-9,]*\}: (\d+) bytes", re.M)
INSTRUCTION = re.compile(
    r"^\s*(?:ROOT )?%?([\w.\-]+) = (\(.*?\)|[a-z0-9]+\[[0-9,]*\])\S* ([\w\-]+)\((.*)$", re.M)


def peak_groups(live_range: str, hlo: str) -> dict[tuple[str, str, str], list[int]]:
    """(shape, opcode, JAX op with layer numbers as #) -> [count, bytes] of the values live
    at the peak."""
    match = LIVE.search(live_range)
    if not match:
        return {}
    made_by = {}
    for name, shape, op, rest in INSTRUCTION.findall(hlo):
        jax_op = re.search(r'op_name="([^"]*)"', rest)
        made_by[name] = (shape if not shape.startswith("(") else "tuple", op,
                         re.sub(r"\d+", "#", jax_op.group(1))[-100:] if jax_op else "")
    groups: dict[tuple[str, str, str], list[int]] = collections.defaultdict(lambda: [0, 0])
    for name, nbytes in VALUE.findall(match.group(1)):
        group = groups[made_by.get(name, ("?", "?", ""))]
        group[0] += 1
        group[1] += int(nbytes)
    return dict(groups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", type=pathlib.Path, help="the --xla_dump_to folder")
    parser.add_argument("--min-gib", type=float, default=0.1,
                        help="skip programs with less than this live at their peak")
    parser.add_argument("--top", type=int, default=30, help="groups to print per program")
    args = parser.parse_args()
    for path in sorted(args.dump.glob("*-live-range.txt")):
        hlo = path.with_name(path.name.replace("-live-range.txt", ".txt"))
        groups = peak_groups(path.read_text(), hlo.read_text() if hlo.is_file() else "")
        total = sum(b for _, b in groups.values())
        if total < args.min_gib * 2**30:
            continue
        print(f"== {path.name}: {sum(k for k, _ in groups.values())} values live at the "
              f"peak, {total / 2**30:.3f} GiB")
        for (shape, op, jax_op), (k, b) in sorted(groups.items(), key=lambda g: -g[1][1])[
                :args.top]:
            print(f"  {b / 2**20:9.1f} MiB  x{k:<4d} {shape:28s} {op:18s} {jax_op}")


if __name__ == "__main__":
    main()
