"""GRPO on harder prompts, against its controls: the results in benchmarks/grpo_hard.json.

Run from the repository root (about 25 minutes a seed on a 2-core CPU, 10 more per control):

    python benchmarks/grpo_hard.py --seeds 0 [1 2 3 4] [--controls shuffled] [--root DIR]

Per seed, the tiny preset with :data:`HARD` and that seed in every stage: SFT and DPO on the
difficulty-1 gold traces; GRPO on difficulty-2 prompts (``grpo.difficulty``) that the DPO
policy gets right 1 to G-1 times of G (``grpo.keep_contrast``), paid for verified answers
(``answer_verified``) and a little for the format. Each stage is scored greedily on two
sets no split holds (``benchmarks/seeds.py``): ``hard``, ``--hard`` fresh difficulty-2
prompts per domain, and ``fresh``, ``--fresh`` fresh difficulty-1 prompts per domain.
SFT's pass@``--k`` on the first ``--pass-per-domain`` hard prompts of each domain is the
stretch goal's mark. Controls start from the same DPO adapters and train on the same kept
prompts:

  shuffled  GRPO whose rewards are permuted across each step's answers: what GRPO does
            with rewards that carry no information about the answers

Stages and scores are kept in the runs (``seeds.py`` keeps scores in ``eval/seeds.json``),
so the script can be stopped and run again. It writes ``results`` into ``--out`` and never
touches the file's ``preregistered`` section, written before the first full run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import shutil
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import seeds  # noqa: E402

from reasonkit import evaluate, models, rewards, template, train  # noqa: E402
from reasonkit.presets import get_preset  # noqa: E402
from reasonkit.runtime import runs, session  # noqa: E402
from reasonkit.train import contrast  # noqa: E402

# The tiny preset's GRPO, moved to the edge of its competence (issue 54).
HARD = {"grpo.difficulty": 2, "grpo.keep_contrast": True,
        "grpo.max_prompt_length": 128, "grpo.max_generation_length": 112,
        "eval.max_prompt_length": 128, "eval.max_generation_length": 112,
        "grpo.rewards": [["answer_verified", 1.0], ["format_exact", 0.1]]}
STAGES = seeds.STAGES


def shuffled(fns: Sequence[Callable], seed: int) -> list[Callable]:
    """``fns``, each returning its rewards permuted across the step's answers.

    One permutation per step, shared by every function (it is drawn from the step's
    completions), so the summed reward is permuted as a whole: each answer gets another
    answer's reward.

    >>> fns = shuffled([lambda p, c, **k: [float(len(t)) for t in c]], seed=0)
    >>> out = fns[0](None, ["a", "bb", "ccc", "dddd"])
    >>> sorted(out), out == fns[0](None, ["a", "bb", "ccc", "dddd"])
    ([1.0, 2.0, 3.0, 4.0], True)
    """
    def wrap(fn: Callable) -> Callable:
        def permuted(prompts: Any, completions: Sequence[Any], **kwargs: Any) -> list[float]:
            values = list(fn(prompts, completions, **kwargs))
            key = hashlib.sha256(repr((seed, list(map(str, completions)))).encode()).digest()
            order = np.random.default_rng(int.from_bytes(key[:8], "little")).permutation(len(values))
            return [values[i] for i in order]

        permuted.__name__ = f"{getattr(fn, '__name__', 'reward')}_shuffled"
        return permuted

    return [wrap(fn) for fn in fns]


def hard_preset(seed: int, quick: bool = False):
    overrides = HARD | {f"{st}.seed": seed for st in STAGES}
    if quick:
        overrides |= {"sft.max_steps": 4, "dpo.max_steps": 2, "grpo.max_steps": 2}
    return get_preset("tiny", **overrides)


def pass_at_k(preset, run: runs.RunDir, stage: str, records: list[dict], k: int) -> dict[str, Any]:
    """The fraction of ``records`` one of ``k`` sampled answers of ``stage`` gets right,
    sampled as evaluation samples (``eval.temperature``)."""
    kept_path = run.stage("eval") / "pass_at_k.json"
    kept = json.loads(kept_path.read_text()) if kept_path.is_file() else {}
    trained = (run.stage(stage) / "finished.json").read_text()
    key = hashlib.sha1(json.dumps([trained, k, [r["prompt"] for r in records]]).encode()).hexdigest()
    if kept.get(stage, {}).get("key") != key:
        _, policy, tok, _ = models.load_policy(preset, run, stage, None)
        sampler = evaluate.make_sampler(policy, tok, preset.model, preset.eval)
        prompts = [template.format_prompt(r["prompt"]) for r in records]
        right = np.zeros((len(records), k), dtype=bool)
        for i in range(k):
            texts = evaluate.generate(sampler, prompts, preset.eval, models.stop_token_ids(tok), sample=True,
                                      seed=preset.eval.seed + i, desc=f"{stage}: sample {i + 1}/{k}")
            right[:, i] = [rewards.is_correct(t, r["answer"], r["domain"])
                           for r, t in zip(records, texts, strict=True)]
        del policy, sampler
        models.free()
        kept[stage] = {"key": key, "n": len(records), "k": k,
                       "pass_at": [100 * float(right[:, :j].any(axis=1).mean()) for j in range(1, k + 1)]}
        kept_path.parent.mkdir(parents=True, exist_ok=True)
        kept_path.write_text(json.dumps(kept, indent=1) + "\n")
    return {name: kept[stage][name] for name in ("n", "k", "pass_at")}


def run_control(preset, run: runs.RunDir, name: str) -> runs.RunDir:
    """The control ``name`` beside ``run``: its DPO adapters and GRPO's kept prompts, GRPO
    trained again with the control's change."""
    ctl = runs.branch(run, f"{run.name}-{name}", ("data", "sft", "dpo"))
    if not ctl.is_finished("grpo"):
        ctl.stage("grpo").mkdir(parents=True, exist_ok=True)
        for file in (contrast.PROMPTS_FILE, contrast.SUMMARY_FILE):  # the same prompts
            shutil.copy(run.stage("grpo") / file, ctl.stage("grpo") / file)
        fns = train.grpo_reward_fns(preset)
        if name == "shuffled":
            fns = shuffled(fns, preset.grpo.seed)
        train.train_grpo(preset, ctl, reward_fns=fns)
        models.free()
    return ctl


def verdict(report: dict[str, Any], diagnostics: dict[str, Any] | None) -> dict[str, Any]:
    """The pre-registered stop rules and targets, read against the results.

    >>> rows = {"0": {"grpo_minus_sft": {"hard": 0.97, "fresh": 0.5}}}
    >>> diag = {"results": {"sft": {"2": {"math": {"greedy": 3.0, "pass_at_k_verified": 2.0},
    ...                                    "summarization": {"greedy": 20.0, "pass_at_k_verified": 51.0}}}}}
    >>> v = verdict({"results": rows}, diag)
    >>> v["headroom_points"], v["headroom_stops"], v["pilot_stops"], v["targets_met"]
    ({'math': -1.0, 'summarization': 31.0}, False, True, False)
    """
    gains = {s: r["grpo_minus_sft"] for s, r in report["results"].items() if not s.endswith("-quick")}
    out: dict[str, Any] = {}
    if diagnostics is not None:
        sft = diagnostics["results"]["sft"]["2"]
        out["headroom_points"] = {d: round(v["pass_at_k_verified"] - v["greedy"], 2) for d, v in sft.items()}
        out["headroom_stops"] = all(h < 15 for h in out["headroom_points"].values())
    hard = [g["hard"] for g in gains.values()]
    out["pilot_stops"] = len(hard) == 1 and hard[0] < 4
    out["targets_met"] = bool(len(hard) >= 5 and np.mean(hard) >= 10 and min(hard) >= 5
                              and min(g["fresh"] for g in gains.values()) >= -0.5)
    return out


def main(argv=None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--controls", nargs="*", default=[], choices=["shuffled"])
    ap.add_argument("--hard", type=int, default=600, help="fresh difficulty-2 prompts per domain")
    ap.add_argument("--fresh", type=int, default=1000, help="fresh difficulty-1 prompts per domain")
    ap.add_argument("--k", type=int, default=4, help="SFT's pass@k on the hard set (the stretch goal)")
    ap.add_argument("--pass-per-domain", type=int, default=100)
    ap.add_argument("--root", default=None, help="runs root (default: reasonkit's runs root)/grpo_hard")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "grpo_hard.json"))
    ap.add_argument("--quick", action="store_true", help="smoke run: a few steps, 4 prompts a domain")
    args = ap.parse_args(argv)
    if args.quick:
        args.hard, args.fresh, args.pass_per_domain, args.k = 4, 4, 2, 2
    root = pathlib.Path(args.root) if args.root else session.default_root() / "grpo_hard"
    out = pathlib.Path(args.out)
    report = json.loads(out.read_text()) if out.is_file() else {}
    results = report.setdefault("results", {})
    for seed in args.seeds:
        preset = hard_preset(seed, args.quick)
        run = runs.RunDir.create(f"seed{seed}" + ("-quick" if args.quick else ""), root=root)
        count = seeds.token_counter(preset)
        sets = seeds.heldout_sets(preset, seeds.build_data(preset, run, count), count, args.fresh,
                                  args.hard)
        sets = {name: sets[name] for name in ("hard", "fresh")}
        row: dict[str, Any] = {"n": {k: len(v) for k, v in sets.items()}}
        for stage in STAGES:
            t = time.time()
            train.train_or_load(preset, run, stage)
            models.free()
            row[stage] = {k: v for k, v in seeds.scores(preset, run, stage, sets).items()}
            print(f"seed {seed} {stage}: " + ", ".join(
                f"{k} {v['accuracy']:.2f}%" for k, v in row[stage].items()) + f" ({time.time() - t:.0f} s)",
                flush=True)
        row["contrast"] = json.loads((run.stage("grpo") / contrast.SUMMARY_FILE).read_text())
        per_domain = {}
        for r in sets["hard"]:
            per_domain.setdefault(r["domain"], []).append(r)
        sample = [r for group in per_domain.values() for r in group[:args.pass_per_domain]]
        row["sft_pass_at_k_hard"] = pass_at_k(preset, run, "sft", sample, args.k)
        for name in args.controls:
            ctl = run_control(preset, run, name)
            row[f"control_{name}"] = seeds.scores(preset, ctl, "grpo", sets)
            print(f"seed {seed} control {name}: " + ", ".join(
                f"{k} {v['accuracy']:.2f}%" for k, v in row[f"control_{name}"].items()), flush=True)
        row["grpo_minus_sft"] = {k: row["grpo"][k]["accuracy"] - row["sft"][k]["accuracy"] for k in sets}
        results[str(seed) + ("-quick" if args.quick else "")] = row
    report["settings"] = {"preset": "tiny", "overrides": HARD, "hard_per_domain": args.hard,
                          "fresh_per_domain": args.fresh, "hard_difficulty": seeds.HARD_DIFFICULTY}
    diagnostics = ROOT / "benchmarks" / "grpo_diagnostics.json"
    report["verdict"] = verdict(report, json.loads(diagnostics.read_text())
                                if diagnostics.is_file() else None)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({s: r["grpo_minus_sft"] for s, r in results.items()}, indent=1))
    return report


if __name__ == "__main__":
    main()
