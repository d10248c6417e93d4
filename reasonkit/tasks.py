"""Synthetic verifiable tasks for the ``tiny`` preset: six domains, short texts.

A model of about a million parameters trained for minutes on a CPU has to learn
these, so every generator keeps to a small closed vocabulary (a few names, objects
and words that repeat) and short texts (prompts and reasoning of at most about 40
words). Every gold answer is checkable by a rule: numbers compare numerically,
everything else as normalised text (:func:`reasonkit.answers.check_answer`).

Each generator maps ``(rng, difficulty)`` to ``(prompt, reasoning, answer)``;
``difficulty`` (1, 2, 3, ...) adds steps, items or bigger numbers.

>>> [r["answer"] for r in generate("general", 3, seed=0)]
['21', '82', 'Cal']
>>> generate("math", 2, seed=0) == generate("math", 2, seed=0)
True
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Callable, Iterable, Sequence

from reasonkit.config import DOMAINS
from reasonkit.template import format_completion, format_prompt, normalize_prompt

__all__ = ["GENERATORS", "MAX_DIFFICULTY", "generate",
           "generate_all", "fresh_records", "corpus_texts"]

_NAMES = ("Ann", "Ben", "Cal", "Dan", "Eva", "Fay", "Gus", "Ivy", "Jon", "Kim", "Leo", "Mia",
         "Ned", "Pam", "Sam", "Tom")
_ITEMS = ("apples", "pears", "eggs", "pens", "books", "cards", "coins", "shells", "stamps",
         "cups", "toys", "rocks")
_BOXES = ("boxes", "bags", "jars", "packs")
_WORDS = ("cat", "dog", "sun", "red", "blue", "tree", "fish", "bird", "milk", "book", "star",
         "rain", "cake", "lamp", "rose", "ship", "hat", "box", "map", "pen", "cup", "egg",
         "key", "owl", "sea", "king", "moon", "frog", "gold", "leaf")
_FRUITS = ("apple", "pear", "fig", "plum", "lime", "kiwi", "grape", "peach")
_ANIMALS = ("cat", "dog", "cow", "pig", "hen", "fox", "owl", "bee")
_VEHICLES = ("car", "bike", "boat", "train", "bus", "cart")
_THINGS = ("box", "cart", "sled", "rock", "ball", "crate")
# (one big unit, many big units, small unit, small units per big unit)
_UNITS = (("m", "m", "cm", 100), ("km", "km", "m", 1000), ("kg", "kg", "g", 1000),
         ("hour", "hours", "minutes", 60), ("minute", "minutes", "seconds", 60),
         ("cm", "cm", "mm", 10), ("L", "L", "mL", 1000))
# (comparative, superlative, opposite superlative)
_ORDERS = (("taller", "tallest", "shortest"), ("older", "oldest", "youngest"),
          ("faster", "fastest", "slowest"), ("heavier", "heaviest", "lightest"))
_CONSONANTS, _VOWELS = "bdfgklmnprst", "aeiou"

_Task = tuple[str, str, str]  # (prompt, reasoning, answer)


# --- math ------------------------------------------------------------------------------

def _math_task(rng: random.Random, difficulty: int = 1) -> _Task:
    """A word problem of ``difficulty`` operations after the start, numbers up to 4 + 4d.

    >>> p, r, a = _math_task(random.Random(8))
    >>> print(p, r, a, sep="\\n")
    Ivy has 3 bags of 7 coins. Ivy gives 3 to Fay. How many coins does Ivy have now?
    3 * 7 = 21. 21 - 3 = 18.
    18
    """
    hi = 4 + 4 * difficulty
    name, other = rng.sample(_NAMES, 2)
    item, box = rng.choice(_ITEMS), rng.choice(_BOXES)
    a, b = rng.randint(2, hi), rng.randint(2, hi)
    if rng.random() < 0.5:
        total, text = a * b, [f"{name} has {a} {box} of {b} {item}."]
        steps = [f"{a} * {b} = {a * b}."]
    else:
        total, text, steps = a + b, [f"{name} has {a + b} {item}."], []
    for _ in range(difficulty):
        c = rng.randint(1, hi)
        kind = rng.choice(("buy", "give", "lose", "get", "double"))
        if kind in ("give", "lose") and total > 1:
            c = min(c, total - 1)
            text.append(f"{name} gives {c} to {other}." if kind == "give" else f"{name} loses {c}.")
            steps.append(f"{total} - {c} = {total - c}.")
            total -= c
        elif kind == "get":
            k = rng.randint(2, 3)
            text.append(f"{name} gets {k} {box} of {c} more.")
            steps.append(f"{k} * {c} = {k * c}. {total} + {k * c} = {total + k * c}.")
            total += k * c
        elif kind == "double":
            text.append(f"Then {name} doubles them.")
            steps.append(f"{total} * 2 = {total * 2}.")
            total *= 2
        else:
            text.append(f"{name} buys {c} more.")
            steps.append(f"{total} + {c} = {total + c}.")
            total += c
    groups = [k for k in range(2, 7) if total % k == 0 and total // k >= 2]
    if groups and rng.random() < 0.3:
        k = rng.choice(groups)
        text.append(f"{name} puts them in groups of {k}. How many groups are there?")
        steps.append(f"{total} / {k} = {total // k}.")
        total //= k
    else:
        text.append(f"How many {item} does {name} have now?")
    return " ".join(text), " ".join(steps), str(total)


# --- coding ----------------------------------------------------------------------------

def _coding_task(rng: random.Random, difficulty: int = 1) -> _Task:
    """What a short Python snippet prints: a chain of ``difficulty`` updates, a list, a string.

    >>> p, r, a = _coding_task(random.Random(1))
    >>> print(p, r, a, sep="\\n")
    What does this code print?
    x = 5
    x = x * 2 + 8
    print(x)
    x = 5. x = 5 * 2 + 8 = 18. It prints 18.
    18
    """
    kind = rng.random()
    if kind < 0.6:
        return _code_chain(rng, difficulty)
    if kind < 0.85:
        return _code_list(rng, difficulty)
    return _code_string(rng, difficulty)


def _code_chain(rng: random.Random, difficulty: int) -> _Task:
    var = rng.choice("xynkab")
    v = rng.randint(1, 9)
    lines, trace = [f"{var} = {v}"], [f"{var} = {v}."]
    for _ in range(difficulty):
        c = rng.randint(2, 3 + difficulty)
        kind = rng.choice(("add", "sub", "mul", "muladd", "loop", "mod"))
        if kind == "sub" and v > c:
            lines.append(f"{var} = {var} - {c}")
            trace.append(f"{var} = {v} - {c} = {v - c}.")
            v -= c
        elif kind == "mul":
            lines.append(f"{var} = {var} * {c}")
            trace.append(f"{var} = {v} * {c} = {v * c}.")
            v *= c
        elif kind == "muladd":
            d = rng.randint(1, 9)
            lines.append(f"{var} = {var} * {c} + {d}")
            trace.append(f"{var} = {v} * {c} + {d} = {v * c + d}.")
            v = v * c + d
        elif kind == "loop":
            k = rng.randint(2, 4)
            lines.append(f"for i in range({k}): {var} = {var} + {c}")
            trace.append(f"The loop adds {c}, {k} times. {var} = {v} + {k * c} = {v + k * c}.")
            v += k * c
        elif kind == "mod" and v > c:
            lines.append(f"{var} = {var} % {c}")
            trace.append(f"{var} = {v} % {c} = {v % c}.")
            v %= c
        else:
            lines.append(f"{var} = {var} + {c}")
            trace.append(f"{var} = {v} + {c} = {v + c}.")
            v += c
    lines.append(f"print({var})")
    trace.append(f"It prints {v}.")
    return _code_prompt(lines), " ".join(trace), str(v)


def _code_list(rng: random.Random, difficulty: int) -> _Task:
    items = [rng.randint(1, 9) for _ in range(2 + difficulty)]
    shown = ", ".join(map(str, items))
    kind = rng.choice(("sum", "max", "min", "len", "index"))
    if kind == "sum":
        expr, value = "sum(a)", sum(items)
        why = f"{' + '.join(map(str, items))} = {value}."
    elif kind in ("max", "min"):
        expr, value = f"{kind}(a)", (max if kind == "max" else min)(items)
        why = f"The {'largest' if kind == 'max' else 'smallest'} of {shown} is {value}."
    elif kind == "len":
        expr, value = "len(a)", len(items)
        why = f"The list has {value} items."
    else:
        i = rng.randrange(len(items))
        expr, value = f"a[{i}]", items[i]
        why = f"a[{i}] is item {i} counting from 0. It is {value}."
    return _code_prompt([f"a = [{shown}]", f"print({expr})"]), why, str(value)


def _code_string(rng: random.Random, difficulty: int) -> _Task:
    word, other = rng.sample(_WORDS, 2)
    k = rng.randint(2, 2 + difficulty)
    if rng.random() < 0.5:
        lines = [f's = "{word}"', f"print(s * {k})"]
        why, value = f"s * {k} writes {word} {k} times with no spaces.", word * k
    else:
        lines = [f's = "{word}"', f't = "{other}"', "print(t + s)"]
        why, value = f"t + s joins {other} and {word} with no space.", other + word
    return _code_prompt(lines), why, value


def _code_prompt(lines: Sequence[str]) -> str:
    return "What does this code print?\n" + "\n".join(lines)


# --- science ---------------------------------------------------------------------------

def _science_task(rng: random.Random, difficulty: int = 1) -> _Task:
    """Motion, force, weight, density, unit conversions; ``difficulty`` >= 2 adds a time step.

    >>> p, r, a = _science_task(random.Random(7))
    >>> print(p, r, a, sep="\\n")
    A train moves at 7 m/s for 4 s. How far does it go in m?
    distance = speed * time = 7 * 4 = 28.
    28
    """
    hi = 6 + 6 * difficulty
    a, b = rng.randint(2, hi), rng.randint(2, hi)
    vehicle, thing = rng.choice(_VEHICLES), rng.choice(_THINGS)
    kind = rng.choice(("distance", "speed", "time", "force", "weight", "density", "convert",
                       "unconvert"))
    # Harder tasks more often need a unit changed first: one more step.
    extra = difficulty > 1 and rng.random() < min(0.9, 0.3 * (difficulty - 1))
    if extra and kind in ("distance", "speed", "time"):
        s = 60 * b
        return (f"A {vehicle} moves at {a} m/s for {b} minutes. How far does it go in m?",
                f"{b} minutes = {b} * 60 = {s} s. distance = speed * time = {a} * {s} = {a * s}.",
                str(a * s))
    if extra and kind in ("force", "weight", "density"):
        return (f"A {a * 1000} g {thing} speeds up at {b} m/s2. What is the force on it in N?",
                f"{a * 1000} g = {a} kg. force = mass * acceleration = {a} * {b} = {a * b}.",
                str(a * b))
    if extra:
        big, small, f, g, why = rng.choice((
            ("km", "cm", 1000, 100, "1 km = 1000 m. 1 m = 100 cm."),
            ("hours", "seconds", 60, 60, "1 hour = 60 minutes. 1 minute = 60 seconds.")))
        return (f"How many {small} are in {a} {big}?", f"{why} {a} * {f} * {g} = {a * f * g}.",
                str(a * f * g))
    if kind == "distance":
        return (f"A {vehicle} moves at {a} m/s for {b} s. How far does it go in m?",
                f"distance = speed * time = {a} * {b} = {a * b}.", str(a * b))
    if kind == "speed":
        return (f"A {vehicle} goes {a * b} m in {b} s. What is its speed in m/s?",
                f"speed = distance / time = {a * b} / {b} = {a}.", str(a))
    if kind == "time":
        return (f"A {vehicle} moves at {a} m/s. How many s does it take to go {a * b} m?",
                f"time = distance / speed = {a * b} / {a} = {b}.", str(b))
    if kind == "force":
        return (f"A {a} kg {thing} speeds up at {b} m/s2. What is the force on it in N?",
                f"force = mass * acceleration = {a} * {b} = {a * b}.", str(a * b))
    if kind == "weight":
        return (f"What is the weight of a {a} kg {thing} in N? Use g = 10 N/kg.",
                f"weight = mass * g = {a} * 10 = {a * 10}.", str(a * 10))
    if kind == "density":
        return (f"A {thing} has a mass of {a * b} g and a volume of {b} cm3. "
                "What is its density in g/cm3?",
                f"density = mass / volume = {a * b} / {b} = {a}.", str(a))
    one, big, small, f = rng.choice(_UNITS)
    if kind == "convert":
        return (f"How many {small} are in {a} {big}?",
                f"1 {one} = {f} {small}. {a} * {f} = {a * f}.", str(a * f))
    return (f"How many {big} are in {a * f} {small}?",
            f"1 {one} = {f} {small}. {a * f} / {f} = {a}.", str(a))


# --- instruction -----------------------------------------------------------------------

def _instruction_task(rng: random.Random, difficulty: int = 1) -> _Task:
    """Follow a checkable instruction: repeat, reverse, reorder, first letters; 2 + d words.

    >>> p, r, a = _instruction_task(random.Random(5))
    >>> print(p, r, a, sep="\\n")
    Write these words in reverse order: pen milk owl.
    Last to first: owl, milk, pen.
    owl milk pen
    """
    words = rng.sample(_WORDS, 2 + difficulty)
    kind = rng.choice(("repeat", "reverse_letters", "reverse_order", "first_letters", "sort"))
    if kind == "repeat":
        w, k = words[0], rng.randint(2, 3 + difficulty)
        sep = rng.choice(("commas", "spaces"))
        answer = (", " if sep == "commas" else " ").join([w] * k)
        return (f"Write the word {w} {k} times, separated by {sep}.",
                f"The word is {w}. I write it {k} times with {sep}.", answer)
    if kind == "reverse_letters":
        w = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS)
                    for _ in range(rng.randint(2, 1 + difficulty + (difficulty > 1))))
        return (f"Reverse the letters of {w}.",
                f"The letters are {' '.join(w)}. Reversed: {' '.join(w[::-1])}.", w[::-1])
    shown = " ".join(words)
    if kind == "reverse_order":
        return (f"Write these words in reverse order: {shown}.",
                f"Last to first: {', '.join(words[::-1])}.", " ".join(words[::-1]))
    if kind == "first_letters":
        return (f"Write the first letter of each word: {shown}.",
                " ".join(f"{w} starts with {w[0]}." for w in words), " ".join(w[0] for w in words))
    ordered = sorted(words)
    return (f"Write these words in alphabetical order: {shown}.",
            f"By first letters: {' < '.join(ordered)}.", " ".join(ordered))


# --- summarization ---------------------------------------------------------------------

def _summarization_task(rng: random.Random, difficulty: int = 1) -> _Task:
    """Extractive summaries of a list of 4 + 2d items: most / least often, count, distinct.

    >>> p, r, a = _summarization_task(random.Random(9))
    >>> print(p, r, a, sep="\\n")
    Which item appears most often: dog owl dog owl hen dog?
    dog 3, owl 2, hen 1. Most often: dog.
    dog
    """
    pool = rng.choice((_FRUITS, _ANIMALS))
    kinds = rng.sample(pool, rng.randint(2, 3 + (difficulty > 1)))
    length = 4 + 2 * difficulty
    kind = rng.choice(("most", "least", "count", "distinct"))
    while True:
        items = [rng.choice(kinds) for _ in range(length)]
        counts = Counter(items)  # keys in order of first appearance
        ranked = sorted(counts.values())
        if len(ranked) < 2:
            continue
        if kind in ("count", "distinct") or (kind == "most" and ranked[-1] > ranked[-2]) or (
                kind == "least" and ranked[0] < ranked[1]):
            break
    shown = " ".join(items)
    tally = ", ".join(f"{k} {v}" for k, v in counts.items())
    if kind == "most":
        top = max(counts, key=counts.get)
        return f"Which item appears most often: {shown}?", f"{tally}. Most often: {top}.", top
    if kind == "least":
        low = min(counts, key=counts.get)
        return f"Which item appears least often: {shown}?", f"{tally}. Least often: {low}.", low
    if kind == "count":
        x = rng.choice(list(counts))
        return (f"How many times does {x} appear: {shown}?",
                f"{tally}. So {x} appears {counts[x]} times.", str(counts[x]))
    return (f"List each item once, in order of first appearance: {shown}.",
            f"New items in order: {', '.join(counts)}.", " ".join(counts))


# --- general ---------------------------------------------------------------------------

def _general_task(rng: random.Random, difficulty: int = 1) -> _Task:
    """Comparisons and ordering: sort numbers, pick the larger, who is tallest in a chain.

    >>> p, r, a = _general_task(random.Random(7))
    >>> print(p, r, a, sep="\\n")
    Eva is taller than Gus. Gus is taller than Leo. Who is the tallest?
    Eva > Gus > Leo. So the tallest is Eva.
    Eva
    """
    hi = 10 * (1 + 2 * difficulty)
    kind = rng.choice(("sort", "pair", "chain", "extreme"))
    if kind == "sort":
        nums = rng.sample(range(1, hi + 1), 2 + difficulty)
        up = rng.random() < 0.5
        ordered = sorted(nums, reverse=not up)
        order = "from smallest to largest" if up else "from largest to smallest"
        return (f"Sort {' '.join(map(str, nums))} {order}.",
                f"{(' < ' if up else ' > ').join(map(str, ordered))}.",
                " ".join(map(str, ordered)))
    if kind == "pair":
        a, b = rng.sample(range(1, hi * 3 + 1), 2)
        word = rng.choice(("larger", "smaller"))
        pick = max(a, b) if word == "larger" else min(a, b)
        return (f"Which is {word}, {a} or {b}?", f"{max(a, b)} > {min(a, b)}.", str(pick))
    if kind == "extreme":
        nums = rng.sample(range(1, hi + 1), 3 + difficulty)
        word = rng.choice(("largest", "smallest"))
        pick = max(nums) if word == "largest" else min(nums)
        return (f"What is the {word} number: {' '.join(map(str, nums))}?",
                f"{' > '.join(map(str, sorted(nums, reverse=True)))}. The {word} is {pick}.",
                str(pick))
    people = rng.sample(_NAMES, 2 + difficulty)  # people[0] is the most
    more, most, least = rng.choice(_ORDERS)
    facts = [f"{a} is {more} than {b}." for a, b in zip(people, people[1:], strict=False)]
    if difficulty > 1:
        rng.shuffle(facts)
    top = rng.random() < 0.5
    return (f"{' '.join(facts)} Who is the {most if top else least}?",
            f"{' > '.join(people)}. So the {most if top else least} is "
            f"{people[0] if top else people[-1]}.",
            people[0] if top else people[-1])


# --- records ---------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[random.Random, int], _Task]] = {
    "math": _math_task, "coding": _coding_task, "science": _science_task,
    "instruction": _instruction_task, "summarization": _summarization_task,
    "general": _general_task,
}
_RETRIES = 30  # fresh draws before accepting a duplicate prompt
# The highest difficulty a domain can draw distinct items for: a general chain takes
# 2 + d people from NAMES, an instruction 2 + d words from WORDS. The others have none.
MAX_DIFFICULTY = {"general": len(_NAMES) - 2, "instruction": len(_WORDS) - 2}


def _check_args(domain: str, n: int, difficulty: int) -> None:
    if domain not in GENERATORS:
        raise ValueError(f"unknown domain {domain!r}; known: {list(DOMAINS)}")
    # bool is an int, but True would make ids "dTrue" and records unlike difficulty=1's.
    if not isinstance(difficulty, int) or isinstance(difficulty, bool) or difficulty < 1:
        raise ValueError(f"difficulty={difficulty!r}: must be an int >= 1")
    if difficulty > MAX_DIFFICULTY.get(domain, difficulty):
        raise ValueError(f"difficulty={difficulty!r}: {domain} tasks go up to "
                         f"difficulty {MAX_DIFFICULTY[domain]}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"n={n!r}: must be an int >= 0")


def generate(domain: str, n: int, *, seed: int, difficulty: int = 1) -> list[dict]:
    """``n`` records of one domain, identical for the same seed, duplicates avoided.

    ``difficulty`` is an int >= 1, at most ``MAX_DIFFICULTY[domain]`` where there is one.

    >>> rec = generate("science", 1, seed=0)[0]
    >>> sorted(rec), rec["id"], rec["source"]
    (['answer', 'domain', 'id', 'prompt', 'reasoning', 'source'], 'tasks-science-s0-d1-0', 'tasks')
    """
    _check_args(domain, n, difficulty)
    # A string seed is hashed with SHA-512 by `random`, so it is stable across processes
    # (unlike the salted built-in hash()).
    rng = random.Random(f"reasonkit.tasks:{domain}:{seed}:{difficulty}")
    make, seen, out = GENERATORS[domain], set(), []
    for i in range(n):
        for _ in range(_RETRIES):
            prompt, reasoning, answer = make(rng, difficulty)
            if normalize_prompt(prompt) not in seen:
                break
        seen.add(normalize_prompt(prompt))
        out.append({"id": f"tasks-{domain}-s{seed}-d{difficulty}-{i}", "domain": domain,
                    "source": "tasks", "prompt": prompt, "reasoning": reasoning,
                    "answer": answer})
    return out


def generate_all(n_per_domain: int, *, seed: int, difficulty: int = 1,
                 domains: Iterable[str] = DOMAINS) -> list[dict]:
    """``n_per_domain`` records for each domain, domain after domain."""
    domains = tuple(domains)
    for d in domains:  # a bad argument fails before any domain is generated
        _check_args(d, n_per_domain, difficulty)
    return [r for d in domains for r in generate(d, n_per_domain, seed=seed,
                                                  difficulty=difficulty)]


def fresh_records(per_domain: int, *, first_seed: int, difficulty: int = 1,
                  seen: set[str] | None = None, keep: Callable[[dict], bool] = lambda r: True,
                  domains: Iterable[str] = DOMAINS, seeds: int = 40) -> list[dict]:
    """Up to ``per_domain`` records per domain whose prompts are not in ``seen`` and that
    ``keep`` accepts, from task seeds ``first_seed`` onwards (``seeds`` of them: a small
    prompt space runs out, and a domain then gets fewer).

    ``seen`` holds :func:`~reasonkit.template.normalize_prompt` keys; each record taken
    adds its own, so the sets of two calls sharing it never overlap. Identical for the same
    arguments.

    >>> seen = set()
    >>> a = fresh_records(3, first_seed=9_000, seen=seen, domains=["math"])
    >>> b = fresh_records(3, first_seed=9_000, seen=seen, domains=["math"])
    >>> len(a), len(b), {r["prompt"] for r in a} & {r["prompt"] for r in b}
    (3, 3, set())
    """
    seen = set() if seen is None else seen
    out = []
    for domain in domains:
        if difficulty > MAX_DIFFICULTY.get(domain, difficulty):
            continue
        got = 0
        for seed in range(first_seed, first_seed + seeds):
            for r in generate(domain, 2 * max(per_domain, 1), seed=seed, difficulty=difficulty):
                key = normalize_prompt(r["prompt"])
                if got < per_domain and key not in seen and keep(r):
                    seen.add(key)
                    out.append(r)
                    got += 1
            if got == per_domain:
                break
    return out


def corpus_texts(records: Iterable[dict]) -> list[str]:
    """The plain texts a tokenizer should cover: fields, templated prompt and completion.

    >>> texts = corpus_texts(generate("general", 1, seed=0))
    >>> len(texts), texts[-1].endswith("<end_of_turn>")
    (5, True)
    """
    texts = []
    for r in records:
        texts += [r["prompt"], r["reasoning"], r["answer"], format_prompt(r["prompt"]),
                  format_completion(r["reasoning"], r["answer"])]
    return texts
