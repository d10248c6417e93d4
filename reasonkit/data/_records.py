"""The record schema, the reports that count what was dropped, and JSONL on disk.

A record is a dict of :data:`FIELDS` (all strings), plus ``chosen``/``rejected`` for a
preference pair; :func:`validate_record` says why a row is not one. :class:`Drops`,
:class:`SourceReport` and :class:`DataReport` count every dropped row by reason. Input
JSONL is read tolerantly, line by line (a bad line is an error to count, never the end
of the file); what this package writes is written and read back strictly.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from typing import Any, Iterable, Iterator, Mapping

from reasonkit import answers
from reasonkit.config import DOMAINS

__all__ = ["FIELDS", "PAIR_FIELDS", "validate_record", "gold_problem", "MAX_EXAMPLES", "Drops",
           "SourceReport", "DataReport", "Row", "write_jsonl", "read_jsonl"]


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


def _where(record: Any) -> str:
    """How a drop report names a record: its id, else the start of its repr."""
    if isinstance(record, dict) and isinstance(record.get("id"), str):
        return record["id"]
    return repr(record)[:80]


# --- JSONL -----------------------------------------------------------------------------

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
