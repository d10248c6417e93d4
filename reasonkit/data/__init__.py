"""One record schema, sources, filters, rebalancing and splits.

Every source turns its rows into records of one schema::

    {"id": "gsm8k-train-0", "domain": "math", "source": "gsm8k",
     "prompt": "Natalia sold ...",      # the question only, never templated
     "reasoning": "Natalia sold 48/2 = 24 clips in May. ...",
     "answer": "72"}                      # + "chosen" / "rejected" for preference data

and reports what it read and what it dropped, and why (:class:`SourceReport`).
:func:`build_splits` then filters (malformed, duplicate, too long, a gold the checker
cannot score), holds out an evaluation set per domain, rebalances each stage's set to
the target domain mix and builds DPO pairs; :class:`DataReport` counts every row
dropped on the way, by reason. Every stage formats records with the one template
(:mod:`reasonkit.template`), and every gold answer is judged by the one checker
(:mod:`reasonkit.answers`).

- :mod:`.records`: the schema, the drop reports, JSONL on disk.
- :mod:`.sources`: JSONL, preference pairs, GSM8K (TFDS, Hugging Face, JSONL), any HF dataset.
- :mod:`.pairs`: rejected responses for DPO pairs.
- :mod:`.splits`: stage limits, filters, rebalancing, the evaluation split, the splits on disk.

>>> from reasonkit.config import DataConfig
>>> recs = [{"id": str(i), "domain": "math", "source": "demo", "prompt": f"{i} + 1?",
...          "reasoning": f"{i} + 1 = {i + 1}.", "answer": str(i + 1)} for i in range(20)]
>>> recs.append(dict(recs[0], id="dup", prompt="0  +  1?"))  # a duplicate prompt
>>> cfg = DataConfig(domain_weights={"math": 1.0}, eval_per_domain=4, train_size=30)
>>> splits, report = build_splits(recs, cfg)
>>> splits.sizes(), report.drops["clean"].counts
({'eval': 4, 'sft': 30, 'dpo': 30, 'grpo': 30}, {'duplicate prompt': 1})
"""

from reasonkit.config import check_weights
from reasonkit.data.pairs import wrong_answer
from reasonkit.data.records import FIELDS, DataReport, Drops, SourceReport, gold_problem, validate_record
from reasonkit.data.sources import (
    load_gsm8k,
    load_hf,
    load_jsonl,
    load_preferences,
    load_source,
    load_sources,
    parse_gsm8k,
)
from reasonkit.data.splits import (
    REPORT_FILE,
    STAGES,
    Limits,
    Splits,
    build_splits,
    domain_targets,
    drop_bad_gold,
    drop_duplicates,
    drop_malformed,
    drop_pairs,
    drop_too_long,
    read_splits,
    rebalance,
    stage_limits,
    too_long,
    write_splits,
)
from reasonkit.template import END_OF_TURN, format_completion, format_prompt, normalize_prompt

__all__ = [
    # records
    "FIELDS", "validate_record", "gold_problem", "Drops", "SourceReport", "DataReport",
    # sources
    "parse_gsm8k", "load_jsonl", "load_preferences", "load_gsm8k", "load_hf", "load_source",
    "load_sources",
    # pairs
    "wrong_answer",
    # splits
    "Limits", "STAGES", "stage_limits", "too_long", "drop_malformed", "drop_duplicates",
    "drop_too_long", "drop_bad_gold", "drop_pairs", "domain_targets", "rebalance", "Splits",
    "build_splits", "REPORT_FILE", "write_splits", "read_splits",
    # reached here by callers, defined in reasonkit.config and reasonkit.template
    "check_weights", "END_OF_TURN", "format_prompt", "format_completion", "normalize_prompt",
]

# The public classes are named as this package's (reasonkit.data.DataReport, ...): that is
# where callers import them from, what pickle records and what plots.qualified_name shows.
for _cls in (Drops, SourceReport, DataReport, Limits, Splits):
    _cls.__module__ = __name__
del _cls
