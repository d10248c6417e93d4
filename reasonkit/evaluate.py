"""One fixed evaluation for every stage: generate, score, compare (:mod:`reasonkit.notebook` shows it).

The same held-out prompts and the same decoding settings for the base model and each
stage, so a row of the stage table differs from the next only by what the stage did.
Answers are read by :mod:`reasonkit.template` and judged by :mod:`reasonkit.answers`, the
same code the data filters and the GRPO rewards use.

Scoring one completion:

>>> row = score({"domain": "math", "answer": "12"},
...             "<reasoning>3 * 4 = 12.</reasoning>\\n<answer>12</answer><end_of_turn>")
>>> row["format_ok"], row["correct"], row["reason"]
(True, True, 'ok')
>>> row = score({"domain": "math", "answer": "12"}, "The answer is 12.")  # prose, as a base model
>>> row["reason"], row["correct"], row["lenient"]
('no_answer_tag', False, True)
>>> score({"domain": "general", "answer": "Tom"}, "Tom is 12. So the answer is Tom.")["lenient"]
True
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import hashlib
import json
import math
import numbers
import pathlib
import time
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from reasonkit import answers, data, models, template
from reasonkit import rewards as rewards_lib
from reasonkit.config import TRAIN_STAGES, EvalConfig, GRPOConfig, ModelConfig, Preset
from reasonkit.rewards import extract
from reasonkit.runtime import RunDir, is_writer, write_files
from reasonkit.runtime import mesh as mesh_lib
from reasonkit.train import generate, make_sampler, prompt_lengths

__all__ = ["METRICS", "LABELS", "make_sampler", "prompt_lengths",
           "generate", "score", "majority", "extract", "score_stage",
           "summarize", "sampled_decoding", "sampled_subset", "evaluate_model", "base_cache",
           "seeds", "load_gsm8k_test", "score_gsm8k", "too_long_row",
           "summarize_gsm8k", "evaluate_gsm8k", "gsm8k_line", "stages_to_evaluate", "load_stage",
           "evaluate_run", "save_run", "standard_error", "paired_difference", "ordered",
           "write_results"]

_STAGE_ORDER = ("base", *TRAIN_STAGES)
_NUMERIC = answers.NUMERIC_DOMAINS
# accuracy is strict (the answer tag, right); lenient accuracy also reads an untagged answer
# in prose, so a model that answers without the format (the base) is measured as it answers.
# pass@k and maj@k are left out of a summary whose stage drew no samples (eval.num_samples 0):
# the tables show "-", not 0%.
METRICS = ("format_rate", "accuracy", "lenient_accuracy", "partial", "pass_at_k", "maj_at_k")
LABELS = {"format_rate": "format pass", "accuracy": "accuracy", "lenient_accuracy": "lenient accuracy",
          "partial": "partial accuracy", "pass_at_k": "pass@k", "maj_at_k": "maj@k",
          "mean_length": "mean length (tokens)"}


# --- scoring --------------------------------------------------------------------------


def _items(text: str) -> set[str]:
    return set(answers.normalize_text(text).split())


def _partial_credit(domain: str, predicted: str | None, gold: str) -> float:
    """1 for a correct answer; otherwise numeric closeness (within 10%) or item overlap.

    Numeric closeness is GRPO's ``answer_close`` divided by its maximum
    (:func:`reasonkit.answers.closeness`), so a percent reads both ways and a gold of 0
    uses the absolute error there as here.

    >>> _partial_credit("math", "11", "10"), _partial_credit("general", "2 7", "2 7 9")
    (0.0, 0.6666666666666666)
    >>> round(_partial_credit("science", "10.5", "10"), 2), round(_partial_credit("math", "49%", "0.5"), 2)
    (0.5, 0.8)
    """
    if predicted is None:
        return 0.0
    if answers.check_answer(domain, predicted, gold):
        return 1.0
    if domain in _NUMERIC:
        return answers.closeness(predicted, gold)
    pred, want = _items(predicted), _items(gold)
    return len(pred & want) / len(pred | want) if pred | want else 0.0


def _gold(record: Any, index: int | None = None) -> Any:
    """A record's gold answer, or a clear error naming the record."""
    if isinstance(record, Mapping) and "answer" in record:
        return record["answer"]
    where = f"record {index}" if index is not None else "the record"
    if not isinstance(record, Mapping):
        raise TypeError(f"{where} is {type(record).__name__}, not a record (a dict with 'answer')")
    raise ValueError(f"{where} (id {record.get('id')!r}) has no gold 'answer'; its keys: "
                     f"{sorted(map(str, record))}")


def score(record: dict, completion: str, num_tokens: int | None = None) -> dict[str, Any]:
    """Format, extracted answer, correctness and why extraction failed, for one completion.

    None is a missing completion (no answer tag); bytes are decoded. Anything else that
    is not text (a number, a list: a bug upstream, never a model's output) is counted
    wrong with the reason ``"not_text"``.

    >>> score({"domain": "math", "answer": "12"}, 12)["reason"]
    'not_text'
    """
    gold = _gold(record)
    domain = record.get("domain", "general")
    if completion is None:
        completion = ""
    elif isinstance(completion, bytes):
        completion = completion.decode("utf-8", "replace")
    if not isinstance(completion, str):
        return {"format_ok": False, "reason": "not_text", "answer": None, "correct": False,
                "lenient": False, "partial": 0.0, "length": num_tokens if num_tokens is not None else 0}
    ext = extract(completion)  # once: the answer tag, read as rewards.is_correct reads it
    correct = rewards_lib.verdict(ext, gold, domain)  # the verdict the rewards pay for
    # lenient: without a usable answer tag, the free text's final answer (last \boxed{}, "final
    # answer is", last number) counts, as lm-evaluation-harness's flexible-extract reads GSM8K;
    # in the text domains also a word answer it states ("So the answer is Tom.")
    loose = None if ext.ok else answers.lenient_answer(completion, domain)
    lenient = correct or (loose is not None and answers.check_answer(domain, loose, gold))
    return {"format_ok": template.has_exact_format(completion), "reason": ext.reason,
            "answer": ext.answer, "correct": bool(correct), "lenient": bool(lenient),
            "partial": _partial_credit(domain, ext.answer if ext.ok else None, gold),
            "length": num_tokens if num_tokens is not None else len(completion.split())}


def _vote_text(answer: Any, index: int) -> str | None:
    """An extracted answer as text to vote with; None for no answer."""
    if answer is None:
        return None
    if isinstance(answer, str):
        return answer.strip() or None
    if isinstance(answer, numbers.Real) and not isinstance(answer, bool):
        if isinstance(answer, float) and not math.isfinite(answer):
            return None  # NaN is no answer (the checker never matches it either)
        return str(answer)
    raise TypeError(f"majority: answer {index} is {type(answer).__name__} ({answer!r:.60}); "
                    "expected the extracted answers: str, a number, or None for a failed one")


def _approx(x: Fraction) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def majority(found: Sequence[Any], domain: str = "general") -> str | None:
    """The most common extracted answer, ignoring failed extractions (None, blank).

    Answers that :func:`reasonkit.answers.check_answer` calls equal under ``domain`` vote
    together, so "12", "12.0" and "$12" are one answer; ties go to the answer seen
    first, which also speaks for its group. Numbers (an int or float is read as its
    text) and text group in one pass by :func:`reasonkit.answers.canonical`'s key;
    groups that the checker still calls equal under other keys ("50%" and "0.5", a
    decimal and the repeating fraction it rounds, "2" and ``\\sqrt{4}``) merge through
    indexes by value and by words, so 2000 distinct answers take milliseconds. Only
    symbolic answers (no number or text key) are compared pairwise, with the other
    symbolic and numeric groups.

    >>> majority(["12", " 12 ", "13", None])
    '12'
    >>> majority(["13", "13", "12", "12.0", "$12", 12], "math")
    '12'
    >>> majority(["0.5", "50%", "\\\\frac{1}{2}", "1/3", "0.333333333333", "0.3333333333333"], "math")
    '0.5'
    """
    by_key: dict[Any, tuple[answers.Answer, list[str]]] = {}  # key -> (read, members), in order
    for i, a in enumerate(found):
        text = _vote_text(a, i)
        if text is not None:
            read = answers.read_answer(text, domain)  # read.key is answers.canonical(text, domain)
            by_key.setdefault(read.key, (read, []))[1].append(text)
    groups: list[tuple[str, list[str]]] = []  # (representative, members), in order
    by_value: dict[Fraction, list[int]] = {}  # a number group's values (a percent: both) -> groups
    by_words: dict[str, list[int]] = {}       # normalised words -> groups (text compares so)
    repeating: list[tuple[float, int]] = []   # number groups no decimal writes exactly, sorted
    symbolic: list[int] = []                  # math groups: no key says what equals them
    numeric: list[int] = []                   # number groups, for the math ones to meet
    for read, members in by_key.values():
        rep = members[0]
        values = (() if read.kind != "number" else
                  (read.value, read.value / 100) if read.percent else (read.value,))
        near: set[int] = set(by_words.get(read.words, ())) if read.words else set()
        for v in values:
            near.update(by_value.get(v, ()))
            if answers.terminates(v) and repeating:  # 0.333333333333 reads as 1/3 (a float artefact)
                x = _approx(v)
                width = 2 * float(answers.FLOAT_ARTEFACT) * max(1.0, abs(x))
                lo = bisect.bisect_left(repeating, (x - width, -1)) if math.isfinite(x) else 0
                hi = (bisect.bisect_right(repeating, (x + width, len(groups)))
                      if math.isfinite(x) else len(repeating))
                near.update(j for _, j in repeating[lo:hi])
        if read.kind in ("number", "math"):
            near.update(symbolic)
        if read.kind == "math":
            near.update(numeric)
        if read.kind == "invalid":  # an equation whose sides disagree equals nothing
            near.clear()
        for j in sorted(near):  # the first group the checker joins, as a pairwise scan would
            if answers.check_answer(domain, rep, groups[j][0]):
                groups[j][1].extend(members)
                break
        else:
            j = len(groups)
            groups.append((rep, list(members)))
            if read.words:
                by_words.setdefault(read.words, []).append(j)
            for v in values:
                by_value.setdefault(v, []).append(j)
                if not answers.terminates(v):
                    bisect.insort(repeating, (_approx(v), j))
            (symbolic if read.kind == "math" else numeric if read.kind == "number" else []).append(j)
    if not groups:
        return None
    return max(groups, key=lambda g: len(g[1]))[0]  # max keeps the first of equal counts


def score_stage(records: Sequence[dict], greedy: Sequence[str], samples: Sequence[Sequence[str]],
                count_tokens: Callable[[str], int] | None = None) -> list[dict[str, Any]]:
    """Per-record rows: the greedy completion scored, plus pass@k / maj@k over the samples.

    A record without samples (``eval.num_samples`` 0) has ``pass_at_k`` and ``maj_at_k``
    None: not measured, and :func:`summarize` leaves them out.
    """
    rows = []
    for i, (rec, text, group) in enumerate(zip(records, greedy, samples, strict=True)):
        _gold(rec, i)  # a record without a gold: an error naming it, before any scoring
        row = score(rec, text, count_tokens(text) if count_tokens and isinstance(text, str) else None)
        found = [e.answer if e.ok else None for e in map(extract, group)]
        domain = rec.get("domain", "general")
        maj = majority(found, domain)
        right = [a is not None and answers.check_answer(domain, a, rec["answer"]) for a in found]
        row.update(id=rec.get("id"), domain=domain, gold=rec["answer"], prompt=rec["prompt"],
                   completion=text, samples_right=sum(right), samples=len(right),
                   pass_at_k=any(right) if group else None,
                   maj_at_k=bool(maj is not None and answers.check_answer(domain, maj, rec["answer"]))
                   if group else None)
        rows.append(row)
    return rows


def summarize(rows: Sequence[dict]) -> dict[str, Any]:
    """Overall and per-domain metrics, failure reasons and lengths, from scored rows.

    pass@k and maj@k only where the rows drew samples; ``sampled_accuracy`` (the mean
    accuracy of the subset's samples, :func:`evaluate_model`) with ``sampled_prompts`` and
    ``greedy_on_sampled`` (greedy accuracy on the same prompts) only where rows have them.

    >>> rows = score_stage([{"domain": "math", "answer": "4", "prompt": "2 + 2?"}],
    ...                    ["<answer>4</answer>"], [[]])
    >>> sorted(k for k in summarize(rows)["overall"] if k.endswith("_k"))
    []
    """
    def block(rs):
        n = len(rs)
        if not n:
            return {"n": 0}
        mean = lambda key, among=rs: float(np.mean([float(r[key]) for r in among]))
        out = {"n": n, "format_rate": mean("format_ok"), "accuracy": mean("correct"),
               "lenient_accuracy": mean("lenient"), "partial": mean("partial")}
        drawn = [r for r in rs if r.get("samples")]
        if drawn:  # pass@k and maj@k were measured
            out.update(pass_at_k=mean("pass_at_k", drawn), maj_at_k=mean("maj_at_k", drawn))
        out.update(mean_length=mean("length"),
                   failures=dict(collections.Counter(r["reason"] for r in rs if r["reason"] != "ok")))
        subset = [r for r in rs if "sampled_accuracy" in r]
        if subset:
            out.update(sampled_accuracy=mean("sampled_accuracy", subset), sampled_prompts=len(subset),
                       greedy_on_sampled=mean("correct", subset))
        return out
    domains = sorted({r["domain"] for r in rows})
    return {"overall": block(rows), "per_domain": {d: block([r for r in rows if r["domain"] == d])
                                                   for d in domains}}


def pass_at_k_curve(rows: Sequence[dict]) -> list[float]:
    """pass@k for k = 1 .. n samples, the unbiased estimate (Chen et al. 2021) from each
    row's ``samples_right`` of ``samples``: the chance that k of its samples drawn without
    replacement hold a right one, averaged over the rows.

    >>> rows = [{"samples_right": 1, "samples": 4}, {"samples_right": 0, "samples": 4}]
    >>> [round(p, 3) for p in pass_at_k_curve(rows)]
    [0.125, 0.25, 0.375, 0.5]
    """
    n = min((r["samples"] for r in rows), default=0)
    if not n:
        return []
    return [float(np.mean([1.0 - math.comb(n - r["samples_right"], k) / math.comb(n, k) for r in rows]))
            for k in range(1, n + 1)]


def sampled_decoding(cfg: EvalConfig, grpo: GRPOConfig | None = None) -> EvalConfig | None:
    """How the sampled-accuracy subset is sampled: ``cfg`` at ``cfg.sampled_temperature``, or
    at GRPO's temperature, top-p and top-k when that is None (``grpo`` given; else ``cfg``'s
    own temperature). None when ``cfg.sampled_subset`` is 0.

    >>> from reasonkit.config import GRPOConfig
    >>> sampled_decoding(EvalConfig(sampled_subset=12), GRPOConfig(temperature=0.9)).temperature
    0.9
    >>> sampled_decoding(EvalConfig(sampled_subset=12, sampled_temperature=0.5)).temperature
    0.5
    >>> sampled_decoding(EvalConfig()) is None
    True
    """
    if not cfg.sampled_subset:
        return None
    if cfg.sampled_temperature is not None:
        return dataclasses.replace(cfg, temperature=cfg.sampled_temperature)
    if grpo is None:
        return cfg
    return dataclasses.replace(cfg, temperature=grpo.temperature, top_p=grpo.top_p, top_k=grpo.top_k)


def sampled_subset(records: Sequence[dict], n: int) -> list[int]:
    """Indexes of a fixed subset of ``n`` records, the domains taken in turn (each in its
    split order), so the subset holds every domain alike; sorted.

    >>> recs = [{"domain": d} for d in ["math"] * 4 + ["general"] * 2 + ["coding"] * 3]
    >>> sampled_subset(recs, 5)
    [0, 1, 4, 5, 6]
    """
    by_domain: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_domain.setdefault(r.get("domain", "general"), []).append(i)
    taken: list[int] = []
    queues = [collections.deque(ix) for ix in by_domain.values()]
    while len(taken) < min(n, len(records)):
        for q in queues:
            if q and len(taken) < n:
                taken.append(q.popleft())
    return sorted(taken)


def _completions(sampler, tokenizer, records: Sequence[dict], cfg: EvalConfig,
                 sampled: EvalConfig | None, stage: str) -> dict[str, Any]:
    """Every completion evaluation scores: greedy (with token counts), the pass@k rounds,
    and the sampled subset's; plain lists, as the base cache keeps them."""
    stops = models.stop_token_ids(tokenizer)
    prompts = [template.format_prompt(r["prompt"]) for r in records]
    greedy = generate(sampler, prompts, cfg, stops, desc=f"{stage}: greedy")
    rounds = [generate(sampler, prompts, cfg, stops, sample=True, seed=cfg.seed + k,
                       desc=f"{stage}: sample {k + 1}/{cfg.num_samples}")
              for k in range(cfg.num_samples)]
    out = {"greedy": greedy, "greedy_tokens": [len(tokenizer.EncodeAsIds(t)) for t in greedy],
           "samples": [list(g) for g in zip(*rounds, strict=True)] if rounds else [[] for _ in records]}
    if sampled is not None:
        idx = sampled_subset(records, sampled.sampled_subset)
        sub = [prompts[i] for i in idx]
        rounds = [generate(sampler, sub, sampled, stops, sample=True, seed=sampled.seed + 1000 + k,
                           desc=f"{stage}: subset sample {k + 1}/{sampled.sampled_per_prompt}")
                  for k in range(sampled.sampled_per_prompt)]
        out["subset"] = idx
        out["subset_samples"] = [list(g) for g in zip(*rounds, strict=True)]
    return out


def _score_completions(records: Sequence[dict], texts: dict[str, Any], stage: str,
                       sampled: EvalConfig | None) -> dict[str, Any]:
    """The stage's result (summary and rows) from :func:`_completions`' texts."""
    rows = score_stage(records, texts["greedy"], texts["samples"])
    for row, tokens in zip(rows, texts["greedy_tokens"], strict=True):
        row["length"] = tokens  # as the tokenizer counted them
    for i, group in zip(texts.get("subset", []), texts.get("subset_samples", []), strict=True):
        rec = records[i]
        right = [rewards_lib.verdict(extract(t), rec["answer"], rec.get("domain", "general"))
                 for t in group]
        rows[i].update(sampled_right=int(sum(right)), sampled_n=len(right),
                       sampled_accuracy=sum(right) / len(right) if right else 0.0)
    summary = summarize(rows)
    if sampled is not None:
        summary["sampled"] = {"prompts": len(texts["subset"]), "per_prompt": sampled.sampled_per_prompt,
                              "temperature": sampled.temperature, "top_p": sampled.top_p,
                              "top_k": sampled.top_k,
                              "accuracy": summary["overall"].get("sampled_accuracy"),
                              "greedy_accuracy": summary["overall"].get("greedy_on_sampled")}
    return {"stage": stage, "summary": summary, "rows": rows}


def _cache_key(model_cfg: ModelConfig, records: Sequence[dict], cfg: EvalConfig,
               sampled: EvalConfig | None) -> str:
    """What a model's completions are a function of: the model, the prompts, the decoding."""
    decoding = ("batch_size", "max_prompt_length", "max_generation_length", "num_samples",
                "temperature", "top_p", "top_k", "seed", "buckets")
    parts = {"model": {k: v for k, v in dataclasses.asdict(model_cfg).items() if k != "remat"},
             "prompts": [[r.get("id"), r["prompt"]] for r in records],
             "decoding": {k: getattr(cfg, k) for k in decoding},
             "sampled": None if sampled is None else {
                 k: getattr(sampled, k) for k in (*decoding, "sampled_subset", "sampled_per_prompt")}}
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def base_cache(root: str | pathlib.Path, model_cfg: ModelConfig, records: Sequence[dict],
               cfg: EvalConfig, sampled: EvalConfig | None = None) -> pathlib.Path:
    """The file that keeps a base model's completions of ``records`` under these decoding
    settings: ``<root>/.eval_cache/base-<key>.json``, the key a hash of the model config,
    the prompts (ids and text) and every decoding setting. Any change is another file.

    >>> import tempfile
    >>> from reasonkit.presets import get_preset
    >>> p, recs = get_preset("tiny"), [{"id": "a", "prompt": "2 + 2?"}]
    >>> one = base_cache("runs", p.model, recs, p.eval)
    >>> one.parent.name, one == base_cache("runs", p.model, recs, p.eval)
    ('.eval_cache', True)
    >>> one == base_cache("runs", p.model, recs, dataclasses.replace(p.eval, temperature=0.5))
    False
    """
    return pathlib.Path(root) / ".eval_cache" / f"base-{_cache_key(model_cfg, records, cfg, sampled)}.json"


def _read_cache(path: pathlib.Path | None, records: Sequence[dict]) -> dict[str, Any] | None:
    """The cached completions at ``path``, or None when there are none (or unreadable)."""
    if path is None or not path.is_file():
        return None
    try:
        texts = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return texts if len(texts.get("greedy", ())) == len(records) else None


def evaluate_model(model, tokenizer, records: Sequence[dict], model_cfg: ModelConfig,
                   cfg: EvalConfig, *, stage: str = "model", sampler=None,
                   sampled: EvalConfig | None = None,
                   cache: pathlib.Path | None = None) -> dict[str, Any]:
    """Generate (greedy + ``cfg.num_samples`` sampled) and score; returns summary and rows.

    ``sampler`` (default: :func:`make_sampler`) is reused by a caller that generates more
    with the same model, so its programs compile once. ``sampled``: how the sampled-accuracy
    subset is sampled (default :func:`sampled_decoding` of ``cfg``; nothing when
    ``cfg.sampled_subset`` is 0): ``sampled_per_prompt`` samples of each of
    ``sampled_subset`` prompts (:func:`sampled_subset`); the summary's ``sampled`` and
    each subset row's ``sampled_accuracy`` say how many were right.

    ``cache`` (:func:`base_cache`): completions read from that file when it holds them,
    written there otherwise; the model is not used on a hit. Scores are always computed
    afresh from the completions, with the checker of now.
    """
    sampled = sampled_decoding(cfg) if sampled is None else sampled
    texts = _read_cache(cache, records)
    if texts is None:
        sampler = make_sampler(model, tokenizer, model_cfg, cfg) if sampler is None else sampler
        texts = _completions(sampler, tokenizer, records, cfg, sampled, stage)
        if cache is not None and is_writer():
            cache.parent.mkdir(parents=True, exist_ok=True)
            partial = cache.with_suffix(".partial")
            partial.write_text(json.dumps(texts), encoding="utf-8")
            partial.replace(cache)
    elif cache is not None:
        print(f"{stage}: completions from {cache} (re-scored)")
    return _score_completions(records, texts, stage, sampled)


# --- GSM8K's test split: a number to set beside published ones ---------------------------


def load_gsm8k_test(cfg: EvalConfig) -> tuple[list[dict], data.SourceReport] | None:
    """GSM8K's test problems from ``cfg.gsm8k_test`` (the first ``cfg.gsm8k_limit``);
    None when it is unset. The report counts what the source held and what was dropped.

    A source that cannot be read (no network, a missing file) raises a ``RuntimeError``
    that names the setting and how to point it elsewhere or skip it.
    """
    source = cfg.gsm8k_source()
    if source is None:
        return None
    how, arg = source
    try:
        records, report = data.load_gsm8k("test", source=how, **({"data_dir": arg} if how == "tfds"
                                                                 else {"path": arg}))
    except Exception as e:  # noqa: BLE001 - network, files, packages: one message saying what to do
        raise RuntimeError(
            f"eval.gsm8k_test={cfg.gsm8k_test!r}: GSM8K's test split could not be read "
            f"({type(e).__name__}: {e}). Point it at a local copy ('hf:<dir in the Hub's layout>', "
            """'jsonl:<test.jsonl>'), or skip it: REASONKIT_OVERRIDES='{"eval.gsm8k_test": ""}'""") from e
    if not records:
        raise ValueError(f"eval.gsm8k_test={cfg.gsm8k_test!r}: no GSM8K test problem could be "
                         f"read ({report.read} rows, drops {report.drops.counts})")
    if cfg.gsm8k_limit is not None and cfg.gsm8k_limit < len(records):
        report.notes.append(f"the first {cfg.gsm8k_limit} of {len(records)} problems (eval.gsm8k_limit)")
        records = records[:cfg.gsm8k_limit]
    return records, report


def score_gsm8k(record: dict, completion: Any, num_tokens: int | None = None) -> dict[str, Any]:
    r"""A completion of a GSM8K problem scored both ways, with the one checker.

    ``strict``: the answer tag is required and right (the held-out set's accuracy).
    ``lenient``: the last ``\boxed{}`` or number of the whole completion is right, tags or
    not (:func:`reasonkit.answers.final_answer`), as lm-evaluation-harness's
    "flexible-extract" reads GSM8K. A model that solves the problem without our format
    counts only here.

    >>> gold = {"answer": "72"}
    >>> for text in ["<reasoning>48 + 24 = 72</reasoning>\n<answer>72</answer>",
    ...              "<reasoning>48 + 24 = 72</reasoning>\n<answer>70</answer>",
    ...              "She sold 48 + 24 = 72 clips.",
    ...              "In all $\\boxed{72}$ clips (check: 72 - 24 = 48)."]:
    ...     row = score_gsm8k(gold, text)
    ...     print(row["strict"], row["lenient"], row["reason"])
    True True ok
    False False ok
    False True no_answer_tag
    False True no_answer_tag
    """
    row = score({"domain": "math", "answer": record["answer"]}, completion, num_tokens)
    loose = answers.final_answer(completion)
    lenient = loose is not None and answers.check_answer("math", loose, record["answer"])
    return {"id": record.get("id"), "gold": record["answer"], "prompt": record.get("prompt"),
            "completion": completion, "strict": row["correct"], "lenient": bool(lenient),
            "format_ok": row["format_ok"], "reason": row["reason"], "answer": row["answer"],
            "lenient_answer": loose, "length": row["length"], "too_long": False}


def too_long_row(record: dict, tokens: int) -> dict[str, Any]:
    """The row of a problem whose prompt exceeds ``eval.max_prompt_length``: not generated,
    counted wrong both ways, so the rates stay over every problem."""
    return {"id": record.get("id"), "gold": record["answer"], "prompt": record.get("prompt"),
            "completion": None, "strict": False, "lenient": False, "format_ok": False,
            "reason": "prompt_too_long", "answer": None, "lenient_answer": None, "length": 0,
            "too_long": True, "prompt_tokens": tokens}


def summarize_gsm8k(rows: Sequence[dict]) -> dict[str, Any]:
    """``n``, the strict and lenient rates (over every problem), format pass, prompts too long.

    >>> rows = [score_gsm8k({"answer": "4"}, t) for t in ("<answer>4</answer>", "2 + 2 = 4", "5")]
    >>> s = summarize_gsm8k(rows + [too_long_row({"answer": "4"}, 300)])
    >>> s["n"], s["strict"], s["lenient"], s["too_long"]
    (4, 0.25, 0.5, 1)
    """
    n = len(rows)
    if not n:
        return {"n": 0, "too_long": 0}
    made = [r for r in rows if not r["too_long"]]
    mean = lambda key: float(np.mean([float(r[key]) for r in rows]))
    return {"n": n, "strict": mean("strict"), "lenient": mean("lenient"),
            "format_rate": mean("format_ok"), "too_long": n - len(made),
            "mean_length": float(np.mean([r["length"] for r in made])) if made else 0.0}


def evaluate_gsm8k(model, tokenizer, records: Sequence[dict], model_cfg: ModelConfig,
                   cfg: EvalConfig, *, stage: str = "model", sampler=None) -> dict[str, Any]:
    """Greedy completions of GSM8K problems, scored strict and lenient (:func:`score_gsm8k`).

    The held-out set's prompt template and decoding settings. A prompt longer than
    ``cfg.max_prompt_length`` (BOS included) is not generated: its row says so
    (:func:`too_long_row`) and it counts as wrong, so ``n`` is every problem given.
    """
    sampler = make_sampler(model, tokenizer, model_cfg, cfg) if sampler is None else sampler
    prompts = [template.format_prompt(r["prompt"]) for r in records]
    sizes = prompt_lengths(sampler, prompts)
    fit = [j for j, size in enumerate(sizes) if size <= cfg.max_prompt_length]
    texts = generate(sampler, [prompts[j] for j in fit], cfg, models.stop_token_ids(tokenizer),
                     desc=f"{stage}: GSM8K test")
    made = dict(zip(fit, texts, strict=True))
    rows = [score_gsm8k(rec, made[j], len(tokenizer.EncodeAsIds(made[j]))) if j in made
            else too_long_row(rec, sizes[j]) for j, rec in enumerate(records)]
    return {"stage": stage, "summary": summarize_gsm8k(rows), "rows": rows}


def gsm8k_line(summary: dict[str, Any]) -> str:
    """One stage's GSM8K result in words.

    >>> gsm8k_line({"n": 1319, "strict": 0.412, "lenient": 0.55, "too_long": 2})
    'GSM8K test, strict / lenient: 41.2% / 55.0% of 1319 (2 prompts too long: counted wrong)'
    """
    if not summary["n"]:
        return "GSM8K test: no problems"
    long = summary["too_long"]
    note = f" ({long} prompt{'s' * (long != 1)} too long: counted wrong)" if long else ""
    return (f"GSM8K test, strict / lenient: {summary['strict']:.1%} / {summary['lenient']:.1%} of "
            f"{summary['n']}{note}")


# --- a run's evaluation: what 06_evaluation does, for the notebook and `python -m reasonkit` ---


def stages_to_evaluate(run: RunDir) -> list[str]:
    """The base model, then each of SFT, DPO, GRPO that finished (a stage a deadline
    stopped half-way is not what it set out to train, so it is left out)."""
    return ["base"] + [s for s in TRAIN_STAGES if run.is_finished(s)]


def load_stage(preset: Preset, run: RunDir, name: str, mesh):
    """``(model, tokenizer)``: the base model, or the base with ``name``'s adapters."""
    if name == "base":
        model, tok, _ = models.load_base(preset.model, mesh=mesh)
        return model, tok
    _, policy, tok, _ = models.load_policy(preset, run, name, mesh)
    return policy, tok


def evaluate_run(preset: Preset, run: RunDir, stages: Sequence[str] | None = None, *,
                 mesh=None) -> tuple[dict[str, Any], dict[str, float]]:
    """``(results, seconds)``: each stage (default :func:`stages_to_evaluate`) on the run's
    held-out split, one at a time, freed before the next loads; on GRPO's mesh.

    With ``preset.eval.gsm8k_test`` set, each stage is also scored on GSM8K's test split
    (:func:`evaluate_gsm8k`, loaded once): ``results[stage]["gsm8k"]``; when GRPO trains on
    harder prompts, on their ``eval_hard`` block too: ``results[stage]["hard"]``.

    With ``preset.eval.sampled_subset``, each stage's summary has ``sampled``: the mean
    accuracy of samples on a fixed subset at GRPO's temperature (:func:`sampled_decoding`).
    With ``preset.eval.cache_base``, the base model's completions are kept in the runs root
    (:func:`base_cache`): a later evaluation under the same model, prompts and decoding
    re-scores them without loading the base (unless GSM8K's test split needs it).
    """
    splits = data.read_splits(run.require("data"))[0]
    records, hard = splits.eval, splits.eval_hard
    sampled = sampled_decoding(preset.eval, preset.grpo)
    gsm8k = load_gsm8k_test(preset.eval)
    if gsm8k is not None:
        report = gsm8k[1]
        dropped = f", {report.drops.total} dropped {report.drops.counts}" if report.drops.total else ""
        print(f"GSM8K test: {len(gsm8k[0])} problems from {report.source}{dropped}"
              + "".join(f"; {note}" for note in report.notes))
    mesh = mesh if mesh is not None else mesh_lib.stage_mesh(preset, "eval")
    results, seconds = {}, {}
    for name in stages if stages is not None else stages_to_evaluate(run):
        t0 = time.perf_counter()
        cache = {}  # the base's completions of each block, kept in the runs root
        if name == "base" and preset.eval.cache_base:
            cache = {key: base_cache(run.path.parent, preset.model, block, preset.eval, sampled)
                     for key, block in (("eval", records), ("hard", hard)) if block}
        if cache and gsm8k is None and all(_read_cache(cache[key], block) is not None
                                           for key, block in (("eval", records), ("hard", hard)) if block):
            model = tok = sampler = None  # every completion is cached: the base is not loaded
        else:
            model, tok = load_stage(preset, run, name, mesh)
            sampler = make_sampler(model, tok, preset.model, preset.eval)  # one for all: compiles once
        results[name] = evaluate_model(model, tok, records, preset.model, preset.eval, stage=name,
                                       sampler=sampler, sampled=sampled, cache=cache.get("eval"))
        if hard:  # GRPO's harder prompts' own held-out block (data.harder_grpo)
            results[name]["hard"] = evaluate_model(model, tok, hard, preset.model, preset.eval,
                                                   stage=f"{name}, hard", sampler=sampler,
                                                   sampled=sampled, cache=cache.get("hard"))
        if gsm8k is not None:
            results[name]["gsm8k"] = evaluate_gsm8k(model, tok, gsm8k[0], preset.model, preset.eval,
                                                    stage=name, sampler=sampler)
            results[name]["gsm8k"]["summary"]["source"] = gsm8k[1].source
        del model, sampler
        models.free()  # release this stage's weights before the next one loads
        seconds[name] = time.perf_counter() - t0
        o = results[name]["summary"]["overall"]
        more = (f"  sampled {o['sampled_accuracy']:6.1%} of {o['sampled_prompts']} x "
                f"{sampled.sampled_per_prompt}" if "sampled_accuracy" in o else "")
        print(f"{name:5s} format pass {o['format_rate']:6.1%}  accuracy {o['accuracy']:6.1%}{more}  "
              f"({seconds[name]:.0f} s)")
        if gsm8k is not None:
            print(f"      {gsm8k_line(results[name]['gsm8k']['summary'])}")
    return results, seconds


def seeds(preset: Preset, run: RunDir | None = None) -> dict[str, int]:
    """The seeds an evaluation's numbers depend on: the training data's (``data.seed``),
    the held-out draw's (``data.eval_seed``, resolved) and the samples' (``eval.seed``).

    The data seeds are read from the run's ``data_report.json`` when it records them (the
    splits evaluated on), else from ``preset``.

    >>> from reasonkit.presets import get_preset
    >>> seeds(get_preset("tiny", **{"data.eval_seed": 5}))
    {'data.seed': 0, 'data.eval_seed': 5, 'eval.seed': 0}
    """
    made = {}
    if run is not None and run.is_finished("data"):
        made = data.read_splits(run.stage("data"))[1].settings
    seed = made.get("seed", preset.data.seed)
    held = made.get("eval_seed", seed if "seed" in made else preset.data.held_out_seed)
    return {"data.seed": seed, "data.eval_seed": held, "eval.seed": preset.eval.seed}


def save_run(run: RunDir, preset: Preset, results: dict[str, Any], seconds: dict[str, float],
             files: dict[str, Any] | None = None) -> pathlib.Path:
    """Write ``<run>/eval`` (:func:`write_results`, then ``files``: ``{name: text or figure}``,
    e.g. :func:`reasonkit.plots.eval_tables` and the plots) and mark it finished.

    Evaluation is derived from the checkpoints, not trained: this replaces what is there.
    """
    out = run.stage("eval")
    if is_writer():  # several processes: process 0 writes what they all evaluated
        write_results(results, out, settings=dataclasses.asdict(preset.eval), seeds=seeds(preset, run))
        write_files(out, files or {})
    run.mark_finished("eval", stages=ordered(results), preset=preset.name,
                      seconds={s: round(t, 1) for s, t in seconds.items()})
    return out


# --- noise ------------------------------------------------------------------------------


def standard_error(p: float, n: int) -> float:
    """Binomial standard error of a rate ``p`` measured on ``n`` prompts."""
    return math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1))


def paired_difference(before: Sequence[dict], after: Sequence[dict], key: str = "correct"
                      ) -> dict[str, float]:
    """``after`` minus ``before`` on the same prompts, in points: the mean of the per-prompt
    differences of ``key`` and its standard error, which is smaller than
    :func:`reasonkit.notebook.noise_points`' unpaired one when the two stages mostly agree.

    The rows must be two scorings of the same prompts in the same order (their ``id``).

    >>> a = [{"id": i, "correct": c} for i, c in enumerate([1, 1, 0, 0, 1, 0, 1, 1])]
    >>> b = [{"id": i, "correct": c} for i, c in enumerate([1, 0, 0, 0, 1, 0, 1, 0])]
    >>> paired_difference(a, b)
    {'n': 8, 'mean': -25.0, 'se': 16.37}
    """
    if [r.get("id") for r in before] != [r.get("id") for r in after]:
        raise ValueError(f"paired_difference: the two stages scored different prompts "
                         f"({len(before)} and {len(after)} rows, ids differ): pair the same held-out set")
    d = np.array([float(b[key]) - float(a[key]) for a, b in zip(before, after, strict=True)])
    n = len(d)
    se = float(np.std(d, ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return {"n": n, "mean": round(100 * float(d.mean()), 2) if n else float("nan"),
            "se": round(100 * se, 2)}


# --- reporting ------------------------------------------------------------------------


def ordered(results: dict[str, Any]) -> list[str]:
    """Stage names in pipeline order (base, sft, dpo, grpo), unknown ones last."""
    return sorted(results, key=lambda s: (_STAGE_ORDER.index(s) if s in _STAGE_ORDER else 99, s))


def write_results(results: dict[str, dict], out_dir: str | pathlib.Path, settings: dict,
                  seeds: dict[str, int] | None = None) -> None:
    """results.json (summaries + settings, and ``seeds``: :func:`seeds`) and
    completions_<stage>.jsonl; with GSM8K results
    also gsm8k_completions_<stage>.jsonl, with a hard block hard_completions_<stage>.jsonl.
    Files of stages (or a GSM8K test) evaluated before but not now are removed, tables
    included (:func:`reasonkit.plots.eval_tables` writes them)."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"settings": settings, **({"seeds": seeds} if seeds is not None else {}),
               "stages": {s: results[s]["summary"] for s in ordered(results)}}
    for block in ("gsm8k", "hard"):
        have = [s for s in ordered(results) if block in results[s]]
        if have:
            summary[block] = {s: results[s][block]["summary"] for s in have}
    (out / "results.json").write_text(json.dumps(summary, indent=2, default=str))
    for pattern in ("completions_*.jsonl", "gsm8k_completions_*.jsonl", "hard_completions_*.jsonl",
                    "gsm8k_table.md"):
        for stale in out.glob(pattern):  # stages (or a GSM8K test) evaluated before, not now
            stale.unlink()
    for stage, res in results.items():
        for name, rows in ((f"completions_{stage}", res["rows"]),
                           (f"gsm8k_completions_{stage}", res.get("gsm8k", {}).get("rows")),
                           (f"hard_completions_{stage}", res.get("hard", {}).get("rows"))):
            if rows is not None:
                with open(out / f"{name}.jsonl", "w") as f:
                    for row in rows:
                        f.write(json.dumps(row, default=str) + "\n")


# What the notebooks show of an evaluation moved to reasonkit.notebook; these names stay
# here until the notebooks import them from there.
