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

>>> recs = [{"id": str(i), "domain": "math", "source": "demo", "prompt": f"{i} + 1?",
...          "reasoning": f"{i} + 1 = {i + 1}.", "answer": str(i + 1)} for i in range(20)]
>>> recs.append(dict(recs[0], id="dup", prompt="0  +  1?"))  # a duplicate prompt
>>> cfg = DataConfig(domain_weights={"math": 1.0}, eval_per_domain=4, train_size=30)
>>> splits, report = build_splits(recs, cfg)
>>> splits.sizes(), report.drops["clean"].counts
({'eval': 4, 'sft': 30, 'dpo': 30, 'grpo': 30}, {'duplicate prompt': 1})
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import random
import re
from collections import Counter
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

from reasonkit import answers, tasks
from reasonkit.config import DOMAINS, DataConfig, check_weights
from reasonkit.template import (
    END_OF_TURN,
    REASONING_END,
    REASONING_START,
    format_completion,
    format_prompt,
    normalize_prompt,
    split_tagged,
)

if TYPE_CHECKING:
    from reasonkit.config import Preset


# --- the schema and the answer rule ----------------------------------------------------

FIELDS = ("id", "domain", "source", "prompt", "reasoning", "answer")
PAIR_FIELDS = ("chosen", "rejected")
# A lone surrogate: JSON's "\ud800" parses to one, and no UTF encoding can write it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def validate_record(row: Any) -> str | None:
    """Why ``row`` is not a valid record (a short reason to count by), or None if it is.

    >>> ok = {"id": "1", "domain": "math", "source": "x", "prompt": "1+1?",
    ...       "reasoning": "", "answer": "2"}
    >>> [validate_record(r) for r in (ok, dict(ok, prompt=3), dict(ok, answer=" "))]
    [None, 'prompt not a string', 'empty answer']
    """
    if not isinstance(row, dict):
        return "not an object"
    for name in FIELDS + tuple(f for f in PAIR_FIELDS if f in row):
        if name not in row:
            return f"missing {name}"
        if not isinstance(row[name], str):
            return f"{name} not a string"
        if name != "reasoning" and not row[name].strip():
            return f"empty {name}"
        if not row[name].isascii() and _SURROGATE.search(row[name]):
            return f"lone surrogate in {name}"  # no encoder writes it: write_splits would fail
    if row["domain"] not in DOMAINS:
        return "unknown domain"
    if ("chosen" in row) != ("rejected" in row):
        return "missing rejected" if "chosen" in row else "missing chosen"
    if "chosen" in row and row["chosen"].strip() == row["rejected"].strip():
        return "chosen equals rejected"
    return None


def gold_problem(record: dict) -> str | None:
    """Why the checker cannot score a record's gold answer (GRPO, eval), or None.

    The checker decides (:func:`reasonkit.answers.gold_problem`): a gold it can score is
    kept, whatever its form (``1/2``, ``2.5 km``, ``\\frac{1}{2}``, ``(1, 2)``, ``odd``).

    >>> [gold_problem({"domain": "math", "answer": a}) for a in ("1/2", "2.5 km", "1 + 1 = 42")]
    [None, None, 'gold answer contradicts itself']
    """
    return answers.gold_problem(record["answer"], record["domain"])


# --- reports ---------------------------------------------------------------------------

MAX_EXAMPLES = 3  # locations kept per drop reason


@dataclasses.dataclass
class Drops:
    """Dropped rows counted by reason, with the first few locations of each."""

    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    examples: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def add(self, reason: str, where: str) -> None:
        """Count one dropped row; ``where`` names it (``file:line``, or an id)."""
        self.counts[reason] = self.counts.get(reason, 0) + 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < MAX_EXAMPLES:
            shown.append(where)

    @property
    def total(self) -> int:
        """How many rows were dropped, all reasons together."""
        return sum(self.counts.values())

    def to_dict(self) -> dict:
        """A JSON-ready copy."""
        return {"counts": dict(self.counts), "examples": {k: list(v) for k, v in
                                                          self.examples.items()}}


@dataclasses.dataclass
class SourceReport:
    """What one source read, kept and dropped (by reason, with file and line)."""

    source: str
    read: int = 0
    kept: int = 0
    drops: Drops = dataclasses.field(default_factory=Drops)
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        """A JSON-ready copy."""
        return {"source": self.source, "read": self.read, "kept": self.kept,
                "dropped": self.drops.counts, "examples": self.drops.to_dict()["examples"],
                "notes": list(self.notes)}


@dataclasses.dataclass
class DataReport:
    """Everything :func:`build_splits` did: inputs, drops by stage and reason, the mix.

    ``drops`` is keyed by step: ``"clean"`` (malformed, duplicates), ``"eval"``
    (training rows whose prompt is an eval prompt), ``"sft"``, ``"dpo"``, ``"grpo"``.
    ``stages[stage]`` holds ``available``/``target``/``count`` per domain, ``mix`` and
    ``shortfalls`` (domains that missed their target, and why).
    """

    settings: dict = dataclasses.field(default_factory=dict)
    sources: list[dict] = dataclasses.field(default_factory=list)
    input: dict[str, int] = dataclasses.field(default_factory=dict)
    drops: dict[str, Drops] = dataclasses.field(default_factory=dict)
    eval: dict[str, int] = dataclasses.field(default_factory=dict)
    stages: dict[str, dict] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)

    def drop(self, step: str) -> Drops:
        """The drop counter of one step, created on first use."""
        return self.drops.setdefault(step, Drops())

    def to_dict(self) -> dict:
        """A JSON-ready copy (what data_report.json holds)."""
        out = dataclasses.asdict(self)
        out["drops"] = {k: v.to_dict() for k, v in self.drops.items()}
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> "DataReport":
        """The inverse of :meth:`to_dict`."""
        d = dict(d)
        d["drops"] = {k: Drops(dict(v["counts"]), {r: list(e) for r, e in v["examples"].items()})
                      for k, v in d.get("drops", {}).items()}
        return cls(**d)


# --- sources ---------------------------------------------------------------------------

Row = tuple[str, Any, str | None]  # (where, parsed row or None, error or None)


# What surrogateescape turns an undecodable byte into; valid UTF-8 never decodes to it.
_UNDECODED = re.compile("[\udc80-\udcff]")

# Byte-order marks, longest first (UTF-32-LE's begins with UTF-16-LE's). A file that starts
# with one is read in that encoding (the BOM is not part of the first line).
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
         (b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16"))


def _encoding(path: pathlib.Path) -> str:
    """The file's encoding: the one its byte-order mark names, else UTF-8.

    A UTF-16 / UTF-32 mark counts only when the text after it holds a brace, bracket or
    newline in that encoding: a UTF-8 file whose first line is garbage that happens to
    begin with ``ff fe`` loses that line, not the file.
    """
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    name = next((name for bom, name in _BOMS if head.startswith(bom)), "utf-8")
    if name in ("utf-16", "utf-32"):
        text = head.decode(name, errors="replace")
        if not any(c in text for c in "{[\n"):
            return "utf-8"
    return name


def _parse_line(line: str) -> tuple[Any, str | None]:
    """``(value, None)`` or ``(None, reason)``; any failure of the parser is a reason.

    Python's json raises more than ``JSONDecodeError`` on valid-looking input: a
    ``ValueError`` for an integer over 4300 digits, a ``RecursionError`` for arrays
    nested a thousand deep. One such line must not end the read of the file.
    """
    try:
        return json.loads(line), None
    except json.JSONDecodeError as e:
        return None, f"broken JSON ({e.msg})"
    except RecursionError:
        return None, "broken JSON (nested too deep)"
    except Exception as e:  # noqa: BLE001 - ValueError (digit limit), MemoryError, ...
        message = str(e) if len(str(e)) <= 100 else str(e)[:97] + "..."
        return None, f"broken JSON ({type(e).__name__}: {message})"


def _jsonl_rows(path: pathlib.Path) -> Iterator[Row]:
    """Each non-blank line of a JSONL file, parsed, with ``file:line``; errors are kept.

    UTF-8, or UTF-16 / UTF-32 when the file starts with their byte-order mark (a UTF-8
    one, which Windows editors write, is skipped). A line that does not decode, does not
    parse (whatever the parser raises) or holds a lone surrogate is kept as an error
    instead of ending the read of the whole file.
    """
    encoding = _encoding(path)
    name = "UTF-8" if encoding == "utf-8-sig" else encoding.upper()
    with open(path, encoding=encoding, errors="surrogateescape") as f:
        for number, line in enumerate(f, start=1):
            where = f"{path}:{number}"
            if not line.strip():
                continue
            bad = _UNDECODED.search(line)
            if bad:
                yield (where, None, f"not {name} (byte 0x{ord(bad.group()) - 0xDC00:02x} at "
                                    f"column {bad.start() + 1})")
                continue
            value, error = _parse_line(line)
            if error is None and "\\u" in line:  # only an escape can make a lone surrogate
                error = _surrogate_in(value)
                value = None if error else value
            yield where, value, error


def _surrogate_in(value: Any) -> str | None:
    """Why a parsed JSON value cannot be written back as UTF-8 (a lone surrogate), or None.

    Such a string is valid JSON (``"\\ud800"``) but no encoder writes it: kept, it would
    stop :func:`write_splits` half-way. Dropped at load, with where it was.
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            bad = _SURROGATE.search(v)
            if bad:
                return f"lone surrogate (\\u{ord(bad.group()):04x} in {v[:40]!r})"
        elif isinstance(v, dict):
            stack += list(v)
            stack += list(v.values())
        elif isinstance(v, list):
            stack += v
    return None


def _existing(path: str | pathlib.Path, *, file: bool = False) -> pathlib.Path:
    """``path``, which exists (and with ``file=True`` is not a directory), or a clear error."""
    path = pathlib.Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"no such file or directory: {path}")
    if file and path.is_dir():
        inside = sorted(p.name for p in path.glob("*.jsonl"))[:3]
        hint = f" (it holds {', '.join(inside)})" if inside else ""
        raise IsADirectoryError(f"{path} is a directory, not a JSONL file{hint}: give the path "
                                "of the file")
    return path


def _collect(rows: Iterable[Row], parse: Callable[[Any, int], tuple[dict | None, str | None]],
             report: SourceReport) -> list[dict]:
    """Run ``parse`` on each row; count every failure into ``report`` by reason."""
    records = []
    for where, row, error in rows:
        report.read += 1
        if error is None:
            record, error = parse(row, report.read - 1)
        if error is not None:
            reason, _, detail = error.partition(" (")
            report.drops.add(reason, f"{where}: {error}" if detail else where)
            continue
        records.append(record)
    report.kept = len(records)
    return records


def _text(value: Any) -> Any:
    """TFDS gives text features as bytes; everything else passes through."""
    return value.decode("utf-8") if isinstance(value, bytes) else value


def parse_gsm8k(row: Mapping) -> tuple[str, str, str]:
    """``(question, reasoning, answer)`` of a GSM8K row (str or TFDS bytes).

    The ``#### 1,234`` line becomes the answer ``"1234"``; the worked solution before it
    is the reasoning, without the ``<<48/2=24>>`` calculator annotations.

    >>> parse_gsm8k({"question": b"How many?",
    ...              "answer": b"She sold 48/2 = <<48/2=24>>24.\\n#### 1,224"})
    ('How many?', 'She sold 48/2 = 24.', '1224')
    """
    question, solution = _text(row.get("question")), _text(row.get("answer"))
    if not isinstance(solution, str) or "####" not in solution:
        raise ValueError("no #### answer line")
    work, final = solution.rsplit("####", 1)
    reasoning = re.sub(r"<<[^>]*>>", "", work).strip()
    return question, reasoning, final.strip().replace(",", "")


def _untagged(text: str) -> str:
    """An untagged response as an answer: stripped, without its closing end-of-turn marker."""
    return text.strip().removesuffix(END_OF_TURN).rstrip()


def _fields(row: Any, domain: str) -> dict | None:
    """Schema fields of a row in the schema, instruction, question/answer or MATH layout."""
    if not isinstance(row, dict):
        return None
    if "prompt" in row:
        out = {k: row[k] for k in (*FIELDS, *PAIR_FIELDS) if k in row}
        out.setdefault("reasoning", "")
        if "answer" not in out and isinstance(row.get("chosen"), str):
            tagged = split_tagged(row["chosen"])
            out["reasoning"], out["answer"] = tagged or ("", _untagged(row["chosen"]))
    elif "instruction" in row:
        prompt, extra = _text(row["instruction"]), _text(row.get("input") or "")
        if isinstance(prompt, str) and isinstance(extra, str) and extra.strip():
            prompt = f"{prompt}\n{extra}"
        output = _text(row.get("output"))
        tagged = split_tagged(output) if isinstance(output, str) else None
        reasoning, answer = tagged or ("", _untagged(output) if isinstance(output, str) else output)
        out = {"prompt": prompt, "reasoning": reasoning, "answer": answer}
    elif "question" in row:
        out = {"prompt": _text(row["question"]), "answer": _text(row.get("answer")),
               "reasoning": _text(row.get("reasoning", ""))}
    elif "problem" in row and "solution" in row:  # MATH: the answer is the last \boxed{}
        solution = _text(row["solution"])
        answer = _text(row.get("answer"))
        if answer is None and isinstance(solution, str):
            answer = answers.boxed_answer(solution) or ""
        out = {"prompt": _text(row["problem"]), "reasoning": solution, "answer": answer}
    else:
        return None
    for k in ("id", "domain", "source"):
        if k in row:
            out[k] = row[k]
    # A "#### x" last line (GSM8K's convention) separates the worked solution and answer.
    if isinstance(out.get("answer"), str) and "####" in out["answer"] and not out["reasoning"]:
        _, out["reasoning"], out["answer"] = parse_gsm8k({"answer": out["answer"]})
    out.setdefault("domain", domain)
    return out


def record_from_row(row: Any, *, domain: str, source: str, rid: str) -> tuple[dict | None,
                                                                            str | None]:
    """``(record, None)`` or ``(None, reason)`` for one row of any supported layout.

    Layouts: the schema's own (``prompt``, ``answer``, optional ``reasoning``/``id``/
    ``domain``/``source``/``chosen``/``rejected``); instructions (``instruction``,
    ``input``, ``output``; a tagged output is split into reasoning and answer, otherwise
    it is all answer); ``question``/``answer`` (a ``#### x`` line is split off); MATH's
    ``problem``/``solution`` (the answer is the solution's last ``\\boxed{}``, or its
    ``answer`` column). A numeric answer (``4``, ``6.0``) becomes its text (``"4"``, ``"6"``).

    >>> rec, _ = record_from_row({"instruction": "Reverse dog", "output": "god"},
    ...                          domain="instruction", source="demo", rid="demo-1")
    >>> rec
    {'prompt': 'Reverse dog', 'reasoning': '', 'answer': 'god', 'domain': 'instruction',
     'id': 'demo-1', 'source': 'demo'}
    >>> record_from_row({"text": "hi"}, domain="general", source="demo", rid="demo-2")
    (None, 'unknown layout (keys: text)')
    """
    out = _fields(row, domain)
    if out is None:
        keys = ", ".join(sorted(map(str, row))) if isinstance(row, dict) else type(row).__name__
        return None, f"unknown layout (keys: {keys})" if isinstance(row, dict) else "not an object"
    for k in PAIR_FIELDS:  # before the answer is looked for: chosen=1 is not "missing answer"
        if k in out and not isinstance(out[k], str):
            got = "null" if out[k] is None else type(out[k]).__name__
            return None, f"{k} not a string (got {got})"
    if isinstance(out.get("id"), int) and not isinstance(out["id"], bool):
        out["id"] = str(out["id"])
    answer = out.get("answer")  # JSON and Arrow give numeric gold answers as numbers
    if isinstance(answer, int) and not isinstance(answer, bool):
        out["answer"] = str(answer)
    elif isinstance(answer, float) and math.isfinite(answer):
        out["answer"] = str(int(answer)) if answer.is_integer() and abs(answer) < 1e15 else repr(answer)
    out.setdefault("id", rid)
    out.setdefault("source", source)
    for k in PAIR_FIELDS:
        if isinstance(out.get(k), str) and not out[k].rstrip().endswith(END_OF_TURN):
            out[k] = out[k].strip() + END_OF_TURN  # every completion ends the model's turn
    reason = validate_record(out)
    return (None, reason) if reason else (out, None)


def _check_domain(domain: Any) -> None:
    """A loader's default domain must be known, or every row without one is dropped."""
    if domain not in DOMAINS:
        raise ValueError(f"domain={domain!r}: unknown domain; known: {', '.join(DOMAINS)}")


def load_jsonl(path: str | pathlib.Path, *, domain: str = "general",
               source: str | None = None) -> tuple[list[dict], SourceReport]:
    """Records from a JSONL file in the schema or the instruction layout (per row).

    ``domain`` applies to rows without a ``domain`` field; ``source`` defaults to the
    file's stem. Broken lines and invalid rows are counted in the report by reason with
    ``file:line``; blank lines are skipped. An empty file raises ``ValueError``.
    """
    _check_domain(domain)
    path = _existing(path, file=True)
    source = source or path.stem
    report = SourceReport(f"jsonl:{path}")
    records = _collect(_jsonl_rows(path), lambda row, i: record_from_row(
        row, domain=domain, source=source, rid=f"{source}-{i}"), report)
    _refuse_empty(report, path)
    return records, report


def load_preferences(path: str | pathlib.Path, *, domain: str = "general",
                     source: str | None = None) -> tuple[list[dict], SourceReport]:
    """Preference pairs ``{prompt, chosen, rejected}`` from JSONL.

    Reasoning and answer are read from ``chosen``'s tags when it has them (otherwise
    the whole of ``chosen`` is the answer); both responses get ``<end_of_turn>``.
    Pairs feed DPO only: they carry no checked gold answer for eval or GRPO.
    """
    _check_domain(domain)
    path = _existing(path, file=True)
    source = source or path.stem
    report = SourceReport(f"prefs:{path}")

    def parse(row: Any, i: int) -> tuple[dict | None, str | None]:
        if isinstance(row, dict):
            for k in ("prompt", *PAIR_FIELDS):
                if k not in row:
                    return None, f"missing {k}"
        return record_from_row(row, domain=domain, source=source, rid=f"{source}-{i}")

    records = _collect(_jsonl_rows(path), parse, report)
    _refuse_empty(report, path)
    return records, report


def _refuse_empty(report: SourceReport, path: pathlib.Path) -> None:
    if report.read == 0:
        raise ValueError(f"{path} is empty: it has no JSON lines (expected one record a line)")


def _gsm8k_parser(split: str) -> Callable[[Any, int], tuple[dict | None, str | None]]:
    def parse(row: Any, i: int) -> tuple[dict | None, str | None]:
        try:
            question, reasoning, answer = parse_gsm8k(row)
        except (ValueError, AttributeError):
            return None, "no #### answer line"
        record = {"id": f"gsm8k-{split}-{i}", "domain": "math", "source": "gsm8k",
                  "prompt": question, "reasoning": reasoning, "answer": answer}
        reason = validate_record(record)
        return (None, reason) if reason else (record, None)
    return parse


def _tfds_rows(name: str, split: str, data_dir: str | None) -> Iterator[Row]:
    """Rows of a TFDS dataset through ``tfds.data_source`` (array_record; no TensorFlow)."""
    try:
        import tensorflow_datasets as tfds

        if name == "gsm8k":  # registers the builder; importing tfds alone needs TensorFlow
            from tensorflow_datasets.text.gsm8k import gsm8k as _  # noqa: F401
    except ImportError as e:
        raise ImportError(f"reading {name!r} from TFDS needs tensorflow-datasets (pip install "
                          "tensorflow-datasets); or use the 'hf' or 'jsonl' source") from e
    builder = tfds.builder(name, data_dir=data_dir, file_format="array_record")
    builder.download_and_prepare()
    source = builder.as_data_source(split=split)
    for i in range(len(source)):
        yield f"tfds:{name}/{split}[{i}]", source[i], None


_HF_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


def _local_data_files(path: pathlib.Path, split: str, config_name: str | None) -> list[str]:
    """Data files of ``split`` in a local file or a directory in the Hub's layout."""
    if path.is_file():
        return [str(path)]
    root = path / config_name if config_name and (path / config_name).is_dir() else path
    files = sorted(str(f) for f in root.rglob(f"{split}*") if f.suffix in _HF_FORMATS)
    if not files:
        raise FileNotFoundError(f"no {split!r} data files ({', '.join(_HF_FORMATS)}) under {root}")
    return files


def _local_files(name_or_path: str, split: str, config_name: str | None) -> list[str] | None:
    """The local data files ``name_or_path`` names, or None when it is a Hub name."""
    local = pathlib.Path(name_or_path).expanduser()
    looks_local = name_or_path.startswith((".", "/", "~")) or local.suffix in _HF_FORMATS
    if local.exists() or looks_local:
        return _local_data_files(_existing(local), split, config_name)
    return None


def _hf_rows(name_or_path: str, split: str, *, config_name: str | None = None,
             cache_dir: str | None = None) -> tuple[Any, str]:
    """A ``datasets.Dataset`` from the Hub, or from local files through the same loader."""
    files = _local_files(name_or_path, split, config_name)
    try:
        import datasets
    except ImportError as e:
        raise ImportError("reading Hugging Face datasets needs `pip install datasets`") from e
    local = pathlib.Path(name_or_path).expanduser()
    if files is not None:
        builder = _HF_FORMATS[pathlib.Path(files[0]).suffix]
        ds = datasets.load_dataset(builder, data_files=files, split="train", cache_dir=cache_dir)
        return ds, f"{local}[{split}]"
    ds = datasets.load_dataset(name_or_path, config_name, split=split, cache_dir=cache_dir)
    return ds, f"hf:{name_or_path}[{split}]"


def _iter_dataset(ds: Any, where: str) -> Iterator[Row]:
    for i, row in enumerate(ds):
        yield f"{where} row {i}", row, None


def load_gsm8k(split: str = "train", source: str = "tfds", path: str | None = None, *,
               data_dir: str | None = None,
               cache_dir: str | None = None) -> tuple[list[dict], SourceReport]:
    """GSM8K from TFDS, the Hugging Face Hub or its own JSONL files, as math records.

    ``source="tfds"`` builds TFDS's ``gsm8k`` (array_record, read through
    ``tfds.data_source``: no TensorFlow needed); ``"hf"`` reads ``openai/gsm8k``, config
    ``main``; ``"jsonl"`` reads the original files. Records have domain ``"math"`` and
    source ``"gsm8k"``.

    ``path`` is the JSONL file for ``"jsonl"``, or for ``"hf"`` a local file or directory
    in the Hub's layout (``main/train-00000-of-00001.parquet``) to read instead of the
    Hub. ``data_dir`` is TFDS's data directory.
    """
    report = SourceReport(f"gsm8k:{source}" + (f":{path}" if path else ""))
    if source == "jsonl":
        if path is None:
            raise ValueError("load_gsm8k(source='jsonl') needs path= (a GSM8K .jsonl file)")
        path = _existing(path, file=True)
        rows: Iterable[Row] = _jsonl_rows(path)
    elif source == "tfds":
        rows = _tfds_rows("gsm8k", split, data_dir)
    elif source == "hf":
        ds, where = _hf_rows(path or "openai/gsm8k", split, config_name="main",
                             cache_dir=cache_dir)
        rows = _iter_dataset(ds, where)
    else:
        raise ValueError(f"load_gsm8k: source={source!r}; use 'tfds', 'hf' or 'jsonl'")
    records = _collect(rows, _gsm8k_parser(split), report)
    if source == "jsonl":
        _refuse_empty(report, path)
    return records, report


def load_hf(name_or_path: str, split: str = "train", *, columns: Mapping[str, str] | None = None,
            domain: str = "general", source: str | None = None, config_name: str | None = None,
            cache_dir: str | None = None) -> tuple[list[dict], SourceReport]:
    """Any Hugging Face dataset (Hub name, or local parquet/JSON/CSV) into records.

    ``columns`` maps schema fields to the dataset's columns, e.g.
    ``{"prompt": "question", "answer": "answer", "reasoning": "rationale"}``; without it
    each row's layout is detected as in :func:`record_from_row`. Local JSONL that the
    datasets library cannot read (a broken line fails its whole file) is read line by
    line as :func:`load_jsonl` does: the report counts each bad line and notes why.
    """
    _check_domain(domain)
    if columns:
        unknown = set(columns) - set(FIELDS) - set(PAIR_FIELDS)
        if unknown:
            raise ValueError(f"load_hf columns: unknown schema field(s) {sorted(unknown)}; "
                             f"fields: {list(FIELDS + PAIR_FIELDS)}")
    source = source or pathlib.Path(name_or_path).stem.split("/")[-1]
    report = SourceReport(f"hf:{name_or_path}")
    try:
        ds, where = _hf_rows(name_or_path, split, config_name=config_name, cache_dir=cache_dir)
    except Exception as e:
        # The datasets library reads a JSONL file as a whole: one broken line (or a column
        # whose type changes) fails it all. Local JSONL is read line by line instead, so
        # every valid row is kept and each bad line counted with file:line.
        files = _local_files(name_or_path, split, config_name)
        if not files or not all(f.endswith(".jsonl") for f in files):
            raise
        report.notes.append(f"the datasets library could not read it ({type(e).__name__}: "
                            f"{str(e)[:160]}); read line by line instead")
        raw = [row for f in files for row in _jsonl_rows(pathlib.Path(f))]
        if columns:
            seen = {k for _, r, err in raw if err is None and isinstance(r, dict) for k in r}
            missing = [c for c in columns.values() if c not in seen]
            if missing:
                raise ValueError(f"{name_or_path}: no column(s) {missing}; columns: "
                                 f"{sorted(seen)}") from None
        rows: Iterable[Row] = ((w, {k: r.get(c) for k, c in columns.items()}
                                if columns and isinstance(r, dict) else r, err)
                               for w, r, err in raw)
    else:
        if columns:
            missing = [c for c in columns.values() if c not in ds.column_names]
            if missing:
                raise ValueError(f"{where}: no column(s) {missing}; columns: {ds.column_names}")
            ds = ds.select_columns(list(dict.fromkeys(columns.values())))
        rows = ((w, {k: r[c] for k, c in columns.items()} if columns else r, e)
                for w, r, e in _iter_dataset(ds, where))
    records = _collect(rows, lambda row, i: record_from_row(
        row, domain=domain, source=source, rid=f"{source}-{split}-{i}"), report)
    return records, report


def load_source(spec: str, config: DataConfig | None = None) -> tuple[list[dict], SourceReport]:
    """Records from one ``DataConfig.sources`` string.

    ``"tasks"`` (synthetic, ``config.num_records`` per domain), ``"gsm8k:tfds"``,
    ``"gsm8k:hf"``, ``"gsm8k:jsonl:<path>"``, ``"jsonl:<path>"``, ``"prefs:<path>"``,
    ``"hf:<name or path>"`` (layout detected per row; for a column mapping call
    :func:`load_hf` yourself). Training sources read their ``train`` split.
    """
    config = config or DataConfig()
    kind, _, arg = spec.partition(":")
    if spec == "tasks":
        records = tasks.generate_all(config.num_records, seed=config.seed,
                                     difficulty=config.difficulty)
        report = SourceReport("tasks", read=len(records), kept=len(records), notes=[
            f"{config.num_records} per domain, difficulty {config.difficulty}, "
            f"seed {config.seed}"])
        return records, report
    if kind == "gsm8k":
        how, _, path = arg.partition(":")
        if how in ("tfds", "hf", "jsonl") and (path or how != "jsonl"):
            return load_gsm8k("train", source=how, path=path or None)
    elif kind in ("jsonl", "prefs", "hf") and arg:
        loader = {"jsonl": load_jsonl, "prefs": load_preferences, "hf": load_hf}[kind]
        return loader(arg)
    raise ValueError(f"unknown data source {spec!r}; use 'tasks', 'gsm8k:tfds', 'gsm8k:hf', "
                     "'gsm8k:jsonl:<path>', 'jsonl:<path>', 'prefs:<path>' or 'hf:<name>'")


def load_sources(config: DataConfig) -> tuple[list[dict], list[SourceReport]]:
    """All of ``config.sources``, in order, with one report each."""
    records, reports = [], []
    for spec in config.sources:
        recs, report = load_source(spec, config)
        records += recs
        reports.append(report)
    return records, reports


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


STAGES = ("eval", "sft", "dpo", "grpo")


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


def _where(record: Any) -> str:
    if isinstance(record, dict) and isinstance(record.get("id"), str):
        return record["id"]
    return repr(record)[:80]


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


# --- evaluation split, DPO pairs, stage sets ------------------------------------------


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


REJECTED_KINDS = ("wrong_answer", "missing_tags", "answer_outside_tag")


def wrong_answer(answer: str, rng: random.Random, others: Sequence[str] = (),
                 domain: str = "general") -> str:
    """A plausible answer that the checker judges wrong under ``domain``'s rule.

    A nearby number for a numeric gold (never negative for a gold that is not);
    otherwise the items reordered or one dropped, or another gold of the domain; as a
    last resort the text reversed or negated. Every candidate is put to
    :func:`reasonkit.answers.check_answer`, so a DPO pair never rejects a right answer.

    >>> wrong_answer("10", random.Random(0)) != "10", wrong_answer("cat", random.Random(0), ["dog"])
    (True, 'dog')
    >>> wrong_answer("x = 5", random.Random(0), domain="math")
    '6'
    """
    def wrong(option: str) -> bool:
        return bool(answers.normalize_text(option)) and not answers.check_answer(domain, option, answer)

    read = answers.read_answer(answer, domain)
    if read.kind == "number":
        delta = rng.choice((-3, -2, -1, 1, 2, 3))
        number = read.value
        value = number + (abs(delta) if number + delta < 0 <= number else delta)
        option = _number_text(value) + ("%" if read.percent else "")
        if wrong(option):
            return option
    items = answer.split()
    options = []
    if len(items) > 1:
        shuffled = items[:]
        rng.shuffle(shuffled)
        options += [" ".join(items[::-1]), " ".join(shuffled), " ".join(items[:-1])]
    if others:  # a few other gold answers of the domain: a wrong item of the right kind
        options += [rng.choice(others) for _ in range(8)]
    options = [o for o in options if wrong(o)]
    if options:
        return rng.choice(options)
    for option in (answer[::-1], f"not {answer}", f"{answer} + 1", f"not ({answer}) + 1"):
        if wrong(option):
            return option
    raise AssertionError(f"no wrong answer found for gold {answer!r} ({domain})")  # unreachable


def _number_text(value: Fraction) -> str:
    """A Fraction as exact text: 12, -2.5, 1/3.

    >>> _number_text(Fraction(5, 2)), _number_text(Fraction(-1, 3)), _number_text(Fraction(7))
    ('2.5', '-1/3', '7')
    """
    for k in range(0, 20):  # a decimal when one writes it exactly
        scaled = value * 10 ** k
        if scaled.denominator == 1:
            digits = str(abs(scaled.numerator)).rjust(k + 1, "0")
            whole, frac = digits[:len(digits) - k], digits[len(digits) - k:]
            return ("-" if value < 0 else "") + whole + (f".{frac}" if k else "")
    return f"{value.numerator}/{value.denominator}"


def preference_pair(record: dict, rng: random.Random, *, others: Sequence[str] = (),
                    wrong_fraction: float = 0.5) -> dict:
    """A DPO pair from a gold record: chosen right and well formed, rejected not.

    Rejected has a wrong answer (``wrong_fraction`` of the time) or a broken format:
    no tags at all, or the answer outside its tag.

    >>> rec = {"id": "1", "domain": "math", "source": "x", "prompt": "3 * 4?",
    ...        "reasoning": "3 * 4 = 12.", "answer": "12"}
    >>> pair = preference_pair(rec, random.Random(2))
    >>> pair["chosen"], pair["rejected_kind"], pair["rejected"]
    ('<reasoning>3 * 4 = 12.</reasoning>\\n<answer>12</answer><end_of_turn>', 'missing_tags',
     '3 * 4 = 12.\\n12<end_of_turn>')
    """
    reasoning, answer = record["reasoning"], record["answer"]
    if rng.random() < wrong_fraction:
        kind = "wrong_answer"
        rejected = format_completion(reasoning, wrong_answer(answer, rng, others,
                                                                domain=record["domain"]))
    else:
        kind = rng.choice(REJECTED_KINDS[1:])
        if kind == "missing_tags":
            rejected = f"{reasoning}\n{answer}{END_OF_TURN}".lstrip("\n")
        else:
            rejected = f"{REASONING_START}{reasoning}{REASONING_END}\n{answer}{END_OF_TURN}"
    return {**{k: record[k] for k in FIELDS}, "chosen": format_completion(reasoning, answer),
            "rejected": rejected, "rejected_kind": kind}


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
    """The held-out evaluation set and each stage's rebalanced training set."""

    eval: list[dict]
    sft: list[dict]
    dpo: list[dict]
    grpo: list[dict]

    def sizes(self) -> dict[str, int]:
        """Records per split."""
        return {name: len(getattr(self, name)) for name in STAGES}


def build_splits(records: Iterable[Any], config: DataConfig, *,
                 count_tokens: Callable[[str], int] | None = None,
                 limits: Mapping[str, Limits] | None = None,
                 source_reports: Iterable[SourceReport] = ()) -> tuple[Splits, DataReport]:
    """Filter, hold out eval (before rebalancing), rebalance each stage, build DPO pairs.

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
                  "limits": {k: dataclasses.asdict(v) for k, v in limits.items()}},
        sources=[s.to_dict() for s in source_reports],
        input=dict(Counter(r["domain"] for r in records
                           if isinstance(r, dict) and isinstance(r.get("domain"), str))))
    clean = drop_duplicates(drop_malformed(records, report.drop("clean")), report.drop("clean"))
    if not clean:
        raise ValueError(f"no valid records among {len(records)}: dropped "
                         f"{report.drop('clean').counts}")
    held, pool, info = hold_out_eval(clean, config.eval_per_domain, seed=config.seed,
                                     count_tokens=count_tokens, limits=limits.get("eval"))
    report.eval = info["count"]
    report.notes += [f"eval {d}: {why}" for d, why in info["short"].items()]
    pool = drop_eval_prompts(pool, held, report.drop("eval"))

    sets = {}
    for stage in ("sft", "dpo", "grpo"):
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


def write_jsonl(records: Iterable[dict], path: str | pathlib.Path) -> None:
    """One JSON object a line, UTF-8; a record that cannot be written is a clear error."""
    with open(path, "w", encoding="utf-8") as f:
        for i, r in enumerate(records):
            line = json.dumps(r, ensure_ascii=False) + "\n"
            try:
                f.write(line)
            except UnicodeEncodeError as e:  # a lone surrogate; validate_record drops them
                raise ValueError(f"{path}: record {i} ({_where(r)}) cannot be written as UTF-8: "
                                 f"{line[e.start:e.end]!r} at column {e.start + 1} is a lone "
                                 "surrogate") from None


def read_jsonl(path: str | pathlib.Path) -> list[dict]:
    """Every line of a JSONL file we wrote (no tolerance: use :func:`load_jsonl` for input)."""
    with open(_existing(path), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_splits(splits: Splits, report: DataReport, out_dir: str | pathlib.Path, *,
                 overwrite: bool = False) -> pathlib.Path:
    """eval.jsonl, sft.jsonl, dpo.jsonl, grpo.jsonl and data_report.json in ``out_dir``.

    Refuses to replace earlier splits unless ``overwrite=True``. Every file is written
    in full beside its place first and moved there only when all are written, so a
    failure leaves no partial split (and earlier splits as they were).
    """
    out = pathlib.Path(out_dir)
    if (out / REPORT_FILE).exists() and not overwrite:
        raise FileExistsError(f"{out} already holds splits ({REPORT_FILE}); pass "
                              "overwrite=True to replace them")
    out.mkdir(parents=True, exist_ok=True)
    names = [f"{name}.jsonl" for name in STAGES] + [REPORT_FILE]
    temps = {name: out / f".{name}.partial" for name in names}
    try:
        for stage, name in zip(STAGES, names, strict=False):
            write_jsonl(getattr(splits, stage), temps[name])
        # backslashreplace: a file name that is not UTF-8 (or any lone surrogate in a note)
        # is written as the JSON escape it reads back as, never a crash at the last file
        temps[REPORT_FILE].write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False),
                                      encoding="utf-8", errors="backslashreplace")
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
    report = DataReport.from_dict(json.loads(
        _existing(out / REPORT_FILE).read_text(encoding="utf-8")))
    return splits, report
