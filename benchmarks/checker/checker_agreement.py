"""How often reasonkit's answer checker agrees with other projects' test verdicts.

``checker_cases.jsonl`` holds (gold, predicted, expected verdict) cases collected from
the test suites of math-verify, open-r1, TRL, Tunix, verifiers and lm-evaluation-harness
(each row names its repository, file and test; data only). Each case is put through
this project's own reward functions, as a policy's completion would be:

- ``mode: "answer"``: the prediction inside the answer tag
  (``<reasoning>..</reasoning><answer>PRED</answer>``), judged by ``answer_correct``;
- ``mode: "free_text"``: a whole solution without tags, judged leniently by
  ``numeric_backup`` (the last ``\\boxed{}``, else the last number).

The gold is the row's ``gold_answer`` when the peer's gold is a solution with boxes (the
dataset's answer), else its ``gold``. Rows with ``comparable: false`` ask for something
else (another rounding, another variable rule, no verdict at all) and are not counted.

    python -m benchmarks.checker.checker_agreement                # this tree
    python -m benchmarks.checker.checker_agreement --compare main # and a git ref, side by side
    python -m benchmarks.checker.checker_agreement --list         # every disagreement
    python -m benchmarks.checker.checker_agreement --timing       # and the rewards' time (see below)

"Credited wrong" counts cases whose expected verdict is *wrong* and that a reward pays
for: the number that must stay 0.

``--timing`` also measures what the checker costs GRPO: the five math rewards on a tiny
preset step (8 prompts x 8 completions of the kinds a small policy writes: right, wrong,
hedged, untagged, cut off, rambling), run in a worker thread as Tunix runs them, with
fresh completions each step (wall time and the thread's CPU time); three worst cases where
every completion is a new symbolic answer: closed forms against the tasks' numeric golds,
closed forms against closed-form LaTeX golds (both rejected without sympy when their value
differs), and expressions with a variable against a polynomial gold (sympy for each: the
rewards' symbolic budget stops it, and the answers it left unjudged are counted); and the
slowest single call on 100 KB answers.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import time

from benchmarks.common import ROOT

CASES = pathlib.Path(__file__).resolve().parent / "checker_cases.jsonl"  # the corpus: input, not a result
REASONING = "<reasoning>Worked it out.</reasoning>\n"
TINY_STEP_S = 3.3  # the tiny preset's GRPO step on 2 CPU cores (the demo: 200 steps in 655 s)


def load_cases(path: pathlib.Path = CASES) -> list[dict]:
    """The corpus rows, in order."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def verdict(case: dict, rewards) -> bool:
    """Does this project's reward pay for ``case``'s prediction?"""
    gold = case.get("gold_answer", case["gold"])
    kwargs = {"answer": [gold], "domain": [case.get("domain", "math")]}
    if case["mode"] == "answer":
        completion = f"{REASONING}<answer>{case['pred']}</answer><end_of_turn>"
        return rewards.answer_correct(None, [completion], **kwargs)[0] > 0
    return rewards.numeric_backup(None, [case["pred"]], **kwargs)[0] > 0


def evaluate(cases: list[dict]) -> dict:
    """Verdicts of the reasonkit importable here, with the slowest call."""
    from reasonkit import rewards

    start = time.perf_counter()  # the first symbolic answer loads and warms up sympy, once
    verdict({"mode": "answer", "pred": "\\frac{\\sqrt3}{2}", "gold": "\\frac{\\sqrt{3}}{2}"}, rewards)
    first = time.perf_counter() - start
    out, worst = [], 0.0
    for case in cases:
        start = time.perf_counter()
        got = verdict(case, rewards) if case["comparable"] else None
        worst = max(worst, time.perf_counter() - start)
        out.append(got)
    return {"verdicts": out, "worst_call_s": worst, "first_call_s": first, "reasonkit": rewards.__file__}


def summarize(cases: list[dict], verdicts: list) -> dict:
    """Agreement overall, by source and by mode; credited-wrong and missed counts."""
    def block(pairs):
        n = len(pairs)
        agree = sum(got == case["expected"] for case, got in pairs)
        return {"n": n, "agree": agree, "agreement": agree / n if n else float("nan"),
                "credited_wrong": sum(got and not case["expected"] for case, got in pairs),
                "missed_right": sum(case["expected"] and not got for case, got in pairs)}

    pairs = [(c, v) for c, v in zip(cases, verdicts, strict=True) if c["comparable"]]
    by = collections.defaultdict(list)
    for case, got in pairs:
        by[("source", case["source"])].append((case, got))
        by[("mode", case["mode"])].append((case, got))
    return {"overall": block(pairs), **{f"{k}={v}": block(p) for (k, v), p in sorted(by.items())}}


STEPS = {  # label: which completions (and golds) _tiny_step writes
    "tiny step": "tiny", "all-sympy step": "closed", "symbolic-gold step": "closed-latex",
    "variables step": "variables"}
LATEX_GOLDS = ["\\frac{\\sqrt{3}}{2}", "2\\sqrt{5}", "\\frac{\\pi}{4}", "3 + \\sqrt{2}"]


def _tiny_step(records: list[dict], step: int, kind: str) -> tuple[list[str], list[str], list[str]]:
    """64 completions for 8 prompts, fresh for each ``step`` (the caches see new text).

    ``kind``: "tiny" (what a small policy writes), or every answer a new symbolic one:
    "closed" (closed forms, the tasks' numeric golds), "closed-latex" (closed forms,
    closed-form LaTeX golds), "variables" (polynomials in x, a polynomial gold).
    """
    completions, golds, domains = [], [], []
    symbolic = kind != "tiny"
    if symbolic:  # numeric golds: a closed expression can only be judged by sympy
        records = [r for r in records if r["domain"] in ("math", "science")]
    for i, rec in enumerate((records[8 * step % len(records):] + records)[:8]):
        gold, n = rec["answer"], step * 97 + i
        shapes = [f"{rec['reasoning']} {gold}", f"{n} + {n % 7}", f"{n} or {gold}", f"about {gold}.",
                  f"{gold}", f"x = {n % 50}", f"{n % 13} apples", gold.upper()]
        if symbolic:  # each one a new closed expression: sympy would parse every one
            shapes = [f"\\sqrt{{{n + k}}} + \\frac{{{k + 1}}}{{{n % 11 + 2}}}" for k in range(8)]
        if kind == "closed-latex":
            gold = LATEX_GOLDS[i % len(LATEX_GOLDS)]
        if kind == "variables":
            gold = "x^2 + 2x + 1"
            shapes = [f"x^{{2}} + {n + k}x - \\frac{{{k + 1}}}{{{n % 11 + 2}}}" for k in range(8)]
        for k, answer in enumerate(shapes):
            body = f"<reasoning>{rec['reasoning']}</reasoning>\n<answer>{answer}</answer><end_of_turn>"
            if not symbolic and k == 3:
                body = rec["reasoning"] + " so it is " + gold  # no tags: numeric_backup's case
            if not symbolic and k == 6:
                body = body[:120]  # cut off at the generation length
            completions.append(body)
            golds.append(gold)
            domains.append(rec["domain"])
    return completions, golds, domains


def _unjudged(rewards) -> int:
    """Answers the rewards' symbolic budget left unjudged so far (0 before it existed)."""
    return sum(getattr(rewards, "SYMBOLIC_SKIPS", {}).values())


def timing(steps: int = 20) -> dict:
    """Seconds the math rewards take per tiny GRPO step, and the slowest 100 KB call."""
    import threading

    import numpy as np

    from reasonkit import rewards, tasks

    records = tasks.generate_all(40, seed=123)
    out: dict = {}
    for label, kind in STEPS.items():
        times: list[tuple[float, float]] = []
        skips = _unjudged(rewards)

        def run(times=times, kind=kind):
            for step in range(steps):
                completions, golds, domains = _tiny_step(records, step, kind)
                kwargs = {"answer": np.array(golds), "domain": np.array(domains)}
                start, cpu = time.perf_counter(), time.thread_time()
                for fn in rewards.MATH_REWARDS:
                    fn(["prompt"] * len(completions), completions, **kwargs)
                times.append((time.perf_counter() - start, time.thread_time() - cpu))

        worker = threading.Thread(target=run)
        worker.start()
        worker.join()
        steady = sorted(times[1:])  # the first step pays any one-time import
        cpu = sorted(t[1] for t in times[1:])
        out[label] = {"first_s": times[0][0], "median_s": steady[len(steady) // 2][0], "max_s": steady[-1][0],
                      "cpu_median_s": cpu[len(cpu) // 2], "cpu_max_s": cpu[-1],
                      "unjudged_per_step": (_unjudged(rewards) - skips) / steps}
    kinds = ["1" * 100_000, "<answer>" + "\\frac{" * 20_000 + "</answer>", "1," * 50_000,
             "<answer>" + "x+" * 50_000 + "</answer>", "<answer>" + "1 or " * 20_000 + "</answer>",
             "(" * 100_000]
    worst = worst_cpu = 0.0
    for kind in kinds:
        for fn in rewards.MATH_REWARDS:
            for gold in ("42", "\\frac{\\sqrt{3}}{2}"):
                start, cpu = time.perf_counter(), time.thread_time()
                fn(None, [kind], answer=[gold])
                worst = max(worst, time.perf_counter() - start)
                worst_cpu = max(worst_cpu, time.thread_time() - cpu)
    out["worst 100 KB call_s"] = worst
    out["worst 100 KB call, CPU_s"] = worst_cpu
    return out


def _ref_verdicts(ref: str, cases_path: pathlib.Path, timed: bool = False) -> dict:
    """Run this module against ``git archive ref reasonkit`` in a fresh interpreter (that
    reasonkit first on its path, then this tree's benchmarks)."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "reasonkit"],
                                 check=True, capture_output=True).stdout
        tar_path = pathlib.Path(tmp) / "ref.tar"
        tar_path.write_bytes(archive)
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((tmp, str(ROOT)))}
        flags = ["--timing"] if timed else []
        done = subprocess.run([sys.executable, "-m", __spec__.name, "--cases", str(cases_path), "--json",
                               *flags],
                              env=env, capture_output=True, text=True, check=True, cwd=tmp)
        return json.loads(done.stdout)


def _line(name: str, block: dict) -> str:
    return (f"{name:48s} {block['agree']:4d}/{block['n']:<4d} {100 * block['agreement']:6.1f}%  "
            f"credited wrong {block['credited_wrong']:3d}  missed right {block['missed_right']:3d}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=pathlib.Path, default=CASES)
    parser.add_argument("--compare", metavar="REF", help="also run the checker of this git ref")
    parser.add_argument("--list", action="store_true", help="print every disagreement")
    parser.add_argument("--timing", action="store_true", help="time the rewards on tiny GRPO steps")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = load_cases(args.cases)
    runs = {"this tree": evaluate(cases)}
    if args.timing:
        runs["this tree"]["timing"] = timing()
    if args.json:
        print(json.dumps(runs["this tree"]))
        return
    if args.compare:
        runs = {args.compare: _ref_verdicts(args.compare, args.cases.resolve(), args.timing), **runs}
    comparable = sum(c["comparable"] for c in cases)
    print(f"{len(cases)} cases, {comparable} comparable ({len(cases) - comparable} ask for "
          "something else and are not counted)")
    for name, run in runs.items():
        print(f"\n== {name} ({run['reasonkit']}); slowest call {1000 * run['worst_call_s']:.0f} ms "
              f"(after a first symbolic call of {1000 * run['first_call_s']:.0f} ms)")
        for key, block in summarize(cases, run["verdicts"]).items():
            print(_line(key, block))
        for label, t in run.get("timing", {}).items():
            if isinstance(t, dict):
                cpu = (f"; CPU median {1000 * t['cpu_median_s']:.1f} ms, max {1000 * t['cpu_max_s']:.1f} ms, "
                       f"{t['unjudged_per_step']:.0f} answers left unjudged" if "cpu_median_s" in t else "")
                print(f"{label:18s} rewards, 64 completions: wall median {1000 * t['median_s']:.1f} ms, "
                      f"max {1000 * t['max_s']:.1f} ms, first {1000 * t['first_s']:.1f} ms; "
                      f"{100 * t['median_s'] / TINY_STEP_S:.1f}% of a {TINY_STEP_S} s tiny GRPO step{cpu}")
            else:
                print(f"{label}: {1000 * t:.0f} ms")
    if args.list:
        verdicts = runs["this tree"]["verdicts"]
        print("\n== disagreements (this tree)")
        for case, got in zip(cases, verdicts, strict=True):
            if case["comparable"] and got != case["expected"]:
                gold = case.get("gold_answer", case["gold"])
                print(f"#{case['id']} {case['source']} {case['test']} [{case['mode']}] expected "
                      f"{case['expected']}, got {got}: gold {gold[:60]!r} pred {case['pred'][:80]!r}")


if __name__ == "__main__":
    main()
