"""Every figure and Markdown table the notebooks show, one call each.

The numbers come from the modules before this one (hardware budgets, data reports,
training metrics, evaluation results); this module only draws and tabulates them.
Figures are returned, not shown: a notebook calls ``plt.show()`` and may save them.

A table is a header and rows of cells:

>>> print(markdown_table(["stage", "accuracy"], [["base", "10.0%"], ["sft", "42.5%"]]))
| stage | accuracy |
|---|---|
| base | 10.0% |
| sft | 42.5% |
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Callable, Mapping, Sequence

import matplotlib.colors
import matplotlib.patches
import matplotlib.pyplot as plt
import numpy as np

from reasonkit import template
from reasonkit.budget import COLUMNS, format_bytes
from reasonkit.config import DOMAINS
from reasonkit.data import DataReport
from reasonkit.evaluate import LABELS, METRICS, extract, ordered, standard_error

__all__ = ["GIB", "markdown_table", "array_table", "count_table", "bullets", "budget_table", "data_table",
           "drop_table", "before_after", "reward_table", "stage_table", "gsm8k_table", "eval_tables",
           "domain_table", "failure_table", "judge_table", "side_by_side", "advantage_table",
           "qualified_name", "parts_table", "config_table", "lora_table", "plot_memory",
           "plot_token_lengths", "plot_mix", "plot_loss_mask", "plot_sft", "plot_dpo", "plot_grpo",
           "plot_held_out", "plot_stages", "plot_pass_at_k", "plot_domains", "plot_lengths",
           "changed_answers"]

GIB = 2**30


# --- tables ----------------------------------------------------------------------------


def markdown_table(head: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table: ``head`` is the first row, each of ``rows`` one more (cells ``str()``-ed).

    >>> print(markdown_table(["a", "b"], [[1, None]]))
    | a | b |
    |---|---|
    | 1 | None |
    """
    for i, row in enumerate(rows):
        if len(row) != len(head):
            raise ValueError(f"row {i} has {len(row)} cells, the head {len(head)}: {list(row)!r}")
    lines = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def array_table(arrays: Mapping[str, Any]) -> str:
    """Each array of a batch with its shape and dtype, as Markdown.

    >>> batch = {"input_tokens": np.zeros((16, 160), np.int32), "input_mask": np.ones((16, 160), bool)}
    >>> print(array_table(batch))
    | array | shape | dtype |
    |---|---|---|
    | input_tokens | [16, 160] | int32 |
    | input_mask | [16, 160] | bool |
    """
    return markdown_table(["array", "shape", "dtype"], [
        [name, f"[{', '.join(map(str, np.shape(a)))}]", np.asarray(a).dtype] for name, a in arrays.items()])


def count_table(counts: Mapping[str, int], what: str) -> str:
    """``{kind: count}`` as a Markdown table, most common first, with the total.

    >>> print(count_table({"missing_tags": 164, "wrong_answer": 305}, "rejected_kind"))
    | rejected_kind | rows |
    |---|---|
    | wrong_answer | 305 |
    | missing_tags | 164 |
    | total | 469 |
    """
    rows = sorted(counts.items(), key=lambda kv: -kv[1])
    return markdown_table([what, "rows"], [*rows, ["total", sum(counts.values())]])


def bullets(lines: Sequence[str], empty: str) -> str:
    """A Markdown list, a line with ``REGRESSED`` in bold with ⚠; ``empty`` when there are none.

    >>> print(bullets(["sft vs base: accuracy improved", "dpo vs sft: accuracy REGRESSED"], "-"))
    - sft vs base: accuracy improved
    - ⚠ **dpo vs sft: accuracy REGRESSED**
    """
    if not lines:
        return empty
    return "\n".join(f"- ⚠ **{x}**" if "REGRESSED" in x else f"- {x}" for x in lines)


def budget_table(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`reasonkit.budget.budget_table` as a Markdown table (empty columns dropped)."""
    cols = [c for c in COLUMNS if any(r[c] for r in rows)]
    head = ["stage", "mesh", *cols, "total", "of", "fits"]
    return markdown_table(head, [
        [r["stage"], "x".join(map(str, r["mesh"])), *[format_bytes(r[c]) if r[c] else "-" for c in cols],
         format_bytes(r["total"]), format_bytes(r["capacity"]), "yes" if r["fits"] else "**no**"]
        for r in rows])


def data_table(report: DataReport) -> str:
    """Records per domain at each step of :func:`reasonkit.data.build_splits`, as Markdown."""
    steps = ["input", "eval", *report.stages]
    return markdown_table(["domain", *steps], [
        [d, report.input.get(d, 0), report.eval.get(d, 0),
         *[s["count"].get(d, 0) for s in report.stages.values()]] for d in DOMAINS])


def drop_table(report: DataReport) -> str:
    """Every dropped row counted by step and reason, with two examples each; or a sentence."""
    rows = [[step, reason, n, ", ".join(drops.examples[reason][:2])]
            for step, drops in report.drops.items() for reason, n in drops.counts.items()]
    return markdown_table(["step", "reason", "rows", "e.g."], rows) if rows else "nothing was dropped"


def _mark(row: dict) -> str:
    return f"{'✓' if row['format_ok'] else '✗'} / {'✓' if row['correct'] else '✗'}"


def before_after(records: Sequence[dict], before: Sequence[dict], after: Sequence[dict],
                 labels: tuple[str, str]) -> str:
    """Format / correct of a few records' completions before and after a stage (✓ / ✗).

    >>> ok, bad = {"format_ok": True, "correct": True}, {"format_ok": False, "correct": False}
    >>> print(before_after([{"domain": "math", "answer": "12"}], [bad], [ok], ("base", "SFT")))
    | domain | gold | base: format / correct | SFT: format / correct |
    |---|---|---|---|
    | math | `12` | ✗ / ✗ | ✓ / ✓ |
    """
    head = ["domain", "gold", *(f"{label}: format / correct" for label in labels)]
    return markdown_table(head, [[r["domain"], f"`{r['answer']}`", _mark(b), _mark(a)]
                                 for r, b, a in zip(records, before, after, strict=True)])


def reward_table(records: Sequence[dict], scored: Mapping[str, Sequence[float]]) -> str:
    """Each reward function's score (rows) of each record's completion (columns)."""
    return markdown_table(["reward", *(r["domain"] for r in records)],
                          [[name, *(f"{v:.2f}" for v in values)] for name, values in scored.items()])


def stage_table(results: dict[str, dict], k: int | None = None) -> str:
    """The per-stage table (rows base / SFT / DPO / GRPO), as Markdown.

    >>> r = {"base": {"summary": {"overall": {"n": 10, "format_rate": 0.0, "accuracy": 0.0,
    ...       "lenient_accuracy": 0.6, "partial": 0.2, "pass_at_k": 0.3, "maj_at_k": 0.1,
    ...       "mean_length": 40.0}}}}
    >>> head, _, row = stage_table(r, k=4).splitlines()
    >>> head.split(" | ")[1:6]
    ['n', 'format pass', 'accuracy', 'lenient accuracy', 'partial accuracy']
    >>> print(row)
    | base | 10 | 0.0% | 0.0% | 60.0% | 20.0% | 30.0% | 10.0% | 40.0 |

    ``accuracy`` needs the answer tag; ``lenient accuracy`` also reads an answer written in
    prose (the base model's way), so the two together say what SFT's format costs or gains.

    A stage evaluated on no prompts (``n`` 0) shows "-" for its metrics.
    """
    kk = "k" if k is None else str(k)
    head = ["stage", "n"] + [LABELS[m].replace("@k", f"@{kk}") for m in (*METRICS, "mean_length")]
    rows = []
    for stage in ordered(results):
        o = results[stage]["summary"]["overall"]
        cells = [stage, str(o["n"])] + [f"{100 * o[m]:.1f}%" if m in o else "-" for m in METRICS]
        cells.append(f"{o['mean_length']:.1f}" if "mean_length" in o else "-")
        rows.append(cells)
    return markdown_table(head, rows)


def gsm8k_table(results: dict[str, dict]) -> str:
    """GSM8K test, strict / lenient, per stage (the stages that have it), as Markdown.

    ``± 1 s.e.``: the larger binomial standard error of the two rates, in points (a move
    under two of them, between stages or against a published number, is noise). "too
    long": prompts over ``max_prompt_length``, not generated, counted wrong.

    >>> r = {"base": {"gsm8k": {"summary": {"n": 1319, "strict": 0.0, "lenient": 0.301,
    ...       "format_rate": 0.0, "too_long": 2, "mean_length": 180.5}}},
    ...      "sft": {"gsm8k": {"summary": {"n": 1319, "strict": 0.412, "lenient": 0.455,
    ...       "format_rate": 0.9, "too_long": 2, "mean_length": 150.0}}}}
    >>> print(gsm8k_table(r))
    | stage | n | GSM8K test, strict / lenient | ± 1 s.e. | format pass | too long | mean length (tokens) |
    |---|---|---|---|---|---|---|
    | base | 1319 | 0.0% / 30.1% | 1.3 | 0.0% | 2 | 180.5 |
    | sft | 1319 | 41.2% / 45.5% | 1.4 | 90.0% | 2 | 150.0 |
    """
    head = ["stage", "n", "GSM8K test, strict / lenient", "± 1 s.e.", "format pass", "too long",
            "mean length (tokens)"]
    rows = []
    for stage in ordered(results):
        if "gsm8k" not in results[stage]:
            continue
        o = results[stage]["gsm8k"]["summary"]
        if not o["n"]:
            rows.append([stage, 0, "-", "-", "-", 0, "-"])
            continue
        se = 100 * max(standard_error(o["strict"], o["n"]), standard_error(o["lenient"], o["n"]))
        rows.append([stage, o["n"], f"{o['strict']:.1%} / {o['lenient']:.1%}", f"{se:.1f}",
                     f"{o['format_rate']:.1%}", o["too_long"], f"{o['mean_length']:.1f}"])
    return markdown_table(head, rows)


def eval_tables(results: dict[str, dict], k: int | None = None) -> dict[str, str]:
    """The tables ``<run>/eval`` keeps: ``stage_table.md``, and ``gsm8k_table.md`` with GSM8K."""
    out = {"stage_table.md": stage_table(results, k) + "\n"}
    if any("gsm8k" in results[s] for s in results):
        out["gsm8k_table.md"] = gsm8k_table(results) + "\n"
    return out


def domain_table(results: dict[str, dict]) -> str:
    """Per domain, each stage's format pass / accuracy of the greedy completions."""
    stages = ordered(results)
    per = {d: b["n"] for s in stages for d, b in results[s]["summary"]["per_domain"].items()}  # prompts
    head = ["domain", "n"] + [f"{s}: format / acc" for s in stages]
    rows = []
    for d in sorted(per):
        cells = [d, str(per[d])]
        for s in stages:
            b = results[s]["summary"]["per_domain"].get(d, {})
            cells.append(f"{b.get('format_rate', 0):.0%} / {b.get('accuracy', 0):.0%}")
        rows.append(cells)
    return markdown_table(head, rows)


def failure_table(results: dict[str, dict]) -> str:
    """Greedy completions per extraction outcome (``ok`` or a failure reason) and stage."""
    reasons = [r for r in template.FAILURE_REASONS
               if any(results[s]["summary"]["overall"]["failures"].get(r) for s in results)]
    stages = ordered(results)
    return markdown_table(["reason", *stages], [
        [reason, *(sum(row["reason"] == reason for row in results[s]["rows"]) for s in stages)]
        for reason in ["ok", *reasons]])


def judge_table(scores: Mapping[str, dict[str, float]]) -> str:
    """An LLM judge's mean scores per stage (:func:`reasonkit.evaluate.judge`'s output)."""
    return markdown_table(["stage", "judged", "skipped", "reasoning (1-10)", "answer (1-10)"], [
        [s, sc["judged"], sc["skipped"], *(f"{sc[key]:.2f}" if key in sc else "-"
                                           for key in ("reasoning", "answer"))]
        for s, sc in scores.items()])


def side_by_side(results: dict[str, dict], n: int = 3, width: int = 160) -> str:
    """A few held-out prompts with each stage's greedy completion, as Markdown, each marked
    right or wrong strictly (the answer tag) and leniently (an answer in prose counts too).

    >>> row = {"domain": "math", "prompt": "2 + 2?", "gold": "4"}
    >>> res = {"base": {"rows": [{**row, "completion": "So the answer is 4.", "correct": False,
    ...                           "lenient": True}]},
    ...        "sft": {"rows": [{**row, "completion": "<answer>5</answer>", "correct": False,
    ...                          "lenient": False}]}}
    >>> print(side_by_side(res))
    **math** · '2 + 2?' · gold `4`
    <BLANKLINE>
    - base (strict ✗, lenient ✓): `So the answer is 4.`
    - sft (strict ✗, lenient ✗): `<answer>5</answer>`
    <BLANKLINE>
    """
    stages = ordered(results)
    lines = []
    for i, row in enumerate(results[stages[0]]["rows"][:n]):
        lines.append(f"**{row['domain']}** · {row['prompt'][:width]!r} · gold `{row['gold']}`\n")
        for stage in stages:
            r = results[stage]["rows"][i]
            mark = f"strict {'✓' if r['correct'] else '✗'}, lenient {'✓' if r['lenient'] else '✗'}"
            text = r["completion"].replace("\n", " ")[:width].replace("|", "/")
            lines.append(f"- {stage} ({mark}): `{text}`")
        lines.append("")
    return "\n".join(lines)


def changed_answers(before: Sequence[dict], after: Sequence[dict], names: tuple[str, str],
                    n: int = 2, width: int = 140) -> str:
    """Markdown: how many greedy answers went wrong -> right and right -> wrong between two
    stages' rows of the same prompts, and up to ``n`` of each, side by side.

    >>> a = [{"prompt": "1+1?", "domain": "math", "gold": "2", "completion": "<answer>3</answer>",
    ...       "correct": False}]
    >>> b = [dict(a[0], completion="<answer>2</answer>", correct=True)]
    >>> print(changed_answers(a, b, ("sft", "grpo")))
    **1 answers wrong -> right, 0 right -> wrong** (sft -> grpo, of 1 prompts)
    <BLANKLINE>
    wrong -> right · **math** · '1+1?' · gold `2`
    - sft: `<answer>3</answer>`
    - grpo: `<answer>2</answer>`
    <BLANKLINE>
    """
    pairs = list(zip(before, after, strict=True))
    fixed = [(x, y) for x, y in pairs if y["correct"] and not x["correct"]]
    broken = [(x, y) for x, y in pairs if x["correct"] and not y["correct"]]
    lines = [f"**{len(fixed)} answers wrong -> right, {len(broken)} right -> wrong** "
             f"({names[0]} -> {names[1]}, of {len(pairs)} prompts)\n"]
    for label, group in (("wrong -> right", fixed), ("right -> wrong", broken)):
        for x, y in group[:n]:
            lines.append(f"{label} · **{x['domain']}** · {x['prompt'][:width]!r} · gold `{x['gold']}`")
            for name, row in zip(names, (x, y), strict=True):
                text = row["completion"].replace("\n", " ")[:width].replace("|", "/")
                lines.append(f"- {name}: `{text}`")
            lines.append("")
    return "\n".join(lines)


def advantage_table(completions: Sequence[str], rewards: Mapping[str, Sequence[float]],
                    advantages: Sequence[float], width: int = 40) -> str:
    """One GRPO group: each answer's start (``width`` characters), the answer read from its tag
    (or why none could be), its rewards, their total and its advantage.

    >>> print(advantage_table(["<reasoning>2 + 2 = 4</reasoning><answer>4</answer>", "<answer>5"],
    ...                       {"answer_correct": [3.0, 0.0]}, [0.71, -0.71], width=24))
    | # | completion | answer | answer_correct | total | advantage |
    |---|---|---|---|---|---|
    | 1 | `<reasoning>2 + 2 = 4</r…` | `4` | 3.00 | 3.00 | +0.71 |
    | 2 | `<answer>5` | (unclosed_tag) | 0.00 | 0.00 | -0.71 |
    """
    totals = [sum(v) for v in zip(*rewards.values(), strict=True)]

    def cell(text: str) -> str:  # in code style, one line, no table syntax
        return "`" + text.replace("|", "/").replace("`", "'") + "`"

    rows = []
    for i, (text, total, adv) in enumerate(zip(completions, totals, advantages, strict=True)):
        short = " ".join(str(text).split())
        short = short if len(short) <= width else short[:width - 1] + "…"
        found = extract(text)
        answer = cell(" ".join(str(found.answer).split())[:width]) if found.ok else f"({found.reason})"
        rows.append([i + 1, cell(short), answer, *(f"{v[i]:.2f}" for v in rewards.values()),
                     f"{total:.2f}", f"{adv:+.2f}"])
    return markdown_table(["#", "completion", "answer", *rewards, "total", "advantage"], rows)


def qualified_name(obj: Any) -> str:
    """Where a function, or an object's class, is defined; a wrapper as ``maker(what it wraps)``.

    What a notebook prints to show which code a Tunix trainer will really call:

    >>> qualified_name(markdown_table), qualified_name(DataReport())
    ('reasonkit.notebook._plots.markdown_table', 'reasonkit.data.DataReport')
    >>> import functools
    >>> def logged(fn):
    ...     @functools.wraps(fn)  # copies fn's name: the code object still says who wrapped it
    ...     def wrapped(*args):
    ...         return fn(*args)
    ...     return wrapped
    >>> qualified_name(logged(markdown_table))
    'reasonkit.notebook._plots.logged(reasonkit.notebook._plots.markdown_table)'
    """
    fn = getattr(obj, "__func__", obj)  # a bound method: its function
    code = getattr(fn, "__code__", None)
    if code is None:  # a class, a callable without Python code (numpy's), or an object: its class
        named = obj if isinstance(obj, type) or hasattr(obj, "__qualname__") else type(obj)
        return f"{named.__module__}.{named.__qualname__}"
    module = getattr(fn, "__globals__", {}).get("__name__", "?")
    inner = getattr(fn, "__wrapped__", None)
    if inner is not None:  # the function that made the wrapper: the code's qualname, one level up
        return f"{module}.{code.co_qualname.rsplit('.<locals>.', 1)[0]}({qualified_name(inner)})"
    return f"{module}.{code.co_qualname}"


def parts_table(parts: Mapping[str, Any]) -> str:
    """``{role: object or function}`` as a table of what each role really is (:func:`qualified_name`)."""
    return markdown_table(["part", "is"], [[role.replace("|", "\\|"), f"`{qualified_name(obj)}`"]
                                           for role, obj in parts.items()])


def _short(value: Any, width: int = 72) -> str:
    """A config value in a table cell: nested configs, meshes, optimizers by kind, the rest repr'd."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return f"{type(value).__name__}(…)"
    if hasattr(value, "axis_names") and hasattr(value, "shape"):  # a jax Mesh
        return "Mesh(" + ", ".join(f"{k}={n}" for k, n in dict(value.shape).items()) + ")"
    if isinstance(value, Mapping):
        text = ", ".join(f"{getattr(k, 'value', k)}: {_short(v, width)}" for k, v in value.items())
        return "{" + text + "}"
    if callable(value) or type(value).__module__.startswith("optax"):
        return qualified_name(value)
    text = repr(value)
    return text if len(text) <= width else text[:width - 1] + "…"


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - arrays, meshes: not comparable means "set"
        return False


def config_table(config: Any) -> str:
    """The fields of a config dataclass that differ from its class's defaults: value and default.

    How a notebook shows which of Tunix's defaults reasonkit sets, and to what:

    >>> @dataclasses.dataclass
    ... class Config:
    ...     steps: int
    ...     beta: float = 0.04
    ...     mode: str = "kl"
    >>> print(config_table(Config(steps=200, mode="low_var_kl")))
    | field | value | default |
    |---|---|---|
    | steps | 200 | (required) |
    | mode | 'low_var_kl' | 'kl' |
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"config_table: {type(config).__name__} is not a dataclass instance")
    rows = []
    for field in dataclasses.fields(config):
        value, default = getattr(config, field.name), _default(field)
        if default is dataclasses.MISSING or not _same(value, default):
            shown = "(required)" if default is dataclasses.MISSING else _short(default)
            rows.append([field.name, _short(value).replace("|", "\\|"), shown.replace("|", "\\|")])
    return markdown_table(["field", "value", "default"], rows) if rows else "every field at its default"


def lora_table(model: Any) -> str:
    """Trainable LoRA parameters against the frozen base, module by module for the first layer.

    Each adapted weight ``W`` gets two small matrices, ``a`` (in x rank) and ``b`` (rank x
    out); only they train. The last rows count every layer.

    >>> import jax.numpy as jnp, qwix, warnings
    >>> from flax import nnx
    >>> class Net(nnx.Module):
    ...     def __init__(self):
    ...         self.up, self.down = nnx.Linear(4, 6, rngs=nnx.Rngs(0)), nnx.Linear(6, 4, rngs=nnx.Rngs(1))
    ...     def __call__(self, x):
    ...         return self.down(self.up(x))
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     net = qwix.apply_lora_to_model(Net(), qwix.LoraProvider(module_path="up", rank=2, alpha=2.0),
    ...                                    jnp.ones((1, 4)), rngs=nnx.Rngs(0))
    >>> print(lora_table(net))
    | module | base weight | LoRA a | LoRA b | base params | LoRA params |
    |---|---|---|---|---|---|
    | up | kernel [4, 6] | [4, 2] | [2, 6] | 24 | 20 |
    | all 1 adapted modules | | | | 58 (frozen) | 20 (trained) |
    | trainable | | | | | 20 of 78 (25.64%) |
    """
    from flax import nnx

    params = {tuple(path): var for path, var in nnx.iter_graph(model) if isinstance(var, nnx.Param)}
    adapters: dict[tuple, dict[str, Any]] = {}
    for path, var in params.items():
        name = str(path[-1])
        if isinstance(var, nnx.LoRAParam) and name.endswith(("_lora_a", "_lora_b")):
            adapters.setdefault(path[:-1], {})[name[-1]] = var
            adapters[path[:-1]]["weight"] = name[:-len("_lora_a")]

    def size(var) -> int:
        return int(np.prod(var.shape))

    def first_layer(path: tuple) -> bool:
        ints = [p for p in path if isinstance(p, int)]
        return not ints or ints[0] == 0

    rows = []
    for module, parts in adapters.items():
        if not first_layer(module):
            continue
        weight = params.get((*module, parts["weight"]))
        shape = lambda var: "[" + ", ".join(map(str, var.shape)) + "]"  # noqa: E731
        rows.append([".".join(map(str, module)),
                     f"{parts['weight']} {shape(weight)}" if weight is not None else "-",
                     shape(parts["a"]), shape(parts["b"]),
                     size(weight) if weight is not None else "-", size(parts["a"]) + size(parts["b"])])
    trained = sum(size(v) for v in params.values() if isinstance(v, nnx.LoRAParam))
    frozen = sum(size(v) for v in params.values() if not isinstance(v, nnx.LoRAParam))
    rows.append([f"all {len(adapters)} adapted modules", "", "", "", f"{frozen} (frozen)",
                 f"{trained} (trained)"])
    rows.append(["trainable", "", "", "", "",
                 f"{trained} of {trained + frozen} ({100 * trained / max(1, trained + frozen):.2f}%)"])
    return markdown_table(["module", "base weight", "LoRA a", "LoRA b", "base params", "LoRA params"], rows)


# --- figures: hardware and data --------------------------------------------------------


def plot_memory(rows: list[dict[str, Any]], title: str):
    """Stacked bars: bytes per device of each stage, item by item (:func:`budget.budget_table`)."""
    items = [k for k in rows[0] if k not in ("stage", "mesh", "phase", "total", "capacity", "fits")]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    bottom = [0.0] * len(rows)
    for item in items:
        values = [r[item] / GIB for r in rows]
        ax.bar([r["stage"] for r in rows], values, bottom=bottom, label=item)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    limit = 0.9 * rows[0]["capacity"] / GIB
    if limit < 2 * max(bottom):  # draw the limit only when it is in the picture
        ax.axhline(limit, color="k", ls="--", label="90% of device memory")
    ax.set_ylabel("GiB per device")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def plot_token_lengths(lengths: dict[str, dict[str, list[int]]],
                       cuts: dict[tuple[str, int], list[str]], n_records: int):
    """One histogram per panel (``lengths[panel][domain]`` tokens), stacked by domain;
    ``cuts[(panel, tokens)]`` names the stages whose budget is ``tokens``, drawn dashed."""
    fig, axes = plt.subplots(1, len(lengths), figsize=(12, 3.4))
    for ax, (key, per_domain) in zip(axes, lengths.items(), strict=True):
        ax.hist(list(per_domain.values()), bins=30, stacked=True, label=list(per_domain))
        for (panel, n), stages in cuts.items():
            if panel == key:
                ax.axvline(n, color="k", ls="--")
                ax.annotate(f"{'/'.join(stages)} ≤ {n}", (n, 1), xycoords=("data", "axes fraction"),
                            xytext=(-3, -4), textcoords="offset points", rotation=90, va="top",
                            ha="right", fontsize=8)
        ax.set_xlabel(f"{key} tokens")
    axes[0].set_ylabel("records")
    axes[-1].legend(fontsize=7, loc="center right")
    fig.suptitle(f"token lengths of {n_records} records; dashed: stage budgets")
    fig.tight_layout()
    return fig


def plot_mix(report: DataReport, title: str):
    """Grouped bars: % of records per domain in the input and in each stage's set."""
    sets = {"input": report.input, **{s: info["count"] for s, info in report.stages.items()}}
    weights, x, width = report.settings["domain_weights"], range(len(DOMAINS)), 0.8 / len(sets)
    fig, ax = plt.subplots(figsize=(9, 3.4))
    for i, (name, counts) in enumerate(sets.items()):
        pct = [100 * counts.get(d, 0) / (sum(counts.values()) or 1) for d in DOMAINS]
        ax.bar([j + (i - (len(sets) - 1) / 2) * width for j in x], pct, width, label=name)
    target = [100 * weights.get(d, 0) / sum(weights.values()) for d in DOMAINS]
    ax.hlines(target, [j - 0.42 for j in x], [j + 0.42 for j in x], colors="k", label="target")
    ax.set_xticks(x, DOMAINS)
    ax.set(ylabel="% of records", title=title)
    ax.legend(fontsize=8, ncol=len(sets) + 1, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    return fig


# --- figures: training -----------------------------------------------------------------


def plot_loss_mask(batch: dict[str, np.ndarray], pad_id: int):
    """One SFT batch, a row per example: padding, prompt (no loss), completion (loss)."""
    kind = np.where(batch["input_mask"], 2, np.where(batch["input_tokens"] != pad_id, 1, 0))  # [B, S]
    colors = ["#dddddd", "#8fb3d9", "#d95f02"]
    fig, ax = plt.subplots(figsize=(10, 2.6))
    ax.imshow(kind, aspect="auto", interpolation="nearest",
              cmap=matplotlib.colors.ListedColormap(colors), vmin=0, vmax=2)
    ax.set(xlabel="position (token)", ylabel="example", title="one SFT batch: where the loss is")
    handles = [matplotlib.patches.Patch(color=c, label=lab) for c, lab in
               zip(colors, ["padding", "BOS + prompt (no loss)", "completion (loss)"], strict=True)]
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    fig.tight_layout()
    return fig


Metrics = dict[str, tuple[list[int], list[float]]]  # what train.read_metrics returns


def plot_sft(m: Metrics):
    """SFT's loss (each batch, and held-out) and learning rate against the step."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6))
    ax1.plot(*m["train/loss"], lw=1, label="train (one batch)")
    if "eval/loss" in m:
        ax1.plot(*m["eval/loss"], "o-", label="held-out")
    ax1.set(xlabel="step", ylabel="cross-entropy per completion token", title="SFT loss")
    ax1.legend()
    ax2.plot(*m["train/learning_rate"])
    ax2.set(xlabel="step", ylabel="learning rate", title="warm-up, then cosine decay")
    fig.tight_layout()
    return fig


def plot_dpo(m: Metrics):
    """DPO's loss, implicit rewards and margin, and preference accuracy against the step."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].plot(*m["train/loss"])
    axes[0].axhline(np.log(2), color="grey", ls=":", label="log 2 (margin 0)")
    axes[0].set(title="DPO loss", ylabel="loss")
    for event in ("chosen", "rejected", "margin"):
        axes[1].plot(*m[f"train/rewards/{event}"], label=event, lw=2 if event == "margin" else 1)
    axes[1].axhline(0, color="grey", ls=":")
    axes[1].set(title="implicit rewards and margin", ylabel="β · log-ratio to the reference")
    axes[2].plot(*m["train/rewards/accuracy"])
    axes[2].axhline(0.5, color="grey", ls=":", label="coin flip")
    axes[2].set(title="preference accuracy", ylabel="pairs ranked right", ylim=(0, 1.05))
    for ax in axes:
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_grpo(m: Metrics, reward_fns: Sequence[Callable], beta: float):
    """GRPO's mean reward per function, their total, and the KL to the reference, per step;
    and the fraction of groups with no signal (all G rewards equal) when it was logged."""
    zero_std = "rewards/train/frac_zero_std"
    fig, axes = plt.subplots(1, 4 if zero_std in m else 3, figsize=(18 if zero_std in m else 14, 3.8))
    for fn in reward_fns:
        axes[0].plot(*m[f"rewards/train/{fn.__name__}"], label=fn.__name__)
    axes[0].set(title="each reward (mean per answer)", ylabel="reward")
    axes[0].set_ylim(top=axes[0].get_ylim()[1] + 0.4 * abs(axes[0].get_ylim()[1]))  # room for the legend
    axes[0].legend(fontsize=8, ncol=2, loc="upper center")
    axes[1].plot(*m["rewards/train/sum"])
    axes[1].set(title="total reward (mean per answer)", ylabel="sum of rewards")
    if "actor/train/kl" in m:
        axes[2].plot(*m["actor/train/kl"])
    axes[2].set(title=f"KL to the reference (beta={beta})", ylabel="KL per token")
    if zero_std in m:  # such a group's advantages are all 0: it teaches nothing
        axes[3].plot(*m[zero_std], label="summed reward")
        if f"{zero_std}/correct" in m:  # all right or all wrong: nothing to learn about correctness
            axes[3].plot(*m[f"{zero_std}/correct"], label="right or wrong alone")
            axes[3].legend(fontsize=8)
        axes[3].set(title="groups with all G rewards equal", ylabel="fraction of prompts", ylim=(-0.05, 1.05))
    for ax in axes:
        ax.set_xlabel("step")
    fig.tight_layout()
    return fig


def plot_held_out(m: Metrics, best: Mapping[str, Any] | None = None):
    """GRPO's reward and its held-out accuracy against the step, in one figure.

    Left axis: the total reward of each step and its running mean; right axis: the greedy
    accuracy of each held-out check (``held_out/accuracy``,
    :mod:`reasonkit.train._held_out`), the checks that raised the alarm (reward up,
    accuracy down) crossed, ``best`` (``held_out.best_info(run)``) starred, and the accuracy
    on a block of its own training prompts, dashed, when it was checked. A reward that
    climbs while the held-out accuracy does not is GRPO learning what the reward pays for,
    or learning its training prompts (the dashed line rises alone).
    """
    fig, ax = plt.subplots(figsize=(9, 3.8))
    steps, values = m.get("rewards/train/sum", ([], []))
    ax.plot(steps, values, lw=0.8, alpha=0.35, color="C0", label="reward (each step)")
    width = max(1, len(values) // 20)
    if len(values) > width > 1:
        ax.plot(steps[width - 1:], np.convolve(values, np.ones(width) / width, "valid"), color="C0",
                lw=2, label=f"reward (mean of {width} steps)")
    ax.set(xlabel="step", ylabel="total reward (mean per answer)")
    right = ax.twinx()
    checks, accuracy = m.get("held_out/accuracy", ([], []))
    pct = dict(zip(checks, (100 * a for a in accuracy), strict=True))
    right.plot(checks, list(pct.values()), "o-", color="C3", label="held-out accuracy (greedy)")
    seen_steps, seen = m.get("held_out/trained_accuracy", ([], []))
    if seen_steps:
        right.plot(seen_steps, [100 * a for a in seen], "s--", color="C1",
                   label="accuracy on its training prompts (greedy)")
    alarms = [s for s, v in zip(*m.get("held_out/alarm", ([], [])), strict=True) if v and s in pct]
    if alarms:
        right.plot(alarms, [pct[s] for s in alarms], "x", color="k", ms=12, mew=2,
                   label="alarm: reward up, accuracy down")
    if best:
        right.plot([best["step"]], [100 * best["accuracy"]], "*", color="gold", mec="k", ms=16,
                   label=f"best: step {best['step']}, {best['accuracy']:.1%}")
    right.set(ylabel="held-out accuracy (%)", ylim=(-3, 103))
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    ax.legend(handles=handles, fontsize=8, loc="upper left")
    ax.set_title("GRPO: reward and held-out accuracy" if checks else
                 "GRPO: reward (no held-out checks: grpo.eval_every was 0)")
    fig.tight_layout()
    return fig


# --- figures: evaluation ---------------------------------------------------------------


def _readable_bars(ax, stages: int, k: int | None) -> None:
    """Each bar's value (%) on it, pass@k with its k, the legend in one row above the bars."""
    for bars in ax.containers:
        if hasattr(bars, "patches"):  # bars, not error bars
            ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    if k is not None:
        ax.set_xticks(ax.get_xticks(), [t.get_text().replace("@k", f"@{k}") for t in ax.get_xticklabels()])
    ax.set_ylim(0, 120)
    ax.legend(ncol=stages, loc="upper center", fontsize=8, frameon=False)


def _save(fig, path: str | pathlib.Path | None):
    if path:
        fig.savefig(path, dpi=120)
    return fig


def plot_stages(results: dict[str, dict], k: int | None = None, path: str | pathlib.Path | None = None):
    """Grouped bars: each metric for each stage, with binomial error bars (pass@k, maj@k: ``k``)."""
    stages = ordered(results)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.8 / len(stages)
    for j, stage in enumerate(stages):
        o = results[stage]["summary"]["overall"]
        # a metric not measured (pass@k, maj@k with eval.num_samples 0) has no bar, not a 0
        vals = [100 * o[m] if m in o else np.nan for m in METRICS]
        errs = [100 * standard_error(o[m], o["n"]) if m in o else np.nan for m in METRICS]
        ax.bar(np.arange(len(METRICS)) + j * width, vals, width, yerr=errs, capsize=2, label=stage)
    ax.set_xticks(np.arange(len(METRICS)) + width * (len(stages) - 1) / 2)
    ax.set_xticklabels([LABELS[m] for m in METRICS])
    ax.set_ylabel("% of held-out prompts")
    ax.set_title("Every stage on the same held-out set")
    _readable_bars(ax, len(stages), k)
    fig.tight_layout()
    return _save(fig, path)


def plot_pass_at_k(curves: Mapping[str, Sequence[float]], title: str,
                   path: str | pathlib.Path | None = None):
    """pass@k against k, one line per stage (``evaluate.pass_at_k_curve``): where a stage's
    curve rises above its pass@1 it can find answers it does not give reliably, the room
    GRPO works in; GRPO's own curve shows whether it turned that room into pass@1."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for stage, curve in curves.items():
        ax.plot(range(1, len(curve) + 1), [100 * p for p in curve], "o-", label=stage)
    ax.set(xlabel="k (sampled answers)", ylabel="pass@k (%)", title=title)
    ax.set_xticks(range(1, max((len(c) for c in curves.values()), default=1) + 1))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_domains(results: dict[str, dict], metric: str = "accuracy",
                 path: str | pathlib.Path | None = None):
    """Per-domain bars of one metric, one bar per stage."""
    stages = ordered(results)
    domains = sorted({d for s in stages for d in results[s]["summary"]["per_domain"]})
    fig, ax = plt.subplots(figsize=(9, 3.5))
    width = 0.8 / len(stages)
    for j, stage in enumerate(stages):
        per = results[stage]["summary"]["per_domain"]
        ax.bar(np.arange(len(domains)) + j * width,
               [100 * per.get(d, {}).get(metric, 0.0) for d in domains], width, label=stage)
    ax.set_xticks(np.arange(len(domains)) + width * (len(stages) - 1) / 2)
    ax.set_xticklabels(domains)
    ax.set_ylabel(f"{LABELS[metric]} (%)")
    ax.set_title(f"{LABELS[metric]} per domain")
    _readable_bars(ax, len(stages), None)
    fig.tight_layout()
    return _save(fig, path)


def plot_lengths(results: dict[str, dict], max_length: int | None = None,
                 path: str | pathlib.Path | None = None):
    """Histogram of greedy completion lengths (tokens) per stage; dashed: ``max_length``."""
    fig, ax = plt.subplots(figsize=(8, 3.2))
    longest = max(r["length"] for s in results for r in results[s]["rows"])
    bins = np.linspace(0, max(longest, 1), 31)  # shared, so the stages line up
    for stage in ordered(results):
        ax.hist([r["length"] for r in results[stage]["rows"]], bins=bins, histtype="step",
                linewidth=1.5, label=stage)
    ax.set_xlabel("completion length (tokens)")
    ax.set_ylabel("completions")
    ax.legend()
    if max_length is not None:
        ax.axvline(max_length, color="k", ls="--", lw=1)
        ax.set_title(f"greedy completion lengths; dashed: max_generation_length ({max_length})")
    fig.tight_layout()
    return _save(fig, path)
