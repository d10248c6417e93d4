"""Synthetic tasks: deterministic, short, and every gold answer right by an independent check."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonkit import tasks
from reasonkit.answers import check_answer, gold_problem, normalize_text
from reasonkit.config import DOMAINS
from reasonkit.template import SPECIAL_TOKENS, normalize_prompt

# --- independent solvers: read the prompt, compute the answer from scratch --------------


def solve_math(prompt: str) -> int:
    total = None
    for sentence in re.findall(r"[^.?]+[.?]", prompt):
        s = sentence.strip()
        if m := re.fullmatch(r"\w+ has (\d+) \w+ of (\d+) \w+\.", s):
            total = int(m[1]) * int(m[2])
        elif m := re.fullmatch(r"\w+ has (\d+) \w+\.", s):
            total = int(m[1])
        elif m := re.fullmatch(r"\w+ (?:buys (\d+) more|gives (\d+) to \w+|loses (\d+))\.", s):
            total += int(m[1]) if m[1] else -int(m[2] or m[3])
        elif m := re.fullmatch(r"\w+ gets (\d+) \w+ of (\d+) more\.", s):
            total += int(m[1]) * int(m[2])
        elif re.fullmatch(r"Then \w+ doubles them\.", s):
            total *= 2
        elif m := re.fullmatch(r"\w+ puts them in groups of (\d+)\.", s):
            assert total % int(m[1]) == 0
            total //= int(m[1])
        else:
            assert s.startswith("How many"), s
        assert total is None or total >= 0
    return total


def solve_coding(prompt: str) -> str:
    head, _, code = prompt.partition("\n")
    assert head == "What does this code print?"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {})  # our own generated snippet
    return out.getvalue().strip()


SMALL_PER_BIG = {("m", "cm"): 100, ("km", "m"): 1000, ("kg", "g"): 1000, ("L", "mL"): 1000,
                 ("hours", "minutes"): 60, ("minutes", "seconds"): 60, ("cm", "mm"): 10,
                 ("km", "cm"): 100_000, ("hours", "seconds"): 3600}


def solve_science(prompt: str) -> int:
    nums = [int(x) for x in re.findall(r"\d+", re.sub(r"m/s2|cm3", "", prompt))]
    if "minutes. How far" in prompt:
        return nums[0] * nums[1] * 60
    if "How far" in prompt or "kg" in prompt and "force" in prompt:
        return nums[0] * nums[1]
    if "force" in prompt:  # mass in grams
        assert nums[0] % 1000 == 0
        return nums[0] // 1000 * nums[1]
    if "speed in" in prompt or "density" in prompt:
        assert nums[0] % nums[1] == 0
        return nums[0] // nums[1]
    if "How many s does it take" in prompt:
        assert nums[1] % nums[0] == 0
        return nums[1] // nums[0]
    if "weight" in prompt:
        return nums[0] * 10
    want, n, have = re.fullmatch(r"How many (\w+) are in (\d+) (\w+)\?", prompt).groups()
    if (have, want) in SMALL_PER_BIG:
        return int(n) * SMALL_PER_BIG[have, want]
    assert int(n) % SMALL_PER_BIG[want, have] == 0
    return int(n) // SMALL_PER_BIG[want, have]


def solve_instruction(prompt: str) -> str:
    if m := re.fullmatch(r"Write the word (\w+) (\d+) times, separated by (commas|spaces)\.",
                         prompt):
        return (", " if m[3] == "commas" else " ").join([m[1]] * int(m[2]))
    if m := re.fullmatch(r"Reverse the letters of (\w+)\.", prompt):
        return m[1][::-1]
    words = prompt.rstrip(".").split(": ")[1].split()
    if prompt.startswith("Write these words in reverse order"):
        return " ".join(reversed(words))
    if prompt.startswith("Write the first letter"):
        return " ".join(w[0] for w in words)
    assert prompt.startswith("Write these words in alphabetical order"), prompt
    assert len(set(words)) == len(words), prompt  # no ties: one right order
    return " ".join(sorted(words))


def solve_summarization(prompt: str) -> str:
    question, _, rest = prompt.partition(": ")
    items = rest.rstrip("?.").split()
    counts = Counter(items)
    if "most often" in question:
        (top, n), (_, m) = counts.most_common(2)
        assert n > m
        return top
    if "least often" in question:
        (low, n), (_, m) = sorted(counts.items(), key=lambda kv: kv[1])[:2]
        assert n < m
        return low
    if m := re.fullmatch(r"How many times does (\w+) appear", question):
        return str(counts[m[1]])
    return " ".join(dict.fromkeys(items))


def solve_general(prompt: str) -> str:
    if nums := re.findall(r"\d+", prompt):
        assert len(set(nums)) == len(nums), prompt  # no ties: "which is larger, 7 or 7?"
    if m := re.fullmatch(r"Sort ([\d ]+) from (smallest|largest) to \w+\.", prompt):
        nums = sorted(map(int, m[1].split()), reverse=m[2] == "largest")
        return " ".join(map(str, nums))
    if m := re.fullmatch(r"Which is (larger|smaller), (\d+) or (\d+)\?", prompt):
        return str((max if m[1] == "larger" else min)(int(m[2]), int(m[3])))
    if m := re.fullmatch(r"What is the (largest|smallest) number: ([\d ]+)\?", prompt):
        return str((max if m[1] == "largest" else min)(map(int, m[2].split())))
    facts = re.findall(r"(\w+) is \w+ than (\w+)\.", prompt)
    more = {a for a, _ in facts}
    less = {b for _, b in facts}
    top, bottom = more - less, less - more
    assert len(top) == len(bottom) == 1 and len(facts) == len(more | less) - 1
    superlative = re.search(r"Who is the (\w+)\?", prompt)[1]
    tops = ("tallest", "oldest", "fastest", "heaviest")
    return (top if superlative in tops else bottom).pop()


def stated_answer(r: dict) -> str:
    """The answer the reasoning itself arrives at, read from the reasoning alone."""
    text, prompt = r["reasoning"], r["prompt"]
    if m := re.fullmatch(r"s \* (\d+) writes (\w+) \1 times with no spaces\.", text):
        return m[2] * int(m[1])
    if m := re.fullmatch(r"t \+ s joins (\w+) and (\w+) with no space\.", text):
        return m[1] + m[2]
    if m := re.fullmatch(r"The word is (\w+)\. I write it (\d+) times with (commas|spaces)\.",
                         text):
        return (", " if m[3] == "commas" else " ").join([m[1]] * int(m[2]))
    if m := re.fullmatch(r"The letters are ([a-z ]+)\. Reversed: ([a-z ]+)\.", text):
        assert m[2].split() == m[1].split()[::-1], text
        return m[2].replace(" ", "")
    if m := re.fullmatch(r"(?:Last to first|By first letters|New items in order): (.+)\.", text):
        return " ".join(re.split(r", | < ", m[1]))
    if re.fullmatch(r"(?:\w+ starts with \w\. ?)+", text):
        return " ".join(re.findall(r"starts with (\w)\.", text))
    if prompt.startswith("Sort "):
        return " ".join(re.findall(r"\d+", text))
    if m := re.fullmatch(r"(\d+) > (\d+)\.", text):  # "Which is larger, a or b?"
        return m[1] if "larger" in prompt else m[2]
    if facts := re.findall(r"(\w+) is \w+ than (\w+)\.", prompt):  # the chain agrees
        order = text.partition(". ")[0].split(" > ")
        assert all(order.index(a) < order.index(b) for a, b in facts), r
    if m := re.search(r"(?:appears|has) (\d+) (?:times|items)\.$", text):
        return m[1]
    return re.findall(r"\w+", text)[-1]  # "... = 42.", "It prints 42.", "is Eva."


SOLVERS = {"math": lambda p: str(solve_math(p)), "coding": solve_coding,
           "science": lambda p: str(solve_science(p)), "instruction": solve_instruction,
           "summarization": solve_summarization, "general": solve_general}
EQUATION = re.compile(r"(\d+(?: [-+*/%] \d+)+) = (\d+)")  # "3 * 4 + 1 = 13"


def check_record(r: dict) -> None:
    assert r["answer"] == SOLVERS[r["domain"]](r["prompt"]), r
    assert stated_answer(r) == r["answer"], r  # the reasoning concludes what the answer says
    assert check_answer(r["domain"], r["answer"], r["answer"]), r
    assert gold_problem(r["answer"], r["domain"]) is None, r  # the data filters keep it
    for expr, value in EQUATION.findall(r["reasoning"]):  # every worked step is right
        assert eval(expr) == int(value), r["reasoning"]  # digits and operators only


# --- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("difficulty", [1, 2, 3])
@pytest.mark.parametrize("domain", DOMAINS)
def test_answers_are_right(domain, difficulty):
    for r in tasks.generate(domain, 300, seed=11, difficulty=difficulty):
        check_record(r)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**9), difficulty=st.integers(1, 4))
def test_answers_are_right_for_any_seed(seed, difficulty):
    for r in tasks.generate_all(3, seed=seed, difficulty=difficulty):
        check_record(r)


@pytest.mark.parametrize("domain", DOMAINS)
def test_deterministic_for_a_seed(domain):
    a = tasks.generate(domain, 50, seed=7)
    assert a == tasks.generate(domain, 50, seed=7)
    assert a != tasks.generate(domain, 50, seed=8)
    assert a[:20] == tasks.generate(domain, 20, seed=7)  # a prefix does not depend on n


def test_tasks_do_not_import_the_data_module():
    """tasks reads the format from reasonkit.template: no data <-> tasks cycle."""
    code = "import sys, reasonkit.tasks; print('reasonkit.data' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_same_output_in_another_process():
    """No salted hash(): a fresh interpreter with another hash seed generates the same."""
    code = ("import json; from reasonkit import tasks; "
            "print(json.dumps(tasks.generate_all(3, seed=5)))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == tasks.generate_all(3, seed=5)


@pytest.mark.parametrize("domain", DOMAINS)
def test_record_schema_and_ids(domain):
    recs = tasks.generate(domain, 100, seed=0)
    for r in recs:
        assert set(r) == {"id", "domain", "source", "prompt", "reasoning", "answer"}
        assert r["domain"] == domain and r["source"] == "tasks"
        assert all(isinstance(v, str) and v.strip() for v in r.values())
        assert normalize_text(r["answer"])
        assert not any(tok in r["prompt"] + r["reasoning"] for tok in SPECIAL_TOKENS)
    assert len({r["id"] for r in recs}) == len(recs)


@pytest.mark.parametrize("difficulty", [1, 2])
@pytest.mark.parametrize("domain", DOMAINS)
def test_texts_are_short(domain, difficulty):
    for r in tasks.generate(domain, 300, seed=1, difficulty=difficulty):
        assert len(r["prompt"].split()) <= 40, r["prompt"]
        assert len(r["reasoning"].split()) <= 40, r["reasoning"]
        assert len(r["answer"].split()) <= 12, r["answer"]


@pytest.mark.parametrize("domain", DOMAINS)
def test_duplicates_are_rare(domain):
    for n in (400, 3000):  # the tiny preset's and the default DataConfig's num_records
        prompts = {normalize_prompt(r["prompt"]) for r in tasks.generate(domain, n, seed=0)}
        assert len(prompts) >= 0.99 * n


def test_closed_vocabulary():
    """Few distinct words: a 512-piece tokenizer covers them (numbers split into digits)."""
    words = Counter()
    for r in tasks.generate_all(300, seed=0):
        for text in (r["prompt"], r["reasoning"], r["answer"]):
            words.update(re.findall(r"[A-Za-z]+", text))
    reverse_task_words = {w for w in words if words[w] == 1}  # made-up words to reverse
    assert len(set(words) - reverse_task_words) < 400


def _effort(domain, difficulty):
    recs = tasks.generate(domain, 200, seed=2, difficulty=difficulty)
    return sum(len(r["prompt"]) + len(r["reasoning"]) for r in recs) / len(recs)


@pytest.mark.parametrize("domain", DOMAINS)
def test_difficulty_makes_tasks_bigger(domain):
    assert tasks.generate(domain, 20, seed=0, difficulty=1) != tasks.generate(
        domain, 20, seed=0, difficulty=2)
    assert _effort(domain, 1) < _effort(domain, 2) < _effort(domain, 3)


def test_difficulty_adds_math_steps_and_code_lines():
    steps = [sum(len(EQUATION.findall(r["reasoning"])) for r in tasks.generate(
        "math", 200, seed=0, difficulty=d)) for d in (1, 2, 3)]
    lines = [sum(r["prompt"].count("\n") for r in tasks.generate(
        "coding", 200, seed=0, difficulty=d)) for d in (1, 2, 3)]
    assert steps[0] < steps[1] < steps[2] and lines[0] < lines[1] < lines[2]


def test_generate_all_and_corpus():
    recs = tasks.generate_all(4, seed=3)
    assert [r["domain"] for r in recs] == [d for d in DOMAINS for _ in range(4)]
    assert len({r["id"] for r in recs}) == len(recs)
    assert [r["domain"] for r in tasks.generate_all(2, seed=3, domains=["math"])] == ["math"] * 2
    texts = tasks.corpus_texts(recs)
    assert len(texts) == 5 * len(recs)
    assert all(tok in "".join(texts) for tok in SPECIAL_TOKENS)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown domain 'cooking'"):
        tasks.generate("cooking", 3, seed=0)
    with pytest.raises(ValueError, match="difficulty=0"):
        tasks.generate("math", 3, seed=0, difficulty=0)
    with pytest.raises(ValueError, match="n=-1"):
        tasks.generate("math", -1, seed=0)
    assert tasks.generate("math", 0, seed=0) == []
    with pytest.raises(ValueError, match="difficulty=True"):  # not a silent "dTrue"
        tasks.generate("math", 3, seed=0, difficulty=True)
    with pytest.raises(ValueError, match="n=True"):
        tasks.generate("math", True, seed=0)
    with pytest.raises(ValueError, match="difficulty=-2"):
        tasks.generate_all(3, seed=0, difficulty=-2)


def test_difficulty_limits():
    """Past a domain's limit, a clear error, raised before any domain is generated."""
    top = tasks.MAX_DIFFICULTY
    assert top == {"general": 14, "instruction": 28}
    for domain, d in top.items():
        for r in tasks.generate(domain, 20, seed=0, difficulty=d):
            check_record(r)
        with pytest.raises(ValueError, match=f"difficulty={d + 1}: {domain} tasks go up to"):
            tasks.generate(domain, 1, seed=0, difficulty=d + 1)
    with pytest.raises(ValueError, match="difficulty=1000000: instruction"):
        tasks.generate_all(1, seed=0, difficulty=10**6)  # would loop a million steps first
    assert len(tasks.generate("math", 1, seed=0, difficulty=40)) == 1  # no limit there
