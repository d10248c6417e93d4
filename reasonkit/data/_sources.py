"""Sources: JSONL in the schema or a known layout, preference pairs, GSM8K, any HF dataset.

Each loader turns its rows into records (:mod:`reasonkit.data._records`) and returns them
with a :class:`~reasonkit.data._records.SourceReport` of what it read, kept and dropped,
by reason and with the row's place (``file:line``). :func:`load_source` reads one
``DataConfig.sources`` string; :func:`load_sources` all of them.
"""

from __future__ import annotations

import math
import pathlib
import re
from typing import Any, Callable, Iterable, Iterator, Mapping

from reasonkit import answers, tasks
from reasonkit.config import DOMAINS, DataConfig
from reasonkit.data._records import (
    FIELDS,
    PAIR_FIELDS,
    Row,
    SourceReport,
    _existing,
    _jsonl_rows,
    validate_record,
)
from reasonkit.template import END_OF_TURN, split_tagged

__all__ = ["parse_gsm8k", "record_from_row", "load_jsonl", "load_preferences", "load_gsm8k",
           "load_hf", "load_source", "load_sources"]


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
