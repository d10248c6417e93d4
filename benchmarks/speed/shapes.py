"""Every Gemma preset x stage compiled at its real shapes: the compiler's bytes per device.

Run from the repository root, by hand (``python -m benchmarks.speed.shapes``; tens of minutes
on 2 cores, one compile at a time): each check runs :func:`reasonkit.shapes.check` in a
fresh CPU process with the preset's device count simulated, Tunix's activation sharding
constraints on as on a TPU, and abstract weights (no checkpoint is downloaded). Writes
``benchmarks/results/shapes.json`` (every program's arguments, outputs, temporaries, aliased
bytes) and ``benchmarks/results/shapes.md`` (the table the README quotes), after each check, so
an interrupted run keeps what it measured; ``--resume`` skips the checks already there.
``--reestimate`` compiles nothing: it recomputes the estimate columns from the stored
compiler figures (seconds), after a change to ``budget.memory_budget``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import pathlib
import platform
import time

from benchmarks.common import result_path, write_json
from reasonkit import budget, shapes
from reasonkit.presets import PRESETS, get_preset
from reasonkit.runtime import hardware

GEMMA_PRESETS = [name for name in PRESETS if name != "tiny"]


def program_key(name: str, stage: str) -> str:
    """What a stage's compiled programs are a function of: the preset less its name, machine
    and description (only the HBM differs), and the device count. gemma3-1b and
    gemma3-1b-v3-8 compile the same programs: one compile serves both."""
    preset = get_preset(name)
    fields = {f.name: getattr(preset, f.name) for f in dataclasses.fields(preset)
              if f.name not in ("name", "hardware", "description", "data")}
    return json.dumps([repr(fields), stage, shapes.device_count(preset)])


def reuse(result: dict, name: str) -> dict:
    """``result`` (another preset's, same programs) judged against ``name``'s machine."""
    preset = get_preset(name)
    hw = hardware.from_name(preset.hardware)
    return reestimate({**result, "preset": name, "hardware": hw.name,
                       "capacity": hw.memory_per_device,
                       "fits": result["peak"] <= budget.FIT_FRACTION * hw.memory_per_device,
                       "same_programs_as": result["preset"], "seconds": 0.0})


def reestimate(result: dict) -> dict:
    """``result`` with its estimates and ratio recomputed by the current
    :func:`reasonkit.budget.memory_budget` (the compiler's figures kept as measured)."""
    if "error" in result:
        return result
    preset = get_preset(result["preset"])
    estimates = shapes.estimate(preset, result["stage"], result["devices"],
                                hardware.from_name(preset.hardware))
    return {**result, **estimates, "ratio": round(estimates["estimate"] / result["peak"], 3)}


def table(results: list[dict]) -> str:
    """The Markdown table: one row per preset x stage."""
    fmt = hardware.format_bytes
    head = ["preset", "stage", "devices", "mesh", "compiler peak / device (XLA:CPU)",
            "of which temp", "estimate (XLA:CPU)", "estimate / compiler",
            "estimate (TPU)", "HBM / device", "fits (<= 90%)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['preset']} | {r['stage']} | | | **failed**: "
                         f"{r['error'].splitlines()[-1][:120]} | | | | | | |")
            continue
        top = max(r["programs"].values(), key=lambda p: p["peak"])
        cells = [r["preset"], r["stage"], str(r["devices"]), "x".join(map(str, r["mesh"])),
                 fmt(r["peak"]), fmt(top["temporaries"]), fmt(r["estimate"]),
                 f"{r['ratio']:.2f}", fmt(r["estimate_tpu"]) if "estimate_tpu" in r else "",
                 fmt(r["capacity"]), "yes" if r["fits"] else "**no**"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="*", default=GEMMA_PRESETS)
    parser.add_argument("--stages", nargs="*", default=list(shapes.CHECK_STAGES))
    parser.add_argument("--out", default=str(result_path("shapes.json")))
    parser.add_argument("--resume", action="store_true", help="keep the checks already in --out")
    parser.add_argument("--nice", type=int, default=10, help="niceness of each compile")
    parser.add_argument("--reestimate", action="store_true",
                        help="compile nothing: recompute the estimate columns of --out from "
                             "its stored compiler figures (after a change to the estimate)")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    if args.reestimate:
        stored = json.loads(out.read_text())
        stored["results"] = [reestimate(r) for r in stored["results"]]
        write_json(out, stored)
        out.with_suffix(".md").write_text(table(stored["results"]) + "\n")
        print(table(stored["results"]))
        return
    done = json.loads(out.read_text())["results"] if args.resume and out.is_file() else []
    have = {(r["preset"], r["stage"]) for r in done if "error" not in r}
    results = [r for r in done if (r["preset"], r["stage"]) in have]
    t0 = time.time()
    for name in args.presets:
        get_preset(name)  # fail early on a typo
        for stage in args.stages:
            if (name, stage) in have:
                continue
            twin = next((r for r in results if "error" not in r and not r.get("same_programs_as")
                         and program_key(r["preset"], r["stage"]) == program_key(name, stage)),
                        None)
            try:
                if twin is not None:
                    result = reuse(twin, name)
                else:
                    result = shapes.check_in_subprocess(name, stage, nice=args.nice)
                print(shapes.describe(result), f"({result['seconds']:.0f} s)", flush=True)
            except RuntimeError as err:
                result = {"preset": name, "stage": stage, "error": str(err)}
                print(f"{name} {stage}: FAILED\n{err}", flush=True)
            results.append(result)
            order = {(p, s): i for i, (p, s) in enumerate(
                (p, s) for p in GEMMA_PRESETS for s in shapes.CHECK_STAGES)}
            results.sort(key=lambda r: order.get((r["preset"], r["stage"]), 1 << 30))
            write_json(out, {
                "date": datetime.date.today().isoformat(), "machine": platform.platform(),
                "xla_flags": shapes.CPU_XLA_FLAGS, "seconds": round(time.time() - t0),
                "results": results})
            out.with_suffix(".md").write_text(table(results) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
