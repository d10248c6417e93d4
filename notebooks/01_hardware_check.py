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
# # 01 · Hardware check
#
# **What you will do:** see what this session runs on and how fast it multiplies matrices.
# Then check that every training stage of your preset fits in accelerator memory, *before*
# you spend hours on it.
#
# **What you will learn:** where the memory of LoRA post-training goes. For Gemma, the
# 256k-262k-token vocabulary makes the logits one of the largest items. And why SFT and
# DPO use an FSDP mesh while GRPO prefers tensor parallelism.
#
# **What you need:** any runtime. On Kaggle pick *TPU v5e-8* (v3-8 is on Cloud TPU only);
# on Colab, *v5e-1*. On a CPU the `tiny` preset runs everything.

# %% [markdown]
# ## Settings, runs and the deadline
# **Settings** are environment variables. On Kaggle or Colab, set them in a cell above the
# setup cell, e.g. `%env REASONKIT_PRESET=gemma3-1b`. Use the same values in every
# notebook of a run. Unset, the preset is `auto`: `tiny` on a CPU, or a Gemma preset sized
# for the TPU it finds. That is untested: no Gemma preset has run on a TPU yet.
#
# **Where the runs live.** Each notebook reads what the one before wrote under
# `runs/<run>/`. That is `./runs` in the working directory, `/kaggle/working/runs` on
# Kaggle, or `$REASONKIT_RUNS`. On Kaggle, `/kaggle/working` lasts one session. To go on
# in a later one, add the earlier session's output as an input. The setup cell copies its
# `runs/<run>` back, never over work already there. On Colab each notebook runs in its own
# runtime, and its disk goes with it. So the runs live on Google Drive, in
# `/content/drive/MyDrive/reasonkit-runs`. The setup cell mounts it, or stops and says
# what to do.
#
# **One deadline per session.** Training stops cleanly before the deadline and resumes in
# the next session. The deadline is `REASONKIT_DEADLINE_HOURS` hours from the session's
# start. It is 8.5 by default on Kaggle (sessions end at 9), none elsewhere unless set.
# Every notebook and stage of a session shares it. To run 02-06 in one Kaggle session, see
# `docs/kaggle.md`.

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
import jax
import matplotlib.pyplot as plt

from reasonkit import notebook
from reasonkit.budget import budget_table, memory_budget
from reasonkit.presets import get_preset
from reasonkit.runtime import RunDir, hardware, mesh, start_session

mesh.init_distributed()  # a no-op on one host; joins the pod on several
session = start_session()  # earlier Kaggle runs restored, compiled programs kept, the deadline set
preset = get_preset()  # $REASONKIT_PRESET ("auto": from the hardware), $REASONKIT_OVERRIDES
run = RunDir.create()
print(f"preset {preset.name!r}: {preset.description}")
print(f"outputs go to {run.path}")

# %% [markdown]
# ## What is here

# %%
import importlib.metadata as md

for pkg in ("jax", "jaxlib", "flax", "google-tunix", "qwix", "optax", "orbax-checkpoint", "grain"):
    print(f"{pkg:18s} {md.version(pkg)}")
hw = hardware.detect()
print()
print(hw.summary())
for d in jax.devices()[:8]:
    print(" ", d)

# %% [markdown]
# ## How fast is it?
# A jitted chain of square matmuls, warm-up excluded. On a TPU, expect a large fraction of
# the table's bf16 peak. Far below it, something else (host input, small shapes) will
# bound training too.

# %%
bench = hardware.matmul_benchmark()
print(f"measured {bench['flops_per_s'] / 1e12:.3f} TFLOP/s per device "
      f"({bench['dtype']}, n={bench['n']})")
if bench["peak_flops_per_s"]:
    print(f"table peak {bench['peak_flops_per_s'] / 1e12:.1f} TFLOP/s -> "
          f"{bench['fraction_of_peak']:.0%} of peak")

# %% [markdown]
# ## Does every stage fit?
# Bytes **per device** for each stage of the preset: base weights, LoRA weights with their
# gradients and Adam moments, activations, attention scores, logits, and the KV cache for
# generation. First on this machine, then on the machine the preset was sized for. A CPU
# preset is sized for this machine, and its small model shows little. So there the second
# table is Gemma 3 1B on a Kaggle TPU v5e-8 (`EXAMPLE`): arithmetic only, nothing is
# loaded. Its 262k-token vocabulary makes the logits nearly as large as the activations of
# all 26 layers.

# %%
from IPython.display import Markdown, display

rows = budget_table(preset, hw)
display(Markdown(notebook.budget_table(rows)))

# %%
EXAMPLE = "gemma3-1b"  # shown beside a CPU preset: what this notebook teaches, at Gemma's size
shown = preset if preset.hardware != "cpu" else get_preset(EXAMPLE)
target = hardware.from_name(shown.hardware)
print(f"{shown.name} on the machine it is sized for, {target.name} ({target.device_count} devices):")
display(Markdown(notebook.budget_table(budget_table(shown, target))))

# %% [markdown]
# ## What the compiler says
# The budget is arithmetic; the compiler can count. This cell builds the SFT step exactly
# as training will, with abstract weights (nothing is downloaded). It compiles it for this
# machine and reads back the bytes each device needs: arguments + outputs + temporaries,
# less the donated inputs. On a TPU that is the real figure. On a CPU it is XLA:CPU's,
# which for a bfloat16 model holds float32 copies of the weights that a TPU does not. The
# estimate printed beside it counts those (`memory_budget(..., backend="cpu")`). For the
# Gemma presets that estimate is within 20% of the compiler's figure
# (`benchmarks/results/shapes.md`). For the float32 `tiny` model it is about half (the ratio
# printed): the estimate is sized for Gemma's shapes, not for a model of a few MiB.
# `python -m reasonkit.shapes gemma3-1b sft` checks a TPU preset on simulated CPU devices.

# %%
from reasonkit import shapes

for stage in ["sft"]:  # also "dpo", "grpo", "rollout", "eval": a minute or two each on a TPU
    print(shapes.describe(shapes.check(preset, stage, hw=hw)))

# %% [markdown]
# When a stage does not fit, the budget says what to change. It prices each suggestion by
# re-running the same arithmetic on the changed preset. When every stage fits here, an
# override that does not (Gemma 3 1B's SFT at 512 sequences a batch) shows what the advice
# reads like.

# %%
examples = [(preset, hw)]
if all(r["fits"] for r in rows):
    big = get_preset(EXAMPLE, **{"sft.batch_size": 512})
    examples.append((big, hardware.from_name(big.hardware)))
for p, machine in examples:
    print(f"{p.name}, SFT batch {p.sft.batch_size}, on {machine.name}:")
    for stage in ("sft", "dpo", "grpo", "eval"):
        budget = memory_budget(p, stage, hw=machine)
        print(f"  {stage:5s} {'fits' if budget.fits else 'DOES NOT FIT'}: "
              f"{hardware.format_bytes(budget.total)} of {hardware.format_bytes(budget.capacity)}")
        for advice in budget.advice()[:3]:
            print(f"        try {advice.change}: {hardware.format_bytes(advice.total)}, "
                  f"{'fits' if advice.fits else 'still too big'}")

# %% [markdown]
# ## Where the memory goes

# %%
fig = notebook.plot_memory(rows, f"{preset.name} on {hw.name} "
                        f"(device memory {rows[0]['capacity'] / 2**30:.1f} GiB)")
fig.savefig(run.path / "hardware_budget.png", dpi=120)
plt.show()

# %% [markdown]
# ## Which mesh for which stage?
# SFT and DPO shard parameters, gradients, optimizer state and the batch over all devices
# (FSDP). GRPO spends most of its time generating one token at a time. There FSDP would
# all-gather every weight per token; tensor parallelism keeps the shards resident. One
# device has nothing to shard, so the layouts of the preset above (`shown`) on its
# machine's devices come too.

# %%
machines = [(preset, hw.device_count)] + ([(shown, target.device_count)] if shown is not preset else [])
for p, devices in machines:
    print(f"{p.name} on {devices} device(s):")
    for stage, layout in mesh.recommended_layouts(p, devices).items():
        configured = mesh.resolve_shape(mesh.stage_mesh_config(p, stage).shape, devices)
        print(f"  {stage:5s} preset {configured}  recommended {layout.shape}: {layout.why}")
m = mesh.stage_mesh(preset, "sft")
print("this machine's SFT mesh:", " x ".join(f"{size} on {axis!r}" for axis, size in m.shape.items()))

# %% [markdown]
# ## Check: what this notebook found
# The last cell asserts what this notebook is for, so a run that quietly found nothing
# stops here. It also fails the tests, which run every notebook under nbval. JAX sees at
# least one device, and the hardware check counted them all. The matmul benchmark measured
# a positive rate. The memory budget has a positive total for each of the four stages
# (SFT, DPO, GRPO, evaluation). These need no margin. One more check has one: by the
# budget's arithmetic, every stage fits the machine the preset was sized for (this one for
# `tiny`). The Gemma presets use 7% to 54% of their target's memory there. So an override
# that breaks it (a larger batch, say) fails here before it fails on a TPU.

# %%
assert jax.device_count() >= 1 and hw.device_count == jax.device_count(), (hw, jax.devices())
assert bench["flops_per_s"] > 0, bench
assert [r["stage"] for r in rows] == ["sft", "dpo", "grpo", "eval"], [r["stage"] for r in rows]
assert all(r["total"] > 0 and r["capacity"] > 0 for r in rows), rows
sized_for = hw if preset.hardware == "cpu" else hardware.from_name(preset.hardware)
too_big = [r["stage"] for r in budget_table(preset, sized_for) if not r["fits"]]
assert not too_big, f"{too_big} do not fit {sized_for.name}, the machine {preset.name!r} is sized for"
print(f"checked: {hw.device_count} device(s); a budget for every stage; all fit {sized_for.name}")

# %% [markdown]
# ## What next
# - Run `02_dataset_rebalance` to build the data splits.
# - If a stage does not fit, apply one of the suggestions with `get_preset(name,
#   **{"sft.batch_size": 16})` and re-run this notebook.
# - Try `REASONKIT_PRESET=auto` to let the hardware pick the preset.
