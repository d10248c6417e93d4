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
# # 03 · Supervised fine-tuning (SFT)
#
# **What you will do:** train LoRA adapters on the base model so that it answers in the
# `<reasoning>…</reasoning><answer>…</answer>` format, on the SFT split from
# `02_dataset_rebalance`. Look at one training batch token by token and ask the untrained
# model three held-out questions. Train with live metrics, plot the loss, and ask again.
#
# **What you will learn:** what *completion-only loss* is and why SFT uses it, and what a
# LoRA checkpoint holds. How a stage resumes after a session ends, and why a finished
# stage is never trained over silently.
#
# **What you need:** the splits from `02_dataset_rebalance` (same run directory). Gemma
# needs a TPU (Kaggle *TPU v5e-8*, Cloud TPU v3-8, Colab *v5e-1*); on a CPU, `tiny` trains
# in a few minutes.

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
import dataclasses

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from reasonkit import data, models, notebook, train
from reasonkit.budget import memory_budget
from reasonkit.presets import get_preset
from reasonkit.runtime import RunDir, checkpoint_dir, hardware, mesh, start_session

mesh.init_distributed()  # a no-op on one host; joins the pod on several
session = start_session()  # earlier Kaggle runs restored, compiled programs kept, the deadline set
preset = get_preset()  # $REASONKIT_PRESET (default "auto": tiny on a CPU), $REASONKIT_OVERRIDES
run = RunDir.create()
splits, _ = data.read_splits(run.require("data"))  # raises if 02 has not run: says so
print(f"preset {preset.name!r}: {preset.description}")
print(f"run {run.path}: {len(splits.sft)} SFT records; SFT starts from the base model")

# %% [markdown]
# ## The stage's settings
# SFT's settings are `preset.sft`. Change a field with `get_preset(name,
# **{"sft.max_steps": 500})`, or without editing a cell with
# `REASONKIT_OVERRIDES='{"sft.max_steps": 500}'` in the environment. The memory line is
# `01_hardware_check`'s estimate; if it says *does not fit*, that notebook says what to
# change.

# %%
for key, value in dataclasses.asdict(preset.sft).items():
    print(f"  {key:18s} {value}")
print(f"  LoRA rank {preset.lora.rank}, alpha {preset.lora.alpha}, qlora {preset.lora.qlora}")
budget = memory_budget(preset, "sft")
print(f"memory: about {hardware.format_bytes(budget.total)} per device of "
      f"{hardware.format_bytes(budget.capacity)}: {'fits' if budget.fits else 'DOES NOT FIT'}")

# %% [markdown]
# ## The model we start from
# `load_policy(..., stage=None)` puts fresh LoRA adapters on the base weights. LoRA's `b`
# matrices start at zero, so this model computes exactly what the base does: below is the
# base model.

# %%
base, model, tok, _ = models.load_policy(preset, run, None, mesh=None)
print(f"{preset.model.num_params / 1e6:.1f}M base parameters, tokenizer of {tok.GetPieceSize()} "
      f"pieces; LoRA on {preset.lora.module_path!r}")

# %% [markdown]
# ## LoRA: what trains, and what it costs
# LoRA freezes every base weight $W$ (`in x out`) and learns a low-rank change beside it.
# The adapted projection computes $xW + \frac{\alpha}{r}\,xAB$, with $A$ of shape `in x r`
# and $B$ of shape `r x out`. Only $A$ and $B$ train, with gradients and Adam moments.
#
# - **The rank** $r$ (`lora.rank`) is how many independent directions the change to $W$
#   can take: $r \cdot (in + out)$ numbers instead of $in \cdot out$. Larger ranks learn
#   more and cost more.
# - **Alpha** $\alpha$ (`lora.alpha`) scales what the adapters add, by $\alpha / r$. Gemma
#   presets set $\alpha = r$ (scale 1), the tiny preset $\alpha = 2r$ (scale 2). A larger
#   scale acts like a larger learning rate on the adapters.
#
#
# The table counts them on the model above: the adapted projections of the first layer
# (each `w` or `kernel`, with its $A$ and $B$), then every layer.

# %%
display(Markdown(notebook.lora_table(model)))
print(f"rank {preset.lora.rank}, alpha {preset.lora.alpha}: the adapters' output is scaled by "
      f"{preset.lora.alpha / preset.lora.rank:g}")

# %% [markdown]
# DPO and GRPO also need a frozen **reference** model: the policy as the stage found it.
# It costs no second copy of the base. `models.frozen_reference` puts a second set of
# adapters on the *same* base model object: restored from the stage before, never given to
# an optimizer. Reference and policy hold the very same base arrays; only the adapters are
# extra. Tunix's RL cluster checks exactly this, by identity (`is_sharing_backbone`), and
# would otherwise copy the backbone. Here, with fresh adapters:

# %%
from tunix.rl.utils import is_sharing_backbone

reference = models.frozen_reference(base, preset, None, None, mesh=None)  # as DPO and GRPO build it
print("the reference's base weights are the policy's own arrays:", is_sharing_backbone(reference, model))
del reference

# %% [markdown]
# ## One training batch, decoded
# SFT batches have a fixed shape, `batch_size x max_target_length`, so XLA compiles the
# step once: BOS, the prompt, the completion, then padding. `input_mask` is the **loss
# mask**, true only on completion tokens. The model still *reads* the prompt (attention
# uses the padding mask), but never learns to *write* it. That is completion-only loss.
# The gradient goes to the answer we want, not to copying questions. Long prompts do not
# drown short completions.

# %%
batches, _ = train.sft_batches(train.sft_examples(splits.sft, tok), preset, tok)
batch = next(iter(batches))  # {"input_tokens": [B, S] int32, "input_mask": [B, S] bool}
ids, loss = batch["input_tokens"][0], batch["input_mask"][0]  # row 0: [S], [S]
real = ids != tok.pad_id()
one = batch["segment_ids"][0] == 1 if "segment_ids" in batch else real  # sft.packing: 1st example
display(Markdown(notebook.array_table(batch)))
print(f"row 0: {(one & ~loss).sum()} tokens BOS + prompt (no loss), {(one & loss).sum()} completion "
      f"tokens (loss), {(~real).sum()} padding (no loss, not attended)")
print("--- prompt, read but not learned:")
print(tok.DecodeIds(ids[one & ~loss].tolist()))
print("--- completion, learned (loss on every token):")
print(tok.DecodeIds(ids[one & loss].tolist()))

# %% [markdown]
# The whole batch at a glance: each row is one example, each column one position.

# %%
notebook.plot_loss_mask(batch, tok.pad_id())
plt.show()

# %% [markdown]
# ## Before: three held-out questions
# The same three held-out prompts appear before and after every stage: one math, one
# coding, one summarization question (other domains stand in if your data lacks these).
# Decoding is greedy, with `06_evaluation`'s settings (`preset.eval`). `evaluate.score`
# judges each completion with the GRPO rewards' parser. Is the format exact? Is the answer
# right?

# %%
EXAMPLES = notebook.pick_examples(splits.eval)  # math, coding, summarization if present
before = notebook.show_completions(model, tok, EXAMPLES, preset.model, preset.eval, "base")

# %% [markdown]
# The base model continues in its pretraining style, without tags. Free it before
# training: the trainer loads its own copy onto the stage's mesh.

# %%
del model, base
models.free()

# %% [markdown]
# ## Train with Tunix's `PeftTrainer`
# The cell below is Tunix's own API, as in its examples. A `PeftTrainer` takes a model, an
# optimizer and a `TrainingConfig`. `with_gen_model_input_fn` says how a batch becomes the
# model's inputs. `trainer.train(train_batches, eval_batches)` is the whole loop.
#
# `train.stage_run` opens the stage around it and gives the cell its parts:
#
# - `r.policy`: the base with fresh LoRA adapters, on the stage's mesh (FSDP).
# - `train.make_optimizer`: AdamW with clipping, warm-up and cosine decay. Tunix applies
#   it to the LoRA parameters only.
# - `r.run_options`: where checkpoints (every `checkpoint_every` steps) and metrics go.
# - `train.gen_model_input_fn`: the causal mask and positions, from the padding. Tunix
#   leaves this to the user.
# - `r.patch(trainer)`: the preset's optimisations (`preset.optimisations`). For SFT, the
#   same cross-entropy a chunk of positions at a time. Tunix's own loss builds several
#   float32 `[B, S, V]` buffers, 4 GiB each for 4 rows of 1024 Gemma tokens.
# - `r.batches(trainer)`: the SFT batches until the session's deadline. `r.eval_batches`:
#   two held-out batches, evaluated at every checkpoint.
#
# Around the call, the `with` block keeps the run's lifecycle:
#
# - **Resume.** Tunix's trainer restores the last checkpoint as it is built; the same
#   batches follow, as if training had never stopped.
# - **Deadline.** Set `REASONKIT_DEADLINE_HOURS`: the batches stop in time for a clean
#   checkpoint. Run the notebook again to resume. In a new Kaggle or Colab session, put
#   `runs/` back first (`01_hardware_check`).
# - **Settings.** `sft/settings.json` records what the adapters depend on. A resume under
#   other settings is refused, listing what changed.
# - **Interrupts.** A checkpoint being written when you stop the cell lands first.
# - **Finished.** A finished stage is loaded, not trained again (`r.trains` is False).
#   `RETRAIN = True` deletes it and trains from scratch.
#
# After the block, `r.result` says how many steps ran and holds the trained policy.
# Scripts call `train.train_or_load(preset, run, "sft")`: the same block, with the same
# objects built by `train.sft_trainer`.
#
# To watch it live in Jupyter, Colab or Kaggle, run this in a cell before training. It
# needs the `tensorboard` package (not run here; the tests have none):
#
# ```python
# %load_ext tensorboard
# %tensorboard --logdir {run.stage("sft") / "tensorboard"}
# ```

# %%
from tunix import PeftTrainer, TrainingConfig

RETRAIN = False  # True: delete this run's SFT checkpoints and metrics, and train again
print("optimisations in force:", list(preset.optimisations) or "none (Tunix as it ships)")

# %%
with train.stage_run(preset, run, "sft", retrain=RETRAIN, deadline=run.deadline()) as r:
    if r.trains:  # False: SFT already finished, and its adapters were loaded instead
        cfg = preset.sft
        config = TrainingConfig(max_steps=cfg.max_steps, eval_every_n_steps=cfg.checkpoint_every,
                                pbar_description="SFT", **r.run_options)
        trainer = PeftTrainer(r.policy, train.make_optimizer(cfg), config)
        trainer = trainer.with_gen_model_input_fn(train.gen_model_input_fn(r.tokenizer.pad_id()))
        trainer = r.patch(trainer)  # Tunix's loss, computed a chunk of positions at a time
        trainer.train(r.batches(trainer), r.eval_batches)
result = r.result
policy, finished = result.policy, result.finished

# %% [markdown]
# What trained, part by part, and the config's fields that differ from Tunix's defaults:

# %%
if r.trains:
    display(Markdown(notebook.parts_table({
        "trainer": trainer, "loss": trainer.loss_fn, "model inputs": trainer.gen_model_input_fn,
        "batches": train.sft_collator(preset, tok),
        "optimizer state (LoRA params only)": trainer.optimizer})))
    display(Markdown(notebook.config_table(trainer.config)))

# %% [markdown]
# ## The curves
# The loss is the cross-entropy of the completion tokens only (the mask above). Each
# training point is one batch, so it is noisy. The held-out points are the same evaluation
# batches every time (step 0 is before any update). The learning rate warms up linearly,
# then decays along a cosine to 0. A held-out loss rising while the training loss falls
# means overfitting: fewer steps or more data.

# %%
fig = notebook.plot_sft(train.read_metrics(run, "sft"))
fig.savefig(run.stage("sft") / "sft_curves.png", dpi=120)
plt.show()

# %% [markdown]
# ## After: the same three questions
# Now with the SFT adapters. On `tiny` the format should be right after SFT; the answers
# may not be. Accuracy is what DPO and GRPO work on next.

# %%
if finished:
    after = notebook.show_completions(policy, tok, EXAMPLES, preset.model, preset.eval, "SFT")
    display(Markdown(notebook.before_after(EXAMPLES, before, after, ("base", "SFT"))))
else:
    print("SFT stopped before max_steps (deadline): run this notebook again to resume.")

# %% [markdown]
# ## What this stage left behind
# `runs/<run>/sft/` now holds the adapters' Orbax checkpoints, `metrics.jsonl`,
# TensorBoard logs, the plot, `settings.json` and `finished.json`. Tunix's
# `CheckpointManager` restores the checkpoints; `04_dpo` does so through
# `models.load_policy(preset, run, "sft", mesh)`. A merged Hugging Face model is exported
# once, at the end of `05_grpo`.

# %%
print(sorted(p.name for p in run.stage("sft").iterdir()))
print("checkpoint steps:", sorted(p.name for p in checkpoint_dir(run, "sft").iterdir()))

# %% [markdown]
# ## Check: SFT taught the format
# The last cell calls `notebook.check_sft`. It fails when SFT did not do its job (a learning
# rate of 1e-12, say, or adapters left at their start). Its margins:
#
# - **The format rises**: more of the 3 held-out answers above are in the exact format
#   after SFT than before, and at least 2. The base model never writes the tags, so an SFT
#   that learned nothing stays at its count; one answer of the three may still miss.
# - **The held-out loss falls**: at the last evaluation it is at least 10% below the one
#   before the first step. On `tiny` it falls far more (the curves above). On Gemma, which
#   starts far better, a fall under 10% would mean SFT barely moved.
#
# A stage stopped by the session's deadline is not checked: run the notebook again first.

# %%
if finished:
    print(notebook.check_sft(before, after, train.read_metrics(run, "sft")))
else:
    print("SFT has not finished: nothing to check yet")

# %% [markdown]
# ## What next
# - Run `04_dpo` to teach preferences, starting from these adapters.
# - Train longer or at another learning rate: `get_preset(name, **{"sft.max_steps": 300,
#   "sft.learning_rate": 1e-3})`, then `RETRAIN = True`. Or use another run name
#   (`REASONKIT_RUN=...`) to keep both and compare them in `06_evaluation`.
# - Watch the curves live while SFT trains: the `%tensorboard` cell of "Train" above shows
#   them inside the notebook. A shell `tensorboard --logdir` on Colab, Kaggle or Jupyter
#   starts a server the notebook cannot show.
# - Try a session deadline: `REASONKIT_DEADLINE_HOURS=0.05` (3 minutes from the session's
#   start). Run, then unset or raise it and run again: the stage resumes from its
#   checkpoint.
