"""Fixed-shape, numeric-only batches for SFT, DPO and GRPO, with explicit truncation.

XLA compiles one program per input shape, so every batch here has the same shape:
rows are padded to the length a layout picks, and :func:`batches` fixes the batch
dimension. Rows that do not fit are cut or dropped by a named policy and counted in a
:class:`CollateStats`; an answer is never cut. Only numeric arrays go to SFT and DPO
(a string reaching a jitted function fails deep in JAX with ``_str_abstractify``).

Examples arrive tokenized (lists of ints); :func:`tokenize` turns texts into them::

    collator = SFTCollator(layout=StaticLayout(max_length=256), pad_id=tokenizer.pad_id())
    train_batches = list(batches(pairs, 8, collator))   # every batch: [8, 256]
    print(collator.stats)                                # kept, dropped, padding efficiency

A collator has two steps: ``fit`` applies the policy to one example (``None`` means
dropped) and ``collate`` pads fitted rows into arrays. :func:`batches` runs ``fit``
before grouping, so a dropped example never leaves a hole in a batch. Calling a
collator on a list does both at once; it refuses an empty list.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Mapping, Sequence, Union

import numpy as np

from reasonkit import masks

__all__ = ["tokenize", "assert_numeric", "CollateStats", "StaticLayout",
           "BucketLayout", "PackedLayout", "bucket_lengths", "layout_for", "length_sorted",
           "SFTCollator", "DPOCollator", "GRPOCollator", "batches"]

_POLICIES = ("drop", "truncate_prompt_left")
_REMAINDERS = ("drop", "pad")


def _fail(cls: str, field: str, value: Any, why: str) -> None:
    raise ValueError(f"{cls}.{field}={value!r}: {why}")


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _token_ids(seq: Any, where: str) -> list[int]:
    """Validate one token sequence and return it as a list of Python ints."""
    if isinstance(seq, (str, bytes)):
        raise TypeError(f"{where} is a {type(seq).__name__}; expected token ids "
                        "(a list of ints). Tokenize text first, e.g. with tokenize().")
    if isinstance(seq, np.ndarray):
        if seq.ndim != 1 or seq.dtype.kind not in "iu":
            raise TypeError(f"{where} must be a 1-D integer array, got shape {seq.shape} "
                            f"and dtype {seq.dtype}")
        ids = seq.tolist()
    else:
        try:
            ids = list(seq)
        except TypeError:
            raise TypeError(f"{where} must be a sequence of int token ids, "
                            f"got {type(seq).__name__}") from None
        for k, t in enumerate(ids):
            if not _is_int(t):
                raise TypeError(f"{where}[{k}]={t!r} is a {type(t).__name__}; "
                                "token ids must be ints")
        ids = [int(t) for t in ids]
    for k, t in enumerate(ids):
        if t < 0:
            raise ValueError(f"{where}[{k}]={t}: token ids must be >= 0")
    return ids


def tokenize(texts: Sequence[str], tokenizer: Any) -> list[list[int]]:
    """Token ids of each text, from any object with ``encode(str) -> list[int]``.

    >>> class Chars:  # a stand-in tokenizer: one id per character
    ...     def encode(self, text):
    ...         return [ord(c) for c in text]
    >>> tokenize(["hi", "yo!"], Chars())
    [[104, 105], [121, 111, 33]]
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, got a single str; wrap it: [text]")
    out = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is a {type(text).__name__}, expected str")
        out.append(_token_ids(tokenizer.encode(text), f"tokenizer.encode(texts[{i}])"))
    return out


def assert_numeric(batch: Mapping[str, Any]) -> None:
    """Raise TypeError naming the first value that is not a numeric numpy array.

    >>> assert_numeric({"input_tokens": np.zeros((2, 4), np.int32)})
    >>> assert_numeric({"input_tokens": np.zeros((2, 4), np.int32), "text": np.array(["a", "b"])})
    Traceback (most recent call last):
    ...
    TypeError: batch['text'] has dtype <U1; only numeric arrays (bool, int, float) may ...
    """
    for key, value in batch.items():
        if not isinstance(value, np.ndarray):
            raise TypeError(f"batch[{key!r}] is a {type(value).__name__}; only numeric numpy "
                            "arrays may reach a jitted step (drop or encode this column)")
        if value.dtype.kind not in "biuf":
            raise TypeError(f"batch[{key!r}] has dtype {value.dtype}; only numeric arrays "
                            "(bool, int, float) may reach a jitted step: strings fail inside "
                            "JAX with _str_abstractify (drop or encode this column)")


@dataclasses.dataclass
class CollateStats:
    """What collation did to the data: rows kept, dropped and cut, and padding waste.

    ``kept + dropped_too_long + dropped_remainder`` is the number of examples seen.
    ``padding_efficiency`` is real tokens / computed tokens (0.0 before any batch).
    """

    kept: int = 0  # rows placed in a batch
    dropped_too_long: int = 0  # examples that did not fit under the policy
    dropped_remainder: int = 0  # fitted rows of a last partial batch left out
    prompt_truncated: int = 0  # fitted rows whose prompt was cut from the left
    real_tokens: int = 0  # non-padding tokens in built batches
    computed_tokens: int = 0  # all token slots in built batches (B * S summed)

    @property
    def padding_efficiency(self) -> float:
        return self.real_tokens / self.computed_tokens if self.computed_tokens else 0.0

    def to_dict(self) -> dict[str, int | float]:
        return {**dataclasses.asdict(self), "padding_efficiency": self.padding_efficiency}

    def __str__(self) -> str:
        return (f"kept {self.kept}, dropped {self.dropped_too_long} too long and "
                f"{self.dropped_remainder} in a partial last batch, "
                f"{self.prompt_truncated} prompts truncated, "
                f"padding efficiency {self.padding_efficiency:.1%}")


# ----------------------------------------------------------------------------- layouts
# A layout answers two questions: how long may a row be (capacity), and how long is a
# batch whose longest row has n tokens (length_for). Collators ask nothing else, so a
# later PackedLayout can slot in without callers changing.


@dataclasses.dataclass(frozen=True, kw_only=True)
class StaticLayout:
    """Every batch padded to ``max_length``: one shape, one XLA compilation.

    >>> StaticLayout(max_length=8).length_for(3)
    8
    """

    max_length: int

    def __post_init__(self):
        if not _is_int(self.max_length) or self.max_length < 1:
            _fail("StaticLayout", "max_length", self.max_length, "must be an int >= 1")

    @property
    def capacity(self) -> int:
        return self.max_length

    def length_for(self, longest: int) -> int:
        return self.max_length


@dataclasses.dataclass(frozen=True, kw_only=True)
class BucketLayout:
    """Each batch padded to the smallest bucket that holds its longest row.

    One compilation per bucket instead of one in total; less padding on short batches.

    >>> layout = BucketLayout(lengths=(64, 128, 256))
    >>> layout.length_for(70), layout.capacity
    (128, 256)
    """

    lengths: tuple[int, ...]

    def __post_init__(self):
        lengths = tuple(self.lengths)
        if not lengths or not all(_is_int(n) and n >= 1 for n in lengths):
            _fail("BucketLayout", "lengths", self.lengths, "must be one or more ints >= 1")
        if any(a >= b for a, b in zip(lengths, lengths[1:], strict=False)):
            _fail("BucketLayout", "lengths", self.lengths, "must be strictly increasing")
        object.__setattr__(self, "lengths", lengths)

    @property
    def capacity(self) -> int:
        return self.lengths[-1]

    def length_for(self, longest: int) -> int:
        for n in self.lengths:
            if n >= longest:
                return n
        raise ValueError(f"a row of {longest} tokens exceeds the largest bucket "
                         f"{self.capacity}; rows must go through fit() first")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PackedLayout:
    """SFT only: several examples per row, each row ``max_length`` long (one shape).

    Rows are filled best-fit-decreasing over a ``window`` of fitted examples (a
    deterministic function of the stream), so almost no slot is padding. An example is
    never split across rows. Each example becomes a segment: the collator adds
    ``segment_ids`` (1, 2, ... per row; 0 on padding) from which the model input
    function builds block-causal attention and positions that restart per segment.

    >>> PackedLayout(max_length=8).pack([5, 3, 4, 2, 6])  # indices: rows of 6+2, 5+3, 4
    [[4, 3], [0, 1], [2]]
    """

    max_length: int
    window: int = 256  # fitted examples considered together when filling rows

    def __post_init__(self):
        if not _is_int(self.max_length) or self.max_length < 1:
            _fail("PackedLayout", "max_length", self.max_length, "must be an int >= 1")
        if not _is_int(self.window) or self.window < 1:
            _fail("PackedLayout", "window", self.window, "must be an int >= 1")

    @property
    def capacity(self) -> int:
        return self.max_length

    def length_for(self, longest: int) -> int:
        return self.max_length

    def pack(self, lengths: Sequence[int]) -> list[list[int]]:
        """Best-fit decreasing: indices into ``lengths``, grouped into rows that fit.

        Longest first, each into the row with the least room that still holds it (ties:
        the earliest row). Rows come out in the order they were opened; the indices in a
        row keep the order they were placed in.
        """
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable
        rows: list[list[int]] = []
        room: list[int] = []
        for i in order:
            n = lengths[i]
            if n > self.max_length:
                raise ValueError(f"an example of {n} tokens exceeds max_length "
                                 f"{self.max_length}; examples must go through fit() first")
            best = min((r for r in range(len(rows)) if room[r] >= n),
                       key=lambda r: room[r], default=None)
            if best is None:
                rows.append([i])
                room.append(self.max_length - n)
            else:
                rows[best].append(i)
                room[best] -= n
        return rows


def bucket_lengths(max_length: int, n: int, multiple: int = 8) -> tuple[int, ...]:
    """``n`` bucket lengths: ``max_length`` halved ``n - 1`` times, rounded up to ``multiple``.

    >>> bucket_lengths(512, 3), bucket_lengths(96, 3), bucket_lengths(100, 1)
    ((128, 256, 512), (24, 48, 96), (100,))
    """
    if not _is_int(n) or n < 1:
        raise ValueError(f"n={n!r} must be an int >= 1")
    lengths = {max_length}
    for k in range(1, n):
        lengths.add(min(max_length, max(multiple, -(-(max_length >> k) // multiple) * multiple)))
    return tuple(sorted(lengths))


def layout_for(max_length: int, buckets: int = 1) -> StaticLayout | BucketLayout:
    """StaticLayout for ``buckets=1``, else a BucketLayout of :func:`bucket_lengths`.

    >>> layout_for(96), layout_for(96, 2)
    (StaticLayout(max_length=96), BucketLayout(lengths=(48, 96)))
    """
    if buckets == 1:
        return StaticLayout(max_length=max_length)
    return BucketLayout(lengths=bucket_lengths(max_length, buckets))


def length_sorted(items: Iterable[Any], window: int, length: Any) -> Iterator[Any]:
    """``items`` sorted by ``length(item)`` within consecutive windows (stable, deterministic).

    With buckets, a batch pads to its longest row: sorting a window of a few batches
    first puts rows of similar length together, so most batches land in a small bucket.

    >>> list(length_sorted(["ccc", "a", "bb", "dddd", "e"], window=3, length=len))
    ['a', 'bb', 'ccc', 'e', 'dddd']
    """
    if not _is_int(window) or window < 1:
        raise ValueError(f"window={window!r} must be an int >= 1")
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == window:
            yield from sorted(chunk, key=length)
            chunk = []
    yield from sorted(chunk, key=length)


_Layout = Union[StaticLayout, BucketLayout, PackedLayout]
_LAYOUTS = (StaticLayout, BucketLayout, PackedLayout)


def _check_common(obj: Any, layouts: dict[str, Any]) -> None:
    cls = type(obj).__name__
    for name, layout in layouts.items():
        if not isinstance(layout, _LAYOUTS):
            _fail(cls, name, layout, "must be a StaticLayout, BucketLayout or PackedLayout")
        if isinstance(layout, PackedLayout) and not isinstance(obj, SFTCollator):
            _fail(cls, name, layout, "PackedLayout is for SFT only; use StaticLayout or "
                  "BucketLayout (a packed prompt/response pair has no single prompt end)")
    if not _is_int(obj.pad_id) or obj.pad_id < 0:
        _fail(cls, "pad_id", obj.pad_id, "must be an int >= 0")
    if obj.policy not in _POLICIES:
        _fail(cls, "policy", obj.policy, f"must be one of {_POLICIES}")
    if not _is_int(obj.min_prompt_tokens) or obj.min_prompt_tokens < 0:
        _fail(cls, "min_prompt_tokens", obj.min_prompt_tokens, "must be an int >= 0")


def _check_batch_size(rows: Sequence[Any], batch_size: int | None) -> int:
    if batch_size is None:
        return len(rows)
    if not _is_int(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an int >= 1")
    if len(rows) > batch_size:
        raise ValueError(f"{len(rows)} rows do not fit in batch_size={batch_size}")
    return batch_size


def _unpack(example: Any, n: int, names: str, where: str) -> tuple:
    if isinstance(example, (str, bytes, Mapping)) or not isinstance(example, Sequence) \
            or len(example) != n:
        raise TypeError(f"{where} must be a ({names}) tuple of {n} token lists, "
                        f"got {type(example).__name__}")
    return tuple(example)


def _fit_and_collate(collator: Any, examples: Iterable[Any], batch_size: int | None,
                     expected: str) -> dict[str, np.ndarray]:
    """What calling a collator does: ``fit`` each example, then ``collate`` the kept rows.

    No examples at all is refused: it is a caller's mistake (an empty split, a spent
    iterator), and the 0-row batch it used to give is a shape no step was compiled for.
    Examples that were all dropped are a different case: they are counted in the stats
    and give the usual batch (0 rows, or ``batch_size`` fully-masked rows).
    """
    cls = type(collator).__name__
    if isinstance(examples, (str, bytes, Mapping)) or not isinstance(examples, Iterable):
        raise TypeError(f"{cls}(examples=...) got a {type(examples).__name__}; "
                        f"expected a list of {expected}")
    rows = [collator.fit(ex, where=f"example {i}") for i, ex in enumerate(examples)]
    if not rows:
        raise ValueError(f"{cls} was called with no examples (examples={examples!r:.40}); "
                         f"expected a non-empty list of {expected}")
    return collator.collate([r for r in rows if r is not None], batch_size=batch_size)


# ----------------------------------------------------------------------------- SFT


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class SFTCollator:
    """(prompt_ids, completion_ids) pairs -> Tunix PeftTrainer batches, right padded.

    ``input_mask`` is the completion-only loss mask: False on the prompt and on padding.
    (PeftTrainer scores token t where ``input_mask[:, 1:]`` is True; build the attention
    mask and positions from ``masks.padding_mask(input_tokens, pad_id)``, not from it.)

    >>> collator = SFTCollator(layout=StaticLayout(max_length=6), pad_id=0)
    >>> batch = collator([([5, 6], [7, 8, 1]),
    ...                   ([9, 5, 6, 4], [7, 1])])
    >>> batch["input_tokens"]
    array([[5, 6, 7, 8, 1, 0],
           [9, 5, 6, 4, 7, 1]], dtype=int32)
    >>> batch["input_mask"].astype(int)
    array([[0, 0, 1, 1, 1, 0],
           [0, 0, 0, 0, 1, 1]])

    Policies: ``"drop"`` (default) drops a pair that does not fit.
    ``"truncate_prompt_left"`` cuts the prompt from the left; it drops the pair only if
    the completion plus ``min_prompt_tokens`` (and ``bos_id``) do not fit:

    >>> cut = SFTCollator(layout=StaticLayout(max_length=4), pad_id=0,
    ...                   policy="truncate_prompt_left")
    >>> cut([([5, 6, 9], [7, 8, 1]),     # prompt cut to [9]
    ...      ([5], [7, 8, 9, 1])])["input_tokens"]  # 1 + 4 tokens: dropped
    array([[9, 7, 8, 1]], dtype=int32)
    >>> cut.stats.prompt_truncated, cut.stats.dropped_too_long
    (1, 1)
    """

    layout: _Layout
    pad_id: int
    bos_id: int | None = None  # prepended to every row when given; never cut
    policy: str = "drop"
    min_prompt_tokens: int = 1
    stats: CollateStats = dataclasses.field(default_factory=CollateStats)

    def __post_init__(self):
        _check_common(self, {"layout": self.layout})
        if self.bos_id is not None and (not _is_int(self.bos_id) or self.bos_id < 0):
            _fail("SFTCollator", "bos_id", self.bos_id, "must be None or an int >= 0")
        if self.layout.capacity < 2:
            _fail("SFTCollator", "layout", self.layout,
                  "max_length must be >= 2 (one context token and one target)")
        need = self._n_bos + self.min_prompt_tokens + 1
        if need > self.layout.capacity:
            _fail("SFTCollator", "min_prompt_tokens", self.min_prompt_tokens,
                  f"bos + min_prompt_tokens + 1 completion token = {need} exceeds "
                  f"max_length {self.layout.capacity}")

    @property
    def _n_bos(self) -> int:
        return 0 if self.bos_id is None else 1

    def fit(self, example: Any, *, where: str = "example") -> tuple[list[int], int] | None:
        """One pair -> (row tokens, prompt length incl. bos), or None if dropped."""
        prompt, completion = _unpack(example, 2, "prompt_ids, completion_ids", where)
        prompt = _token_ids(prompt, f"{where}: prompt_ids")
        completion = _token_ids(completion, f"{where}: completion_ids")
        if not completion:
            raise ValueError(f"{where}: completion_ids is empty; there is nothing to learn")
        room = self.layout.capacity - self._n_bos - len(completion)  # tokens left for prompt
        if len(prompt) > room:
            if self.policy == "drop" or room < self.min_prompt_tokens:
                self.stats.dropped_too_long += 1
                return None
            prompt = prompt[len(prompt) - room:]
            self.stats.prompt_truncated += 1
        bos = [] if self.bos_id is None else [self.bos_id]
        return bos + prompt + completion, self._n_bos + len(prompt)

    def collate(self, rows: Sequence[tuple[list[int], int]], *,
                batch_size: int | None = None) -> dict[str, np.ndarray]:
        """Rows from ``fit`` -> right-padded arrays; rows short of ``batch_size`` are masked.

        Under a :class:`PackedLayout` the rows are packed first (see :meth:`collate_packed`).
        """
        if isinstance(self.layout, PackedLayout):
            packs = [[rows[i] for i in pack]
                     for pack in self.layout.pack([len(t) for t, _ in rows])]
            return self.collate_packed(packs, batch_size=batch_size)
        b = _check_batch_size(rows, batch_size)
        s = self.layout.length_for(max((len(t) for t, _ in rows), default=1))
        tokens = np.full((b, s), self.pad_id, dtype=np.int32)  # [B, S]
        lengths = np.zeros(b, dtype=np.int32)  # [B]
        prompt_lengths = np.zeros(b, dtype=np.int32)  # [B]
        for i, (row, prompt_length) in enumerate(rows):
            tokens[i, :len(row)] = row
            lengths[i], prompt_lengths[i] = len(row), prompt_length
        real = np.arange(s)[None, :] < lengths[:, None]  # [B, S]
        batch = {"input_tokens": tokens,
                 "input_mask": masks.completion_mask(real, prompt_lengths)}  # [B, S]
        assert_numeric(batch)
        self.stats.kept += len(rows)
        self.stats.real_tokens += int(lengths.sum())
        self.stats.computed_tokens += b * s
        return batch

    def collate_packed(self, packs: Sequence[Sequence[tuple[list[int], int]]], *,
                       batch_size: int | None = None) -> dict[str, np.ndarray]:
        """Packs (lists of rows from ``fit``) -> one row each, with ``segment_ids``.

        ``input_mask`` is each segment's completion mask, and False on every segment's
        first token: PeftTrainer scores ``input_tokens[:, 1:]`` from the token before,
        and the first token of a segment would be predicted from the previous example.
        Segments are numbered 1, 2, ... in each row; 0 marks padding.

        >>> collator = SFTCollator(layout=PackedLayout(max_length=8), pad_id=0)
        >>> batch = collator.collate_packed([[([5, 6, 7, 1], 2), ([5, 8, 1], 1)],
        ...                                  [([9, 4, 1], 1)]])
        >>> for key in ("input_tokens", "segment_ids", "input_mask"):
        ...     print(f"{key:>12}", batch[key].astype(int).tolist())
        input_tokens [[5, 6, 7, 1, 5, 8, 1, 0], [9, 4, 1, 0, 0, 0, 0, 0]]
         segment_ids [[1, 1, 1, 1, 2, 2, 2, 0], [1, 1, 1, 0, 0, 0, 0, 0]]
          input_mask [[0, 0, 1, 1, 0, 1, 1, 0], [0, 1, 1, 0, 0, 0, 0, 0]]
        """
        if not isinstance(self.layout, PackedLayout):
            raise TypeError(f"collate_packed needs a PackedLayout, got {self.layout!r}")
        b = _check_batch_size(packs, batch_size)
        s = self.layout.max_length
        tokens = np.full((b, s), self.pad_id, dtype=np.int32)  # [B, S]
        segment_ids = np.zeros((b, s), dtype=np.int32)  # [B, S]
        loss = np.zeros((b, s), dtype=bool)  # [B, S]
        kept = real = 0
        for i, pack in enumerate(packs):
            start = 0
            for k, (row, prompt_length) in enumerate(pack, start=1):
                end = start + len(row)
                if end > s:
                    raise ValueError(f"pack {i} holds {sum(len(r) for r, _ in pack)} tokens, "
                                     f"more than max_length {s}")
                tokens[i, start:end] = row
                segment_ids[i, start:end] = k
                loss[i, start + max(prompt_length, 1):end] = True  # never a segment's first
                start = end
            kept, real = kept + len(pack), real + start
        batch = {"input_tokens": tokens, "input_mask": loss, "segment_ids": segment_ids}
        assert_numeric(batch)
        self.stats.kept += kept
        self.stats.real_tokens += real
        self.stats.computed_tokens += b * s
        return batch

    def __call__(self, examples: Iterable[Any], *,
                 batch_size: int | None = None) -> dict[str, np.ndarray]:
        return _fit_and_collate(self, examples, batch_size, "(prompt_ids, completion_ids) pairs")


# ----------------------------------------------------------------------------- DPO


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class DPOCollator:
    """(prompt, chosen, rejected) token triples -> Tunix DPO ``TrainingInput`` fields.

    Prompts are left padded (they end where the responses begin), responses right
    padded. A prompt may be cut from the left under ``"truncate_prompt_left"``; a
    response is never cut: a triple whose chosen or rejected response does not fit is
    dropped and counted.

    >>> collator = DPOCollator(prompt_layout=StaticLayout(max_length=3),
    ...                        response_layout=StaticLayout(max_length=4), pad_id=0)
    >>> batch = collator([([5, 6], [7, 1], [8, 9, 1])])
    >>> batch["prompt_ids"], batch["prompt_mask"].astype(int)
    (array([[0, 5, 6]], dtype=int32), array([[0, 1, 1]]))
    >>> batch["chosen_ids"], batch["chosen_mask"].astype(int)
    (array([[7, 1, 0, 0]], dtype=int32), array([[1, 1, 0, 0]]))
    >>> batch["rejected_ids"], batch["rejected_mask"].astype(int)
    (array([[8, 9, 1, 0]], dtype=int32), array([[1, 1, 1, 0]]))
    """

    prompt_layout: _Layout
    response_layout: _Layout
    pad_id: int
    policy: str = "drop"
    min_prompt_tokens: int = 1
    stats: CollateStats = dataclasses.field(default_factory=CollateStats)

    def __post_init__(self):
        _check_common(self, {"prompt_layout": self.prompt_layout,
                             "response_layout": self.response_layout})
        if self.min_prompt_tokens > self.prompt_layout.capacity:
            _fail("DPOCollator", "min_prompt_tokens", self.min_prompt_tokens,
                  f"exceeds the prompt capacity {self.prompt_layout.capacity}")

    def fit(self, example: Any, *,
            where: str = "example") -> tuple[list[int], list[int], list[int]] | None:
        """One triple -> (prompt, chosen, rejected) that fit, or None if dropped."""
        parts = _unpack(example, 3, "prompt_ids, chosen_ids, rejected_ids", where)
        names = ("prompt_ids", "chosen_ids", "rejected_ids")
        prompt, chosen, rejected = (_token_ids(part, f"{where}: {name}")
                                    for part, name in zip(parts, names, strict=True))
        for name, response in (("chosen_ids", chosen), ("rejected_ids", rejected)):
            if not response:
                raise ValueError(f"{where}: {name} is empty")
        room = self.prompt_layout.capacity
        too_long = max(len(chosen), len(rejected)) > self.response_layout.capacity
        if too_long or (len(prompt) > room and self.policy == "drop"):
            self.stats.dropped_too_long += 1
            return None
        if len(prompt) > room:
            prompt = prompt[len(prompt) - room:]
            self.stats.prompt_truncated += 1
        return prompt, chosen, rejected

    def collate(self, rows: Sequence[tuple[list[int], list[int], list[int]]], *,
                batch_size: int | None = None) -> dict[str, np.ndarray]:
        """Rows from ``fit`` -> padded arrays; rows short of ``batch_size`` are fully masked."""
        b = _check_batch_size(rows, batch_size)
        p = self.prompt_layout.length_for(max((len(r[0]) for r in rows), default=1))
        r = self.response_layout.length_for(
            max((max(len(c), len(x)) for _, c, x in rows), default=1))
        batch = {"prompt_ids": np.full((b, p), self.pad_id, dtype=np.int32),  # [B, P]
                 "chosen_ids": np.full((b, r), self.pad_id, dtype=np.int32),  # [B, R]
                 "rejected_ids": np.full((b, r), self.pad_id, dtype=np.int32)}  # [B, R]
        lengths = {k: np.zeros(b, dtype=np.int32) for k in batch}
        for i, (prompt, chosen, rejected) in enumerate(rows):
            if prompt:  # left pad: the prompt ends at the last column
                batch["prompt_ids"][i, p - len(prompt):] = prompt
            batch["chosen_ids"][i, :len(chosen)] = chosen
            batch["rejected_ids"][i, :len(rejected)] = rejected
            for key, ids in zip(batch, (prompt, chosen, rejected), strict=True):
                lengths[key][i] = len(ids)
        batch["prompt_mask"] = np.arange(p)[None, :] >= (p - lengths["prompt_ids"])[:, None]
        batch["chosen_mask"] = np.arange(r)[None, :] < lengths["chosen_ids"][:, None]
        batch["rejected_mask"] = np.arange(r)[None, :] < lengths["rejected_ids"][:, None]
        assert_numeric(batch)
        self.stats.kept += len(rows)
        self.stats.real_tokens += int(sum(n.sum() for n in lengths.values()))
        self.stats.computed_tokens += b * (p + 2 * r)
        return batch

    def __call__(self, examples: Iterable[Any], *,
                 batch_size: int | None = None) -> dict[str, np.ndarray]:
        return _fit_and_collate(self, examples, batch_size, "(prompt_ids, chosen_ids, rejected_ids) triples")


# ----------------------------------------------------------------------------- GRPO

_SCALARS = (str, int, float, bool, np.generic, type(None))


def _column(values: list[Any]) -> np.ndarray:
    """A 1-D array of scalars: str or numeric dtype when uniform, object otherwise."""
    if all(isinstance(v, str) for v in values):
        return np.array(values, dtype=str)
    if all(isinstance(v, (int, float, bool, np.number, np.bool_)) for v in values):
        return np.asarray(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class GRPOCollator:
    """Records -> Tunix GRPO batch: a dict of equal-length 1-D numpy arrays.

    Each record needs ``"prompts"`` (the formatted prompt text) and ``"answer"``; other
    columns ride along and reach reward functions as keyword arguments. Strings are
    fine here: Tunix tokenizes prompts outside jit. Values must be scalars (a list
    value would become a nested array that Tunix flattens out of line). With a
    ``tokenizer`` and ``max_prompt_length``, longer prompts are dropped and counted,
    and the stats' token counts measure prompt padding (the rollout pads every prompt
    to ``max_prompt_length``; without a tokenizer they stay 0). Rows are never padded
    (a filler prompt would be rolled out and rewarded).

    >>> collator = GRPOCollator()
    >>> batch = collator([{"prompts": "2+2?", "answer": "4", "domain": "math"},
    ...                   {"prompts": "3+3?", "answer": "6", "domain": "math"}])
    >>> batch["prompts"], batch["answer"]
    (array(['2+2?', '3+3?'], dtype='<U4'), array(['4', '6'], dtype='<U1'))
    """

    tokenizer: Any = None
    max_prompt_length: int | None = None
    stats: CollateStats = dataclasses.field(default_factory=CollateStats)

    def __post_init__(self):
        if (self.tokenizer is None) != (self.max_prompt_length is None):
            _fail("GRPOCollator", "max_prompt_length", self.max_prompt_length,
                  "give both tokenizer and max_prompt_length, or neither")
        if self.max_prompt_length is not None and (
                not _is_int(self.max_prompt_length) or self.max_prompt_length < 1):
            _fail("GRPOCollator", "max_prompt_length", self.max_prompt_length,
                  "must be an int >= 1")

    def fit(self, record: Any, *, where: str = "example") -> dict[str, Any] | None:
        """One record -> the record (validated), or None if its prompt is too long."""
        if not isinstance(record, Mapping):
            raise TypeError(f"{where} must be a dict with 'prompts' and 'answer', "
                            f"got {type(record).__name__}")
        for key in ("prompts", "answer"):
            if key not in record:
                raise ValueError(f"{where} has no {key!r} key (keys: {sorted(record)})")
        if not isinstance(record["prompts"], str):
            raise TypeError(f"{where}: 'prompts' must be a str, "
                            f"got {type(record['prompts']).__name__}")
        for key, value in record.items():
            if not isinstance(value, _SCALARS):
                raise TypeError(f"{where}: column {key!r} is a {type(value).__name__}; "
                                "GRPO columns must be scalars (str, int, float, bool)")
        if self.tokenizer is not None:
            n = len(self.tokenizer.encode(record["prompts"]))
            if n > self.max_prompt_length:
                self.stats.dropped_too_long += 1
                return None
        return dict(record)

    def collate(self, rows: Sequence[Mapping[str, Any]], *,
                batch_size: int | None = None) -> dict[str, np.ndarray]:
        """Fitted records -> dict of 1-D arrays; refuses to pad up to ``batch_size``."""
        if batch_size is not None and batch_size != len(rows):
            raise ValueError(f"GRPO batches are never padded: got {len(rows)} rows for "
                             f"batch_size={batch_size} (use remainder='drop')")
        if not rows:
            raise ValueError("no rows to collate (none given, or all were dropped)")
        keys = list(rows[0])
        for i, row in enumerate(rows):
            if set(row) != set(keys):
                raise ValueError(f"row {i} has columns {sorted(row)}, row 0 has {sorted(keys)}")
        batch = {key: _column([row[key] for row in rows]) for key in keys}
        for key, value in batch.items():  # Tunix flattens anything else out of line
            if value.shape != (len(rows),):
                raise ValueError(f"column {key!r} has shape {value.shape}, not ({len(rows)},)")
        self.stats.kept += len(rows)
        if self.tokenizer is not None:  # Tunix left-pads every prompt to max_prompt_length
            self.stats.real_tokens += sum(len(self.tokenizer.encode(r["prompts"])) for r in rows)
            self.stats.computed_tokens += len(rows) * self.max_prompt_length
        return batch

    def __call__(self, examples: Iterable[Any], *,
                 batch_size: int | None = None) -> dict[str, np.ndarray]:
        return _fit_and_collate(self, examples, batch_size, "records (dicts with 'prompts' and 'answer')")


# ----------------------------------------------------------------------------- batching

_Collator = Union[SFTCollator, DPOCollator, GRPOCollator]


def batches(examples: Iterable[Any], batch_size: int, collator: _Collator, *,
            remainder: str = "drop") -> Iterator[dict[str, np.ndarray]]:
    """Fit each example, group ``batch_size`` kept rows, yield each group collated.

    Examples that do not fit are dropped before grouping, so every batch is full.
    The last partial group: ``remainder="drop"`` (default, for training) leaves it
    out and counts it, so every batch has one shape; ``remainder="pad"`` (for
    evaluation) fills it with fully-masked rows (padding tokens, masks False) so every
    example is used. GRPO batches cannot be padded.

    >>> collator = SFTCollator(layout=StaticLayout(max_length=4), pad_id=0)
    >>> pairs = [([5], [7, 1]), ([6], [8, 1]), ([5], [9, 1])]
    >>> [b["input_tokens"].shape for b in batches(pairs, 2, collator)]
    [(2, 4)]
    >>> last = list(batches(pairs, 2, collator, remainder="pad"))[-1]
    >>> last["input_tokens"], last["input_mask"].astype(int)
    (array([[5, 9, 1, 0],
           [0, 0, 0, 0]], dtype=int32), array([[0, 1, 1, 0],
           [0, 0, 0, 0]]))
    """
    if not _is_int(batch_size) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be an int >= 1")
    if remainder not in _REMAINDERS:
        raise ValueError(f"remainder={remainder!r} must be one of {_REMAINDERS}")
    if remainder == "pad" and isinstance(collator, GRPOCollator):
        raise ValueError("GRPO batches cannot be padded (a filler prompt would be rolled "
                         "out and rewarded); use remainder='drop'")
    if isinstance(getattr(collator, "layout", None), PackedLayout):
        yield from _packed_batches(examples, batch_size, collator, remainder)
        return
    group = []
    for i, example in enumerate(examples):
        row = collator.fit(example, where=f"example {i}")
        if row is None:
            continue
        group.append(row)
        if len(group) == batch_size:
            yield collator.collate(group, batch_size=batch_size)
            group = []
    if group and remainder == "pad":
        yield collator.collate(group, batch_size=batch_size)
    elif group:
        collator.stats.dropped_remainder += len(group)


def _packed_batches(examples: Iterable[Any], batch_size: int, collator: SFTCollator,
                    remainder: str) -> Iterator[dict[str, np.ndarray]]:
    """:func:`batches` under a PackedLayout: ``batch_size`` packed rows per batch.

    Fitted rows gather in a buffer of ``layout.window``; the buffer is packed and the
    fullest packs leave in groups of ``batch_size``; the rows of the packs left over go
    back to the buffer, to be packed with the next examples.
    """
    layout = collator.layout

    def packed(buffer):
        packs = [[buffer[i] for i in p] for p in layout.pack([len(t) for t, _ in buffer])]
        return sorted(packs, key=lambda p: -sum(len(t) for t, _ in p))  # fullest first

    buffer: list[tuple[list[int], int]] = []
    for i, example in enumerate(examples):
        row = collator.fit(example, where=f"example {i}")
        if row is None:
            continue
        buffer.append(row)
        if len(buffer) >= layout.window:
            packs = packed(buffer)
            n = len(packs) // batch_size * batch_size
            for start in range(0, n, batch_size):
                yield collator.collate_packed(packs[start:start + batch_size],
                                              batch_size=batch_size)
            buffer = [row for pack in packs[n:] for row in pack]
    packs = packed(buffer) if buffer else []
    n = len(packs) // batch_size * batch_size
    for start in range(0, n, batch_size):
        yield collator.collate_packed(packs[start:start + batch_size], batch_size=batch_size)
    if packs[n:] and remainder == "pad":
        yield collator.collate_packed(packs[n:], batch_size=batch_size)
    elif packs[n:]:
        collator.stats.dropped_remainder += sum(len(p) for p in packs[n:])
