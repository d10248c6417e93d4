"""GRPO on harder prompts, against its controls: the results in benchmarks/results/grpo_hard.json.

Run from the repository root (about 25 minutes a seed on a 2-core CPU, 10 more per control):

    python -m benchmarks.grpo.grpo_hard --seeds 0 [1 2 3 4] [--controls shuffled] [--root DIR]

Per seed, the tiny preset with :data:`HARD` and that seed in every stage: SFT and DPO on the
difficulty-1 gold traces; GRPO on difficulty-2 prompts (``grpo.difficulty``) that the DPO
policy gets right 1 to G-1 times of G (``grpo.keep_contrast``), paid for verified answers
(``answer_verified``) and a little for the format. Each stage is scored greedily on two
sets no split holds (:mod:`benchmarks.grpo.seeds`): ``hard``, ``--hard`` fresh difficulty-2
prompts per domain, and ``fresh``, ``--fresh`` fresh difficulty-1 prompts per domain.
SFT's pass@``--k`` on the first ``--pass-per-domain`` hard prompts of each domain is the
stretch goal's mark. Controls start from the same DPO adapters and train on the same kept
prompts:

  shuffled  GRPO whose rewards are permuted across each step's answers: what GRPO does
            with rewards that carry no information about the answers
  dr-grpo   GRPO with Dr. GRPO's loss (no length or standard-deviation normalisation)
  fading    GRPO whose format reward steps back as the format is learned
            (``format_exact_fading`` at weight 1, for ``format_exact`` at 0.1)
  rs-sft    rejection-sampling SFT: as many answers sampled from the DPO policy as GRPO
            samples (steps x prompts x G, at GRPO's temperature), the verified-correct
            ones kept (each distinct answer once), then SFT on them: the information GRPO
            gets, taught by imitation
  gold-sft  SFT on the kept prompts' gold traces, the same steps: the upper bound a
            teacher gives

Both SFT controls take :data:`CONTROL_SFT` steps (as many examples as GRPO's prompts).

Stages and scores are kept in the runs (``seeds.py`` keeps scores in ``eval/seeds.json``),
so the script can be stopped and run again. It writes ``results`` into ``--out`` and never
touches the file's ``preregistered`` section, written before the first full run.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pathlib
import shutil
import time
from typing import Any, Callable, Sequence

import numpy as np

from benchmarks.common import result_path, write_json
from benchmarks.grpo import seeds
from reasonkit import data, evaluate, models, rewards, template, train
from reasonkit.data import read_jsonl
from reasonkit.presets import get_preset
from reasonkit.runtime import mesh as mesh_lib
from reasonkit.runtime import runs, session
from reasonkit.train import contrast

# The tiny preset's GRPO, moved to the edge of its competence (issue 54).
HARD = {"grpo.difficulty": 2, "grpo.keep_contrast": True,
        "grpo.max_prompt_length": 128, "grpo.max_generation_length": 112,
        "eval.max_prompt_length": 128, "eval.max_generation_length": 112,
        "grpo.rewards": [["answer_verified", 1.0], ["format_exact", 0.1]]}
STAGES = seeds.STAGES
CONTROLS = ("shuffled", "dr-grpo", "fading", "rs-sft", "gold-sft")
FADING = (("answer_verified", 1.0), ("format_exact_fading", 1.0))
# The SFT controls continue from trained adapters: docs/experiments.md's expert-iteration
# rate, over as many examples as GRPO's prompts (steps x grpo.batch_size), at lengths that
# hold a difficulty-2 prompt and its answer.
CONTROL_SFT = {"sft.learning_rate": 1e-3, "sft.max_prompt_length": 128, "sft.max_target_length": 240}


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


def hard_preset(seed: int, quick: bool = False, **extra: Any):
    overrides = HARD | {f"{st}.seed": seed for st in STAGES}
    if quick:  # too few steps for any contrast: GRPO takes its split as drawn
        overrides |= {"sft.max_steps": 4, "dpo.max_steps": 2, "grpo.max_steps": 2,
                      "grpo.keep_contrast": False}
    return get_preset("tiny", **overrides | extra)


def grpo_prompts(run: runs.RunDir) -> list[dict]:
    """The prompts ``run``'s GRPO trained on: those the contrast pass kept, or its split."""
    kept = run.stage("grpo") / contrast.PROMPTS_FILE
    return read_jsonl(kept) if kept.is_file() else data.read_splits(run.require("data"))[0].grpo


def control_preset(preset, name: str):
    """The preset a control trains with: Dr. GRPO's loss, the fading format reward
    (:data:`FADING`), or SFT (:data:`CONTROL_SFT`) for as many examples as GRPO's prompts."""
    if name in ("dr-grpo", "fading"):
        change = {"loss": "dr-grpo"} if name == "dr-grpo" else {"rewards": FADING}
        return dataclasses.replace(preset, grpo=dataclasses.replace(preset.grpo, **change))
    if name in ("rs-sft", "gold-sft"):
        g = preset.grpo
        steps = -(-g.max_steps * g.batch_size // preset.sft.batch_size)
        fields = {k.split(".")[1]: v for k, v in CONTROL_SFT.items()}
        return dataclasses.replace(preset, sft=dataclasses.replace(preset.sft, max_steps=steps, **fields))
    return preset


def pass_at_k(preset, run: runs.RunDir, stage: str, records: list[dict], k: int) -> dict[str, Any]:
    """pass@1 .. pass@``k`` of ``stage`` on ``records`` (%), sampled as evaluation samples
    (``eval.temperature``): the unbiased estimate from each prompt's right answers of ``k``
    (:func:`evaluate.pass_at_k_curve`)."""
    kept_path = run.stage("eval") / "pass_at_k.json"
    kept = json.loads(kept_path.read_text()) if kept_path.is_file() else {}
    trained = (run.stage(stage) / "finished.json").read_text()
    key = hashlib.sha1(json.dumps([trained, k, [r["prompt"] for r in records], "unbiased"]).encode()
                       ).hexdigest()
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
        rows = [{"samples_right": int(c), "samples": k} for c in right.sum(axis=1)]
        kept[stage] = {"key": key, "n": len(records), "k": k,
                       "pass_at": [100 * p for p in evaluate.pass_at_k_curve(rows)]}
        kept_path.parent.mkdir(parents=True, exist_ok=True)
        kept_path.write_text(json.dumps(kept, indent=1) + "\n")
    return {name: kept[stage][name] for name in ("n", "k", "pass_at")}


def own_verified(preset, run: runs.RunDir, records: list[dict]) -> tuple[list[dict], dict[str, Any]]:
    """Rejection sampling: as many answers from ``run``'s DPO policy as GRPO samples on
    ``records`` (``grpo.max_steps x grpo.batch_size x G``, spread evenly over the prompts, at
    GRPO's temperature), kept when verified correct (:func:`rewards.is_verified`), each
    distinct answer to a prompt once; as SFT records, with what was kept."""
    g = preset.grpo
    per_prompt = max(1, round(g.max_steps * g.batch_size * g.num_generations / len(records)))
    cfg = contrast.as_rollouts(preset)
    _, policy, tok, _ = models.load_policy(preset, run, "dpo", None)
    sampler = evaluate.make_sampler(policy, tok, preset.model, cfg)
    prompts = [template.format_prompt(r["prompt"]) for r in records for _ in range(per_prompt)]
    texts = evaluate.generate(sampler, prompts, cfg, models.stop_token_ids(tok), sample=True,
                              seed=g.seed, desc="dpo: rejection sampling")
    del policy, sampler
    models.free()
    kept, info = keep_verified(records, texts, per_prompt)
    return kept, {"per_prompt": per_prompt} | info


def keep_verified(records: list[dict], texts: list[str], per_prompt: int
                  ) -> tuple[list[dict], dict[str, Any]]:
    r"""The verified-correct ``texts`` (``per_prompt`` in a row for each of ``records``) as SFT
    records, each distinct (reasoning, answer) of a prompt once; and the counts.

    >>> recs = [{"prompt": "2 + 3?", "answer": "5", "domain": "math", "reasoning": "gold"}]
    >>> ok = "<reasoning>2 + 3 = 5.</reasoning>\n<answer>5</answer>"
    >>> lucky = "<reasoning>2 + 3 = 6.</reasoning>\n<answer>5</answer>"
    >>> kept, info = keep_verified(recs, [ok, lucky, ok], per_prompt=3)
    >>> [r["reasoning"] for r in kept], info
    (['2 + 3 = 5.'], {'sampled': 3, 'verified': 2, 'distinct_kept': 1, 'prompts_with_one': 1})
    """
    if len(texts) != per_prompt * len(records):
        raise ValueError(f"keep_verified: {len(texts)} texts for {len(records)} prompts x {per_prompt}")
    kept, seen, right = [], set(), 0
    for i, text in enumerate(texts):
        r = records[i // per_prompt]
        if not rewards.is_verified(text, r["answer"], r["domain"]):
            continue
        right += 1
        reasoning, answer = template.split_tagged(text)
        if (r["prompt"], reasoning, answer) not in seen:
            seen.add((r["prompt"], reasoning, answer))
            kept.append(r | {"reasoning": reasoning, "answer": answer})
    return kept, {"sampled": len(texts), "verified": right, "distinct_kept": len(kept),
                  "prompts_with_one": len({r["prompt"] for r in kept})}


def sft_control(preset, run: runs.RunDir, name: str) -> tuple[runs.RunDir, dict[str, Any]]:
    """``name`` ("rs-sft" or "gold-sft"): SFT that starts from ``run``'s DPO adapters, on
    GRPO's kept prompts, as run ``<run>-<name>``'s "sft" stage (what is scored)."""
    ctl = runs.branch(run, f"{run.name}-{name}", ("data", "dpo"))
    records = grpo_prompts(run)
    info_path = ctl.stage("sft") / "control.json"
    if not ctl.is_finished("sft"):
        info: dict[str, Any] = {"prompts": len(records)}
        if name == "rs-sft":
            records, info["sampling"] = own_verified(preset, run, records)
            if not records:
                raise ValueError(f"rs-sft: none of the {info['sampling']['sampled']} answers sampled "
                                 f"from run {run.name!r}'s DPO policy is verified correct: nothing "
                                 "to imitate")
        p = control_preset(preset, name)
        stage = train.build_stage(p, "sft", ctl, started="dpo")
        tok = stage.tokenizer
        stream, collator = train.sft_batches(train.sft_examples(records, tok), p, tok)
        t = time.time()
        with stage.mesh:
            stage.trainer.train(mesh_lib.global_batches(stream, stage.mesh), None)
        info |= {"examples": len(records), "steps": stage.trainer.train_steps,
                 "learning_rate": p.sft.learning_rate, "seconds": round(time.time() - t, 1),
                 "collate": collator.stats.to_dict()}
        info_path.write_text(json.dumps(info, indent=1) + "\n")
        ctl.mark_finished("sft", steps=stage.trainer.train_steps, started_from="dpo", control=name)
        del stage
        models.free()
    return ctl, json.loads(info_path.read_text())


def run_control(preset, run: runs.RunDir, name: str) -> tuple[runs.RunDir, str, dict[str, Any]]:
    """The control ``name`` beside ``run``, from its DPO adapters and GRPO's kept prompts:
    its run, the stage that holds what it trained, and what it did."""
    if name in ("rs-sft", "gold-sft"):
        ctl, info = sft_control(preset, run, name)
        return ctl, "sft", info
    ctl = runs.branch(run, f"{run.name}-{name}", ("data", "sft", "dpo"))
    if not ctl.is_finished("grpo"):
        ctl.stage("grpo").mkdir(parents=True, exist_ok=True)
        for file in runs.CONTRAST_FILES:  # the same prompts
            if (run.stage("grpo") / file).is_file():
                shutil.copy(run.stage("grpo") / file, ctl.stage("grpo") / file)
        p = control_preset(preset, name)
        fns = train.grpo_reward_fns(p)
        if name == "shuffled":
            fns = shuffled(fns, p.grpo.seed)
        train.train_grpo(p, ctl, reward_fns=fns)
        models.free()
    info = ctl.finished_info("grpo")
    return ctl, "grpo", {"steps": info.get("steps"), "seconds": info.get("seconds")}


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
    ap.add_argument("--controls", nargs="*", default=[], choices=CONTROLS)
    ap.add_argument("--hard", type=int, default=600, help="fresh difficulty-2 prompts per domain")
    ap.add_argument("--fresh", type=int, default=1000, help="fresh difficulty-1 prompts per domain")
    ap.add_argument("--k", type=int, default=4, help="SFT's pass@k on the hard set (the stretch goal)")
    ap.add_argument("--pass-per-domain", type=int, default=100)
    ap.add_argument("--root", default=None, help="runs root (default: reasonkit's runs root)/grpo_hard")
    ap.add_argument("--out", default=str(result_path("grpo_hard.json")))
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
        summary = run.stage("grpo") / contrast.SUMMARY_FILE
        row["contrast"] = json.loads(summary.read_text()) if summary.is_file() else None
        per_domain = {}
        for r in sets["hard"]:
            per_domain.setdefault(r["domain"], []).append(r)
        sample = [r for group in per_domain.values() for r in group[:args.pass_per_domain]]
        row["sft_pass_at_k_hard"] = pass_at_k(preset, run, "sft", sample, args.k)
        for name in args.controls:
            ctl, stage, info = run_control(preset, run, name)
            row[f"control_{name}"] = seeds.scores(preset, ctl, stage, sets) | {"did": info}
            print(f"seed {seed} control {name}: " + ", ".join(
                f"{k} {row[f'control_{name}'][k]['accuracy']:.2f}%" for k in sets), flush=True)
        row["grpo_minus_sft"] = {k: row["grpo"][k]["accuracy"] - row["sft"][k]["accuracy"] for k in sets}
        results[str(seed) + ("-quick" if args.quick else "")] = row
    report["settings"] = {"preset": "tiny", "overrides": HARD, "hard_per_domain": args.hard,
                          "fresh_per_domain": args.fresh, "hard_difficulty": seeds.HARD_DIFFICULTY}
    diagnostics = result_path("grpo_diagnostics.json")
    report["verdict"] = verdict(report, json.loads(diagnostics.read_text())
                                if diagnostics.is_file() else None)
    write_json(out, report)
    print(json.dumps({s: r["grpo_minus_sft"] for s, r in results.items()}, indent=1))
    return report


if __name__ == "__main__":
    main()
