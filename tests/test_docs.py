"""README.md and docs/: the first page stays one, every link lands, the preset docs match the presets,
and every figure they quote is the one in the file behind it (benchmarks/results/, committed outputs)."""

import importlib
import importlib.util
import json
import pathlib
import re

import pytest

from reasonkit import presets

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)\s#]*)(#[^)\s]*)?\)")  # [text](target#anchor)

# What docs/presets.md states about every Gemma preset, setting by setting. A preset that
# changes one of these must change the page too (its source, or "untested").
DOCUMENTED = {
    "lora.alpha_over_rank": 1.0, "lora.qlora": False, "model.remat": True,
    "sft.learning_rate": 2e-4, "sft.warmup_ratio": 0.05, "sft.max_steps": 1000,
    "sft.max_prompt_length": 256, "sft.max_target_length": 1024, "sft.max_grad_norm": 1.0,
    "sft.weight_decay": 0.0, "sft.packing": False,
    "dpo.learning_rate": 3e-6, "dpo.warmup_ratio": 0.1, "dpo.beta": 0.1, "dpo.algorithm": "dpo",
    "dpo.max_steps": 600, "dpo.max_prompt_length": 256, "dpo.max_response_length": 512,
    "grpo.learning_rate": 3e-6, "grpo.warmup_ratio": 0.1, "grpo.beta": 0.04,
    "grpo.kl_loss_mode": "low_var_kl", "grpo.epsilon": 0.2, "grpo.num_iterations": 1,
    "grpo.loss": "grpo", "grpo.num_generations": 4, "grpo.temperature": 0.9, "grpo.top_p": 1.0,
    "grpo.top_k": 50, "grpo.max_prompt_length": 256, "grpo.max_generation_length": 512,
    "grpo.max_steps": 800, "eval.num_samples": 4, "eval.temperature": 0.7, "eval.gsm8k_test": "hf",
}
GEMMA = [name for name in presets.PRESETS if presets.get_preset(name).hardware != "cpu"]  # the TPU presets


def _exported_images() -> dict[str, tuple[str, str]]:
    """The README images scripts/refresh_notebooks.py copies from a demo run (its IMAGES)."""
    spec = importlib.util.spec_from_file_location("refresh_images", ROOT / "scripts" / "refresh_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.IMAGES


EXPORTED = _exported_images()


def _value(preset, key: str):
    if key == "lora.alpha_over_rank":
        return preset.lora.alpha / preset.lora.rank
    section, field = key.split(".")
    return getattr(getattr(preset, section), field)


def test_readme_is_a_first_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 200, "README.md is a first page: move detail into docs/"
    # The quick start: two commands, each a script of the repository; CI runs the tests' one.
    start = text.split("## Quick start", 1)[1].split("## ", 1)[0]
    commands = re.findall(r"^bash (scripts/\S+)", start, re.M)
    assert len(commands) == 2 and all((ROOT / c).is_file() for c in commands), commands
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


# `reasonkit.a.b` in backticks, or `train.x` with a unit of the package first: a module or a
# name the docs send a reader to.
UNITS = ("config", "template", "answers", "tasks", "data", "masks", "collate", "tunix_patches",
         "runtime", "models", "budget", "rewards", "train", "evaluate", "shapes", "notebook", "plots",
         "testing")
RUNTIME = ("mesh", "hardware", "runs", "compiles")
DOTTED = re.compile(r"`((?:reasonkit|%s)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\([^`]*\))?`"
                    % "|".join(UNITS + RUNTIME))


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[-1] in ("json", "jsonl", "md", "py", "txt"):  # a file name
        return True
    if len(parts) == 2 and hasattr(getattr(presets.get_preset("tiny"), parts[0], None), parts[1]):
        return True  # a preset setting, as the overrides name it
    if parts[0] != "reasonkit":
        parts = ["reasonkit", *(["runtime"] if parts[0] in RUNTIME else []), *parts]
    for i in range(len(parts), 1, -1):  # the longest importable module, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_every_dotted_name_in_the_docs_exists(page):
    missing = sorted({d for d in DOTTED.findall(page.read_text()) if not _resolves(d)})
    assert missing == [], f"{page.name} names what reasonkit does not have: {missing}"


def test_every_doc_is_linked_from_the_readme():
    text = README.read_text()
    assert DOCS, "docs/ holds no pages"
    unlinked = [p.name for p in DOCS if f"](docs/{p.name})" not in text]
    assert not unlinked, f"README.md links to none of {unlinked}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_land_on_a_file(page):
    for target, _ in LINK.findall(page.read_text()):
        if not target or "://" in target or target.startswith("mailto:"):
            continue
        if page == README and target in EXPORTED:  # made by a demo run: the test below
            continue
        assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to missing {target}"


def test_presets_page_names_every_preset():
    readme, page = README.read_text(), (ROOT / "docs" / "presets.md").read_text()
    for name in presets.PRESETS:
        assert f"`{name}`" in page and f"`{name}`" in readme, name


@pytest.mark.parametrize("name", GEMMA)
def test_presets_page_matches_each_gemma_preset(name):
    preset = presets.get_preset(name)
    wrong = {key: _value(preset, key) for key, want in DOCUMENTED.items() if _value(preset, key) != want}
    assert not wrong, f"{name} differs from docs/presets.md: {wrong}; update the page (source or untested)"


def test_readme_shows_the_exported_images():
    text = README.read_text()
    for image in EXPORTED:
        assert f"]({image})" in text, f"README.md does not show {image}"
    # scripts/refresh_notebooks.py writes the notebooks' outputs and the images together:
    # committed outputs without the images mean a refresh was only half committed.
    refreshed = [p.name for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
                 if any(c.get("outputs") for c in json.loads(p.read_text())["cells"])]
    missing = [image for image in EXPORTED if not (ROOT / image).is_file()]
    if not refreshed and missing:
        pytest.skip(f"{', '.join(missing)}: not exported yet (bash scripts/demo.sh, then "
                    "python scripts/refresh_notebooks.py)")
    assert not missing, f"{refreshed} hold outputs but {missing} are missing: commit what the script wrote"


# --- Kaggle, Colab, Cloud TPU: the routes as documented --------------------------------------

KAGGLE_DOC = ROOT / "docs" / "kaggle.md"


def test_kaggle_steps_come_in_the_order_a_first_run_needs_them():
    """Internet, licence, secrets, the plan with its estimate, the run, resuming in a new version."""
    text = KAGGLE_DOC.read_text().split("## Kaggle, step by step", 1)[1].split("\n## ", 1)[0]
    steps = ["Phone verification", "*Internet > On*", "Gemma licence", "*Add-ons > Secrets*",
             "!python -m reasonkit plan", "!python -m reasonkit run", "Resuming in a new version"]
    at = [text.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), dict(zip(steps, at, strict=True))


def test_the_plan_estimates_in_the_kaggle_doc_are_the_time_models():
    """The table of ``python -m reasonkit plan``'s estimates, one row per TPU preset, as the time
    model computes them on the preset's own hardware."""
    from reasonkit.runtime import hardware

    text = KAGGLE_DOC.read_text()
    for name in presets.PRESETS:
        preset = presets.get_preset(name)
        if preset.hardware == "cpu":
            continue
        model = hardware.time_model(preset, hardware.from_name(preset.hardware))
        stages = " / ".join(hardware.format_duration(model.seconds(s))
                            for s in ("sft", "dpo", "grpo", "eval"))
        gen, chips = preset.hardware.split("-")[1:]
        row = f"| `{name}` | TPU {gen}-{chips} | {stages} | {hardware.format_duration(model.total())} |"
        assert row in text, f"docs/kaggle.md: the row of {name} should read {row}"


def test_no_repository_address_but_the_placeholder():
    """The repository's address is one setting, REASONKIT_REPO; the docs show it as <owner>/<repo>."""
    for page in (KAGGLE_DOC, ROOT / "docs" / "multihost.md"):
        for url in re.findall(r"github\.com/[^\s)`'\"]+", page.read_text()):
            assert url.startswith("github.com/<owner>/<repo>"), f"{page.name}: {url}"
    assert "REASONKIT_REPO" in KAGGLE_DOC.read_text()


def test_a_cloud_tpu_install_starts_by_naming_python_3_11():
    text = (ROOT / "docs" / "multihost.md").read_text()
    assert -1 < text.find("Python 3.11") < text.find("python3.11 -m venv") < text.find("requirements-tpu.txt")


@pytest.mark.parametrize("name", GEMMA)
def test_the_presets_page_says_where_each_preset_runs(name):
    """v3-8 exists on Cloud TPU only: Kaggle's menu no longer has it."""
    preset = presets.get_preset(name)
    where = {"tpu-v3-8": "Cloud TPU v3-8", "tpu-v5e-8": "Kaggle TPU v5e-8", "tpu-v5e-1": "Colab TPU v5e-1"}
    row = next(line for line in (ROOT / "docs" / "presets.md").read_text().splitlines()
               if line.startswith(f"| `{name}` |"))
    assert where[preset.hardware] in row, row


# --- one source for every number: the figures README and docs quote, from the files behind them ---

RESULTS = ROOT / "docs" / "results.md"
BENCH = ROOT / "benchmarks" / "results"


def _table(text: str, head_starts: str) -> tuple[list[str], dict[str, list[str]]]:
    """The Markdown table of ``text`` whose head row starts with ``head_starts``: its head and
    its rows by first cell."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(head_starts))
    cells = lambda line: [c.strip() for c in line.strip().strip("|").split("|")]
    rows = {}
    for line in lines[at + 2:]:
        if not line.startswith("|"):
            break
        row = cells(line)
        rows[row[0]] = row[1:]
    return cells(lines[at])[1:], rows


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_seven_seed_table_and_its_quotes_are_seeds_json():
    seeds = json.loads((BENCH / "seeds.json").read_text())
    order = sorted(seeds["results"], key=int)
    head, rows = _table(RESULTS.read_text(), "| stage | 1036 prompts")
    assert len(head) == 4, head
    for stage in ("sft", "dpo", "grpo"):
        for col, kind in ((0, "leftover"), (2, "fresh")):
            values = [seeds["results"][s][stage][kind] for s in order]
            assert rows[stage][col] == " / ".join(f"{v:.2f}" for v in values), (stage, kind)
            summary = seeds["summary"][kind][stage]
            assert rows[stage][col + 1] == f"{summary['mean']:.2f} ± {summary['sd']:.2f}", (stage, kind)
    for col, kind in ((0, "leftover"), (2, "fresh")):
        diff = seeds["summary"][kind]["grpo_minus_sft"]
        assert rows["grpo - sft"][col] == " / ".join(f"{v:+.2f}" for v in diff["per_seed"])
        assert rows["grpo - sft"][col + 1].strip("*") == f"{diff['mean']:+.2f} ± {diff['sd']:.2f}"
    fresh = seeds["summary"]["fresh"]
    gain = f"{fresh['grpo_minus_sft']['mean']:+.2f} ± {fresh['grpo_minus_sft']['sd']:.2f}"
    assert all(d > 0 for d in fresh["grpo_minus_sft"]["per_seed"])  # "above SFT on all seven"
    for page in (README, RESULTS):
        text = _flat(page.read_text())
        assert re.search(rf"above SFT on all seven( seeds\*\*)?, {re.escape(gain)} points", text), page.name
        assert f"spread between seeds ({fresh['sft']['sd']:.2f})" in text, page.name
        quoted = set(re.findall(r"[+-]\d\.\d\d ± \d\.\d\d", text))
        assert quoted <= {gain, f"{seeds['summary']['leftover']['grpo_minus_sft']['mean']:+.2f} ± "
                                f"{seeds['summary']['leftover']['grpo_minus_sft']['sd']:.2f}"}, quoted
    by_domain = seeds["grpo_minus_sft_by_domain"]["fresh"]
    line = ", ".join(f"`{d}` {v:+.2f}" for d, v in sorted(by_domain.items(), key=lambda kv: -kv[1]))
    assert line in _flat(RESULTS.read_text())


def test_the_real_270m_table_and_its_quotes_are_its_json():
    real = json.loads((BENCH / "real_270m_cpu.json").read_text())
    head, rows = _table(RESULTS.read_text(), "| stage | n | format pass | accuracy | lenient")
    keys = {"format pass": "format_rate", "accuracy": "accuracy", "lenient accuracy": "lenient_accuracy"}
    for label, stage in (("base", "base"), ("SFT", "sft"), ("DPO", "dpo"), ("GRPO", "grpo")):
        s = real["stages"][stage]
        assert rows[label][0] == str(s["n"])
        for col, name in enumerate(head[1:], 1):
            want = f"{100 * s[keys[name]]:.1f} ± {100 * s[keys[name] + '_se']:.1f}"
            assert rows[label][col] == want, (label, name)
    paired = ", ".join(f"{pair.upper().replace('BASE', 'base')} "
                       f"{d['mean']:+.1f} ± {d['se']:.1f}" for pair, d in real["paired_accuracy"].items())
    assert f"paired_accuracy` in the JSON): {paired}." in _flat(RESULTS.read_text()), paired


def _stage_table_of_06() -> tuple[list[str], dict[str, list[str]]]:
    """The first stage table in the committed outputs of 06_evaluation."""
    nb = json.loads((ROOT / "notebooks" / "06_evaluation.ipynb").read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            md = "".join(out.get("data", {}).get("text/markdown", ""))
            if md.startswith("| stage | n |"):
                head, rows = _table(md, "| stage | n |")
                return head[1:], {k: v[1:] for k, v in rows.items()}  # without n
    raise AssertionError("06_evaluation.ipynb shows no stage table: refresh its outputs")


@pytest.mark.parametrize("page", [README, RESULTS], ids=lambda p: p.name)
def test_the_tiny_table_is_the_committed_06(page):
    """Each quoted column of each stage, as 06's committed outputs show it."""
    shown_head, shown = _stage_table_of_06()
    head, rows = _table(page.read_text(), "| stage | format pass |")
    assert set(head) <= set(shown_head), set(head) - set(shown_head)
    for stage, cells in rows.items():
        if stage.startswith("grpo, format rewards only"):
            continue  # 06 shows that row in a table of its own
        for name, cell in zip(head, cells, strict=True):
            assert cell == shown[stage][shown_head.index(name)], (page.name, stage, name)
    assert set(rows) >= set(shown), f"{page.name} leaves out {set(shown) - set(rows)}"


def test_the_memory_estimate_claims_are_shapes_json_and_notebook_01():
    ratios = [r["ratio"] for r in json.loads((BENCH / "shapes.json").read_text())["results"]]
    text = _flat(README.read_text())
    assert all(0.8 <= r <= 1.2 for r in ratios), ratios  # "within 20% of each"
    assert f"within 20% of each (x{min(ratios):.2f} to x{max(ratios):.2f})" in text
    tiny = re.search(r"not of the tiny model \(01 prints (x\d\.\d\d)\)", text)
    assert tiny, "README says what 01 prints for the tiny model"
    outputs = "".join("".join(o.get("text", "")) for c in json.loads(
        (ROOT / "notebooks" / "01_hardware_check.ipynb").read_text())["cells"] for o in c.get("outputs", []))
    assert f"({tiny.group(1)})" in outputs, f"01's committed outputs print no {tiny.group(1)}"


def _section(text: str, title: str) -> str:
    return text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


def test_the_harder_grpo_section_quotes_its_json():
    text = _section((ROOT / "docs" / "results.md").read_text(), "GRPO on harder prompts")
    diag = json.loads((BENCH / "grpo_diagnostics.json").read_text())["results"]["sft"]["2"]
    for domain, r in diag.items():
        cells = [f"{r[c]:.0f}" for c in ("greedy", "greedy_verified", "pass_at_k", "pass_at_k_verified")]
        assert f"| {domain} | {' | '.join(cells)} | {100 * r['zero_std']:.0f}% |" in text, domain
    hard = json.loads((BENCH / "grpo_hard.json").read_text())
    row = hard["results"]["0"]
    for name, label in (("hard", "fresh, difficulty 2"), ("fresh", "fresh, difficulty 1")):
        cells = [f"{row[st][name]['accuracy']:.2f}" for st in ("sft", "dpo", "grpo")]
        assert (f"| {label} | {row['n'][name]} | {' | '.join(cells)} | "
                f"{row['grpo_minus_sft'][name]:+.2f} |") in text, name
    ctl = row["control_shuffled"]
    assert f"ends at {ctl['hard']['accuracy']:.2f} on the" in text
    assert f"{ctl['fresh']['accuracy']:.2f} on the difficulty-1 set" in text
    kept = row["contrast"]
    assert f"kept {kept['kept']} of {kept['screened']} prompts ({kept['all_wrong']} all wrong" in text
    assert hard["verdict"]["pilot_stops"] and "**Stopped.** The pilot gained" in text
    curve = row["sft_pass_at_k_hard"]["pass_at"]
    assert f"{curve[-1]:.1f}%" in text
    assert f"(pass@1 to pass@4: {', '.join(f'{x:.1f}' for x in curve)}, the unbiased" in _flat(text)
    assert f"({ctl['hard']['accuracy'] - row['sft']['hard']['accuracy']:+.2f} and" in text
    sft = {name: row["sft"][name]["accuracy"] for name in ("hard", "fresh")}
    for key, label in (("grpo", "GRPO (the pilot)"), ("control_shuffled", "GRPO, shuffled rewards"),
                       ("control_dr-grpo", "Dr. GRPO"), ("control_fading", "GRPO, fading format reward"),
                       ("control_rs-sft", "rejection-sampling SFT"),
                       ("control_gold-sft", "SFT on the gold traces")):
        cells = [f"{row[key][n]['accuracy']:.2f} | {row[key][n]['accuracy'] - sft[n]:+.2f}"
                 for n in ("hard", "fresh")]
        assert f"| {label} | {' | '.join(cells)} |" in text, key
    rs = row["control_rs-sft"]["did"]
    assert (f"{rs['sampling']['per_prompt']} per prompt, {rs['sampling']['sampled']}" in _flat(text)
            and f"kept the {rs['sampling']['verified']} verified right" in _flat(text)
            and f"{rs['steps']} SFT steps on the {rs['sampling']['distinct_kept']} distinct" in _flat(text)
            and f"({rs['sampling']['prompts_with_one']} of the {rs['prompts']} prompts" in _flat(text))


def test_the_dpo_rate_table_quotes_its_json():
    page = (ROOT / "docs" / "presets.md").read_text()
    text = page.split("### The DPO learning rate", 1)[1].split("\n### ", 1)[0]
    sweep = json.loads((BENCH / "real_270m_dpo_lr.json").read_text())
    assert sweep["held_out_pairs"] == 48
    assert f"from the real series' {sweep['sft_steps']}-step SFT" in _flat(text)
    for row in sweep["rows"]:
        after = row["after"]
        rate = f"{row['learning_rate']:.0e}".replace("e-0", "e-")
        cells = [f"{after['loss']:.3f}", f"{100 * after['rewards/accuracy']:.3g}%",
                 f"{after['rewards/margin']:.2f}", f"{row['gold_answer_loss_after']:.2f}"]
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {rate}") or
                    ln.startswith(f"| **{rate}**"))
        assert line.replace("**", "").split(" | ")[1:] == cells[:-1] + [cells[-1] + " |"], (line, cells)
    assert presets.get_preset("gemma3-270m-cpu").dpo.learning_rate == 5e-5 and "keeps **5e-5**" in text


def test_the_grpo_rate_table_quotes_its_json():
    page = (ROOT / "docs" / "presets.md").read_text()
    text = page.split("### The GRPO learning rate", 1)[1].split("\n### ", 1)[0]
    sweep = json.loads((BENCH / "real_270m_grpo_lr.json").read_text())
    assert f"after its {sweep['sft_steps']}-step SFT" in _flat(text)
    assert f"on {sweep['held_out_records']} fresh task prompts" in _flat(text)
    for row in sweep["rows"]:
        rate = row["learning_rate"]
        label = "none (the DPO adapters)" if rate is None else f"{rate:.0e}".replace("e-0", "e-")
        cells = [f"{100 * row['format_rate']:.3g}%", f"{100 * row['accuracy']:.1f}%",
                 f"{row['gold_answer_loss']:.3f}"]
        if rate is not None:
            cells += [f"{row['correct_reward_first']:.2f} -> {row['correct_reward_last']:.2f}",
                      f"{row['kl_last']:.2g}"]
        line = next(ln for ln in text.splitlines() if ln.replace("**", "").startswith(f"| {label} "))
        shown = [c.strip() for c in line.replace("**", "").strip("| \n").split(" | ")][1:]
        assert shown[:len(cells)] == cells, (line, cells)
    assert presets.get_preset("gemma3-270m-cpu").grpo.learning_rate == 5e-6
    gain = json.loads((BENCH / "real_270m_cpu.json").read_text())["paired_accuracy"]["grpo - dpo"]
    assert f"gains {gain['mean']:.1f} ± {gain['se']:.1f} points over DPO" in _flat(text)
    assert "**5e-6** (the CPU preset)" in text and "the CPU preset takes 5e-6" in _flat(text)


# --- the real Gemma 3 270M on the first page and in 04-06 (issue 66 item 10) ---

REAL = BENCH / "real_270m_cpu.json"


def _pm(mean: float, se: float) -> str:
    """A paired difference as the pages write it: ``-4.8 ± 1.5``."""
    return f"{mean:+.1f} ± {se:.1f}"


def test_the_readme_real_270m_table_is_its_json():
    real = json.loads(REAL.read_text())
    stages, paired = real["stages"], real["paired_accuracy"]
    head, rows = _table(README.read_text(), "| Gemma 3 270M | format pass | accuracy | paired against")
    assert head[:2] == ["format pass", "accuracy"], head
    base = stages["base"]
    assert rows["base"][:2] == [f"{100 * base['format_rate']:.1f}",
                                f"{100 * base['accuracy']:.1f} ± {100 * base['accuracy_se']:.1f} "
                                f"({100 * base['lenient_accuracy']:.1f} read leniently)"]
    before = {"sft": "base", "dpo": "sft", "grpo": "dpo"}
    for stage, prev in before.items():
        s, d = stages[stage], paired[f"{stage} - {prev}"]
        label = stage.upper()
        want = [f"{100 * s['format_rate']:.1f}", f"{100 * s['accuracy']:.1f} ± {100 * s['accuracy_se']:.1f}"]
        assert rows[label][:2] == want, (label, rows[label], want)
        assert rows[label][2].startswith(f"{label} - {prev.upper().replace('BASE', 'base')} "
                                         f"{_pm(d['mean'], d['se'])}"), (label, rows[label][2])
    whole = paired["grpo - sft"]
    assert rows["GRPO"][2].endswith(f"GRPO - SFT {_pm(whole['mean'], whole['se'])}"), rows["GRPO"][2]
    # what each stage did, plainly: the signs the table shows
    assert paired["sft - base"]["mean"] > 0 and paired["dpo - sft"]["mean"] < 0
    assert paired["grpo - dpo"]["mean"] > 0 > paired["grpo - sft"]["mean"]
    text = _flat(README.read_text())
    for said in ("SFT taught the format and most of the accuracy.", "DPO on synthetic pairs cost accuracy.",
                 "GRPO repaired part of that, but ends below SFT."):
        assert said in text, said
    onpolicy = json.loads((BENCH / "real_270m_onpolicy.json").read_text())
    assert "preregistered" in onpolicy and "(benchmarks/results/real_270m_onpolicy.json)" in text
    assert ("not yet run" in text) == (onpolicy["results"] is None), "README: say whether it has run"


def _paragraph(notebook: str, starts: str) -> str:
    """The flat text of the markdown paragraph of ``notebooks/<notebook>.py`` starting ``starts``."""
    lines = (ROOT / "notebooks" / f"{notebook}.py").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"# {starts}"))
    out = []
    for line in lines[at:]:
        if line.rstrip() == "#" or not line.startswith("#"):
            break
        out.append(line[2:])
    return _flat(" ".join(out))


def test_each_stage_notebook_says_what_it_did_on_the_real_270m():
    """04, 05 and 06 each say in one paragraph what their stage did, with the JSON's figures."""
    real = json.loads(REAL.read_text())
    acc = {s: f"{100 * v['accuracy']:.1f}%" for s, v in real["stages"].items()}
    p = {k: _pm(d["mean"], d["se"]) for k, d in real["paired_accuracy"].items()}
    dom = {s: {d: f"{100 * v:.1f}%" for d, v in by.items()} for s, by in real["accuracy_by_domain"].items()}
    said = {
        ("04_dpo", "**What DPO did on the real Gemma 3 270M**"): [
            f"{acc['sft']} after SFT, {acc['dpo']} after DPO, {p['dpo - sft']} points, paired",
            f"Summarization lost most, from {dom['sft']['summarization']} to {dom['dpo']['summarization']}"],
        ("05_grpo", "**What GRPO did on the real Gemma 3 270M**"): [
            f"won back {p['grpo - dpo']} points over DPO, paired, to {acc['grpo']}",
            f"It still ends below SFT: {p['grpo - sft']} points, paired"],
        ("06_evaluation", "**What the series did on the real Gemma 3 270M**"): [
            f"SFT took accuracy from {acc['base']} to {acc['sft']}",
            f"DPO lost {p['dpo - sft'].lstrip('-')} points, paired",
            f"GRPO won back {p['grpo - dpo'].lstrip('+')} and ended at {acc['grpo']}, "
            f"below SFT: {p['grpo - sft']}"],
    }
    for (name, starts), quotes in said.items():
        text = _paragraph(name, starts)
        for quote in quotes:
            assert quote in text, (name, quote, text)
    # the summarization loss is DPO's largest, as 04 says
    by = real["accuracy_by_domain"]
    drops = {d: by["dpo"][d] - v for d, v in by["sft"].items()}
    assert min(drops, key=drops.get) == "summarization"
    # 06 says its check fails that run: the last stage more than two paired errors below SFT
    d = real["paired_accuracy"]["grpo - sft"]
    assert d["mean"] < -2 * d["se"] and "This check fails that run." in _paragraph(
        "06_evaluation", "**What the series did on the real Gemma 3 270M**")


def test_claims_whose_evidence_is_gone_stay_gone():
    pages = {p.name: _flat(p.read_text()) for p in [README, *DOCS]}
    pages |= {p.name: _flat(p.read_text().replace("\n# ", "\n"))  # a notebook's markdown, unmarked
              for p in sorted((ROOT / "notebooks").glob("0*.py"))}
    for name, text in pages.items():
        assert "no measured cost" not in text, name  # SFT's cost on tiny is within noise, not nil
        assert "not yet in the stage table" not in text, name  # lenient accuracy is a column
    shown_head, _ = _stage_table_of_06()
    assert "lenient accuracy" in shown_head
    # the GRPO step's speed-up is bench.json's
    speedup = json.loads((BENCH / "bench.json").read_text())["old_new"]["grpo"]["speedup_new"]
    assert f"the tiny GRPO step {speedup:.2f}x Tunix's" in pages["README.md"]
    # Dr. GRPO ran after the pilot's stop rule fired: a later control, never the pilot's figure
    row = json.loads((BENCH / "grpo_hard.json").read_text())["results"]["0"]
    dr = f"{row['control_dr-grpo']['hard']['accuracy'] - row['sft']['hard']['accuracy']:+.2f}"
    pilot = f"{row['grpo_minus_sft']['hard']:+.2f}"
    assert (f"a pre-registered pilot gained {pilot} on 3600 fresh ones; its stop rule fired. A later "
            f"control run with Dr. GRPO's loss gained {dr}") in pages["README.md"]
    assert "a control run after the pilot's stop rule fired" in pages["results.md"]
    assert "and the pilot's stop rule fired. A later control run with Dr. GRPO's loss" in pages["05_grpo.py"]


def _numbers(obj) -> set[float]:
    """Every number in a JSON value, curves left out (their values are quoted as below)."""
    if isinstance(obj, bool):
        return set()
    if isinstance(obj, (int, float)):
        return {float(obj)}
    if isinstance(obj, dict):
        return set().union(*(_numbers(v) for k, v in obj.items() if k != "curves"), set())
    if isinstance(obj, list):
        return set().union(*(_numbers(v) for v in obj), set())
    return set()


def test_every_decimal_figure_of_the_real_270m_section_is_in_its_json():
    """Each figure with a decimal point, from the section's start to its time model (which
    tests/test_main.py checks), is a number of real_270m_cpu.json at the precision shown (a
    rate as a percentage too), a paired difference in standard errors, or the first, last,
    least or largest point of one of its curves, or the mean of its first or last 10."""
    real = json.loads(REAL.read_text())
    known = _numbers(real)
    for points in real["curves"].values():
        values = [v for _, v in points]
        known |= {sum(values[:10]) / len(values[:10]), sum(values[-10:]) / len(values[-10:]),
                  values[0], values[-1], min(values), max(values)}
    known |= {100 * v for v in known}
    known |= {d["mean"] / d["se"] for d in real["paired_accuracy"].values()}  # "2.4 standard errors"
    text = _section(RESULTS.read_text(), "Google's Gemma 3 270M").split("**The time model**", 1)[0]
    missing = []
    for figure in re.findall(r"(?<![\w.])[+-]?\d+\.\d+(?![\w.])", text):
        places = len(figure.split(".")[1])
        if not any(round(abs(n), places) == abs(float(figure)) for n in known):
            missing.append(figure)
    assert missing == [], f"docs/results.md quotes figures real_270m_cpu.json does not hold: {missing}"
