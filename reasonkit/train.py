"""Build and run Tunix SFT / DPO / GRPO from a preset: LoRA, resume, hand-off, deadline, export.

Each stage trains LoRA adapters on a frozen base and checkpoints them with Orbax
under ``runs/<run>/<stage>/checkpoints`` (adapters, optimizer state, step) every
``checkpoint_every`` steps and at the end. Re-running a stage resumes from its last
complete checkpoint: Tunix restores the step and optimizer state and skips the
batches it already consumed, and every batch stream here is a deterministic
function of the data and the seed, so a resumed run ends where an uninterrupted one
would. The hand-off: DPO starts from the SFT adapters, GRPO from DPO's (or SFT's
when DPO was skipped); adapters are restored onto the new stage's mesh. Which stage
starts from which, the settings each records and the checks on them live with the run
directory, in :mod:`reasonkit.runs`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import importlib
import importlib.metadata
import itertools
import json
import os
import pathlib
import random
import time
import warnings
from typing import Any, Callable, Iterable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from reasonkit import (
    attention,
    collate,
    compiles,
    data,
    logprobs,
    masks,
    models,
    rewards,
    runs,
    sampling,
    template,
    tiny,
)
from reasonkit import mesh as mesh_lib
from reasonkit.config import GRPOConfig, ModelConfig, Preset, TrainConfig
from reasonkit.hardware import format_duration
from reasonkit.runs import NOTEBOOK_OF, RunDir, from_writer, is_writer, open_jsonl, sync

# --- Tunix internals ---------------------------------------------------------------------
#
# Written for google-tunix 0.1.7, the version requirements.txt and pyproject.toml pin. A few
# things reasonkit needs are private in Tunix: a sampler's compiled prefill and decode, a DPO
# trainer's input preparation, the RL cluster's metrics logger. Every such access goes
# through tunix_private / set_tunix_private, so one grep finds them all, and a Tunix that
# renamed one fails at once with the attribute's name instead of deep inside a stage.

TUNIX_PINNED = "0.1.7"
_MISSING = object()


def tunix_version() -> str:
    """The installed google-tunix version, or ``"not installed"``."""
    try:
        return importlib.metadata.version("google-tunix")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _private_error(obj: Any, path: str, holder: Any, name: str) -> AttributeError:
    where = type(holder).__module__ + "." + type(holder).__name__
    inside = "" if holder is obj else f" (reached from a {type(obj).__name__})"
    return AttributeError(
        f"Tunix private attribute {path!r} not found: a {where}{inside} has no {name!r}. "
        f"reasonkit reaches into this private part of Tunix as google-tunix {TUNIX_PINNED} "
        f"has it; installed: google-tunix {tunix_version()}. Install google-tunix=="
        f"{TUNIX_PINNED} (requirements.txt), or update reasonkit for this version.")


def tunix_private(obj: Any, path: str) -> Any:
    """``obj.<path>`` for a dotted ``path`` into Tunix's private attributes (Tunix 0.1.7).

    A missing attribute raises an AttributeError naming the path, the type that lacks
    it and the pinned and installed Tunix versions.

    >>> class Trainer: _ref_model_exists = True
    >>> tunix_private(Trainer(), "_ref_model_exists")
    True
    >>> tunix_private(Trainer(), "_sampler._transformer_graphdef")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AttributeError: Tunix private attribute '_sampler._transformer_graphdef' not found: ...
    """
    value = obj
    for name in path.split("."):
        holder, value = value, getattr(value, name, _MISSING)
        if value is _MISSING:
            raise _private_error(obj, path, holder, name)
    return value


def set_tunix_private(obj: Any, path: str, value: Any) -> None:
    """Set ``obj.<path>`` (:func:`tunix_private`'s dotted path) to ``value``.

    Only an attribute Tunix has: setting one it lacks would change nothing Tunix reads,
    so that raises :func:`tunix_private`'s error too.
    """
    head, _, name = path.rpartition(".")
    holder = tunix_private(obj, head) if head else obj
    if getattr(holder, name, _MISSING) is _MISSING:
        raise _private_error(obj, path, holder, name)
    setattr(holder, name, value)


# --- optimisation ------------------------------------------------------------------------


def schedule_numbers(cfg: TrainConfig) -> dict[str, float | int]:
    """What :func:`schedule` is made of: the peak learning rate, the warm-up's steps and
    the step at which the cosine reaches 0 (at least one past the warm-up).

    >>> from reasonkit.config import SFTConfig
    >>> schedule_numbers(SFTConfig(max_steps=100, warmup_ratio=0.1, learning_rate=3e-3))
    {'peak': 0.003, 'warmup': 10, 'total': 100}
    """
    warmup = max(1, int(round(cfg.warmup_ratio * cfg.max_steps))) if cfg.warmup_ratio else 0
    return {"peak": cfg.learning_rate, "warmup": warmup, "total": max(cfg.max_steps, warmup + 1)}


def _learning_rate(count, peak, warmup, total):
    """Linear warm-up from 0 over ``warmup`` steps, then cosine decay from ``peak`` to 0 at
    ``total``: optax's ``warmup_cosine_decay_schedule(0, peak, warmup, total, 0)``, in
    jnp on numbers that may be arrays (the optimizer's state holds them)."""
    count = jnp.asarray(count, jnp.float32)
    peak, warmup, total = (jnp.asarray(x, jnp.float32) for x in (peak, warmup, total))
    rising = peak * count / jnp.maximum(warmup, 1.0)
    done = jnp.clip((count - warmup) / (total - warmup), 0.0, 1.0)
    return jnp.where(count < warmup, rising, 0.5 * peak * (1.0 + jnp.cos(jnp.pi * done)))


def schedule(cfg: TrainConfig) -> optax.Schedule:
    """Linear warm-up over ``warmup_ratio`` of the steps, then cosine decay to 0.

    A warm-up starts at 0, so it takes at least a step; no warm-up starts at the peak.
    """
    return functools.partial(_learning_rate, **schedule_numbers(cfg))


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """AdamW + global-norm clipping at :func:`schedule`'s learning rate.

    The state is optax's ``InjectHyperparamsState``: Tunix logs
    ``hyperparams["learning_rate"]``, the rate of the step just taken. The schedule's
    numbers (:func:`schedule_numbers`) sit beside it in ``hyperparams``, as arrays, not
    in the compiled update: runs that differ only in their step count or peak rate (a
    branch for fewer steps, 05_grpo's format-only run) compile the same program, so the
    second loads the first's from the compilation cache instead of compiling its own.
    """
    def inner(learning_rate):
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm),
                           optax.adamw(learning_rate, weight_decay=cfg.weight_decay))

    def init(params):
        numbers = {k: jnp.asarray(v, jnp.float32) for k, v in schedule_numbers(cfg).items()}
        return optax.InjectHyperparamsState(
            count=jnp.zeros([], jnp.int32), inner_state=inner(0.0).init(params),
            hyperparams={"learning_rate": _learning_rate(0, **numbers), **numbers})

    def update(updates, state, params=None):
        numbers = {k: state.hyperparams[k] for k in ("peak", "warmup", "total")}
        lr = _learning_rate(state.count, **numbers)
        updates, inner_state = inner(lr).update(updates, state.inner_state, params)
        return updates, optax.InjectHyperparamsState(
            count=optax.safe_increment(state.count), inner_state=inner_state,
            hyperparams={"learning_rate": lr, **numbers})

    return optax.GradientTransformation(init, update)


# --- metrics -----------------------------------------------------------------------------


class JsonlBackend:
    """A metrax logging backend that appends ``{"event", "step", "value"}`` lines."""

    def __init__(self, path: str | os.PathLike):
        self._f = open_jsonl(path)

    def log_scalar(self, event: str, value: Any, **kwargs: Any) -> None:
        # jax.monitoring listeners are process-wide: JAX / Orbax internals arrive here
        # too, and a closed logger may still be called. Ignore both.
        if self._f.closed or event.startswith("/jax/"):
            return
        self._f.write(json.dumps({"event": event.lstrip("/"), "step": int(kwargs.get("step") or 0),
                                  "value": float(np.asarray(value))}) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def metrics_options(run: RunDir, stage: str):
    """Tunix metrics to ``<stage>/metrics.jsonl`` and TensorBoard ``<stage>/tensorboard``."""
    import tunix
    from metrax.logging import TensorboardBackend

    tb = str(run.stage(stage) / "tensorboard")
    jsonl = run.stage(stage) / "metrics.jsonl"
    return tunix.MetricsLoggerOptions(log_dir=tb, backend_kwargs={"custom_backend": [
        lambda: JsonlBackend(jsonl), lambda: TensorboardBackend(log_dir=tb)]})


@contextlib.contextmanager
def detached_after(logger: Any) -> Iterator[None]:
    """Unregister a MetricsLogger's listeners however training ends, an interrupt included.

    Tunix leaves them registered: they would copy every metric logged later in the same
    process (a resumed run, the next stage) into this stage's metrics.jsonl.
    """
    backends = tunix_private(logger, "_backends")  # before training: a missing one raises now
    try:
        yield
    finally:
        for backend in backends:
            try:
                jax.monitoring.unregister_scalar_listener(backend.log_scalar)
            except Exception:  # noqa: BLE001 - it was not registered
                pass


def read_metrics(run: RunDir, stage: str) -> dict[str, tuple[list[int], list[float]]]:
    """``{event: (steps, values)}`` from a stage's metrics.jsonl (last value per step wins)."""
    series: dict[str, dict[int, float]] = {}
    for row in run.read_metrics(stage):
        if "event" in row:
            series.setdefault(row["event"], {})[row["step"]] = row["value"]
    return {k: (sorted(v), [v[s] for s in sorted(v)]) for k, v in series.items()}


# --- time budget -------------------------------------------------------------------------


def until(stream: Iterable[Any], deadline: float | None, margin_s: float = 120.0, *,
          total: int | None = None, skip: int = 0, name: str = "training",
          warmup: int = 2) -> Iterator[Any]:
    """Yield from ``stream`` while there is time for another step before ``deadline``.

    The trainer stops when its data ends and saves a final checkpoint, so stopping the
    stream is a clean stop; re-running the notebook resumes from there. The margin
    grows to twice the slowest step seen, plus ``margin_s`` for the checkpoint write.
    ``deadline`` is the session's (:meth:`reasonkit.runs.RunDir.deadline`).

    With ``total`` (the stage's ``max_steps``), once ``warmup`` steps have run after the
    first (which compiles), it prints the measured time per step, when the stage should
    end and whether that is before the deadline. ``skip``: batches a resumed trainer
    reads and discards first (they take no step).
    """
    last, slowest, steady = time.time(), 0.0, []
    for i, item in enumerate(stream):
        # From one request to the next: the trainer's step on the batch before, and this fetch.
        now = time.time()
        gap, last = now - last, now
        slowest = max(slowest, gap)
        if i >= skip + 2:  # the step on batch i - 1 was not the first (compiling) one
            steady.append(gap)
            if total is not None and len(steady) == warmup and i < total:
                print(eta(name, sum(steady) / len(steady), i, total, deadline, now))
        # Several processes stop together, when process 0 says so.
        if from_writer(deadline is not None and now + 2 * slowest + margin_s > deadline):
            print("time budget: stopping cleanly" + (f", {deadline - now:.0f}s before the deadline"
                                                     if deadline is not None else ""))
            return
        yield item


def eta(name: str, per_step: float, done: int, total: int, deadline: float | None,
        now: float | None = None) -> str:
    """One line: the measured time per step, when the stage ends, and against the deadline.

    >>> print(eta("SFT", 2.0, 40, 240, deadline=1000.0, now=0.0))
    SFT: 2.00 s/step after warm-up; 200 steps left, 6.7 min: ends 10.0 min before the deadline
    >>> print(eta("GRPO", 10.0, 0, 100, deadline=500.0, now=0.0))  # doctest: +NORMALIZE_WHITESPACE
    GRPO: 10.0 s/step after warm-up; 100 steps left, 16.7 min: does NOT fit the deadline
    (8.3 min left): it stops cleanly near step 50; run again in a new session to resume
    """
    now = time.time() if now is None else now
    left = total - done
    need = left * per_step
    rate = f"{per_step:.3g} s/step" if per_step < 1 else f"{per_step:.2f} s/step" if per_step < 10 \
        else f"{per_step:.1f} s/step"
    line = f"{name}: {rate} after warm-up; {left} steps left, {format_duration(need)}"
    if deadline is None:
        return line + "; no deadline set"
    spare = deadline - now - need
    if spare >= 0:
        return line + f": ends {format_duration(spare)} before the deadline"
    reach = done + max(0, int((deadline - now) / per_step))
    return (line + f": does NOT fit the deadline ({format_duration(max(0.0, deadline - now))} left): "
            f"it stops cleanly near step {reach}; run again in a new session to resume")


# --- data ------------------------------------------------------------------------------


def epochs(items: Sequence[Any], seed: int, split: str = "training") -> Iterator[Any]:
    """``items`` reshuffled each epoch (seeded), forever; the same seed gives the same stream."""
    if not items:
        raise ValueError(
            f"no training examples: the {split} split is empty. data/data_report.json "
            f"(02_dataset_rebalance) says what each source gave and why rows were dropped; "
            f"{split} needs " + ("preference pairs or gold answers to build them from"
                                 if split == "dpo" else "records with a gold answer"))
    for epoch in range(1_000_000):
        order = list(range(len(items)))
        random.Random(seed * 1_000_003 + epoch).shuffle(order)
        yield from (items[i] for i in order)


def take(stream: Iterable[Any], n: int) -> Iterator[Any]:
    """The first ``n`` items of ``stream``, lazily; ``n`` is checked here, at the call.

    A wrong ``n`` (a negative ``max_steps`` would silently train nothing) fails where it
    is passed, not at the first ``next``. No item past the n-th is read: a batch stream
    collates, and counts in its stats, every batch it yields.

    >>> list(take(iter("abcdef"), 3)), list(take("ab", 5)), list(take("ab", 0))
    (['a', 'b', 'c'], ['a', 'b'], [])
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"take: n={n!r} is a {type(n).__name__}; expected an int >= 0 "
                        "(how many items to take)")
    if n < 0:
        raise ValueError(f"take: n={n} is negative; expected an int >= 0 (how many items to take)")
    if not isinstance(stream, Iterable):
        raise TypeError(f"take: stream is a {type(stream).__name__}; expected an iterable")
    return _take(stream, int(n))


def _take(stream: Iterable[Any], n: int) -> Iterator[Any]:
    if n == 0:
        return
    for i, item in enumerate(stream, start=1):
        yield item
        if i == n:  # stop before asking the stream for one more
            return


def sft_examples(records: Sequence[dict], tok) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) in the one template, BOS added by the collator."""
    return [(tok.EncodeAsIds(template.format_prompt(r["prompt"])),
             tok.EncodeAsIds(template.format_completion(r["reasoning"], r["answer"]))) for r in records]


def dpo_examples(records: Sequence[dict], tok) -> list[tuple[list[int], list[int], list[int]]]:
    """(BOS + prompt, chosen, rejected) token triples."""
    return [([tok.bos_id()] + tok.EncodeAsIds(template.format_prompt(r["prompt"])),
             tok.EncodeAsIds(r["chosen"]), tok.EncodeAsIds(r["rejected"])) for r in records]


def grpo_records(records: Sequence[dict]) -> list[dict[str, Any]]:
    """Rows for Tunix's GRPO: formatted prompt, gold answer, domain (reaches the rewards)."""
    return [{"prompts": template.format_prompt(r["prompt"]), "answer": r["answer"],
             "domain": r["domain"]} for r in records]


def sft_collator(preset: Preset, tok) -> collate.SFTCollator:
    cfg = preset.sft
    layout = collate.PackedLayout(max_length=cfg.max_target_length) if cfg.packing \
        else collate.StaticLayout(max_length=cfg.max_target_length)
    return collate.SFTCollator(layout=layout, pad_id=tok.pad_id(), bos_id=tok.bos_id())


def dpo_collator(preset: Preset, tok) -> collate.DPOCollator:
    cfg = preset.dpo
    return collate.DPOCollator(
        prompt_layout=collate.layout_for(cfg.max_prompt_length, cfg.buckets),
        response_layout=collate.layout_for(cfg.max_response_length, cfg.buckets),
        pad_id=tok.pad_id())


def sft_batches(examples, preset: Preset, tok, *, seed: int | None = None):
    """Exactly ``max_steps`` fixed-shape SFT batches (a deterministic stream) and the collator."""
    cfg = preset.sft
    collator = sft_collator(preset, tok)
    stream = collate.batches(epochs(examples, cfg.seed if seed is None else seed, "sft"),
                             cfg.batch_size, collator)
    return take(stream, cfg.max_steps), collator


def dpo_batches(examples, preset: Preset, tok, *, seed: int | None = None):
    cfg = preset.dpo
    collator = dpo_collator(preset, tok)
    stream = epochs(examples, cfg.seed if seed is None else seed, "dpo")
    if cfg.buckets > 1:  # rows of similar length together: most batches fit a small bucket
        stream = collate.length_sorted(stream, 8 * cfg.batch_size,
                                       lambda t: (len(t[0]), max(len(t[1]), len(t[2]))))
    stream = collate.batches(stream, cfg.batch_size, collator)
    return take(stream, cfg.max_steps), collator


def grpo_batches(rows, preset: Preset, tok, *, seed: int | None = None):
    cfg = preset.grpo
    # The sampler adds BOS: leave it one token of room.
    collator = collate.GRPOCollator(tokenizer=tok, max_prompt_length=cfg.max_prompt_length - 1)
    stream = collate.batches(epochs(rows, cfg.seed if seed is None else seed, "grpo"),
                             cfg.batch_size, collator)
    return take(stream, cfg.max_steps), collator


# --- models and checkpoints ------------------------------------------------------------


def restore_lora(model, run: RunDir, stage: str) -> int:
    """Load ``stage``'s latest LoRA params into ``model`` (resharded onto its mesh)."""
    from tunix.sft.checkpoint_manager import CheckpointManager

    root = runs.checkpoint_dir(run, stage)
    if (root / "actor").is_dir():
        root = root / "actor"
    manager = CheckpointManager(str(root))
    try:
        step, _ = manager.maybe_restore(model, restore_only_lora_params=True)
    finally:
        manager.close()
    if not step:
        raise FileNotFoundError(
            f"no checkpoint of stage {stage!r} under {root}: run notebooks/{NOTEBOOK_OF[stage]} "
            f"for run {run.name!r} (or set REASONKIT_RUN to the run that has it)")
    return step


def load_policy(preset: Preset, run: RunDir | None, stage: str | None, mesh, *, seed: int = 0):
    """``(base, lora_model, tokenizer, model_dir)`` on ``mesh``; adapters from ``stage`` if given.

    ``stage=None`` gives fresh adapters (lora_b = 0: the model equals the base).
    """
    model_dir = models.resolve_source(preset.model)
    base = models.load_model(model_dir, preset.model, mesh=mesh)
    tok = models.load_tokenizer(model_dir / "tokenizer.model", vocab_size=preset.model.vocab_size)
    policy = models.apply_lora(base, preset.lora, mesh=mesh, seed=seed)
    if stage is not None:
        restore_lora(policy, run, stage)
    return base, policy, tok, model_dir


def frozen_reference(base, preset: Preset, run: RunDir | None, started: str | None, mesh,
                     seed: int = 0):
    """The policy a stage starts from, frozen: the reference for DPO's ratios and GRPO's KL.

    Not the raw base: after SFT the base is far from the policy (a KL of ~3 nats on the
    tiny preset), and a KL penalty towards it would pull the model back out of the
    format. A second set of adapters on the same backbone costs no second base in memory;
    it is never given to an optimizer.
    """
    reference = models.apply_lora(base, preset.lora, mesh=mesh, seed=seed)
    if started is not None and run is not None:
        restore_lora(reference, run, started)
    return reference


# --- models without a checkpoint: abstract or random at the real shapes -------------------

WEIGHTS = ("checkpoint", "random", "abstract")
# A stand-in tokenizer for models built without a checkpoint: compiling a step only needs
# its special ids (pad 0, eos 1, bos 2, as Gemma's), never its vocabulary.
SHAPE_TOKENIZER = tiny.ASSET / "tokenizer.model"


def _leaf_specs(state) -> list:
    is_spec = lambda x: isinstance(x, jax.sharding.PartitionSpec) or x is None  # noqa: E731
    return jax.tree.leaves(nnx.get_partition_spec(state), is_leaf=is_spec)


def placed_abstractly(model, mesh, dtype: str | None = None):
    """``model`` (abstract or not) as ShapeDtypeStructs placed as its sharding metadata says.

    Axes that do not divide a dimension are dropped, as :func:`reasonkit.mesh.reshard`
    does; ``dtype`` recasts floating-point leaves (Tunix's Gemma 2 initialises in float32
    whatever the checkpoint's dtype).
    """
    graph, state = nnx.split(model)
    leaves, treedef = jax.tree.flatten(state)
    cast = None if dtype is None else jnp.dtype(dtype)
    out = []
    for x, spec in zip(leaves, _leaf_specs(state), strict=True):
        spec = mesh_lib.fit_spec(spec or jax.sharding.PartitionSpec(), x.shape, mesh)
        dt = cast if cast is not None and jnp.issubdtype(x.dtype, jnp.floating) else x.dtype
        out.append(jax.ShapeDtypeStruct(x.shape, dt, sharding=jax.sharding.NamedSharding(mesh, spec)))
    return nnx.merge(graph, jax.tree.unflatten(treedef, out))


def materialised(model, what, seed: int = 0, scale: float = 0.0):
    """``model`` with the abstract leaves of the ``what`` filter made real arrays, in place.

    Each is ``scale * normal`` (zeros by default), created where its sharding puts it:
    no device ever holds more than its shard.
    """
    graph, chosen, rest = nnx.split(model, what, ...)
    leaves, treedef = jax.tree.flatten(chosen)

    def make(i, x):
        def fn():
            if scale and jnp.issubdtype(x.dtype, jnp.floating):
                return (scale * jax.random.normal(jax.random.key(seed * 100_003 + i), x.shape,
                                                  jnp.float32)).astype(x.dtype)
            return jnp.zeros(x.shape, x.dtype)
        return jax.jit(fn, out_shardings=x.sharding)()

    real = [make(i, x) if isinstance(x, jax.ShapeDtypeStruct) else x for i, x in enumerate(leaves)]
    return nnx.merge(graph, jax.tree.unflatten(treedef, real), rest)


def abstract_base(cfg: ModelConfig, mesh):
    """The base model at ``cfg``'s real shapes, as ShapeDtypeStructs placed on ``mesh``."""
    return placed_abstractly(nnx.eval_shape(lambda: models.new_model(cfg)), mesh, cfg.dtype)


def build_models(preset: Preset, mesh, weights: str, *, run: RunDir | None = None,
                 started: str | None = None, seed: int = 0, reference: bool = False):
    """``(base, policy, reference or None, tokenizer, model_dir)`` on ``mesh``.

    ``weights`` is ``"checkpoint"`` (the preset's model source, adapters restored from
    ``started``), ``"random"`` (random weights at the real config, each device creating
    only its shard) or ``"abstract"`` (ShapeDtypeStructs: enough to lower and compile a
    step; the adapters are real zeros, since an optimizer must be built on them).
    Without a checkpoint the tokenizer is :data:`SHAPE_TOKENIZER` and ``model_dir`` None.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights={weights!r}: must be one of {', '.join(WEIGHTS)}")
    lora = preset.lora
    if weights == "checkpoint":
        base, policy, tok, model_dir = load_policy(preset, run, started, mesh, seed=seed)
        ref = frozen_reference(base, preset, run, started, mesh, seed) if reference else None
        return base, policy, ref, tok, model_dir
    tok = models.load_tokenizer(SHAPE_TOKENIZER)
    base = abstract_base(preset.model, mesh)
    if weights == "random":
        base = materialised(base, nnx.Param, seed=seed, scale=0.02)
        policy = models.apply_lora(base, lora, mesh=mesh, seed=seed)
        ref = models.apply_lora(base, lora, mesh=mesh, seed=seed) if reference else None
        return base, policy, ref, tok, None

    def with_lora(model):
        lora_model = nnx.eval_shape(lambda m: models.apply_lora(m, lora, mesh=mesh, seed=seed), model)
        return materialised(placed_abstractly(lora_model, mesh), nnx.LoRAParam)

    return base, with_lora(base), with_lora(base) if reference else None, tok, None


def gen_model_input_fn(pad_id: int) -> Callable[[Any], dict[str, Any]]:
    """SFT batch -> model inputs; attention and positions come from the padding, not the loss mask.

    A packed batch (with ``segment_ids``) gets block-causal attention and positions that
    restart in each segment, so each example sees only itself, as if unpacked.
    """
    def fn(x):
        if "segment_ids" in x:
            return {"input_tokens": x["input_tokens"], "input_mask": x["input_mask"],
                    "positions": masks.segment_positions(x["segment_ids"]),  # [B, S]
                    "attention_mask": masks.segment_causal_mask(x["segment_ids"])}  # [B, S, S]
        valid = masks.padding_mask(x["input_tokens"], pad_id)  # [B, S]
        return {"input_tokens": x["input_tokens"], "input_mask": x["input_mask"],
                "positions": masks.positions_from_mask(valid),  # [B, S]
                "attention_mask": masks.causal_mask(valid)}  # [B, S, S]
    return fn


def log_compiles(run: RunDir, stage: str, counter: compiles.CompileCounter,
                 step: int) -> dict[str, Any]:
    """Append ``compiles/total`` and ``compiles/after_warmup`` to the stage's metrics.jsonl."""
    summary = counter.summary()
    if summary["after_warmup"]:
        print(f"{stage}: {summary['after_warmup']} XLA compilation(s) after the first step: "
              f"{summary['names_after_warmup']}: one per step means a batch shape keeps "
              "changing; a few tiny ones once (Tunix's sampler compiles jit(equal) on its "
              "second call) cost nothing")
    for key in ("total", "after_warmup"):
        run.append_metrics(stage, {"event": f"compiles/{key}", "step": step,
                                   "value": float(summary[key] or 0)})
    return summary


@contextlib.contextmanager
def saves_land_on_interrupt(manager) -> Iterator[None]:
    """If training stops with an exception, let the checkpoint still being written land first.

    Orbax finishes each save in a background thread, and Tunix closes its checkpoint
    manager only when training ends normally. Without this, an interrupt (the notebook's
    stop button, a failing step) a moment after a save would drop that save, or lose it
    when the interpreter exits, and the next run would resume one checkpoint earlier.
    """
    try:
        yield
    except BaseException as stop:
        try:
            manager.close()  # waits for the save in flight
        except Exception as e:  # noqa: BLE001 - the interrupt is what the caller must see
            stop.add_note(f"the checkpoint being written when training stopped was lost: {e!r}")
        raise


def _checkpointing(cfg: TrainConfig):
    import orbax.checkpoint as ocp

    return ocp.CheckpointManagerOptions(save_interval_steps=cfg.checkpoint_every, max_to_keep=2)


def free() -> None:
    """Release device buffers of trainers and models the caller has already deleted."""
    gc.collect()
    jax.clear_caches()


# --- the stage builder -------------------------------------------------------------------

TRAIN_STAGES = ("sft", "dpo", "grpo")

# Tunix computes DPO's and GRPO's log-probabilities from full-vocabulary float32 logits
# (reasonkit.logprobs says why that does not fit a Gemma step). These are the functions its
# trainers look up at call time, and reasonkit's chunked equivalents; chunked_log_probs()
# swaps them in around the calls our stages make into Tunix, and nowhere else.
_CHUNKED = (("tunix.sft.dpo.dpo_trainer", "compute_logps", logprobs.dpo_compute_logps),
            ("tunix.rl.common", "compute_per_token_logps", logprobs.grpo_compute_per_token_logps),
            ("tunix.rl.algo_core", "compute_entropy_from_logits", logprobs.entropy_of_entropy))


@contextlib.contextmanager
def chunked_log_probs(group: int = 1) -> Iterator[None]:
    """While active, Tunix's DPO / GRPO compute log-probabilities with :mod:`reasonkit.logprobs`.

    The one place reasonkit patches Tunix's log-probabilities (same arguments, same
    numbers, no ``[B, S, V]`` float32 logits). GRPO's "logits" come back as the
    per-token entropy they are only used for, with the matching entropy function.
    ``group`` > 1: GRPO's rows are groups of that many sharing a prompt, each prompt run
    once (:func:`reasonkit.logprobs.shared_prompt_hidden`); only for rows known to be.
    """
    saved = []
    try:
        for module, name, ours in _CHUNKED:
            mod = importlib.import_module(module)
            saved.append((mod, name, getattr(mod, name)))
            if group > 1 and ours is logprobs.grpo_compute_per_token_logps:
                ours = functools.partial(ours, group=group)
            setattr(mod, name, ours)
        yield
    finally:
        for mod, name, theirs in reversed(saved):
            setattr(mod, name, theirs)


def _chunked(fn: Callable, group: int = 1) -> Callable:
    """``fn`` run inside :func:`chunked_log_probs` (a loss: while it is traced)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with chunked_log_probs(group):
            return fn(*args, **kwargs)
    return wrapped


def _chunked_if_grouped(fn: Callable, group: int) -> Callable:
    """``fn(prompt_tokens, ...)`` (a log-probability forward Tunix calls from Python, with
    arrays) inside :func:`chunked_log_probs`, sharing prompts when its rows are groups of
    ``group`` equal prompts, checked on the host; Tunix's row-by-row otherwise."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        prompts = kwargs["prompt_tokens"] if "prompt_tokens" in kwargs else args[0]
        with chunked_log_probs(group if group > 1 and sampling.grouped(prompts, group) else 1):
            return fn(*args, **kwargs)
    return wrapped


def share_prompts(learner, group: int) -> None:
    """Check that every GRPO example's rows are groups of ``group`` equal prompts.

    The update's loss is traced once per shape, so it cannot look at its rows: it is
    compiled to run each prompt once per ``group`` rows, as Tunix 0.1.7's learner makes
    them (``np.repeat`` of each prompt G times; micro-batches of whole groups). This
    wrapper of the learner's ``_generate_and_compute_advantage`` stops the run with a
    clear error, before any update, if an example is ever made otherwise.
    """
    make_example = tunix_private(learner, "_generate_and_compute_advantage")

    def checked(*args, **kwargs):
        example = make_example(*args, **kwargs)
        ids = example.prompt_ids
        if isinstance(ids, jax.Array) and not ids.is_fully_addressable:
            return example  # several hosts: no one host reads them all (Tunix's repeat holds)
        if not sampling.grouped(ids, group):
            raise RuntimeError(
                f"GRPO: the example's {ids.shape[0]} prompt rows are not groups of "
                f"{group} equal prompts, which the update's shared-prompt forward is compiled for "
                "(Tunix 0.1.7 repeats each prompt num_generations times); set "
                "grpo.share_prompts to false to train without sharing prompts")
        return example

    set_tunix_private(learner, "_generate_and_compute_advantage", checked)


def _abstract(shape, dtype, mesh, data_sharded: bool = True) -> jax.ShapeDtypeStruct:
    """A batch array as Tunix's ``shard_input`` places it: rows over the data axes."""
    spec = jax.sharding.PartitionSpec(mesh_lib.DATA_AXES if len(mesh_lib.DATA_AXES) > 1
                                      else mesh_lib.DATA_AXES[0])
    if not data_sharded or not shape or shape[0] % mesh_lib.data_ways(mesh):
        spec = jax.sharding.PartitionSpec()
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype),
                                sharding=jax.sharding.NamedSharding(mesh, spec))


def _placed(tree, mesh):
    """Every array of a batch (numpy or abstract) as :func:`_abstract` places it."""
    return jax.tree.map(lambda x: _abstract(np.shape(x), x.dtype, mesh), tree)


@dataclasses.dataclass
class Stage:
    """One training stage built and not run: the real Tunix objects, as training uses them.

    ``trainer`` is the ``PeftTrainer`` (SFT), ``DPOTrainer`` (DPO) or the RL cluster's
    actor trainer (GRPO, with ``cluster`` and ``learner``). :meth:`example_batch` is what
    the jitted step receives (after Tunix's own preparation and sharding), as
    ShapeDtypeStructs, and :meth:`lower` lowers that step for it, as training would
    compile it: ``stage.lower().compile().memory_analysis()`` is what each device needs.
    """

    name: str
    preset: Preset
    mesh: Any
    weights: str
    base: Any
    policy: Any
    reference: Any
    tokenizer: Any
    model_dir: pathlib.Path | None
    trainer: Any
    started_from: str | None = None
    cluster: Any = None
    learner: Any = None

    @property
    def config(self) -> TrainConfig:
        return getattr(self.preset, self.name)

    def example_batch(self) -> Any:
        """The step's input at the stage's full shapes, as ShapeDtypeStructs on the mesh."""
        cfg, tok = self.config, self.tokenizer
        if self.name == "sft":  # one example per row, filling it
            rows = [([5], [6] * (cfg.max_target_length - 2))] * cfg.batch_size
            return _placed(sft_collator(self.preset, tok)(rows), self.mesh)
        if self.name == "dpo":
            rows = [([5] * cfg.max_prompt_length, [6] * cfg.max_response_length,
                     [7] * cfg.max_response_length)] * cfg.batch_size
            batch = dpo_collator(self.preset, tok)(rows)
            has_ref = tunix_private(self.trainer, "_ref_model_exists")
            set_tunix_private(self.trainer, "_ref_model_exists", False)
            try:  # Tunix's own preparation, traced; the reference's log-probs filled in below
                with self.mesh:
                    example = jax.eval_shape(tunix_private(self.trainer, "_prepare_inputs"), batch)
            finally:
                set_tunix_private(self.trainer, "_ref_model_exists", has_ref)
            if has_ref:
                logps = jax.ShapeDtypeStruct((cfg.batch_size,), jnp.float32)
                example = example.replace(ref_chosen_logps=logps, ref_rejected_logps=logps)
            return _placed(example, self.mesh)
        from tunix.rl.common import TrainExample

        n, p, c = (cfg.batch_size * cfg.num_generations, cfg.max_prompt_length,
                   cfg.max_generation_length)
        per_token = jax.ShapeDtypeStruct((n, c), jnp.float32)
        return _placed(TrainExample(
            prompt_ids=jax.ShapeDtypeStruct((n, p), jnp.int32),
            prompt_mask=jax.ShapeDtypeStruct((n, p), jnp.bool_),
            completion_ids=jax.ShapeDtypeStruct((n, c), jnp.int32),
            completion_mask=jax.ShapeDtypeStruct((n, c), jnp.bool_),
            advantages=jax.ShapeDtypeStruct((n,), jnp.float32),
            ref_per_token_logps=per_token if self.learner.algo_config.beta != 0.0 else None,
            old_per_token_logps=per_token if cfg.num_iterations > 1 else None), self.mesh)

    def lower(self):
        """The trainer's jitted train step, lowered for :meth:`example_batch`."""
        with self.mesh:
            step, _ = self.trainer.jit_train_and_eval_step(cache_nnx_graph=False)
            try:
                return step.func.lower(*step.args, self.example_batch())
            finally:
                self.trainer.clear_jit_cache()  # training jits its own (cached-graph) step


def _io(run: RunDir | None, stage: str, cfg: TrainConfig) -> dict[str, Any]:
    """Checkpoint and metrics options of a stage's run directory; none without a run."""
    if run is None:
        return {}
    return dict(checkpoint_root_directory=str(runs.checkpoint_dir(run, stage)),
                checkpointing_options=_checkpointing(cfg),
                metrics_logging_options=metrics_options(run, stage))


def build_stage(preset: Preset, stage: str, run: RunDir | None = None, *,
                weights: str = "checkpoint", started: str | None = None,
                reward_fns: Sequence[Callable] | None = None, mesh=None) -> Stage:
    """Build ``stage`` without training it: preset -> mesh -> model -> LoRA -> Tunix trainer.

    The one way every stage is built: ``train_sft`` / ``train_dpo`` / ``train_grpo`` train
    what this returns, and the real-shape checks (:mod:`reasonkit.shapes`), notebooks and
    benchmarks look inside it. ``weights`` picks real (``"checkpoint"``), random or
    abstract weights (:func:`build_models`); ``started`` is the stage whose adapters to
    start from (and to freeze as the reference); ``run`` gives checkpoints and metrics
    (none without it); ``reward_fns`` replaces GRPO's ``preset.grpo.rewards``. A batch that
    does not split over the mesh's data axes is refused here, before anything is built.
    """
    import tunix

    if stage not in TRAIN_STAGES:
        raise ValueError(f"stage={stage!r}: must be one of {', '.join(TRAIN_STAGES)}")
    cfg = getattr(preset, stage)
    mesh = mesh if mesh is not None else mesh_lib.stage_mesh(preset, stage)
    repeat, how = {"sft": (1, ""), "dpo": (2, "chosen + rejected"),
                   "grpo": (getattr(cfg, "num_generations", 1),
                            "x grpo.num_generations")}[stage]
    mesh_lib.check_batch(cfg.batch_size, mesh, f"{stage}.batch_size", repeat=repeat,
                         how=how and f"{cfg.batch_size} {how}")
    with_ref = stage == "grpo" or (stage == "dpo" and cfg.algorithm == "dpo")  # ORPO: none
    with mesh:
        base, policy, reference, tok, model_dir = build_models(
            preset, mesh, weights, run=run, started=started, seed=cfg.seed, reference=with_ref)
        built = Stage(stage, preset, mesh, weights, base, policy, reference, tok, model_dir,
                      None, started)
        if stage == "sft":
            built.trainer = tunix.PeftTrainer(policy, make_optimizer(cfg), tunix.TrainingConfig(
                eval_every_n_steps=cfg.checkpoint_every, max_steps=cfg.max_steps,
                pbar_description="SFT", **_io(run, stage, cfg)))
            built.trainer.with_gen_model_input_fn(gen_model_input_fn(tok.pad_id()))
            built.trainer.with_loss_fn(logprobs.sft_loss)  # Tunix's loss, chunked
        elif stage == "dpo":
            built.trainer = _dpo_trainer(preset, run, policy, reference)
        else:
            built.cluster, built.learner = _grpo_learner(preset, run, policy, reference, tok,
                                                         mesh, reward_fns)
            built.trainer = built.cluster.actor_trainer
    return built


def _dpo_trainer(preset: Preset, run: RunDir | None, policy, reference):
    import tunix
    from tunix.sft.dpo.dpo_trainer import DPOTrainingConfig, dpo_loss_fn

    cfg = preset.dpo
    trainer = tunix.DPOTrainer(
        model=policy, ref_model=reference, optimizer=make_optimizer(cfg),
        training_config=DPOTrainingConfig(
            algorithm=cfg.algorithm, beta=cfg.beta, lambda_orpo=cfg.lambda_orpo,
            eval_every_n_steps=cfg.max_steps + 1, max_steps=cfg.max_steps,
            max_prompt_length=cfg.max_prompt_length, max_response_length=cfg.max_response_length,
            pbar_description=cfg.algorithm.upper(), **_io(run, "dpo", cfg)))
    # Tunix's loss and preparation (the reference's forward), with chunked log-probs
    trainer.with_loss_fn(_chunked(dpo_loss_fn), has_aux=True)
    set_tunix_private(trainer, "_prepare_inputs", _chunked(tunix_private(trainer, "_prepare_inputs")))
    return trainer


@contextlib.contextmanager
def _abstract_models_stay_put() -> Iterator[None]:
    """RLCluster copies the actor's state to host memory as it starts (``device_put``);
    an abstract model (ShapeDtypeStructs) has nothing to copy, so it is returned as is."""
    from tunix.rl import utils as rl_utils

    put = rl_utils.put_params_on_memory_kind

    def put_unless_abstract(params, memory_kind):
        if any(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree.leaves(params)):
            return params
        return put(params, memory_kind)

    rl_utils.put_params_on_memory_kind = put_unless_abstract
    try:
        yield
    finally:
        rl_utils.put_params_on_memory_kind = put


def _grpo_learner(preset: Preset, run: RunDir | None, policy, reference, tok, mesh,
                  reward_fns: Sequence[Callable] | None):
    from tunix.rl import rl_cluster as rl
    from tunix.rl.rollout import base_rollout

    cfg = preset.grpo
    training = rl.RLTrainingConfig(
        actor_optimizer=make_optimizer(cfg), eval_every_n_steps=cfg.max_steps + 1,
        max_steps=cfg.max_steps, mini_batch_size=cfg.batch_size,
        train_micro_batch_size=cfg.batch_size, **_io(run, "grpo", cfg))
    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=cfg.max_generation_length, max_prompt_length=cfg.max_prompt_length,
        kv_cache_size=cfg.max_prompt_length + cfg.max_generation_length,
        temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
        eos_tokens=models.stop_token_ids(tok))
    with _abstract_models_stay_put():
        cluster = rl.RLCluster(actor=policy, reference=reference, tokenizer=tok,
                               cluster_config=rl.ClusterConfig(
                                   role_to_mesh={rl.Role.ACTOR: mesh, rl.Role.REFERENCE: mesh,
                                                 rl.Role.ROLLOUT: mesh},
                                   rollout_engine="vanilla", offload_to_cpu=False,
                                   training_config=training, rollout_config=rollout))
    # Tunix's sampler traces the actor's graph as given: with remat on it cannot decode,
    # and it would compute the prefill's logits at every position and each prompt G times
    set_tunix_private(cluster.rollout, "_sampler._transformer_graphdef", models.sampling_graphdef(policy))
    set_tunix_private(cluster.rollout, "_sampler._supports_decode_only_last_token", True)
    share_prefill(tunix_private(cluster.rollout, "_sampler"), policy, cfg.num_generations)
    reseed_rollouts(cluster, cfg.seed)
    learner_cls, algo = grpo_algorithm(preset)
    fns = rewards.from_config(cfg.rewards) if reward_fns is None else list(reward_fns)
    learner = learner_cls(rl_cluster=cluster, reward_fns=fns, algo_config=algo,
                          metric_fns=[grpo_metrics(cluster, cfg, fns)])
    if cfg.length_buckets != ((), ()):
        bucket_lengths(cluster, learner, cfg)
    # the learner's policy loss and the reference's forward, with chunked log-probs; with
    # grpo.share_prompts each prompt runs once for its G answers (needs reasonkit's attention)
    group = cfg.num_generations if cfg.shares_prompts(attention.impl_of(policy)) else 1
    if group > 1:
        share_prompts(learner, group)
    actor = cluster.actor_trainer
    actor.with_loss_fn(_chunked(actor.loss_fn, group), has_aux=True)
    worker, rollout = cluster.inference_worker, cluster.rollout
    worker.get_ref_per_token_logps = _chunked_if_grouped(worker.get_ref_per_token_logps, group)
    # the old policy's forward (num_iterations > 1)
    rollout.get_per_token_logps = _chunked_if_grouped(rollout.get_per_token_logps, group)
    return cluster, learner


class SharedPrefill:
    """A Tunix sampler's prefill that runs once per group of ``group`` equal prompts.

    GRPO's learner repeats each prompt G times before the sampler sees them. When a
    batch's token and position rows are such groups (checked on the host, where the
    sampler keeps them), the prefill traces :func:`reasonkit.models.sampling_graphdef`
    with ``group`` (:mod:`reasonkit.sampling`): each prompt once, its cache and logits
    repeated, every row's first token sampled with its own key as before. Any other
    batch goes to Tunix's own compiled prefill. Two programs, each compiled once.
    """

    def __init__(self, sampler, policy, group: int):
        self.group = group
        self.every_row = tunix_private(sampler, "_compiled_prefill_fn")
        prefill, graphdef = tunix_private(sampler, "_prefill_fn"), models.sampling_graphdef(policy, group)

        def grouped_prefill(params, state, images=None, echo=False):
            # runs when traced only: Tunix's prefill, reading the grouped model's graphdef.
            # A function of its own, so jit's cache never hands one program to the other.
            every_row = tunix_private(sampler, "_transformer_graphdef")
            set_tunix_private(sampler, "_transformer_graphdef", graphdef)
            try:
                return prefill(params, state, images, echo=echo)
            finally:
                set_tunix_private(sampler, "_transformer_graphdef", every_row)

        # jitted as Tunix 0.1.7 jits its own: the sampling state (the KV cache) donated
        self.shared = jax.jit(grouped_prefill, donate_argnums=(1,), static_argnames=("echo",))

    def __call__(self, params, state, images=None, echo: bool = False):
        if images is None and (sampling.grouped(state.token_buffer, self.group)
                               and sampling.grouped(state.positions, self.group)):
            return self.shared(params, state, images, echo=echo)
        return self.every_row(params, state, images, echo=echo)


def share_prefill(sampler, policy, group: int) -> None:
    """Give ``sampler`` a :class:`SharedPrefill` over groups of ``group`` (1: leave it as it is)."""
    if group > 1:
        set_tunix_private(sampler, "_compiled_prefill_fn", SharedPrefill(sampler, policy, group))


# --- stages ----------------------------------------------------------------------------


@dataclasses.dataclass
class StageResult:
    """What a stage run did: steps, whether it finished, where, and the live objects."""

    stage: str
    steps: int
    finished: bool
    started_from: str | None
    seconds: float
    stats: dict[str, Any]
    policy: Any = None
    tokenizer: Any = None
    model_dir: pathlib.Path | None = None

    def summary(self) -> dict[str, Any]:
        return {"stage": self.stage, "steps": self.steps, "finished": self.finished,
                "started_from": self.started_from, "seconds": round(self.seconds, 1), **self.stats}


@dataclasses.dataclass
class _Run:
    """What :func:`_running` gives a trainer: the built stage, the splits, its batch streams.

    After the ``with`` block (training done) ``steps`` and ``policy`` are set, and
    :meth:`finish` turns the run into a :class:`StageResult`.
    """

    preset: Preset
    run: RunDir
    name: str
    deadline: float | None
    t0: float
    splits: data.Splits
    started: str | None
    stage: Stage
    counter: compiles.CompileCounter
    steps: int | None = None
    policy: Any = None

    @property
    def config(self) -> TrainConfig:
        return getattr(self.preset, self.name)

    def batches(self, stream: Iterable[Any], label: str) -> Iterator[Any]:
        """``stream`` until the deadline (:func:`until`), its compilations counted.

        A resumed trainer first reads and discards the batches it already consumed
        (``skip``, its restored step): they are neither timed nor counted as warm-up.
        """
        skip = self.stage.trainer.train_steps
        return self.counter.watch(until(stream, self.deadline, total=self.config.max_steps,
                                        name=label, skip=skip), skip=skip)

    def finish(self, collator) -> StageResult:
        """The stage's result, after the block; marks the stage finished when it ran all its steps."""
        if self.steps is None:
            raise RuntimeError(f"{self.name}: finish() comes after the `with _running(...)` block")
        stats = {"collate": collator.stats.to_dict(),
                 "compiles": log_compiles(self.run, self.name, self.counter, self.steps)}
        done = self.steps >= self.config.max_steps
        result = StageResult(self.name, self.steps, done, self.started, time.time() - self.t0, stats,
                             self.policy, self.stage.tokenizer, self.stage.model_dir)
        if done:
            self.run.mark_finished(self.name, **{k: v for k, v in result.summary().items()
                                                 if k != "stage"})
        else:
            print(f"{self.name}: stopped at step {self.steps}/{self.config.max_steps}; "
                  "run the notebook again to resume")
        return result


@contextlib.contextmanager
def _running(preset: Preset, run: RunDir, name: str, *, deadline: float | None, overwrite: bool,
             reward_fns: Sequence[Callable] | None = None) -> Iterator[_Run]:
    """What every training stage does around Tunix's own lines; the block is those lines.

    Before: refuse a finished stage (or clear it: ``overwrite``), read the splits, find
    the stage it starts from, record its settings (refusing a resume under other ones)
    and build it. Around the block: the stage's mesh, a compile counter, checkpoint saves
    that land on an interrupt, Tunix's metrics listeners detached however training ends.
    After it: the step count and the trained policy, for :meth:`_Run.finish`.
    """
    runs.begin_stage(run, name, overwrite)
    t0 = time.time()
    splits, _ = data.read_splits(run.require("data"))
    started = runs.start_from(run, name)  # None for SFT
    runs.record_settings(run, name, runs.stage_settings(preset, run, name, started))
    stage = build_stage(preset, name, run, started=started, reward_fns=reward_fns)
    trainer = stage.trainer  # GRPO: the RL cluster's actor trainer
    logger = (trainer.metrics_logger if stage.cluster is None
              else tunix_private(stage.cluster, "_rl_metrics_logger"))
    with stage.mesh:
        with compiles.CompileCounter() as counter, saves_land_on_interrupt(trainer.checkpoint_manager), \
                detached_after(logger):
            r = _Run(preset, run, name, deadline, t0, splits, started, stage, counter)
            yield r
        r.steps, r.policy = trainer.train_steps, trainer.model


def train_sft(preset: Preset, run: RunDir, *, deadline: float | None = None,
              overwrite: bool = False) -> StageResult:
    """Supervised fine-tuning with completion-only loss, resuming from the last checkpoint."""
    cfg = preset.sft
    with _running(preset, run, "sft", deadline=deadline, overwrite=overwrite) as r:
        trainer, tok, mesh = r.stage.trainer, r.stage.tokenizer, r.stage.mesh
        train, collator = sft_batches(sft_examples(r.splits.sft, tok), preset, tok)
        held_out = collate.batches(sft_examples(r.splits.eval, tok), cfg.batch_size, collate.SFTCollator(
            layout=collate.StaticLayout(max_length=cfg.max_target_length), pad_id=tok.pad_id(),
            bos_id=tok.bos_id()))
        # global_batches: on several processes, each batch one global array
        trainer.train(r.batches(mesh_lib.global_batches(train, mesh), "SFT"),
                      list(mesh_lib.global_batches(take(held_out, 2), mesh)))
    return r.finish(collator)


def train_dpo(preset: Preset, run: RunDir, *, deadline: float | None = None,
              overwrite: bool = False) -> StageResult:
    """DPO (or ORPO) from the SFT adapters; the reference is the SFT policy, frozen (no ORPO)."""
    with _running(preset, run, "dpo", deadline=deadline, overwrite=overwrite) as r:
        tok = r.stage.tokenizer
        train, collator = dpo_batches(dpo_examples(r.splits.dpo, tok), preset, tok)
        r.stage.trainer.train(r.batches(mesh_lib.global_batches(train, r.stage.mesh),
                                        preset.dpo.algorithm))
    return r.finish(collator)


def grpo_algorithm(preset: Preset):
    """``(learner class, algorithm config)`` for the preset's policy-loss variant."""
    from tunix.rl.grpo import dapo_learner, drgrpo_learner, grpo_learner

    cfg = preset.grpo
    common = dict(num_generations=cfg.num_generations, num_iterations=cfg.num_iterations,
                  epsilon=cfg.epsilon)
    if cfg.loss == "dapo":  # no KL term, clip-higher, token-mean loss
        return dapo_learner.DAPOLearner, dapo_learner.DAPOConfig(
            **common, overlong_buffer={"enable": False})
    if cfg.loss == "dr-grpo":  # no length / std normalisation
        return drgrpo_learner.DrGRPOLearner, drgrpo_learner.DrGRPOConfig(
            **common, beta=cfg.beta, kl_loss_mode=cfg.kl_loss_mode)
    return grpo_learner.GRPOLearner, grpo_learner.GRPOConfig(
        **common, beta=cfg.beta, kl_loss_mode=cfg.kl_loss_mode, loss_algo=cfg.loss)


def reseed_rollouts(cluster, seed: int) -> None:
    """Give every rollout its own sampling key, a function of ``(seed, step, call)``.

    Tunix 0.1.7's sampler falls back to ``PRNGKey(0)`` when ``RolloutConfig.seed`` is
    unset, so every step would draw the same noise for row ``i`` at decoding step ``t``:
    each group would explore the same few deviations forever. Keys follow the learner's
    global step, which Tunix restores on resume, so a resumed run samples what an
    uninterrupted one would.
    """
    generate, calls = cluster.rollout.generate, {}

    def reseeded(prompts, rollout_config, **kwargs):
        step = cluster.global_steps
        calls[step] = calls.get(step, -1) + 1
        key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), step), calls[step])
        return generate(prompts, dataclasses.replace(rollout_config, seed=key), **kwargs)

    cluster.rollout.generate = reseeded


def fit_bucket(length: int, buckets: Sequence[int], maximum: int) -> int:
    """The smallest of ``buckets`` that holds ``length``, or ``maximum`` when none below it does.

    ``maximum`` is always the last bucket: buckets at or above it are never used, and a
    ``length`` past it gets ``maximum`` (what happens without buckets).

    >>> [fit_bucket(n, (48, 80), 96) for n in (10, 48, 49, 80, 81, 96, 200)]
    [48, 48, 80, 80, 96, 96, 96]
    >>> fit_bucket(30, (), 64), fit_bucket(30, (64, 128), 64)
    (64, 64)
    """
    return min((b for b in buckets if length <= b < maximum), default=maximum)


def used_width(ids: Any, pad_id: int) -> int:
    """Columns of right-padded ``ids`` [B, C] up to the last non-pad token of any row.

    >>> used_width(np.array([[5, 6, 0, 0, 0],
    ...                      [7, 0, 0, 0, 0]]), pad_id=0)
    2
    """
    real = np.flatnonzero((np.asarray(ids) != pad_id).any(axis=0))  # columns with a token
    return int(real[-1]) + 1 if real.size else 0


def _cut(x: Any, width: int) -> Any:
    """``x[:, :width]`` through numpy: no XLA program to compile for each width."""
    return None if x is None else jnp.asarray(np.asarray(x)[:, :width])


def cuts_answers(algo_config) -> bool:
    """Whether a GRPO variant's loss is the same with its answers cut to fewer padded columns.

    Each of Tunix's loss aggregations masks the padding out, except
    "sequence-mean-token-scale" (dr-grpo's), which divides by the padded width.
    """
    return algo_config.loss_agg_mode != "sequence-mean-token-scale"


def bucket_lengths(cluster, learner, cfg: GRPOConfig) -> None:
    """Run each GRPO step at the smallest (prompt, answer) shape of ``cfg.length_buckets`` for it.

    Tunix 0.1.7's sampler left-pads prompts to the ``max_prompt_length`` it is given, and
    its GRPO learner right-pads every answer to ``max_tokens_to_generate`` before the
    reference forward and the update: on the tiny preset 96 + 64 positions, ~86 of them real.

    - Prompts: the sampler gets the step's prompt bucket as ``max_prompt_length``. Positions
      and attention come from the padding mask, so the model computes the same numbers and
      the answers have the same distribution. Not the same draws as at the max: Tunix's
      sampler folds the absolute decoding position into each step's key, which is one
      reason the buckets are recorded in the run's settings.
    - Answers: sampled to the max as before, then cut to the smallest answer bucket that
      holds the longest answer, for the reference's (and the old policy's, ``num_iterations
      > 1``) forward and in the ``TrainExample`` the update trains on. Every column cut is
      padding in every row: masked out of each loss Tunix aggregates, except
      "sequence-mean-token-scale" (dr-grpo), which divides by the padded width, so dr-grpo
      keeps its answers at the max.

    The learner's ``_generate_and_compute_advantage`` (where the step's rollouts are made
    and padded) is wrapped rather than copied: the wrapper only picks the buckets, cuts the
    finished example and reports the shape to the compile counters
    (:func:`reasonkit.compiles.step_shape`). Tunix calls the reference and old-policy
    forwards with keyword arguments; their wrappers cut only inside a step.
    """
    prompt_buckets, answer_buckets = cfg.length_buckets
    cut_answers = cuts_answers(learner.algo_config)
    pad = cluster.rollout.pad_id()
    step: dict[str, int] = {}  # the shape of the step being made: set only inside it

    def answer_width(ids) -> int:
        if not cut_answers:
            return cfg.max_generation_length
        return fit_bucket(used_width(ids, pad), answer_buckets, cfg.max_generation_length)

    generate = cluster.rollout.generate

    def padded_to_bucket(prompts, rollout_config, **kwargs):
        if "prompt" in step:
            rollout_config = dataclasses.replace(rollout_config, max_prompt_length=step["prompt"])
        return generate(prompts, rollout_config, **kwargs)

    cluster.rollout.generate = padded_to_bucket

    def on_cut_answers(forward: Callable) -> Callable:
        @functools.wraps(forward)
        def cut(*, completion_tokens, **kwargs):
            if "prompt" in step:  # [B, C] -> [B, width]: log-probs come back [B, width]
                completion_tokens = _cut(completion_tokens, answer_width(completion_tokens))
            return forward(completion_tokens=completion_tokens, **kwargs)
        return cut

    cluster.get_ref_per_token_logps = on_cut_answers(cluster.get_ref_per_token_logps)
    cluster.get_old_per_token_logps = on_cut_answers(cluster.get_old_per_token_logps)
    make_example = tunix_private(learner, "_generate_and_compute_advantage")

    def bucketed(training_input, *args, **kwargs):
        tokenize = tunix_private(cluster.rollout, "_sampler").tokenize  # as the sampler counts
        longest = max(len(tokenize(str(p))) for p in training_input["prompts"])
        step["prompt"] = fit_bucket(longest, prompt_buckets, cfg.max_prompt_length)
        try:
            example = make_example(training_input, *args, **kwargs)
        finally:
            prompt = step.pop("prompt")
        width = answer_width(example.completion_ids)
        example = example.replace(completion_ids=_cut(example.completion_ids, width),
                                  completion_mask=_cut(example.completion_mask, width))
        for name in ("ref_per_token_logps", "old_per_token_logps"):
            logps = getattr(example, name)
            if logps is not None and logps.shape[-1] != width:
                raise RuntimeError(f"GRPO length buckets: {name} has {logps.shape[-1]} columns, "
                                   f"the answers {width}: Tunix no longer computes it through "
                                   "RLCluster.get_ref/old_per_token_logps as 0.1.7 does")
        compiles.step_shape(("grpo", prompt, width))
        return example

    set_tunix_private(learner, "_generate_and_compute_advantage", bucketed)


def grpo_metrics(cluster, cfg: GRPOConfig, reward_fns: Sequence[Callable]) -> Callable:
    """A metric function for Tunix's GRPO learner (its ``metric_fns``): what each step's
    rewards can teach, and now and then one of the answers they scored.

    Every step it logs ``rewards/frac_zero_std`` (``rewards/train/frac_zero_std`` in
    metrics.jsonl): the fraction of prompts whose G answers all got the same reward
    (:func:`reasonkit.rewards.frac_zero_std`), which move nothing. Every
    ``cfg.show_every`` steps (0: never) it prints the first answer of the step, the end of
    its prompt and what each reward gave it.
    """
    def metrics(prompts, completions, advantages, **columns) -> dict[str, tuple[float, Callable]]:
        summed = np.asarray(columns.pop("rewards"), dtype=float)  # [B * G]: each answer's r_i
        step = cluster.global_steps  # the step these rollouts train, as the metrics number it
        if cfg.show_every and step % cfg.show_every == 0 and is_writer():
            print(show_answer(step, prompts, completions, summed, columns, reward_fns,
                              cfg.num_generations))
        return {"rewards/frac_zero_std": (rewards.frac_zero_std(summed, cfg.num_generations), np.mean)}

    return metrics


def show_answer(step: int, prompts: Sequence[str], completions: Sequence[str], summed: np.ndarray,
                columns: dict[str, Any], reward_fns: Sequence[Callable], num_generations: int,
                index: int = 0, tail: int = 100) -> str:
    """A few lines on answer ``index`` of a GRPO step: the end of its prompt, the answer, each
    reward's score of it (scored again, alone) and its group's summed rewards."""
    one = dict(prompts=[prompts[index]], completions=[completions[index]],
               **{k: np.asarray(v)[index:index + 1] for k, v in columns.items()})
    scores = []
    for fn in reward_fns:
        try:
            scores.append(f"{fn.__name__} {fn(**one)[0]:.2f}")
        except Exception as e:  # noqa: BLE001 - a printout must never stop training
            scores.append(f"{fn.__name__} ? ({type(e).__name__})")
    question = str(prompts[index]).rsplit(template.END_OF_TURN, 1)[0]
    first = index - index % num_generations
    group = " ".join(f"{r:g}" for r in summed[first:first + num_generations])
    return (f"--- GRPO step {step}: one sampled answer of {len(completions)}\n"
            f"prompt ends: ...{question[-tail:]!r}\n"
            f"answer: {completions[index]!r}\n"
            f"rewards: {', '.join(scores)}; sum {summed[index]:g} (its group of {num_generations}: {group})")


def train_grpo(preset: Preset, run: RunDir, *, deadline: float | None = None,
               overwrite: bool = False, reward_fns: Sequence[Callable] | None = None) -> StageResult:
    """GRPO from the DPO (or SFT) adapters, KL-regularised towards where it started.

    The reward is ``preset.grpo.rewards``; ``reward_fns`` (a list of reward functions)
    replaces it, e.g. for a reward of your own (the settings still record the preset's).
    """
    # Resolved before anything starts: an unknown reward name is refused with the stage untouched.
    fns = rewards.from_config(preset.grpo.rewards) if reward_fns is None else list(reward_fns)
    with _running(preset, run, "grpo", deadline=deadline, overwrite=overwrite, reward_fns=fns) as r:
        cluster, learner, tok = r.stage.cluster, r.stage.learner, r.stage.tokenizer
        train, collator = grpo_batches(grpo_records(r.splits.grpo), preset, tok)
        stream = r.batches(train, "GRPO")
        first = next(stream, None)
        if first is None:  # out of time before the first batch: Tunix's learner would
            cluster.close()  # raise StopIteration; close as it does (saves the step)
        else:
            learner.train(itertools.chain([first], stream))
    return r.finish(collator)


def export(result: StageResult, preset: Preset, run: RunDir, *,
           merged: bool = True) -> dict[str, pathlib.Path]:
    """Export a stage for use outside JAX: ``{"adapter": <stage>/adapter, "merged": <stage>/merged}``.

    ``adapter`` holds the LoRA adapters in PEFT's format, exact (no rounding of a bf16
    merge) and a twentieth of the model (100 MB for gemma3-1b at rank 64 in bf16);
    ``merged`` the base with the adapters merged in, a complete Hugging Face directory
    (2 GB for gemma3-1b), left out with ``merged=False``. 05_grpo exports the final stage
    only (Kaggle keeps 20 GB of output); pass another stage's result to export that one.
    """
    name = f"reasonkit run {run.name!r}, stage {result.stage}"
    out = {"adapter": run.stage(result.stage) / "adapter"} | (
        {"merged": run.stage(result.stage) / "merged"} if merged else {})
    # Several processes: each holds shards of the model; all gather it whole, process 0 writes.
    policy = mesh_lib.host_copy(result.policy) if jax.process_count() > 1 else result.policy
    if is_writer():
        models.export_adapter(policy, preset.model, preset.lora, out["adapter"], result.model_dir, name=name)
        if merged:
            models.export_merged(policy, preset.model, preset.lora, out["merged"], result.model_dir,
                                 name=name)
    sync(f"{run.name}/{result.stage} exported")
    return out


def export_once(result: StageResult, preset: Preset, run: RunDir, *,
                again: bool = False) -> dict[str, pathlib.Path]:
    """:func:`export`, unless the stage's adapter and merged model are already there (then
    says so and returns them); ``again=True`` exports anew."""
    out = {kind: run.stage(result.stage) / kind for kind in ("adapter", "merged")}
    done = (out["adapter"] / "adapter_model.safetensors").is_file() and (
        out["merged"] / "model.safetensors").is_file()

    def load() -> dict[str, pathlib.Path]:
        print("already exported:")
        return out

    return runs.load_or_build(run, result.stage, load, lambda: export(result, preset, run),
                              rebuild=again, done=done)


def train_or_load(preset: Preset, run: RunDir, stage: str, *, retrain: bool = False,
                  deadline: float | None = None) -> StageResult:
    """Train ``stage`` (resuming if it was interrupted), or load it if it already finished.

    What a notebook cell wants: re-running a finished notebook loads its adapters instead
    of training again or failing; ``retrain=True`` trains from scratch.
    """
    trainers = {"sft": train_sft, "dpo": train_dpo, "grpo": train_grpo}
    if stage not in trainers:
        raise ValueError(f"unknown training stage {stage!r}; stages: {list(trainers)}")

    def load() -> StageResult:
        info = run.finished_info(stage)
        print(f"{stage} of run {run.name!r} already finished ({info.get('steps')} steps, "
              f"{info.get('finished_at')}): loading its adapters instead of training "
              "(retrain=True trains again)")
        changes = runs.settings_changes(run, stage, runs.stage_settings(preset, run, stage,
                                                                        info.get("started_from")))
        if changes:
            warnings.warn(f"{stage} of run {run.name!r} was trained with other settings than "
                          f"now ({'; '.join(changes)}): the adapters loaded are the old "
                          "run's. retrain=True, or another run name, trains with these.",
                          stacklevel=4)
        _, policy, tok, model_dir = load_policy(preset, run, stage, None)
        return StageResult(stage, info.get("steps", 0), True, info.get("started_from"), 0.0, {},
                           policy, tok, model_dir)

    def build() -> StageResult:
        result = trainers[stage](preset, run, deadline=deadline, overwrite=retrain)
        print(result.summary())
        return result

    return runs.load_or_build(run, stage, load, build, rebuild=retrain)
