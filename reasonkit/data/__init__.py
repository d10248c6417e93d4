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

- :mod:`._records`: the schema, the drop reports, JSONL on disk.
- :mod:`._sources`: JSONL, preference pairs, GSM8K (TFDS, Hugging Face, JSONL), any HF dataset.
- :mod:`._pairs`: DPO pairs: synthetic rejected responses, and pairs of the policy's own answers.
- :mod:`._splits`: stage limits, filters, rebalancing, the evaluation split, the splits on disk.

>>> from reasonkit.config import DataConfig
>>> recs = [{"id": str(i), "domain": "math", "source": "demo", "prompt": f"{i} + 1?",
...          "reasoning": f"{i} + 1 = {i + 1}.", "answer": str(i + 1)} for i in range(20)]
>>> recs.append(dict(recs[0], id="dup", prompt="0  +  1?"))  # a duplicate prompt
>>> cfg = DataConfig(domain_weights={"math": 1.0}, eval_per_domain=4, train_size=30)
>>> splits, report = build_splits(recs, cfg)
>>> splits.sizes(), report.drops["clean"].counts
({'eval': 4, 'sft': 30, 'dpo': 30, 'grpo': 30}, {'duplicate prompt': 1})
"""

from reasonkit.data._pairs import onpolicy_pair
from reasonkit.data._records import DataReport, SourceReport, gold_problem, read_jsonl, write_jsonl
from reasonkit.data._sources import load_gsm8k, load_sources
from reasonkit.data._splits import (
    Limits,
    Splits,
    build_splits,
    harder_grpo,
    read_splits,
    stage_limits,
    too_long,
    write_splits,
)

__all__ = ["onpolicy_pair", "gold_problem", "SourceReport", "DataReport", "read_jsonl", "write_jsonl",
           "load_gsm8k", "load_sources", "Limits", "stage_limits", "too_long", "Splits", "build_splits",
           "harder_grpo", "write_splits", "read_splits"]

# The public classes are named as this package's (reasonkit.data.DataReport, ...): that is
# where callers import them from, what pickle records and what plots.qualified_name shows.
for _cls in (SourceReport, DataReport, Limits, Splits):
    _cls.__module__ = __name__
del _cls
