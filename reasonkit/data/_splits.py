"""Filters, rebalancing, the held-out evaluation set, DPO pairs, and the splits on disk.

:func:`build_splits` filters records for each stage (malformed, duplicate, too long for
the stage's :class:`Limits`, a gold the checker cannot score), holds out an evaluation
set per domain, rebalances each stage's set to the target domain mix and builds DPO
pairs; its :class:`~reasonkit.data._records.DataReport` counts every row dropped on the
way. :func:`write_splits` and :func:`read_splits` keep the result in a directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import random
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from reasonkit import tasks
from reasonkit.config import DOMAINS, TRAIN_STAGES, DataConfig, check_weights
from reasonkit.data._pairs import preference_pair
from reasonkit.data._records import (
    DataReport,
    Drops,
    SourceReport,
    _existing,
    _where,
    gold_problem,
    read_jsonl,
    validate_record,
    write_jsonl,
)
from reasonkit.template import format_completion, format_prompt, normalize_prompt

if TYPE_CHECKING:
    from reasonkit.config import Preset

__all__ = ["Limits", "STAGES", "stage_limits", "too_long", "drop_malformed", "drop_duplicates",
           "drop_too_long", "drop_bad_gold", "drop_pairs", "domain_targets", "rebalance",
           "hold_out_eval", "drop_eval_prompts", "make_pairs", "Splits", "build_splits",
           "harder_grpo", "HARD_SEED",
           "REPORT_FILE", "write_splits", "read_splits"]


# --- filters ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Limits:
    """A stage's token budgets (None: no limit).

    ``prompt`` counts ``format_prompt(prompt)`` plus the BOS token every stage puts
    before it (SFT's collator, DPO's examples, GRPO's rollout and evaluation all do);
    ``completion`` the target (``format_completion(...)``, or the longer of
    ``chosen``/``rejected``); ``total`` both together.
    """

    prompt: int | None = None
    completion: int | None = None
    total: int | None = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            n = getattr(self, field.name)
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                raise ValueError(f"Limits.{field.name}={n!r}: must be None (no limit) or an "
                                 "int >= 1 (tokens)")


STAGES = ("eval", *TRAIN_STAGES)  # the splits: the held-out one, then one per training stage


def _check_limits(limits: Any) -> dict[str, Limits]:
    """``build_splits``'s ``limits`` as a dict of stage -> Limits, or a clear error."""
    if limits is None:
        return {}
    if isinstance(limits, Limits):  # one budget for every stage is rarely right: say how
        raise TypeError(f"build_splits: limits={limits!r} is a single Limits; expected a "
                        f"mapping of stage name {STAGES} -> Limits, e.g. stage_limits(preset), "
                        "or {stage: limits for stage in STAGES} to give every stage this one")
    if not isinstance(limits, Mapping):
        raise TypeError(f"build_splits: limits is a {type(limits).__name__} ({limits!r:.60}); "
                        f"expected a mapping of stage name {STAGES} -> Limits, "
                        "e.g. stage_limits(preset)")
    unknown = sorted(set(limits) - set(STAGES), key=repr)
    if unknown:
        raise ValueError(f"build_splits: limits has unknown stage(s) {unknown}; "
                         f"stages: {list(STAGES)}")
    for stage, value in limits.items():
        if not isinstance(value, Limits):
            raise TypeError(f"build_splits: limits[{stage!r}]={value!r:.60} is a "
                            f"{type(value).__name__}; expected a Limits, "
                            "e.g. Limits(prompt=256, total=512)")
    return dict(limits)


def stage_limits(preset: "Preset") -> dict[str, Limits]:
    """Each stage's token budgets from a preset.

    SFT's ``max_target_length`` covers prompt + completion; DPO's response and GRPO's
    generation lengths cover the completion alone (for GRPO, the gold completion is
    the yardstick of what the model must fit in its generation budget).
    """
    return {"eval": Limits(prompt=preset.eval.max_prompt_length),
            "sft": Limits(prompt=preset.sft.max_prompt_length,
                          total=preset.sft.max_target_length),
            "dpo": Limits(prompt=preset.dpo.max_prompt_length,
                          completion=preset.dpo.max_response_length),
            "grpo": Limits(prompt=preset.grpo.max_prompt_length,
                           completion=preset.grpo.max_generation_length)}


def drop_malformed(records: Iterable[Any], drops: Drops) -> list[dict]:
    """Records that pass :func:`validate_record`; the rest counted by reason."""
    kept = []
    for r in records:
        reason = validate_record(r)
        if reason:
            drops.add(reason, _where(r))
        else:
            kept.append(r)
    return kept


def drop_duplicates(records: Iterable[dict], drops: Drops) -> list[dict]:
    """The first record of each normalised prompt (case and whitespace ignored)."""
    seen: set[str] = set()
    kept = []
    for r in records:
        key = normalize_prompt(r["prompt"])
        if key in seen:
            drops.add("duplicate prompt", _where(r))
        else:
            seen.add(key)
            kept.append(r)
    return kept


def _completions(record: dict) -> list[str]:
    if "chosen" in record:
        return [record["chosen"], record["rejected"]]
    return [format_completion(record["reasoning"], record["answer"])]


def too_long(record: dict, count_tokens: Callable[[str], int], limits: Limits) -> str | None:
    """Which budget a record exceeds (``"prompt too long"``, ...), or None.

    ``count_tokens`` counts a text's tokens without BOS; the prompt's count adds one
    for it, as the stages do. A prompt of exactly ``limits.prompt`` tokens would
    otherwise pass here and then be refused by evaluation (or cut by the collators):

    >>> words = lambda text: len(text.split())
    >>> n = words(format_prompt("Add 2 and 3."))
    >>> too_long({"prompt": "Add 2 and 3."}, words, Limits(prompt=n))
    'prompt too long (... > ... tokens)'
    >>> too_long({"prompt": "Add 2 and 3."}, words, Limits(prompt=n + 1)) is None
    True
    """
    p = count_tokens(format_prompt(record["prompt"])) + 1  # + BOS
    if limits.prompt is not None and p > limits.prompt:
        return f"prompt too long ({p} > {limits.prompt} tokens)"
    if limits.completion is None and limits.total is None:
        return None
    c = max(count_tokens(t) for t in _completions(record))
    if limits.completion is not None and c > limits.completion:
        return f"completion too long ({c} > {limits.completion} tokens)"
    if limits.total is not None and p + c > limits.total:
        return f"prompt + completion too long ({p + c} > {limits.total} tokens)"
    return None


def drop_too_long(records: Iterable[dict], drops: Drops, *, count_tokens: Callable[[str], int],
                  limits: Limits) -> list[dict]:
    """Records within a stage's token budgets; the rest counted by which budget."""
    kept = []
    for r in records:
        reason = too_long(r, count_tokens, limits)
        if reason:
            head, _, detail = reason.partition(" (")
            drops.add(head, f"{_where(r)}: {detail.rstrip(')')}")
        else:
            kept.append(r)
    return kept


def drop_bad_gold(records: Iterable[dict], drops: Drops) -> list[dict]:
    """Records whose gold answer can be checked (:func:`gold_problem`)."""
    kept = []
    for r in records:
        reason = gold_problem(r)
        if reason:
            drops.add(reason, f"{_where(r)}: {r['answer'][:40]!r}")
        else:
            kept.append(r)
    return kept


def drop_pairs(records: Iterable[dict], drops: Drops) -> list[dict]:
    """Records without ``chosen``/``rejected`` (pairs train DPO only)."""
    kept = []
    for r in records:
        if "chosen" in r:
            drops.add("preference pair (DPO only)", _where(r))
        else:
            kept.append(r)
    return kept


# --- rebalancing -----------------------------------------------------------------------


def domain_targets(weights: Mapping[str, float], total: int) -> dict[str, int]:
    """Records per domain for a mix of ``total`` (largest remainders; sums to ``total``).

    >>> domain_targets({"math": 2, "coding": 1, "general": 0}, 10)
    {'math': 7, 'coding': 3, 'general': 0}
    """
    weights = check_weights(weights)
    scale = total / sum(weights.values())
    exact = {d: w * scale for d, w in weights.items()}
    out = {d: int(x) for d, x in exact.items()}
    by_remainder = sorted(exact, key=lambda d: (out[d] - exact[d], DOMAINS.index(d)))
    for d in by_remainder[:total - sum(out.values())]:
        out[d] += 1
    return out


def rebalance(records: Sequence[dict], weights: Mapping[str, float], total: int, *,
              max_repeats: int, seed: int | str) -> tuple[list[dict], dict]:
    """A seeded sample of ``total`` records in the mix ``weights``, shuffled.

    Domains with more records than their target are down-sampled without replacement;
    those with fewer are repeated, each record at most ``max_repeats`` times in all.
    Where that cap (or an empty domain) keeps a domain below its target, the returned
    info's ``shortfalls`` says so. Records of domains without weight are not used.

    >>> recs = [{"id": str(i), "domain": "math"} for i in range(3)] + [
    ...     {"id": "c", "domain": "coding"}]
    >>> out, info = rebalance(recs, {"math": 1, "coding": 1}, 6, max_repeats=2, seed=0)
    >>> info["count"], info["shortfalls"]
    ({'math': 3, 'coding': 2},
     {'coding': 'target 3 needs 3 copies of 1 record(s); max_repeats=2 allows 2'})
    """
    targets = domain_targets(weights, total)
    by_domain: dict[str, list[dict]] = {}
    for r in records:
        by_domain.setdefault(r["domain"], []).append(r)
    rng = random.Random(f"reasonkit.rebalance:{seed}")
    out: list[dict] = []
    info: dict[str, Any] = {"available": {}, "target": targets, "count": {}, "shortfalls": {},
                            "unused": {}}
    for d in DOMAINS:
        pool, target = by_domain.get(d, []), targets.get(d, 0)
        if not target:
            if pool:
                info["unused"][d] = len(pool)
            continue
        info["available"][d] = len(pool)
        full, rest = divmod(target, len(pool)) if pool else (0, 0)
        if not pool:
            picked = []
            info["shortfalls"][d] = f"target {target} but no records"
        elif full + (rest > 0) > max_repeats:
            picked = pool * max_repeats
            info["shortfalls"][d] = (f"target {target} needs {full + (rest > 0)} copies of "
                                     f"{len(pool)} record(s); max_repeats={max_repeats} allows "
                                     f"{max_repeats}")
        else:
            picked = pool * full + rng.sample(pool, rest)
        info["count"][d] = len(picked)
        out += picked
    rng.shuffle(out)
    n = len(out) or 1
    info["mix"] = {d: round(c / n, 4) for d, c in info["count"].items()}
    return out, info


# --- the evaluation split --------------------------------------------------------------


def hold_out_eval(records: Sequence[dict], per_domain: int, *, seed: int | str,
                  count_tokens: Callable[[str], int] | None = None,
                  limits: Limits | None = None) -> tuple[list[dict], list[dict], dict]:
    """``(eval, rest, info)``: up to ``per_domain`` records per domain held out.

    Eligible for eval: records with a checkable gold answer, no preference pair, and a
    prompt within ``limits``. At most half of a domain's eligible records are held out,
    so training keeps some; ``info["short"]`` names domains that got fewer.
    """
    rng = random.Random(f"reasonkit.eval:{seed}")
    chosen: set[int] = set()
    info: dict[str, Any] = {"count": {}, "short": {}}
    for d in DOMAINS:
        in_domain = [i for i, r in enumerate(records) if r["domain"] == d]
        if not in_domain:
            continue
        eligible = [i for i in in_domain if "chosen" not in records[i]
                    and gold_problem(records[i]) is None
                    and (limits is None or too_long(records[i], count_tokens, limits) is None)]
        rng.shuffle(eligible)  # an empty list draws nothing: other domains are unaffected
        take = eligible[:min(per_domain, len(eligible) // 2)]
        chosen.update(take)
        info["count"][d] = len(take)
        if len(take) < per_domain:
            info["short"][d] = (f"{len(take)} of {per_domain}: {len(eligible)} eligible "
                                "records, at most half are held out")
    held = [r for i, r in enumerate(records) if i in chosen]
    rest = [r for i, r in enumerate(records) if i not in chosen]
    return held, rest, info


def drop_eval_prompts(records: Iterable[dict], eval_records: Iterable[dict],
                      drops: Drops) -> list[dict]:
    """Training records whose normalised prompt is not an evaluation prompt."""
    held = {normalize_prompt(r["prompt"]) for r in eval_records}
    kept = []
    for r in records:
        if normalize_prompt(r["prompt"]) in held:
            drops.add("prompt in eval split", _where(r))
        else:
            kept.append(r)
    return kept


# --- DPO pairs and the stage sets ------------------------------------------------------


def make_pairs(records: Sequence[dict], *, seed: int | str, drops: Drops,
               count_tokens: Callable[[str], int] | None = None,
               limits: Limits | None = None) -> list[dict]:
    """DPO pairs: a dataset's own pair as is, otherwise :func:`preference_pair`.

    A built pair whose rejected response overflows ``limits`` is dropped and counted.
    """
    rng = random.Random(f"reasonkit.pairs:{seed}")
    answers: dict[str, dict[str, None]] = {}  # distinct gold answers per domain, in order
    for r in records:
        answers.setdefault(r["domain"], {})[r["answer"]] = None
    others = {d: list(a) for d, a in answers.items()}
    pairs = []
    for r in records:
        if "chosen" in r:
            pairs.append({**r, "rejected_kind": "dataset"})
            continue
        pair = preference_pair(r, rng, others=others[r["domain"]])
        reason = too_long(pair, count_tokens, limits) if limits else None
        if reason:
            drops.add("rejected " + reason.partition(" (")[0], _where(r))
        else:
            pairs.append(pair)
    return pairs


@dataclasses.dataclass
class Splits:
    """The held-out evaluation set and each stage's rebalanced training set; with GRPO on
    harder prompts (:func:`harder_grpo`), ``eval_hard``, a held-out block at their
    difficulty."""

    eval: list[dict]
    sft: list[dict]
    dpo: list[dict]
    grpo: list[dict]
    eval_hard: list[dict] = dataclasses.field(default_factory=list)

    def sizes(self) -> dict[str, int]:
        """Records per split (``eval_hard`` only when there is one)."""
        names = STAGES + (("eval_hard",) if self.eval_hard else ())
        return {name: len(getattr(self, name)) for name in names}


# Task seeds of harder GRPO prompts and their evaluation block: HARD_SEED + 100 * data seed
# onwards, apart from the data pool's (the data seed) and the benchmarks' (50_000, 70_000).
HARD_SEED = 20_000


def harder_grpo(splits: Splits, report: DataReport, config: DataConfig, difficulty: int, *,
                count_tokens: Callable[[str], int] | None = None,
                limits: Mapping[str, Limits] | None = None) -> Splits:
    """GRPO's set drawn afresh from the synthetic tasks at ``difficulty``, and a held-out
    ``eval_hard`` block beside it; ``splits`` unchanged when ``difficulty`` is not above
    ``config.difficulty``.

    SFT and DPO keep their gold traces at the data's difficulty; GRPO needs only prompts
    and answers, so it can train where SFT left the policy short. No prompt of the new sets
    is in any other split or in the other new set. ``eval_hard`` takes
    ``config.eval_per_domain`` records per domain that fit ``limits["eval"]``; GRPO's set
    is rebalanced as :func:`build_splits` rebalances it, from ``config.num_records``
    candidates per domain that fit ``limits["grpo"]``. ``report`` records both.
    """
    if difficulty <= config.difficulty:
        return splits
    if "tasks" not in config.sources:
        raise ValueError(f"grpo.difficulty={difficulty} draws GRPO's prompts from the synthetic "
                         f"tasks, but data.sources={list(config.sources)} has no 'tasks'")
    limits = _check_limits(limits)
    if limits and count_tokens is None:
        raise ValueError("limits need count_tokens (a function: text -> number of tokens)")
    weights = check_weights(config.domain_weights)
    domains = [d for d in DOMAINS if weights.get(d, 0) > 0]
    seen = {normalize_prompt(r["prompt"]) for name in STAGES for r in getattr(splits, name)}

    def fits(stage: str) -> Callable[[dict], bool]:
        return lambda r: gold_problem(r) is None and (
            stage not in limits or too_long(r, count_tokens, limits[stage]) is None)

    first = HARD_SEED + 100 * config.seed
    held = tasks.fresh_records(config.eval_per_domain, first_seed=HARD_SEED + 100 * config.held_out_seed,
                               difficulty=difficulty, seen=seen, keep=fits("eval"), domains=domains)
    pool = tasks.fresh_records(config.num_records, first_seed=first + 50, difficulty=difficulty,
                               seen=seen, keep=fits("grpo"), domains=domains)
    grpo, info = rebalance(pool, weights, config.train_size, max_repeats=config.max_repeats,
                           seed=f"{config.seed}:grpo:d{difficulty}")
    report.stages["grpo"] = info
    report.settings["grpo_difficulty"] = difficulty
    report.notes.append(f"grpo: {len(grpo)} prompts at difficulty {difficulty}, drawn afresh; "
                        f"eval_hard: {len(held)} held out beside them")
    report.notes += [f"grpo {d}: {why}" for d, why in info["shortfalls"].items()]
    return dataclasses.replace(splits, grpo=grpo, eval_hard=held)


def build_splits(records: Iterable[Any], config: DataConfig, *,
                 count_tokens: Callable[[str], int] | None = None,
                 limits: Mapping[str, Limits] | None = None,
                 source_reports: Iterable[SourceReport] = ()) -> tuple[Splits, DataReport]:
    """Filter, hold out eval (before rebalancing), rebalance each stage, build DPO pairs.

    The held-out draw uses ``config.eval_seed`` (``config.seed`` when None), the rest
    ``config.seed``: another ``eval_seed`` holds out other records of the same pool.

    ``limits`` maps stage names (``"eval"``, ``"sft"``, ``"dpo"``, ``"grpo"``) to
    :class:`Limits` in tokens counted by ``count_tokens`` (see :func:`stage_limits`); a
    stage left out has no limit. A single ``Limits`` is refused, not applied to every
    stage (the stages' budgets differ); pass ``{s: limits for s in STAGES}`` for that.
    Each stage's set is filtered for that stage first, then rebalanced to
    ``config.train_size`` records in ``config.domain_weights``. No training set holds
    an evaluation prompt. Returns the splits and a report of every drop.
    """
    weights = check_weights(config.domain_weights)
    limits = _check_limits(limits)
    if limits and count_tokens is None:
        raise ValueError("limits need count_tokens (a function: text -> number of tokens)")
    records = list(records)
    report = DataReport(
        settings={"sources": list(config.sources), "domain_weights": weights,
                  "train_size": config.train_size, "eval_per_domain": config.eval_per_domain,
                  "max_repeats": config.max_repeats, "seed": config.seed,
                  "eval_seed": config.held_out_seed,
                  "limits": {k: dataclasses.asdict(v) for k, v in limits.items()}},
        sources=[s.to_dict() for s in source_reports],
        input=dict(Counter(r["domain"] for r in records
                           if isinstance(r, dict) and isinstance(r.get("domain"), str))))
    clean = drop_duplicates(drop_malformed(records, report.drop("clean")), report.drop("clean"))
    if not clean:
        raise ValueError(f"no valid records among {len(records)}: dropped "
                         f"{report.drop('clean').counts}")
    held, pool, info = hold_out_eval(clean, config.eval_per_domain, seed=config.held_out_seed,
                                     count_tokens=count_tokens, limits=limits.get("eval"))
    report.eval = info["count"]
    report.notes += [f"eval {d}: {why}" for d, why in info["short"].items()]
    pool = drop_eval_prompts(pool, held, report.drop("eval"))

    sets = {}
    for stage in TRAIN_STAGES:
        drops = report.drop(stage)
        candidates = pool if stage == "dpo" else drop_pairs(pool, drops)
        if stage == "grpo":
            candidates = drop_bad_gold(candidates, drops)
        if stage in limits:
            candidates = drop_too_long(candidates, drops, count_tokens=count_tokens,
                                       limits=limits[stage])
        sets[stage], report.stages[stage] = rebalance(
            candidates, weights, config.train_size, max_repeats=config.max_repeats,
            seed=f"{config.seed}:{stage}")
        report.notes += [f"{stage} {d}: {why}" for d, why in
                         report.stages[stage]["shortfalls"].items()]
        report.notes += [f"{stage} {d}: {n} records unused (no weight)" for d, n in
                         report.stages[stage]["unused"].items()]
    sets["dpo"] = make_pairs(sets["dpo"], seed=config.seed, drops=report.drop("dpo"),
                             count_tokens=count_tokens, limits=limits.get("dpo"))
    counts = Counter(r["domain"] for r in sets["dpo"])
    report.stages["dpo"]["count"] = {d: counts[d] for d in report.stages["dpo"]["count"]}
    report.stages["dpo"]["mix"] = {d: round(c / max(1, len(sets["dpo"])), 4)
                                   for d, c in report.stages["dpo"]["count"].items()}
    return Splits(eval=held, **sets), report


# --- on disk ---------------------------------------------------------------------------

REPORT_FILE = "data_report.json"


def write_splits(splits: Splits, report: DataReport, out_dir: str | pathlib.Path, *,
                 overwrite: bool = False) -> pathlib.Path:
    """eval.jsonl, sft.jsonl, dpo.jsonl, grpo.jsonl (eval_hard.jsonl) and data_report.json in ``out_dir``.

    Refuses to replace earlier splits unless ``overwrite=True``. Every file is written
    in full beside its place first and moved there only when all are written, so a
    failure leaves no partial split (and earlier splits as they were).
    """
    out = pathlib.Path(out_dir)
    if (out / REPORT_FILE).exists() and not overwrite:
        raise FileExistsError(f"{out} already holds splits ({REPORT_FILE}); pass "
                              "overwrite=True to replace them")
    out.mkdir(parents=True, exist_ok=True)
    blocks = STAGES + (("eval_hard",) if splits.eval_hard else ())
    names = [f"{name}.jsonl" for name in blocks] + [REPORT_FILE]
    temps = {name: out / f".{name}.partial" for name in names}
    try:
        for stage, name in zip(blocks, names, strict=False):
            write_jsonl(getattr(splits, stage), temps[name])
        # backslashreplace: a file name that is not UTF-8 (or any lone surrogate in a note)
        # is written as the JSON escape it reads back as, never a crash at the last file
        temps[REPORT_FILE].write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False),
                                      encoding="utf-8", errors="backslashreplace")
        if not splits.eval_hard:  # none now: an earlier one would be read back as this one's
            (out / "eval_hard.jsonl").unlink(missing_ok=True)
        for name in names:  # the report last: it marks the splits as complete
            os.replace(temps[name], out / name)
    finally:
        for temp in temps.values():
            temp.unlink(missing_ok=True)
    return out


def read_splits(out_dir: str | pathlib.Path) -> tuple[Splits, DataReport]:
    """What :func:`write_splits` wrote."""
    out = _existing(out_dir)
    splits = Splits(**{name: read_jsonl(out / f"{name}.jsonl") for name in STAGES})
    if (out / "eval_hard.jsonl").is_file():
        splits.eval_hard = read_jsonl(out / "eval_hard.jsonl")
    report = DataReport.from_dict(json.loads(
        _existing(out / REPORT_FILE).read_text(encoding="utf-8")))
    return splits, report
