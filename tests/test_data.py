"""Records, sources, filters, rebalancing and splits: real-format files, no network."""

import dataclasses
import json
import os
import random
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonkit import answers, config, data, notebook, tasks, template
from reasonkit.config import DOMAINS, DataConfig
from reasonkit.data import Limits
from reasonkit.data import _pairs as data_pairs
from reasonkit.data import _records as data_records
from reasonkit.data import _sources as data_sources
from reasonkit.data import _splits as data_splits
from reasonkit.data._records import Drops
from reasonkit.data._sources import _gsm8k_parser  # TFDS's bytes rows: no public way without TFDS
from reasonkit.presets import get_preset
from reasonkit.template import END_OF_TURN, format_completion, format_prompt, normalize_prompt, split_tagged


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def rec(i, domain="math", prompt=None, answer=None, **extra):
    return {"id": f"r{i}", "domain": domain, "source": "test",
            "prompt": prompt or f"What is {i} plus 1?", "reasoning": f"{i} + 1 = {i + 1}.",
            "answer": answer or str(i + 1), **extra}


def words(text):
    return len(text.split())


# --- schema ----------------------------------------------------------------------------


def test_validate_record_reasons():
    ok = rec(1)
    assert data_records.validate_record(ok) is None
    assert data_records.validate_record(dict(ok, reasoning="")) is None  # reasoning may be empty
    cases = {"missing answer": {k: v for k, v in ok.items() if k != "answer"},
             "prompt not a string": dict(ok, prompt=["a"]), "empty prompt": dict(ok, prompt=" "),
             "unknown domain": dict(ok, domain="cooking"), "not an object": "text",
             "missing rejected": dict(ok, chosen="a"),
             "chosen equals rejected": dict(ok, chosen="a", rejected="a ")}
    for reason, row in cases.items():
        assert data_records.validate_record(row) == reason


def test_gold_rule_is_the_checker_s():
    """Golds the old number parser dropped are kept: the checker reads them (issue 29)."""
    golds = {"1/2": 0.5, "2.5 km": 2.5, "\\frac{1}{2}": 0.5, "\u22123": -3, "42 apples": 42,
             "1,234": 1234}
    for gold, value in golds.items():
        assert data.gold_problem({"domain": "math", "answer": gold}) is None, gold
        assert answers.check_answer("math", str(value), gold), gold
    assert data.gold_problem({"domain": "math", "answer": "1 + 1 = 42"}) == (
        "gold answer contradicts itself")
    assert data.gold_problem({"domain": "general", "answer": "..."}) == "empty gold answer"


# --- sources ---------------------------------------------------------------------------


def test_load_jsonl_schema_layout(tmp_path):
    rows = [rec(i, domain=d) for i, d in enumerate(["math", "coding", "general"])]
    records, report = data_sources.load_jsonl(write_jsonl(tmp_path / "mine.jsonl", rows))
    assert records == rows
    assert (report.read, report.kept, report.drops.total) == (3, 3, 0)


def test_load_jsonl_instruction_layout(tmp_path):
    rows = [{"instruction": "Reverse dog", "input": "", "output": "god"},
            {"instruction": "Add these", "input": "2 and 3",
             "output": "<reasoning>2 + 3 = 5.</reasoning>\n<answer>5</answer>", "domain": "math"},
            {"instruction": "Sort 3 1", "output": "  1 3 \n"}]
    records, report = data_sources.load_jsonl(write_jsonl(tmp_path / "alpaca.jsonl", rows),
                                      domain="instruction")
    assert report.kept == 3
    assert [(r["prompt"], r["reasoning"], r["answer"], r["domain"]) for r in records] == [
        ("Reverse dog", "", "god", "instruction"),
        ("Add these\n2 and 3", "2 + 3 = 5.", "5", "math"),
        ("Sort 3 1", "", "1 3", "instruction")]
    assert {r["source"] for r in records} == {"alpaca"}
    assert len({r["id"] for r in records}) == 3


def test_bad_lines_are_counted_and_good_rows_kept(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [
        rec(0), "{not json", "", rec(1, prompt=123), {"text": "no layout"}, [1, 2],
        rec(2, domain="cooking"), rec(3)])
    records, report = data_sources.load_jsonl(path)
    assert [r["id"] for r in records] == ["r0", "r3"]
    assert report.read == 7 and report.kept == 2  # the blank line is not a row
    assert report.drops.counts == {"broken JSON": 1, "prompt not a string": 1,
                                   "unknown layout": 1, "not an object": 1, "unknown domain": 1}
    assert report.drops.examples["broken JSON"][0].startswith(f"{path}:2: broken JSON (")
    assert report.drops.examples["prompt not a string"] == [f"{path}:4"]
    assert "keys: text" in report.drops.examples["unknown layout"][0]
    assert report.to_dict()["dropped"] == report.drops.counts


def test_byte_order_mark_does_not_cost_the_first_row(tmp_path):
    path = tmp_path / "notepad.jsonl"  # Windows editors save UTF-8 with a BOM
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in GSM8K_ROWS).encode())
    records, report = data_sources.load_jsonl(path, domain="math")
    assert [r["answer"] for r in records] == ["72", "2000"] and report.drops.total == 0
    records, report = data.load_gsm8k("train", source="jsonl", path=path)
    assert [r["answer"] for r in records] == ["72", "2000"] and report.drops.total == 0


def test_a_line_that_is_not_utf8_is_counted_not_fatal(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(rec(0)).encode() + b"\n"
                     + '{"prompt": "Caf\u00e9?", "answer": "x"}\n'.encode("latin-1")
                     + json.dumps(rec(1), ensure_ascii=False).encode() + b"\n")
    records, report = data_sources.load_jsonl(path)
    assert [r["id"] for r in records] == ["r0", "r1"]
    assert report.read == 3 and report.drops.counts == {"not UTF-8": 1}
    assert report.drops.examples["not UTF-8"] == [f"{path}:2: not UTF-8 (byte 0xe9 at column 16)"]


# Lines that parse in most tools but make Python's json raise something else than
# JSONDecodeError: an integer over 4300 digits (ValueError), arrays nested past the
# recursion limit (RecursionError).
HOSTILE_LINES = {"big integer": '{"prompt": "big?", "answer": ' + "9" * 5000 + "}",
                 "deep nesting": "[" * 100_000 + "]" * 100_000}


def test_a_line_the_parser_cannot_take_is_counted_not_fatal(tmp_path):
    good = [rec(0), rec(1)]
    lines = [json.dumps(good[0]), *HOSTILE_LINES.values(), json.dumps(good[1])]
    path = write_jsonl(tmp_path / "hostile.jsonl", lines)
    records, report = data_sources.load_jsonl(path)
    assert records == good and (report.read, report.kept) == (4, 2)
    assert report.drops.counts == {"broken JSON": 2}
    big, deep = report.drops.examples["broken JSON"]
    assert big.startswith(f"{path}:2: broken JSON (ValueError: Exceeds the limit (4300 digits)")
    assert deep == f"{path}:3: broken JSON (nested too deep)"
    _, report = data_sources.load_preferences(path)
    assert report.read == 4 and report.drops.counts["broken JSON"] == 2
    gsm = write_jsonl(tmp_path / "gsm.jsonl", [GSM8K_ROWS[0], *HOSTILE_LINES.values(), GSM8K_ROWS[1]])
    records, report = data.load_gsm8k("train", source="jsonl", path=gsm)
    assert [r["answer"] for r in records] == ["72", "2000"]
    assert report.drops.counts == {"broken JSON": 2}


def test_a_lone_surrogate_is_dropped_at_load_and_never_half_written(tmp_path):
    """"\ud800" is valid JSON but no encoder writes it: dropped with its place, and a
    record that still carries one makes write_splits fail before any split file is replaced."""
    path = write_jsonl(tmp_path / "s.jsonl", [rec(0), '{"prompt": "x\\ud800?", "answer": "1"}',
                                               '{"prompt": "ok", "answer": "1", "k": ["\\udfff"]}',
                                               '{"prompt": "\\ud83d\\ude00?", "answer": "1"}'])
    records, report = data_sources.load_jsonl(path)
    assert [r["prompt"] for r in records] == [rec(0)["prompt"], "\U0001F600?"]  # a pair is fine
    assert report.drops.counts == {"lone surrogate": 2}
    assert report.drops.examples["lone surrogate"][0] == (
        f"{path}:2: lone surrogate (\\ud800 in 'x\\ud800?')")
    # records built in Python reach build_splits directly: dropped there, by field
    bad = [rec(i) for i in range(20)] + [rec(20, prompt="a\udc80"), rec(21, answer="\ud800")]
    splits, report = data.build_splits(bad, DataConfig(domain_weights={"math": 1.0},
                                                       eval_per_domain=2, train_size=10))
    assert report.drops["clean"].counts == {"lone surrogate in prompt": 1,
                                            "lone surrogate in answer": 1}
    out = data.write_splits(splits, report, tmp_path / "data")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    splits.grpo[-1] = dict(splits.grpo[-1], prompt="\ud800")  # past every filter
    with pytest.raises(ValueError, match=r"grpo.jsonl.*: record 9 \(r\d+\) cannot be written as "
                                         r"UTF-8: '\\ud800' at column \d+ is a lone surrogate"):
        data.write_splits(splits, report, out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing half written
    with pytest.raises(ValueError, match="lone surrogate"):
        data.write_splits(splits, report, tmp_path / "fresh")
    assert list((tmp_path / "fresh").iterdir()) == []


@pytest.mark.slow
def test_load_hf_reads_a_local_jsonl_with_a_broken_line_line_by_line(tmp_path):
    pytest.importorskip("datasets")
    path = write_jsonl(tmp_path / "train.jsonl", [rec(0), "{broken", rec(1), rec(2, answer=3)])
    for columns in (None, {"prompt": "prompt", "answer": "answer", "domain": "domain"}):
        records, report = data_sources.load_hf(str(path), columns=columns, cache_dir=str(tmp_path / "c"))
        assert [r["prompt"] for r in records] == [rec(i)["prompt"] for i in range(3)]
        assert report.read == 4 and report.drops.counts == {"broken JSON": 1}
        assert report.drops.examples["broken JSON"][0].startswith(f"{path}:2: broken JSON (")
        assert "read line by line" in report.notes[0]
    with pytest.raises(ValueError, match=r"no column\(s\) \['q'\]"):
        data_sources.load_hf(str(path), columns={"prompt": "q"}, cache_dir=str(tmp_path / "c"))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-32-le"])
def test_utf16_and_utf32_files_with_a_byte_order_mark_are_read(tmp_path, encoding):
    rows = [rec(0), rec(1, prompt="Caf\u00e9 \U0001F600?")]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\r\n" for r in rows)
    bom = "" if encoding in ("utf-16", "utf-32") else "\ufeff"  # these two write their own
    path = tmp_path / "wide.jsonl"
    path.write_bytes((bom + text).encode(encoding))
    records, report = data_sources.load_jsonl(path)
    assert records == rows and report.drops.total == 0
    # garbage that merely starts like a mark costs its own line, not the file
    path.write_bytes(b"\xff\xfe garbage\n" + text.encode())
    records, report = data_sources.load_jsonl(path)
    assert records == rows and report.drops.counts == {"not UTF-8": 1}


def test_a_preference_response_that_is_not_a_string_says_so(tmp_path):
    path = write_jsonl(tmp_path / "prefs.jsonl", [
        {"prompt": "a?", "chosen": 1, "rejected": "x"}, {"prompt": "b?", "chosen": "y", "rejected": None},
        {"prompt": "c?", "chosen": None, "rejected": "z"}, {"prompt": "d?", "chosen": "y", "rejected": "z"}])
    for load in (data_sources.load_preferences, data_sources.load_jsonl):
        records, report = load(path)
        assert [r["prompt"] for r in records] == ["d?"]
        assert report.drops.counts == {"chosen not a string": 2, "rejected not a string": 1}
        assert report.drops.examples["chosen not a string"] == [
            f"{path}:1: chosen not a string (got int)", f"{path}:3: chosen not a string (got null)"]


def test_a_directory_given_as_a_file_is_named(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [rec(0)])
    calls = [data_sources.load_jsonl, data_sources.load_preferences,
             lambda p: data.load_gsm8k("train", source="jsonl", path=p)]
    for call in calls:
        with pytest.raises(IsADirectoryError, match=f"{tmp_path} is a directory, not a JSONL file "
                                                    r"\(it holds train.jsonl\)"):
            call(tmp_path)


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(
    lambda t: t.strip() and "####" not in t)


@st.composite
def _valid_rows(draw):
    prompt, answer = draw(_TEXT), draw(_TEXT)
    row = {"id": f"v{draw(st.integers(0, 10**6))}", "domain": draw(st.sampled_from(DOMAINS)),
           "source": "prop", "prompt": prompt, "reasoning": "r", "answer": answer,
           "chosen": f"{answer}{END_OF_TURN}", "rejected": f"not {answer}{END_OF_TURN}"}
    return row, json.dumps(row, ensure_ascii=draw(st.booleans())).encode()


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
# Any bytes but a line break; not blank (a blank line is no row) and not a byte-order mark
# (a file that starts with one is read in that mark's encoding).
_JUNK = st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")).filter(
    lambda b: b.decode("utf-8", "surrogateescape").strip() and not b.startswith((b"\xef", b"\xff", b"\xfe",
                                                                                   b"\x00\x00")))
_LINES = st.lists(st.one_of(_valid_rows(), _JUNK, _JSON.map(lambda v: json.dumps(v).encode()),
                            st.sampled_from([line.encode() for line in HOSTILE_LINES.values()])),
                  max_size=12)


@settings(max_examples=40, deadline=None)
@given(lines=_LINES)
def test_any_mix_of_valid_lines_and_garbage_keeps_every_valid_row(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("prop") / "mixed.jsonl"
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line[1] for line in lines))
    valid = [line[0] for line in lines if isinstance(line, tuple)]
    for load in (data_sources.load_jsonl, data_sources.load_preferences):
        if not lines:
            with pytest.raises(ValueError, match="is empty"):
                load(path)
            continue
        records, report = load(path)
        assert report.read == len(lines) and report.kept == len(records)
        assert report.kept + report.drops.total == report.read
        kept = iter(records)  # every valid row, in order (garbage may parse to a record too)
        assert all(any(r == row for r in kept) for row in valid)


def test_numeric_gold_answers_are_read_as_text(tmp_path):
    """JSON (and Arrow) give numeric answers as numbers; they are gold, not wrong types."""
    path = write_jsonl(tmp_path / "nums.jsonl", [
        {"question": "2 + 2?", "answer": 4}, {"prompt": "3 * 2?", "answer": 6.0},
        {"prompt": "1 / 4?", "answer": 0.25}, {"prompt": "Yes?", "answer": True},
        {"prompt": "Big?", "answer": 10 ** 30}, {"prompt": "Avogadro?", "answer": 6.02e23}])
    records, report = data_sources.load_jsonl(path, domain="math")
    assert [r["answer"] for r in records] == ["4", "6", "0.25", str(10 ** 30), "6.02e+23"]
    assert answers.check_answer("science", "6.02 \\times 10^{23}", records[-1]["answer"])
    assert report.drops.counts == {"answer not a string": 1}  # a bool is no answer


def test_unknown_default_domain_is_refused_up_front(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"question": "2 + 2?", "answer": "4"}])
    for load in (data_sources.load_jsonl, data_sources.load_preferences, data_sources.load_hf):
        with pytest.raises(ValueError, match=r"domain='maths': unknown domain; known: math, "):
            load(path if load is not data_sources.load_hf else str(path), domain="maths")


def test_empty_file_is_an_error(tmp_path):
    for text in ("", "\n  \n"):
        (tmp_path / "empty.jsonl").write_text(text)
        with pytest.raises(ValueError, match=r"empty\.jsonl is empty"):
            data_sources.load_jsonl(tmp_path / "empty.jsonl")
        with pytest.raises(ValueError, match="is empty"):
            data_sources.load_preferences(tmp_path / "empty.jsonl")


def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.jsonl"
    calls = [lambda: data_sources.load_jsonl(missing), lambda: data_sources.load_preferences(missing),
             lambda: data.load_gsm8k("train", source="jsonl", path=missing),
             lambda: data_sources.load_hf(str(missing)), lambda: data_sources.load_source(f"jsonl:{missing}")]
    for call in calls:
        with pytest.raises(FileNotFoundError, match="nope.jsonl"):
            call()


GSM8K_ROWS = [
    {"question": "Natalia sold clips to 48 friends in April, and half as many in May. "
                 "How many clips did she sell altogether?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
               "Natalia sold 48+24 = <<48+24=72>>72 clips altogether.\n#### 72"},
    {"question": "A shop sells 1,000 pens a day for 2 days. How many pens?",
     "answer": "1000 * 2 = <<1000*2=2000>>2000\n#### 2,000"},
]


def test_parse_gsm8k_strings_and_tfds_bytes():
    q, reasoning, answer = data_sources.parse_gsm8k(GSM8K_ROWS[0])
    assert answer == "72" and "<<" not in reasoning and reasoning.endswith("72 clips altogether.")
    tfds_row = {k: v.encode() for k, v in GSM8K_ROWS[1].items()}  # TFDS's feature layout
    tfds_row["short_answer"] = b"2,000"
    assert data_sources.parse_gsm8k(tfds_row) == (GSM8K_ROWS[1]["question"], "1000 * 2 = 2000", "2000")
    record, reason = _gsm8k_parser("train")(tfds_row, 5)
    assert reason is None and record == {
        "id": "gsm8k-train-5", "domain": "math", "source": "gsm8k",
        "prompt": GSM8K_ROWS[1]["question"], "reasoning": "1000 * 2 = 2000", "answer": "2000"}
    assert _gsm8k_parser("train")({"question": b"q", "answer": b"no marker"}, 0) == (
        None, "no #### answer line")


def test_load_gsm8k_jsonl(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl",
                       GSM8K_ROWS + [{"question": "q?", "answer": "no final line"}])
    records, report = data.load_gsm8k("train", source="jsonl", path=path)
    assert [r["answer"] for r in records] == ["72", "2000"]
    assert {(r["domain"], r["source"]) for r in records} == {("math", "gsm8k")}
    assert report.drops.counts == {"no #### answer line": 1}
    assert report.drops.examples["no #### answer line"] == [f"{path}:3"]
    same, _ = data_sources.load_source(f"gsm8k:jsonl:{path}")
    assert same == records


@pytest.mark.slow
def test_gsm8k_and_math_golds_from_their_files_are_judged_by_the_checker(tmp_path):
    """GSM8K's "#### 1,234" and MATH's \\boxed{} golds, read from files in those formats."""
    gsm8k = write_jsonl(tmp_path / "gsm8k.jsonl", [
        {"question": "How much?", "answer": "She pays 1,000 + 234 = <<1000+234=1234>>1,234.\n#### 1,234"},
        {"question": "How many?", "answer": "3 * 4 = <<3*4=12>>12\n#### 12"}])
    math = write_jsonl(tmp_path / "math.jsonl", [
        {"problem": "Find $x$.", "solution": "So $x = \\boxed{\\frac{1}{2}}$.", "level": "Level 2",
         "type": "Algebra"},
        {"problem": "Simplify.", "solution": "It is $\\boxed{\\frac{\\sqrt{3}}{2}}$.",
         "level": "Level 3", "type": "Geometry"},
        {"problem": "Which?", "solution": "The answer is $\\boxed{\\text{(C)}}$."},
        {"problem": "No box?", "solution": "It is 4."}])
    gsm, _ = data.load_gsm8k("train", source="jsonl", path=gsm8k)
    records, report = data_sources.load_jsonl(math, domain="math")
    assert [r["answer"] for r in gsm] == ["1234", "12"]
    assert [r["answer"] for r in records] == ["\\frac{1}{2}", "\\frac{\\sqrt{3}}{2}", "\\text{(C)}"]
    assert report.drops.counts == {"empty answer": 1}  # a MATH row without a box
    assert records[0]["reasoning"].endswith("$.") and records[0]["prompt"] == "Find $x$."
    right = {"1234": ["1,234", "$1,234.00", "1234 dollars", "1000 + 234"],
             "12": ["12", "x = 12", "12.0"],
             "\\frac{1}{2}": ["0.5", "1/2", "\\dfrac{1}{2}", "\\frac{2}{4}"],
             "\\frac{\\sqrt{3}}{2}": ["\\frac{\\sqrt3}{2}", "\\sqrt{3}/2"],
             "\\text{(C)}": ["(C)", "C"]}
    wrong = {"1234": ["1,23", "123", "1234.5", "1234 or 1235", "1 + 1234"],
             "12": ["1 + 12", "12 - x", "2"], "\\frac{1}{2}": ["0.49", "\\frac{1}{3}", "2"],
             "\\frac{\\sqrt{3}}{2}": ["0.866", "\\frac{\\sqrt{2}}{2}"], "\\text{(C)}": ["(D)"]}
    for r in gsm + records:
        assert data.gold_problem(r) is None  # every one is kept for GRPO and evaluation
        assert all(answers.check_answer("math", a, r["answer"]) for a in right[r["answer"]])
        assert not any(answers.check_answer("math", a, r["answer"]) for a in wrong[r["answer"]])
    drops = Drops()
    assert data_splits.drop_bad_gold(gsm + records, drops) == gsm + records and not drops.counts


def test_load_gsm8k_through_tfds_without_tensorflow(tmp_path, monkeypatch):
    """The real TFDS builder path (array_record data source), fed from a local file."""
    pytest.importorskip("tensorflow_datasets")
    from tensorflow_datasets.text.gsm8k import gsm8k as tfds_gsm8k

    source = write_jsonl(tmp_path / "train.jsonl", GSM8K_ROWS)
    monkeypatch.setattr(tfds_gsm8k.Gsm8k, "_split_generators",
                        lambda self, dl_manager: {"train": self._generate_examples(source)})
    records, report = data.load_gsm8k("train", source="tfds", data_dir=str(tmp_path / "tfds"))
    assert sorted(r["answer"] for r in records) == ["2000", "72"]
    assert report.kept == 2 and report.drops.total == 0


def write_parquet(path, rows):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_load_gsm8k_from_a_local_copy_in_hub_layout(tmp_path):
    pytest.importorskip("datasets")
    root = tmp_path / "gsm8k"
    write_parquet(root / "main" / "train-00000-of-00001.parquet", GSM8K_ROWS)
    write_parquet(root / "main" / "test-00000-of-00001.parquet", GSM8K_ROWS[:1])
    write_parquet(root / "socratic" / "train-00000-of-00001.parquet", GSM8K_ROWS[:1])
    cache = str(tmp_path / "hf-cache")
    train, report = data.load_gsm8k("train", source="hf", path=str(root), cache_dir=cache)
    test, _ = data.load_gsm8k("test", source="hf", path=str(root), cache_dir=cache)
    assert [r["answer"] for r in train] == ["72", "2000"] and report.kept == 2
    assert [r["id"] for r in test] == ["gsm8k-test-0"]
    with pytest.raises(FileNotFoundError, match="'validation'"):
        data.load_gsm8k("validation", source="hf", path=str(root), cache_dir=cache)


def test_load_hf_with_a_column_mapping(tmp_path):
    pytest.importorskip("datasets")
    rows = [{"q": "Which is larger, 3 or 5?", "sol": "5 > 3.", "final": "5", "extra": 1},
            {"q": None, "sol": "", "final": "x", "extra": 2}]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    records, report = data_sources.load_hf(str(path), columns={"prompt": "q", "reasoning": "sol",
                                                        "answer": "final"},
                                   domain="general", cache_dir=str(tmp_path / "c"))
    assert [(r["prompt"], r["reasoning"], r["answer"], r["domain"]) for r in records] == [
        ("Which is larger, 3 or 5?", "5 > 3.", "5", "general")]
    assert report.drops.counts == {"prompt not a string": 1}
    assert "row 1" in report.drops.examples["prompt not a string"][0]
    with pytest.raises(ValueError, match=r"no column\(s\) \['question'\]"):
        data_sources.load_hf(str(path), columns={"prompt": "question"}, cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match="unknown schema field"):
        data_sources.load_hf(str(path), columns={"question": "q"})


def test_load_hf_detects_the_layout(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    rows = [{"instruction": "Reverse cat", "input": "", "output": "tac"},
            {"instruction": "Reverse dog", "input": "", "output": "<answer>god</answer>"}]
    path = write_parquet(tmp_path / "alpaca" / "train-00000-of-00001.parquet", rows)
    records, report = data_sources.load_source(f"hf:{path.parent}")
    assert [r["answer"] for r in records] == ["tac", "god"] and report.kept == 2


def test_load_preferences(tmp_path):
    rows = [{"prompt": "3 * 4?", "chosen": "<reasoning>3 * 4 = 12.</reasoning>\n<answer>12"
                                           "</answer>", "rejected": "12", "domain": "math"},
            {"prompt": "Best color?", "chosen": "Blue, because...", "rejected": "I don't know"},
            {"prompt": "No pair", "chosen": "a"},
            {"prompt": "Same", "chosen": "x", "rejected": "x"}]
    path = write_jsonl(tmp_path / "prefs.jsonl", rows)
    records, report = data_sources.load_preferences(path)
    assert report.drops.counts == {"missing rejected": 1, "chosen equals rejected": 1}
    first, second = records
    assert (first["reasoning"], first["answer"], first["domain"]) == ("3 * 4 = 12.", "12", "math")
    assert (second["reasoning"], second["answer"], second["domain"]) == (
        "", "Blue, because...", "general")
    assert all(r[k].endswith(END_OF_TURN) for r in records for k in ("chosen", "rejected"))
    assert data_sources.load_source(f"prefs:{path}")[0] == records


def test_an_untagged_response_ending_its_turn_leaves_the_marker_out_of_the_answer(tmp_path):
    """Gemma-formatted data ends responses with <end_of_turn>: it is no part of the answer."""
    prefs = write_jsonl(tmp_path / "prefs.jsonl", [
        {"prompt": "Best color?", "chosen": f"Blue.{END_OF_TURN}", "rejected": f"Red.{END_OF_TURN}"}])
    (pair,), _ = data_sources.load_preferences(prefs)
    assert pair["answer"] == "Blue." and pair["chosen"] == f"Blue.{END_OF_TURN}"
    sft = write_jsonl(tmp_path / "sft.jsonl", [{"instruction": "Say hi", "output": f"hi{END_OF_TURN}"}])
    (record,), _ = data_sources.load_jsonl(sft)
    assert record["answer"] == "hi"
    assert format_completion(record["reasoning"], record["answer"]).count(END_OF_TURN) == 1


def test_load_source_dispatch_and_errors(tmp_path):
    cfg = DataConfig(num_records=5, seed=3)
    records, report = data_sources.load_source("tasks", cfg)
    assert records == tasks.generate_all(5, seed=3) and report.kept == 30
    path = write_jsonl(tmp_path / "x.jsonl", [rec(1)])
    assert data_sources.load_source(f"jsonl:{path}")[0] == [rec(1)]
    for bad in ("nope", "jsonl:", "gsm8k:jsonl", "gsm8k:web", "hf:"):
        with pytest.raises(ValueError, match="unknown data source"):
            data_sources.load_source(bad, cfg)
    all_records, reports = data.load_sources(dataclasses.replace(
        cfg, sources=("tasks", f"jsonl:{path}")))
    assert len(all_records) == 31 and [r.source for r in reports] == ["tasks", f"jsonl:{path}"]


# --- filters ---------------------------------------------------------------------------


def test_drop_malformed_counts_each_reason():
    rows = [rec(0), {"id": "x"}, rec(1, prompt=5), rec(2, answer=""), rec(3, domain="art"),
            None, rec(4)]
    rows[3]["answer"] = ""
    drops = Drops()
    kept = data_splits.drop_malformed(rows, drops)
    assert [r["id"] for r in kept] == ["r0", "r4"]
    assert drops.counts == {"missing domain": 1, "prompt not a string": 1, "empty answer": 1,
                            "unknown domain": 1, "not an object": 1}
    assert drops.examples["empty answer"] == ["r2"]


def test_drop_duplicates_ignores_case_and_whitespace():
    rows = [rec(0, prompt="Sort 3 1 2."), rec(1, prompt="  sort 3  1\n2. "),
            rec(2, prompt="Sort 3 1 2!"), rec(3, prompt="SORT 3 1 2.")]
    drops = Drops()
    assert [r["id"] for r in data_splits.drop_duplicates(rows, drops)] == ["r0", "r2"]
    assert drops.counts == {"duplicate prompt": 2} and drops.examples["duplicate prompt"] == [
        "r1", "r3"]


def test_drop_too_long_by_each_budget():
    short = rec(0, prompt="hi")
    long_prompt = rec(1, prompt="word " * 50)
    long_target = dict(rec(2, prompt="hello"), reasoning="step " * 30)
    pair = dict(rec(3, prompt="hey"), chosen="ok", rejected="bad " * 40)
    p = words(template.format_prompt("hello"))
    c = words(format_completion(long_target["reasoning"], long_target["answer"]))
    cases = [(Limits(prompt=30), {"prompt too long": 1}),
             (Limits(completion=20), {"completion too long": 2}),
             (Limits(total=p + c - 1), {"prompt + completion too long": 3}),
             (Limits(), {})]
    for limits, expected in cases:
        drops = Drops()
        kept = data_splits.drop_too_long([short, long_prompt, long_target, pair], drops,
                                  count_tokens=words, limits=limits)
        assert drops.counts == expected, limits
        assert len(kept) == 4 - drops.total and short in kept
    drops = Drops()
    data_splits.drop_too_long([long_prompt], drops, count_tokens=words, limits=Limits(prompt=30))
    n = words(template.format_prompt(long_prompt["prompt"])) + 1  # + BOS
    assert drops.examples["prompt too long"] == [f"r1: {n} > 30 tokens"]


def test_drop_bad_gold_and_pairs():
    rows = [rec(0, answer="1 + 1 = 42"), rec(1, domain="science", answer="3,000"),
            rec(2, domain="general", answer="Ann"), rec(3, domain="general", answer="..."),
            rec(4, domain="coding", answer="catcat"), rec(5, answer="about five"),
            rec(6, answer="\\frac{1}{")]
    drops = Drops()
    assert [r["id"] for r in data_splits.drop_bad_gold(rows, drops)] == ["r1", "r2", "r4", "r5"]
    assert drops.counts == {"gold answer contradicts itself": 1, "empty gold answer": 1,
                            "gold answer is not parseable math": 1}
    drops = Drops()
    assert data_splits.drop_pairs([rec(0), rec(1, chosen="a", rejected="b")], drops) == [rec(0)]
    assert drops.counts == {"preference pair (DPO only)": 1}


# --- rebalancing -----------------------------------------------------------------------

SIZES = {"math": 8000, "coding": 5000, "science": 3000, "instruction": 2000,
         "summarization": 1500, "general": 500}


@pytest.fixture(scope="module")
def big_sample():
    """20k records, six domains of very unequal sizes."""
    return [rec(i, domain=d, id=f"{d}-{i}") for d, n in SIZES.items() for i in range(n)]


@pytest.mark.parametrize("weights", [
    {d: 1.0 for d in DOMAINS},
    {"math": 3, "coding": 2, "science": 1, "instruction": 1, "summarization": 1, "general": 2},
])
def test_rebalance_hits_the_target_mix(big_sample, weights):
    out, info = data_splits.rebalance(big_sample, weights, 6000, max_repeats=3, seed=0)
    assert len(out) == 6000 and not info["shortfalls"]
    mix = Counter(r["domain"] for r in out)
    total = sum(weights.values())
    for d in DOMAINS:
        assert abs(mix[d] / 6000 - weights[d] / total) < 0.01, d
    assert info["count"] == info["target"] == dict(mix)
    assert max(Counter(r["id"] for r in out).values()) <= 3


def test_rebalance_is_seeded(big_sample):
    weights = {d: 1.0 for d in DOMAINS}
    ids = lambda seed: [r["id"] for r in data_splits.rebalance(big_sample, weights, 3000,
                                                         max_repeats=3, seed=seed)[0]]
    assert ids(1) == ids(1)
    assert ids(1) != ids(2)


def test_repeat_cap_is_respected_and_reported(big_sample):
    weights = {"math": 1.0, "general": 1.0}  # general: 500 records, target 2000
    out, info = data_splits.rebalance(big_sample, weights, 4000, max_repeats=3, seed=0)
    counts = Counter(r["id"] for r in out)
    assert max(counts.values()) == 3
    assert info["count"] == {"math": 2000, "general": 1500}
    assert "max_repeats=3" in info["shortfalls"]["general"]
    assert info["unused"] == {d: SIZES[d] for d in ("coding", "science", "instruction",
                                                    "summarization")}
    # Without the cap biting, upsampling spreads repeats evenly (2 or 3 copies each).
    out, info = data_splits.rebalance(big_sample, {"general": 1.0}, 1250, max_repeats=3, seed=0)
    assert set(Counter(r["id"] for r in out).values()) == {2, 3} and not info["shortfalls"]


def test_weights_are_checked():
    recs = [rec(0)]
    with pytest.raises(ValueError, match=r"domain_weights\['cooking'\]: unknown domain"):
        data_splits.rebalance(recs, {"math": 1, "cooking": 1}, 10, max_repeats=1, seed=0)
    with pytest.raises(ValueError, match=r"domain_weights\['math'\]=-1"):
        data_splits.rebalance(recs, {"math": -1, "coding": 2}, 10, max_repeats=1, seed=0)
    with pytest.raises(ValueError, match=r"domain_weights\['math'\]='1'"):
        config.check_weights({"math": "1"})
    with pytest.raises(ValueError, match="must sum to a positive number"):
        config.check_weights({"math": 0, "coding": 0.0})
    assert data_splits.domain_targets({"math": 1, "coding": 1, "science": 1}, 10) == {
        "math": 4, "coding": 3, "science": 3}


# --- splits ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def task_records():
    return tasks.generate_all(200, seed=4)


def leaks(splits):
    held = {normalize_prompt(r["prompt"]) for r in splits.eval}
    return [r["id"] for name in ("sft", "dpo", "grpo") for r in getattr(splits, name)
            if normalize_prompt(r["prompt"]) in held]


def test_build_splits_on_tasks(task_records):
    cfg = DataConfig(eval_per_domain=10, train_size=600, seed=1)
    splits, report = data.build_splits(task_records, cfg)
    assert splits.sizes() == {"eval": 60, "sft": 600, "dpo": 600, "grpo": 600}
    assert Counter(r["domain"] for r in splits.eval) == {d: 10 for d in DOMAINS}
    assert report.eval == {d: 10 for d in DOMAINS}
    for name in ("sft", "grpo"):
        assert Counter(r["domain"] for r in getattr(splits, name)) == {d: 100 for d in DOMAINS}
    assert not leaks(splits)
    assert all(data_records.validate_record(r) is None for r in splits.eval + splits.sft + splits.grpo)
    assert report.input == {d: 200 for d in DOMAINS}
    assert "| math | 200 | 10 | 100 | 100 | 100 |" in notebook.data_table(report)


def test_eval_is_held_out_before_rebalancing(task_records):
    a, _ = data.build_splits(task_records, DataConfig(eval_per_domain=10, train_size=600))
    b, report = data.build_splits(task_records, DataConfig(
        eval_per_domain=10, train_size=300, domain_weights={"math": 1.0}))
    assert a.eval == b.eval  # weights and sizes do not touch the held-out set
    assert {r["domain"] for r in b.sft} == {"math"}
    assert any("records unused" in note for note in report.notes)


def test_build_splits_same_seed_same_output(task_records):
    cfg = DataConfig(eval_per_domain=5, train_size=200, seed=7)
    a, ra = data.build_splits(task_records, cfg)
    b, rb = data.build_splits(task_records, cfg)
    c, _ = data.build_splits(task_records, dataclasses.replace(cfg, seed=8))
    assert a == b and ra.to_dict() == rb.to_dict()
    assert a.eval != c.eval and a.sft != c.sft and a.dpo != c.dpo


def test_the_held_out_seed_moves_the_held_out_set_alone(task_records):
    """data.eval_seed (issue 66 item 5): None is data.seed, as before; another value holds out
    other records of the same pool, and the report records the seed used."""
    cfg = DataConfig(eval_per_domain=5, train_size=200, seed=7)
    a, ra = data.build_splits(task_records, cfg)
    same, _ = data.build_splits(task_records, dataclasses.replace(cfg, eval_seed=7))
    other, ro = data.build_splits(task_records, dataclasses.replace(cfg, eval_seed=8))
    moved, _ = data.build_splits(task_records, dataclasses.replace(cfg, seed=8, eval_seed=7))
    assert same == a and (ra.settings["seed"], ra.settings["eval_seed"]) == (7, 7)
    assert other.eval != a.eval and (ro.settings["seed"], ro.settings["eval_seed"]) == (7, 8)
    assert moved.eval == a.eval and moved.sft != a.sft  # the training draws follow data.seed
    assert not leaks(other) and not leaks(moved)


def test_dpo_pairs_from_gold_answers(task_records):
    splits, _ = data.build_splits(task_records, DataConfig(eval_per_domain=5, train_size=600))
    kinds = Counter(p["rejected_kind"] for p in splits.dpo)
    assert set(kinds) == {"wrong_answer", "missing_tags", "answer_outside_tag"}
    assert 0.4 < kinds["wrong_answer"] / len(splits.dpo) < 0.6
    for p in splits.dpo:
        assert p["chosen"] == format_completion(p["reasoning"], p["answer"])
        assert split_tagged(p["chosen"]) == (p["reasoning"], p["answer"])  # gold in good tags
        assert p["rejected"] != p["chosen"] and p["rejected"].endswith(END_OF_TURN)
        tagged = split_tagged(p["rejected"])
        if p["rejected_kind"] == "wrong_answer":  # every one is wrong by the checker's rule
            assert not answers.check_answer(p["domain"], tagged[1], p["answer"]), p
        else:
            assert tagged is None  # the answer is not inside answer tags


def test_dataset_pairs_feed_dpo_only(task_records, tmp_path):
    pairs = [{"id": f"p{i}", "domain": "general", "source": "prefs", "prompt": f"Pick one {i}",
              "reasoning": "", "answer": "a", "chosen": f"a{END_OF_TURN}",
              "rejected": f"b{END_OF_TURN}"} for i in range(40)]
    splits, report = data.build_splits(task_records + pairs,
                                       DataConfig(eval_per_domain=5, train_size=600))
    dataset_pairs = [p for p in splits.dpo if p["rejected_kind"] == "dataset"]
    assert dataset_pairs and all(p["rejected"] == f"b{END_OF_TURN}" for p in dataset_pairs)
    assert not any(r["id"].startswith("p") for r in splits.sft + splits.grpo + splits.eval)
    assert report.drops["sft"].counts["preference pair (DPO only)"] == 40
    assert report.drops["grpo"].counts["preference pair (DPO only)"] == 40


def test_grpo_needs_checkable_gold_and_every_drop_is_counted(task_records):
    bad = [rec(900 + i, answer=f"{i} + 1 = 42") for i in range(5)]  # golds that contradict
    broken = [dict(rec(950), prompt=None), rec(951, prompt=task_records[0]["prompt"].upper())]
    splits, report = data.build_splits(task_records + bad + broken,
                                       DataConfig(eval_per_domain=5, train_size=1800))
    assert report.drops["clean"].counts == {"prompt not a string": 1, "duplicate prompt": 1}
    assert report.drops["grpo"].counts == {"gold answer contradicts itself": 5}
    assert all(data.gold_problem(r) is None for r in splits.grpo + splits.eval)
    assert any(r["answer"] == "0 + 1 = 42" for r in splits.sft)  # SFT does not need a checker


def test_length_limits_per_stage(task_records):
    preset = get_preset("tiny")
    limits = data.stage_limits(preset)
    assert limits["sft"] == Limits(prompt=96, total=160)
    assert limits["grpo"] == Limits(prompt=96, completion=64)
    count = lambda text: len(text) // 4  # a stand-in tokenizer: 4 characters a token
    sizes = sorted(count(template.format_prompt(r["prompt"])) for r in task_records)
    cut = sizes[len(sizes) * 3 // 4]  # a quarter of the prompts do not fit
    tight = {k: dataclasses.replace(v, prompt=cut) for k, v in limits.items()}
    splits, report = data.build_splits(task_records, DataConfig(eval_per_domain=5,
                                                                train_size=300),
                                       count_tokens=count, limits=tight)
    for name in ("sft", "dpo", "grpo"):
        assert report.drops[name].counts.get("prompt too long", 0) > 0
        assert all(data.too_long(r, count, tight[name]) is None for r in getattr(splits, name))
    assert all(count(template.format_prompt(r["prompt"])) + 1 <= cut for r in splits.eval)  # + BOS
    with pytest.raises(ValueError, match="limits need count_tokens"):
        data.build_splits(task_records, DataConfig(), limits=tight)
    with pytest.raises(ValueError, match="unknown stage"):
        data.build_splits(task_records, DataConfig(), count_tokens=count,
                          limits={"pretrain": Limits()})


def test_build_splits_refuses_limits_that_are_not_a_stage_mapping(task_records):
    count = lambda text: len(text) // 4
    one = Limits(prompt=96)
    with pytest.raises(TypeError, match=r"build_splits: limits=Limits\(prompt=96, .*\) is a "
                                        r"single Limits; expected a mapping of stage name.*"
                                        r"stage_limits\(preset\).*for stage in STAGES"):
        data.build_splits(task_records, DataConfig(), count_tokens=count, limits=one)
    with pytest.raises(TypeError, match=r"build_splits: limits is a list \(\[\('sft', .*\); "
                                        r"expected a mapping of stage name"):
        data.build_splits(task_records, DataConfig(), count_tokens=count,
                          limits=[("sft", one)])
    with pytest.raises(TypeError, match=r"build_splits: limits\['sft'\]=\{'prompt': 96\} is a "
                                        r"dict; expected a Limits"):
        data.build_splits(task_records, DataConfig(), count_tokens=count,
                          limits={"eval": one, "sft": {"prompt": 96}})
    with pytest.raises(ValueError, match=r"limits has unknown stage\(s\) \['train', 3\]"):
        data.build_splits(task_records, DataConfig(), count_tokens=count,
                          limits={"train": one, 3: one})


@pytest.mark.parametrize("field, value", [("prompt", 0), ("completion", -5), ("total", "512"),
                                          ("prompt", 96.0), ("total", True)])
def test_limits_fields_are_none_or_positive_ints(field, value):
    with pytest.raises(ValueError, match=rf"Limits.{field}={value!r}: must be None \(no limit\) "
                                         r"or an int >= 1"):
        Limits(**{field: value})


def test_shortfalls_are_reported_not_hidden(task_records):
    few = [r for r in task_records if r["domain"] != "general"] + [
        r for r in task_records if r["domain"] == "general"][:20]
    splits, report = data.build_splits(few, DataConfig(eval_per_domain=8, train_size=600))
    assert report.eval["general"] == 8
    assert report.stages["sft"]["count"]["general"] == 36  # 12 records x max_repeats 3
    assert "max_repeats=3" in report.stages["sft"]["shortfalls"]["general"]
    assert any(n.startswith("sft general: target 100") for n in report.notes)
    tiny = [r for r in task_records if r["domain"] != "general"] + [
        r for r in task_records if r["domain"] == "general"][:3]
    _, report = data.build_splits(tiny, DataConfig(eval_per_domain=8, train_size=600))
    assert "eval general: 1 of 8" in " ".join(report.notes)


def test_a_domain_with_nothing_to_evaluate_is_named():
    """Preference pairs carry no checked gold: their domain gets no eval set, and a note."""
    pairs = [rec(i, domain="general", prompt=f"Pick {i}", chosen=f"a{END_OF_TURN}",
                 rejected=f"b{END_OF_TURN}") for i in range(10)]
    _, report = data.build_splits([rec(i) for i in range(10)] + pairs, DataConfig(
        eval_per_domain=3, train_size=10, domain_weights={"math": 1.0, "general": 1.0}))
    assert report.eval == {"math": 3, "general": 0}
    assert "eval general: 0 of 3: 0 eligible records, at most half are held out" in report.notes
    assert "| general | 10 | 0 | 0 | 5 | 0 |" in notebook.data_table(report)


PROMPTS = st.sampled_from(["Sort 3 1 2.", "Which is larger, 4 or 9?", "Reverse dog.",
                           "Count cats: cat dog cat.", "What is 2 + 2?", "Name a fruit."])


@st.composite
def messy_records(draw):
    n = draw(st.integers(10, 60))
    out = []
    for i in range(n):
        prompt = draw(PROMPTS) + " " * draw(st.integers(0, 2)) + str(draw(st.integers(0, 20)))
        if draw(st.booleans()):
            prompt = prompt.upper()
        out.append(rec(i, domain=draw(st.sampled_from(DOMAINS)), prompt=prompt,
                       answer=str(draw(st.integers(1, 9)))))
    return out


@settings(max_examples=60, deadline=None)
@given(records=messy_records(), per_domain=st.integers(1, 5), seed=st.integers(0, 99))
def test_no_eval_prompt_reaches_training(records, per_domain, seed):
    splits, report = data.build_splits(records, DataConfig(eval_per_domain=per_domain,
                                                           train_size=50, seed=seed))
    assert not leaks(splits)
    held = [normalize_prompt(r["prompt"]) for r in splits.eval]
    assert len(set(held)) == len(held) and all(r in records for r in splits.eval)
    assert all(n <= per_domain for n in report.eval.values())


def test_write_read_round_trip(task_records, tmp_path):
    splits, report = data.build_splits(task_records, DataConfig(eval_per_domain=5,
                                                                train_size=100))
    out = data.write_splits(splits, report, tmp_path / "data")
    assert sorted(p.name for p in out.iterdir()) == [
        "data_report.json", "dpo.jsonl", "eval.jsonl", "grpo.jsonl", "sft.jsonl"]
    again, report_again = data.read_splits(out)
    assert again == splits and report_again == report
    assert json.loads((out / "data_report.json").read_text())["eval"] == report.eval
    with pytest.raises(FileExistsError, match="overwrite=True"):
        data.write_splits(splits, report, out)
    data.write_splits(splits, report, out, overwrite=True)
    with pytest.raises(FileNotFoundError, match="missing"):
        data.read_splits(tmp_path / "missing")


def test_report_round_trip_does_not_depend_on_the_locale(tmp_path):
    """data_report.json is UTF-8 like the JSONL files, whatever the platform's encoding."""
    script = (
        "import sys; from reasonkit import data; from reasonkit.config import DataConfig\n"
        "recs = [{'id': f'caf\\u00e9-{i}', 'domain': 'math', 'source': '\\u65e5\\u672c', "
        "'prompt': f'{i} + 1?', 'reasoning': '', 'answer': str(i + 1)} for i in range(10)]\n"
        "splits, report = data.build_splits(recs + [recs[0]], DataConfig(eval_per_domain=2, "
        "train_size=10))\n"
        "data.write_splits(splits, report, sys.argv[1])\n"
        "assert data.read_splits(sys.argv[1]) == (splits, report)\n")
    env = dict(os.environ, LC_ALL="C", LANG="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "data")], env=env,
                          capture_output=True, text=True, encoding="utf-8", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "data" / "data_report.json").read_text(encoding="utf-8"))
    assert report["drops"]["clean"]["examples"]["duplicate prompt"] == ["caf\u00e9-0"]


def test_wrong_answer_is_wrong_by_the_checker():
    rng = random.Random(0)
    golds = [("math", g) for g in ["0", "1", "42", "2.5", "1,234", "x = 5", "50%", "\\frac{1}{3}",
                                   "\\sqrt{2}", "(1, 2)", "odd"]]
    golds += [("general", g) for g in ["cat, cat, cat", "god", "2 7 9", "Ann", "a", "21"]]
    for domain, gold in golds:
        for _ in range(20):
            wrong = data_pairs.wrong_answer(gold, rng, others=[gold, "dog", "7"], domain=domain)
            assert answers.normalize_text(wrong) and not answers.check_answer(domain, wrong, gold)
            read = answers.read_answer(gold, domain)
            if read.kind == "number" and read.value >= 0:  # a nearby number, never negative
                assert answers.read_answer(wrong, domain).value >= 0


def test_the_package_layers_one_way():
    """records <- sources, pairs <- splits <- the face; outside reasonkit.data only config,
    template, answers and tasks."""
    import ast
    import pathlib

    order = ["_records", "_sources", "_pairs", "_splits", "__init__"]
    allowed = {"reasonkit.config", "reasonkit.template", "reasonkit.answers", "reasonkit.tasks"}
    for i, name in enumerate(order):
        tree = ast.parse((pathlib.Path(data.__file__).parent / f"{name}.py").read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {f"reasonkit.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                     and n.module == "reasonkit" for a in n.names}
        ours = {m for m in imported if m.startswith("reasonkit")} - {"reasonkit"}
        assert ours <= allowed | {f"reasonkit.data.{m}" for m in order[:i]}, (name, ours)
    assert all(hasattr(data, n) for n in data.__all__)
    assert notebook.qualified_name(data.DataReport()) == "reasonkit.data.DataReport"


# --- GRPO on harder prompts ------------------------------------------------------------


def test_harder_grpo_draws_grpo_and_an_eval_block_apart_from_every_split(task_records, tmp_path):
    cfg = DataConfig(eval_per_domain=5, train_size=120, num_records=60, seed=3)
    splits, report = data.build_splits(task_records, cfg)
    assert data.harder_grpo(splits, report, cfg, 1) is splits  # the data's own difficulty
    hard = data.harder_grpo(splits, report, cfg, 2)
    assert (hard.eval, hard.sft, hard.dpo) == (splits.eval, splits.sft, splits.dpo)
    assert {r["id"].split("-")[-2] for r in hard.grpo + hard.eval_hard} == {"d2"}
    assert len(hard.grpo) == 120 and Counter(r["domain"] for r in hard.eval_hard) == {
        d: 5 for d in DOMAINS}
    keys = lambda rs: {normalize_prompt(r["prompt"]) for r in rs}  # noqa: E731
    others = keys(splits.eval + splits.sft + splits.dpo + splits.grpo)
    assert not keys(hard.eval_hard) & (others | keys(hard.grpo))
    assert not keys(hard.grpo) & others
    assert report.settings["grpo_difficulty"] == 2 and any("difficulty 2" in n for n in report.notes)
    assert data.harder_grpo(splits, report, cfg, 2) == hard  # the same draw every time
    # on disk: eval_hard.jsonl beside the others, gone when splits without one replace them
    out = data.write_splits(hard, report, tmp_path / "data")
    assert (out / "eval_hard.jsonl").is_file() and data.read_splits(out)[0] == hard
    assert hard.sizes()["eval_hard"] == 30 and "eval_hard" not in splits.sizes()
    data.write_splits(splits, report, out, overwrite=True)
    assert not (out / "eval_hard.jsonl").exists() and data.read_splits(out)[0].eval_hard == []


def test_harder_grpo_needs_the_tasks_and_fits_the_limits(task_records):
    cfg = DataConfig(eval_per_domain=5, train_size=60, num_records=40)
    splits, report = data.build_splits(task_records, cfg)
    other = DataConfig(sources=("jsonl:/nowhere.jsonl",), eval_per_domain=5, train_size=60)
    with pytest.raises(ValueError, match=r"grpo.difficulty=2 .* has no 'tasks'"):
        data.harder_grpo(splits, report, other, 2)
    count = lambda text: len(text.split())  # noqa: E731
    limits = {"eval": data.Limits(prompt=12), "grpo": data.Limits(prompt=12)}
    hard = data.harder_grpo(splits, report, cfg, 2, count_tokens=count, limits=limits)
    assert all(count(format_prompt(r["prompt"])) + 1 <= 12 for r in hard.grpo + hard.eval_hard)
    with pytest.raises(ValueError, match="count_tokens"):
        data.harder_grpo(splits, report, cfg, 2, limits=limits)


def test_onpolicy_pairs_reject_the_models_own_wrong_answer_of_exact_format():
    """A verified right answer against a wrong one of exact format; the gold when none is
    verified; no pair when every wrong answer breaks the format (that is SFT's to teach)."""
    rec = tasks.generate("math", 1, seed=3)[0]
    gold = template.format_completion(rec["reasoning"], rec["answer"])
    right = gold.removesuffix(template.END_OF_TURN)
    wrong = template.format_completion(rec["reasoning"], "zzz").removesuffix(template.END_OF_TURN)
    pair = data.onpolicy_pair(rec, [wrong, right], [False, True], [False, True])
    assert (pair["chosen"], pair["rejected"], pair["chosen_from"]) == (gold, wrong + template.END_OF_TURN,
                                                                      "policy")
    assert pair["rights"] == 1 and {k: pair[k] for k in data_records.FIELDS} == rec
    unverified = data.onpolicy_pair(rec, [right, wrong], [True, False], [False, False])
    assert (unverified["chosen"], unverified["chosen_from"]) == (gold, "gold")
    assert data.onpolicy_pair(rec, [right, "zzz"], [True, False], [True, False]) is None
    assert data.onpolicy_pair(rec, [right, right], [True, True], [True, True]) is None
    assert data_pairs.as_completion(right + template.END_OF_TURN + "more") == gold
