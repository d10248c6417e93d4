# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Direct preference optimisation (DPO)
#
# **What you will do:** train the SFT adapters on preference pairs (a prompt, a *chosen*
# and a *rejected* completion) from `02_dataset_rebalance`'s DPO split. Decode a pair as
# the trainer sees it and ask the SFT model three held-out questions. Train with live
# metrics, plot the reward margin and preference accuracy, and ask again.
#
# **What you will learn:** what DPO optimises without a reward model, and why its
# reference is the SFT policy. What the logs' *reward margin* and *preference accuracy*
# mean. What a healthy run looks like.
#
# **What you need:** the splits (`02_dataset_rebalance`) and the SFT adapters (`03_sft`)
# in the same run. Gemma needs a TPU (Kaggle *TPU v5e-8*, Cloud TPU v3-8, Colab *v5e-1*);
# on a CPU, `tiny` trains in a couple of minutes.

# %% [markdown]
# ## Setup
# The first cell is the same in every notebook. It finds reasonkit (installed, this
# checkout, `$REASONKIT_REPO`, a Kaggle input or `$REASONKIT_PIP`), or says where it
# looked. It installs the tested JAX, Tunix and transformers, and says if the runtime must
# restart. The next cell starts the session: it restores runs attached on Kaggle and sets
# the session's deadline. Kaggle and Colab, step by step: `docs/kaggle.md`.

# %%
import glob
import importlib.util
import os
import subprocess
import sys

# reasonkit_bootstrap.py: in this checkout, a clone here, or a Kaggle input (docs/kaggle.md)
KAGGLE = os.environ.get("REASONKIT_KAGGLE_INPUT") or "/kaggle/input"
PLACES = ["..", ".", "reasonkit", *(f"{KAGGLE}/{p}" for p in (
    "*", "*/*", "datasets/*/*", "datasets/*/*/*", "notebooks/*/*", "notebooks/*/*/*"))]
found = [p for where in PLACES for p in sorted(glob.glob(f"{where}/reasonkit_bootstrap.py"))]
missing = not found and not importlib.util.find_spec("reasonkit_bootstrap")
if missing and os.environ.get("REASONKIT_REPO"):  # e.g. Colab: clone the repository beside the notebook
    subprocess.check_call(["git", "clone", "--depth=1", os.environ["REASONKIT_REPO"], "reasonkit"])
    found = ["reasonkit/reasonkit_bootstrap.py"]
elif missing and os.environ.get("REASONKIT_PIP"):  # reasonkit's wheel brings reasonkit_bootstrap
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--no-deps", os.environ["REASONKIT_PIP"]])
elif missing:
    raise FileNotFoundError(f"reasonkit_bootstrap.py is in none of {PLACES}: clone the repository, add it "
                            "on Kaggle, or set REASONKIT_REPO or REASONKIT_PIP above (docs/kaggle.md)")
sys.path[:0] = [os.path.dirname(os.path.abspath(found[0]))] if found else []
import reasonkit_bootstrap

source = reasonkit_bootstrap.setup()  # reasonkit and the tested JAX stack

# %%
import collections
import dataclasses

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from reasonkit import data, models, notebook, train
from reasonkit.budget import memory_budget
from reasonkit.presets import get_preset
from reasonkit.runtime import RunDir, hardware, mesh, start_from, start_session

mesh.init_distributed()  # a no-op on one host; joins the pod on several
session = start_session()  # earlier Kaggle runs restored, compiled programs kept, the deadline set
preset = get_preset()  # $REASONKIT_PRESET (default "auto": tiny on a CPU), $REASONKIT_OVERRIDES
run = RunDir.create()
splits, _ = data.read_splits(run.require("data"))  # raises if 02 has not run: says so
start = start_from(run, "dpo")  # raises if SFT has not finished: says which notebook
print(f"preset {preset.name!r}: {preset.description}")
print(f"run {run.path}: {len(splits.dpo)} preference pairs; DPO starts from the "
      f"{start.upper()} adapters")

# %% [markdown]
# ## The stage's settings
# `algorithm` is `"dpo"` or `"orpo"`. `beta` sets how far the policy may move from the
# reference (smaller: further). The memory line is `01_hardware_check`'s estimate. DPO
# runs every batch twice (chosen and rejected), so its batch is half of SFT's.

# %%
for key, value in dataclasses.asdict(preset.dpo).items():
    print(f"  {key:20s} {value}")
budget = memory_budget(preset, "dpo")
print(f"memory: about {hardware.format_bytes(budget.total)} per device of "
      f"{hardware.format_bytes(budget.capacity)}: {'fits' if budget.fits else 'DOES NOT FIT'}")

# %% [markdown]
# ## The model we start from
# The base weights with the SFT adapters, restored from `runs/<run>/sft/checkpoints`.

# %%
_, model, tok, _ = models.load_policy(preset, run, start, mesh=None)
print(f"{preset.model.num_params / 1e6:.1f}M base parameters + LoRA rank {preset.lora.rank} "
      f"adapters from {start}")

# %% [markdown]
# ## One preference pair, decoded
# A row of the DPO split is a prompt with a **chosen** completion (right answer, right
# format) and a **rejected** one. `02_dataset_rebalance` made the rejected side differ in
# one way, recorded as `rejected_kind`:

# %%
kinds = collections.Counter(r["rejected_kind"] for r in splits.dpo)
display(Markdown(notebook.count_table(kinds, "rejected_kind")))

# %% [markdown]
# The trainer sees fixed-shape arrays. The prompt is **left**-padded, so it ends where the
# responses begin; each response is **right**-padded; masks mark the real tokens. The
# first row of the first batch, decoded from those arrays:

# %%
batches, _ = train.dpo_batches(train.dpo_examples(splits.dpo, tok), preset, tok)
batch = next(iter(batches))
display(Markdown(notebook.array_table(batch)))
for part in ("prompt", "chosen", "rejected"):
    ids, mask = batch[f"{part}_ids"][0], batch[f"{part}_mask"][0].astype(bool)
    print(f"--- {part} ({mask.sum()} tokens, {(~mask).sum()} padding)")
    print(tok.DecodeIds(ids[mask].tolist()))

# %% [markdown]
# ## Before: the SFT model on three held-out questions
# The three held-out prompts of `03_sft`, greedy, scored by `evaluate.score`.

# %%
EXAMPLES = notebook.pick_examples(splits.eval)  # math, coding, summarization if present
before = notebook.show_completions(model, tok, EXAMPLES, preset.model, preset.eval, start.upper())
del model
models.free()  # the trainer loads its own copy onto the DPO mesh

# %% [markdown]
# ## How DPO learns, and what it logs
# DPO needs no reward model and no sampling. For each pair, it compares how much more
# likely each response is under the **policy** (being trained) than under a frozen
# **reference**. The *implicit reward* of a response $y$ is
# $r(y) = \beta\,(\log \pi_\theta(y \mid x) - \log \pi_{\text{ref}}(y \mid x))$. The loss
# is $-\log \sigma(r(\text{chosen}) - r(\text{rejected}))$.
#
# - **The reference is the SFT policy**, not the raw base. DPO should move the model only
#   where the preferences say, from where SFT left it. The reference is the SFT adapters,
#   frozen, on the policy's own backbone arrays: no second copy of the base weights.
# - **Reward margin** `train/rewards/margin` $= r(\text{chosen}) - r(\text{rejected})$,
#   averaged over the batch: how much more the policy moved towards the chosen responses
#   than the rejected. It starts at 0 (policy = reference) and should grow.
# - **Preference accuracy** `train/rewards/accuracy`: the share of pairs whose chosen
#   response has the higher implicit reward. At step 1 the margins are 0 up to rounding: a
#   coin flip. It should climb towards 1.
# - **Loss** starts at $\log 2 \approx 0.69$ (a margin of 0) and falls as margins grow.
#
# Watch `train/rewards/chosen` too. DPO can raise the margin by pushing *both* responses
# down, the rejected faster. Chosen rewards far below 0 mean even the good answers grow
# less likely. Then lower the learning rate or raise `beta`.

# %% [markdown]
# ## Train with Tunix's `DPOTrainer`
# The cell writes out a `DPOTrainer`: the policy, the frozen reference, an optimizer and a
# `DPOTrainingConfig`. `trainer.train(batches)` runs the loop.
#
# - `r.policy` starts from the SFT adapters. `r.reference` is the frozen copy (above;
#   `03_sft`, "LoRA"). ORPO (`dpo.algorithm = "orpo"`) has no reference: `r.reference` is
#   None.
# - The config holds DPO or ORPO, `beta`, and the lengths the collator pads to.
# - `r.patch(trainer)`: the preset's optimisations. Tunix takes each response's
#   log-probability from float32 full-vocabulary logits, in the loss and the reference's
#   forward. The patch computes the same numbers a chunk of positions at a time.
# - `r.batches(trainer)`: the pairs above, prompts left-padded, responses right-padded.
#
# The `with` block keeps `03_sft`'s lifecycle: checkpoints, the settings record, a clean
# stop before the session's deadline, and resume (in a new session too). A finished stage
# is loaded (`r.trains` is False), not retrained, unless `RETRAIN = True`. Scripts build
# the same trainer with `train.dpo_trainer`.

# %%
from tunix import DPOTrainer, DPOTrainingConfig

RETRAIN = False  # True: delete this run's DPO checkpoints and metrics, and train again

# %%
with train.stage_run(preset, run, "dpo", retrain=RETRAIN, deadline=run.deadline()) as r:
    if r.trains:  # False: DPO already finished, and its adapters were loaded instead
        cfg = preset.dpo
        config = DPOTrainingConfig(
            algorithm=cfg.algorithm, beta=cfg.beta, lambda_orpo=cfg.lambda_orpo,
            eval_every_n_steps=cfg.max_steps + 1, max_steps=cfg.max_steps,  # no held-out loss
            max_prompt_length=cfg.max_prompt_length, max_response_length=cfg.max_response_length,
            pbar_description=cfg.algorithm.upper(), **r.run_options)
        trainer = DPOTrainer(model=r.policy, ref_model=r.reference, optimizer=train.make_optimizer(cfg),
                             training_config=config)
        trainer = r.patch(trainer)  # log-probabilities a chunk of positions at a time
        trainer.train(r.batches(trainer))
result = r.result
policy, finished = result.policy, result.finished

# %%
if r.trains:
    display(Markdown(notebook.parts_table({
        "trainer": trainer, "loss": trainer.loss_fn, "batches": train.dpo_collator(preset, tok)})))
    display(Markdown(notebook.config_table(trainer.config)))

# %% [markdown]
# ## The curves
# One point per batch (`dpo.batch_size` pairs), so they are noisy.

# %%
fig = notebook.plot_dpo(train.read_metrics(run, "dpo"))
fig.savefig(run.stage("dpo") / "dpo_curves.png", dpi=120)
plt.show()

# %% [markdown]
# ## After: the same three questions
# Now with the DPO adapters. The pairs prefer right answers to wrong ones *and* complete
# tags to broken ones. Format should hold; answers may improve. DPO can also hurt format.
# In *Training Gemma 2 2B to Reason with Tunix*, the write-up this pipeline follows,
# format pass fell from 89.5% after SFT to 76.8% after DPO. `06_evaluation` measures it on
# the whole held-out set.

# %%
if finished:
    after = notebook.show_completions(policy, tok, EXAMPLES, preset.model, preset.eval, "DPO")
    display(Markdown(notebook.before_after(EXAMPLES, before, after, (start.upper(), "DPO"))))
else:
    print("DPO stopped before max_steps (deadline): run this notebook again to resume.")

# %% [markdown]
# ## What this stage left behind
# `runs/<run>/dpo/` holds the Orbax checkpoints of the DPO adapters (what `05_grpo`
# restores), `metrics.jsonl`, TensorBoard logs, the plot and `finished.json`. To browse
# the logs in Jupyter, Colab or Kaggle, run in a cell of its own (it needs the
# `tensorboard` package; not run here, the tests have none):
#
# ```python
# %load_ext tensorboard
# %tensorboard --logdir {run.stage("dpo") / "tensorboard"}
# ```

# %%
print(sorted(p.name for p in run.stage("dpo").iterdir()))

# %% [markdown]
# ## Check: DPO moved towards the chosen answers
# The last cell calls `notebook.check_dpo` on DPO's metrics. It averages them over the first
# and last quarter of the logged steps, as one batch a step is noisy. It fails when DPO
# did not do its job (a learning rate of 1e-12, adapters left at their start). Its
# margins:
#
# - **The chosen-over-rejected margin rises**: its last-quarter mean is at least 0.05 and
#   above its first-quarter mean. A DPO that learned nothing stays at its start, 0.
# - **The pairs are ranked right**: the last quarter's preference accuracy is at least
#   0.6, against 0.5 for a coin flip.
# - **Held-out answers did not get worse**, given `held_out=(before, after)`: per-prompt
#   correctness of the same held-out prompts, with SFT's adapters and with DPO's. DPO fails
#   when it ends more than two paired standard errors below SFT. DPO logs no held-out
#   block yet, so this cell passes none; `06_evaluation` makes the same paired comparison.
#
# Not checked: ORPO (its logged "margin" compares log-probabilities with no reference, so
# it does not start at 0), and a stage stopped by the session's deadline.
#
# **What DPO did on the real Gemma 3 270M** (`benchmarks/results/real_270m_cpu.json`). It
# cost accuracy: 44.6% after SFT, 39.9% after DPO, -4.8 ± 1.5 points, paired. The pairs
# are synthetic: each rejected answer is an edit of the gold, not the model's own error.
# Summarization lost most, from 52.4% to 35.7%. A margin can rise while answers get worse.

# %%
if finished and preset.dpo.algorithm == "dpo":
    print(notebook.check_dpo(train.read_metrics(run, "dpo"), held_out=None))  # no held-out block yet
else:
    print("not checked:", "ORPO: no reference" if finished else "DPO has not finished")

# %% [markdown]
# ## What next
# - Run `05_grpo` to push accuracy with verifiable rewards, from these adapters.
# - Try `beta`: `get_preset(name, **{"dpo.beta": 0.5})` keeps the policy closer to SFT
#   (smaller margins, less drift); `0.05` lets it move further. Another run name
#   (`REASONKIT_RUN=...`) keeps both, to compare in `06_evaluation`.
# - Try ORPO: `**{"dpo.algorithm": "orpo"}` adds a preference term to plain SFT loss and
#   needs no reference model.
# - Skip DPO: `05_grpo` starts from the SFT adapters when DPO has not run.
