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

    python benchmarks/checker_agreement.py                # this tree
    python benchmarks/checker_agreement.py --compare main # and a git ref, side by side
    python benchmarks/checker_agreement.py --list         # every disagreement

"Credited wrong" counts cases whose expected verdict is *wrong* and that a reward pays
for: the number that must stay 0.
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

HERE = pathlib.Path(__file__).resolve().parent
CASES = HERE / "checker_cases.jsonl"
REASONING = "<reasoning>Worked it out.</reasoning>\n"


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

    out, worst = [], 0.0
    for case in cases:
        start = time.perf_counter()
        got = verdict(case, rewards) if case["comparable"] else None
        worst = max(worst, time.perf_counter() - start)
        out.append(got)
    return {"verdicts": out, "worst_call_s": worst, "reasonkit": rewards.__file__}


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


def _ref_verdicts(ref: str, cases_path: pathlib.Path) -> dict:
    """Run this script against ``git archive ref reasonkit`` in a fresh interpreter."""
    root = HERE.parent
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(root), "archive", ref, "reasonkit"],
                                 check=True, capture_output=True).stdout
        tar_path = pathlib.Path(tmp) / "ref.tar"
        tar_path.write_bytes(archive)
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "PYTHONPATH": tmp}
        done = subprocess.run([sys.executable, __file__, "--cases", str(cases_path), "--json"],
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
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cases = load_cases(args.cases)
    runs = {"this tree": evaluate(cases)}
    if args.json:
        print(json.dumps(runs["this tree"]))
        return
    if args.compare:
        runs = {args.compare: _ref_verdicts(args.compare, args.cases.resolve()), **runs}
    comparable = sum(c["comparable"] for c in cases)
    print(f"{len(cases)} cases, {comparable} comparable ({len(cases) - comparable} ask for "
          "something else and are not counted)")
    for name, run in runs.items():
        print(f"\n== {name} ({run['reasonkit']}); slowest call {1000 * run['worst_call_s']:.0f} ms")
        for key, block in summarize(cases, run["verdicts"]).items():
            print(_line(key, block))
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
