import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reasonkit.collate import (
    BucketLayout,
    CollateStats,
    DPOCollator,
    GRPOCollator,
    SFTCollator,
    StaticLayout,
    assert_numeric,
    batches,
    tokenize,
)

PAD = 0


def sft(max_length=6, pad_id=PAD, **kw):
    return SFTCollator(layout=StaticLayout(max_length=max_length), pad_id=pad_id, **kw)


def dpo(prompt=3, response=4, **kw):
    return DPOCollator(prompt_layout=StaticLayout(max_length=prompt),
                       response_layout=StaticLayout(max_length=response), pad_id=PAD, **kw)


def ids(n, start=10):
    """n distinct non-pad token ids, so a cut or a shift is visible."""
    return list(range(start, start + n))


class CharTokenizer:
    def encode(self, text):
        return [ord(c) for c in text]


# ----------------------------------------------------------------- SFT

def test_sft_worked_example():
    batch = sft(6)([([5, 6], [7, 8, 1])])
    assert set(batch) == {"input_tokens", "input_mask"}
    np.testing.assert_array_equal(batch["input_tokens"], [[5, 6, 7, 8, 1, 0]])
    np.testing.assert_array_equal(batch["input_mask"], [[False, False, True, True, True, False]])
    assert batch["input_tokens"].dtype == np.int32 and batch["input_mask"].dtype == bool


def test_sft_bos_is_prepended_and_not_a_target():
    batch = sft(6, bos_id=2)([([5, 6], [7, 1])])
    np.testing.assert_array_equal(batch["input_tokens"], [[2, 5, 6, 7, 1, 0]])
    np.testing.assert_array_equal(batch["input_mask"], [[0, 0, 0, 1, 1, 0]])


def test_sft_drop_policy_counts_and_never_cuts():
    c = sft(5)
    batch = c([([5, 6], [7, 8, 1]),      # 5 tokens: fits exactly
               ([5, 6, 9], [7, 8, 1]),   # 6 tokens: dropped
               ([5], [7, 8, 9, 4, 1])])  # 6 tokens: dropped
    np.testing.assert_array_equal(batch["input_tokens"], [[5, 6, 7, 8, 1]])
    assert (c.stats.kept, c.stats.dropped_too_long, c.stats.prompt_truncated) == (1, 2, 0)


def test_sft_truncate_prompt_left_counts_and_respects_min_prompt_tokens():
    c = sft(5, policy="truncate_prompt_left")
    batch = c([([1, 2, 3, 4], [7, 8, 9]),  # prompt cut to [3, 4]
               ([1, 2], [7, 8, 9, 6]),     # prompt cut to [2]
               ([1], [7, 8, 9, 6, 5])])    # completion alone fills the row: dropped
    np.testing.assert_array_equal(batch["input_tokens"], [[3, 4, 7, 8, 9],
                                                          [2, 7, 8, 9, 6]])
    np.testing.assert_array_equal(batch["input_mask"], [[0, 0, 1, 1, 1],
                                                        [0, 1, 1, 1, 1]])
    assert (c.stats.kept, c.stats.dropped_too_long, c.stats.prompt_truncated) == (2, 1, 2)

    strict = sft(5, policy="truncate_prompt_left", min_prompt_tokens=2)
    batch = strict([([1, 2], [7, 8, 9, 6])])  # only 1 prompt token would fit
    assert batch["input_tokens"].shape == (0, 5)
    assert strict.stats.dropped_too_long == 1 and strict.stats.prompt_truncated == 0

    loose = sft(5, policy="truncate_prompt_left", min_prompt_tokens=0)
    np.testing.assert_array_equal(loose([([1, 2], [7, 8, 9, 6, 5])])["input_tokens"],
                                  [[7, 8, 9, 6, 5]])


@settings(max_examples=150, deadline=None)
@given(prompt_len=st.integers(0, 12), completion_len=st.integers(1, 12),
       max_length=st.integers(2, 16), policy=st.sampled_from(["drop", "truncate_prompt_left"]),
       bos=st.booleans(), min_prompt=st.integers(0, 1))
def test_sft_answer_is_never_cut(prompt_len, completion_len, max_length, policy, bos,
                                 min_prompt):
    if int(bos) + min_prompt + 1 > max_length:
        return  # refused at construction; tested separately
    prompt, completion = ids(prompt_len, 10), ids(completion_len, 100)
    c = sft(max_length, policy=policy, bos_id=3 if bos else None, min_prompt_tokens=min_prompt)
    batch = c([(prompt, completion)])
    tokens, mask = batch["input_tokens"], batch["input_mask"]
    assert tokens.shape == mask.shape == (batch["input_tokens"].shape[0], max_length)
    total = int(bos) + prompt_len + completion_len
    if tokens.shape[0] == 0:  # dropped: only when it truly could not fit
        assert c.stats.dropped_too_long == 1
        if policy == "drop":
            assert total > max_length
        else:
            assert int(bos) + min(min_prompt, prompt_len) + completion_len > max_length
        return
    row = tokens[0][tokens[0] != PAD].tolist()
    assert row[len(row) - completion_len:] == completion  # the whole answer, at the end
    kept_prompt = row[int(bos):len(row) - completion_len]
    assert kept_prompt == prompt[len(prompt) - len(kept_prompt):]  # a suffix of the prompt
    assert tokens[0][mask[0]].tolist() == completion  # loss exactly on the answer
    assert c.stats.prompt_truncated == int(len(kept_prompt) < prompt_len)
    if policy == "drop" or total <= max_length:
        assert kept_prompt == prompt


# ----------------------------------------------------------------- DPO

def test_dpo_left_pads_prompts_and_right_pads_responses():
    batch = dpo(3, 4)([([5, 6], [7, 1], [8, 9, 1]),
                       ([4, 5, 6], [7, 7, 7, 1], [1])])
    assert set(batch) == {"prompt_ids", "prompt_mask", "chosen_ids", "chosen_mask",
                          "rejected_ids", "rejected_mask"}
    np.testing.assert_array_equal(batch["prompt_ids"], [[0, 5, 6], [4, 5, 6]])
    np.testing.assert_array_equal(batch["prompt_mask"], [[0, 1, 1], [1, 1, 1]])
    np.testing.assert_array_equal(batch["chosen_ids"], [[7, 1, 0, 0], [7, 7, 7, 1]])
    np.testing.assert_array_equal(batch["chosen_mask"], [[1, 1, 0, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(batch["rejected_ids"], [[8, 9, 1, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(batch["rejected_mask"], [[1, 1, 1, 0], [1, 0, 0, 0]])


def test_dpo_drops_long_responses_and_handles_long_prompts_by_policy():
    triples = [([5, 6, 7, 8], [7, 1], [8, 1]),  # prompt too long
               ([5], [7, 7, 7, 7, 1], [8, 1]),  # chosen too long: never cut
               ([5], [7, 1], [8, 8, 8, 8, 1])]  # rejected too long: never cut
    drop = dpo(3, 4)
    assert drop(triples)["prompt_ids"].shape == (0, 3)
    assert (drop.stats.dropped_too_long, drop.stats.prompt_truncated) == (3, 0)

    cut = dpo(3, 4, policy="truncate_prompt_left")
    batch = cut(triples)
    np.testing.assert_array_equal(batch["prompt_ids"], [[6, 7, 8]])
    assert (cut.stats.kept, cut.stats.dropped_too_long, cut.stats.prompt_truncated) == (1, 2, 1)


@settings(max_examples=100, deadline=None)
@given(p=st.integers(0, 8), c=st.integers(1, 8), r=st.integers(1, 8),
       policy=st.sampled_from(["drop", "truncate_prompt_left"]))
def test_dpo_responses_are_never_cut(p, c, r, policy):
    prompt, chosen, rejected = ids(p, 10), ids(c, 100), ids(r, 200)
    col = dpo(4, 5, policy=policy)
    batch = col([(prompt, chosen, rejected)])
    assert batch["prompt_ids"].shape[1:] == (4,) and batch["chosen_ids"].shape[1:] == (5,)
    if batch["prompt_ids"].shape[0] == 0:
        assert max(c, r) > 5 or (p > 4 and policy == "drop")
        return
    assert batch["chosen_ids"][0][batch["chosen_mask"][0]].tolist() == chosen
    assert batch["rejected_ids"][0][batch["rejected_mask"][0]].tolist() == rejected
    kept_prompt = batch["prompt_ids"][0][batch["prompt_mask"][0]].tolist()
    assert kept_prompt == prompt[max(p - 4, 0):]
    assert batch["prompt_mask"][0, -1] == (len(kept_prompt) > 0)  # left padded: ends last


# ----------------------------------------------------------------- static shapes

@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(1, 12)), min_size=0, max_size=20),
       st.sampled_from(["drop", "pad"]))
def test_sft_batches_have_one_numeric_shape(lengths, remainder):
    c = sft(10, policy="truncate_prompt_left")
    pairs = [(ids(p), ids(n, 100)) for p, n in lengths]
    out = list(batches(pairs, 3, c, remainder=remainder))
    for batch in out:
        assert_numeric(batch)
        assert batch["input_tokens"].shape == batch["input_mask"].shape == (3, 10)
        assert batch["input_tokens"].dtype == np.int32
    s = c.stats
    assert s.kept + s.dropped_too_long + s.dropped_remainder == len(pairs)
    assert s.kept == sum(int(b["input_mask"].any(axis=1).sum()) for b in out)
    if remainder == "pad":
        assert s.dropped_remainder == 0
    else:  # every yielded row is a real example: drops leave no holes
        assert all(b["input_mask"].any(axis=1).all() for b in out)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 6), st.integers(1, 6)),
                min_size=0, max_size=12))
def test_dpo_batches_have_one_numeric_shape(lengths):
    c = dpo(4, 5, policy="truncate_prompt_left")
    triples = [(ids(p), ids(a, 100), ids(b, 200)) for p, a, b in lengths]
    for batch in batches(triples, 2, c, remainder="pad"):
        assert_numeric(batch)
        assert {k: v.shape for k, v in batch.items()} == {
            "prompt_ids": (2, 4), "prompt_mask": (2, 4), "chosen_ids": (2, 5),
            "chosen_mask": (2, 5), "rejected_ids": (2, 5), "rejected_mask": (2, 5)}
    assert c.stats.kept + c.stats.dropped_too_long == len(triples)


def test_pad_remainder_adds_fully_masked_rows():
    c = dpo(3, 4)
    last = list(batches([([5], [7, 1], [8, 1])] * 3, 2, c, remainder="pad"))[-1]
    np.testing.assert_array_equal(last["prompt_ids"], [[0, 0, 5], [0, 0, 0]])
    for key in ("prompt_mask", "chosen_mask", "rejected_mask"):
        assert last[key][0].any() and not last[key][1].any()
    assert c.stats.kept == 3 and c.stats.dropped_remainder == 0


def test_drop_remainder_counts_left_out_rows():
    c = sft(4)
    out = list(batches([([5], [7, 1])] * 7, 3, c))
    assert len(out) == 2 and c.stats.dropped_remainder == 1 and c.stats.kept == 6


def test_bucket_layout_picks_smallest_bucket_per_batch():
    c = SFTCollator(layout=BucketLayout(lengths=(4, 8, 16)), pad_id=PAD,
                    policy="truncate_prompt_left")
    assert c([([5], [7, 1])])["input_tokens"].shape == (1, 4)
    assert c([([5], [7, 1]), (ids(4), [7, 1])])["input_tokens"].shape == (2, 8)
    assert c([(ids(30), [7, 1])])["input_tokens"].shape == (1, 16)  # cut to the capacity
    assert c.stats.prompt_truncated == 1
    with pytest.raises(ValueError, match="strictly increasing"):
        BucketLayout(lengths=(8, 4))


# ----------------------------------------------------------------- GRPO

def test_grpo_batch_is_a_dict_of_equal_length_1d_arrays():
    records = [{"prompts": "2+2?", "answer": "4", "domain": "math", "difficulty": 1},
               {"prompts": "3+3?", "answer": "6", "domain": "math", "difficulty": 2}]
    batch = GRPOCollator()(records)
    assert set(batch) == {"prompts", "answer", "domain", "difficulty"}
    for value in batch.values():
        assert isinstance(value, np.ndarray) and value.shape == (2,)
    assert batch["prompts"].tolist() == ["2+2?", "3+3?"]
    assert batch["difficulty"].dtype.kind == "i"
    mixed = GRPOCollator()([{"prompts": "a", "answer": "4"}, {"prompts": "b", "answer": 4}])
    assert mixed["answer"].dtype == object and mixed["answer"].tolist() == ["4", 4]


def test_grpo_drops_long_prompts_and_refuses_nested_or_padded_batches():
    c = GRPOCollator(tokenizer=CharTokenizer(), max_prompt_length=4)
    batch = c([{"prompts": "abcd", "answer": "1"}, {"prompts": "abcde", "answer": "2"}])
    assert batch["answer"].tolist() == ["1"] and c.stats.dropped_too_long == 1
    c([{"prompts": "ab", "answer": "3"}])  # prompt padding: (4 + 2) real of 2 * 4 slots
    assert (c.stats.real_tokens, c.stats.computed_tokens, c.stats.padding_efficiency) == (6, 8, 0.75)
    with pytest.raises(TypeError, match="example 0: column 'answer' is a list"):
        GRPOCollator()([{"prompts": "x", "answer": ["1", "one"]}])
    with pytest.raises(ValueError, match="no 'answer' key"):
        GRPOCollator()([{"prompts": "x"}])
    with pytest.raises(ValueError, match="cannot be padded"):
        list(batches([{"prompts": "x", "answer": "1"}], 2, GRPOCollator(), remainder="pad"))
    out = list(batches([{"prompts": "x", "answer": str(i)} for i in range(5)], 2,
                       GRPOCollator()))
    assert [b["answer"].tolist() for b in out] == [["0", "1"], ["2", "3"]]


# ----------------------------------------------------------------- guards and errors

def test_assert_numeric_names_the_offending_key():
    assert_numeric({"a": np.zeros(2, np.int32), "b": np.ones(2, bool), "c": np.zeros(2)})
    with pytest.raises(TypeError, match=r"batch\['text'\] has dtype <U"):
        assert_numeric({"a": np.zeros(2, np.int32), "text": np.array(["x", "y"])})
    with pytest.raises(TypeError, match=r"batch\['obj'\] has dtype object"):
        assert_numeric({"obj": np.array([1, "x"], dtype=object)})
    with pytest.raises(TypeError, match=r"batch\['ids'\] is a list"):
        assert_numeric({"ids": [1, 2]})


@pytest.mark.parametrize("example, error, match", [
    (([5, "6"], [7]), TypeError, r"example 0: prompt_ids\[1\]='6' is a str"),
    (([5, 6.0], [7]), TypeError, r"prompt_ids\[1\]=6.0 is a float"),
    (([5, True], [7]), TypeError, r"prompt_ids\[1\]=True is a bool"),
    (([5], [7, -1]), ValueError, r"example 0: completion_ids\[1\]=-1: token ids must be >= 0"),
    (("hello", [7]), TypeError, r"prompt_ids is a str.*tokenize"),
    (([5], []), ValueError, "completion_ids is empty"),
    (([5], [7], [8]), TypeError, r"\(prompt_ids, completion_ids\) tuple"),
    ((np.array([5.0]), [7]), TypeError, "1-D integer array"),
])
def test_sft_bad_examples_are_named(example, error, match):
    with pytest.raises(error, match=match):
        sft()([example])


def test_bad_input_in_batches_names_the_example_index():
    pairs = [([5], [7])] * 3 + [([5], [7, None])]
    with pytest.raises(TypeError, match=r"example 3: completion_ids\[1\]=None"):
        list(batches(pairs, 2, sft()))


def test_numpy_token_arrays_are_accepted():
    batch = sft(5)([(np.array([5, 6], dtype=np.int64), np.array([7, 1], dtype=np.uint16))])
    np.testing.assert_array_equal(batch["input_tokens"], [[5, 6, 7, 1, 0]])


@pytest.mark.parametrize("make, match", [
    (lambda: sft(1), "max_length must be >= 2"),
    (lambda: sft(2, bos_id=1), "min_prompt_tokens=1: bos \\+ min_prompt_tokens"),
    (lambda: sft(policy="truncate"), "SFTCollator.policy='truncate'"),
    (lambda: sft(pad_id=-1), "SFTCollator.pad_id=-1"),
    (lambda: SFTCollator(layout=128, pad_id=0), "SFTCollator.layout=128"),
    (lambda: StaticLayout(max_length=0), "StaticLayout.max_length=0"),
    (lambda: dpo(2, 4, min_prompt_tokens=3), "DPOCollator.min_prompt_tokens=3"),
    (lambda: GRPOCollator(max_prompt_length=8), "give both tokenizer and max_prompt_length"),
])
def test_bad_configuration_names_field_and_value(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("make, expected", [
    (sft, r"\(prompt_ids, completion_ids\) pairs"),
    (dpo, r"\(prompt_ids, chosen_ids, rejected_ids\) triples"),
    (GRPOCollator, "records"),
])
def test_calling_a_collator_with_no_examples_is_refused(make, expected):
    collator = make()
    name = type(collator).__name__
    for empty in ([], (), iter([])):
        with pytest.raises(ValueError, match=rf"{name} was called with no examples.*"
                                             rf"expected a non-empty list of {expected}"):
            collator(empty)
    with pytest.raises(ValueError, match=f"{name} was called with no examples"):
        collator([], batch_size=2)
    assert collator.stats == CollateStats()  # nothing was counted


@pytest.mark.parametrize("make", [sft, dpo, GRPOCollator])
def test_calling_a_collator_on_one_example_or_a_non_list_is_refused(make):
    name = make().__class__.__name__
    for wrong in (5, "abc", {"prompts": "2+2?", "answer": "4"}):
        with pytest.raises(TypeError, match=rf"{name}\(examples=\.\.\.\) got a "
                                            rf"{type(wrong).__name__}; expected a list of"):
            make()(wrong)


def test_all_examples_dropped_is_not_the_empty_call():
    """Dropped examples are counted, and a fixed batch_size still gives a full-shape batch."""
    c = sft(5)
    batch = c([([5, 6, 9], [7, 8, 1])], batch_size=2)  # 6 tokens: dropped
    assert batch["input_tokens"].shape == (2, 5) and not batch["input_mask"].any()
    assert c.stats.dropped_too_long == 1
    d = dpo(3, 4)
    batch = d([([5], [7, 8, 9, 4, 1], [8, 1])], batch_size=1)  # chosen too long: dropped
    assert batch["chosen_ids"].shape == (1, 4) and not batch["chosen_mask"].any()


def test_bad_batching_arguments():
    with pytest.raises(ValueError, match="batch_size=0"):
        list(batches([], 0, sft()))
    with pytest.raises(ValueError, match="remainder='keep'"):
        list(batches([], 2, sft(), remainder="keep"))
    with pytest.raises(ValueError, match="3 rows do not fit in batch_size=2"):
        sft()([([5], [7])] * 3, batch_size=2)


# ----------------------------------------------------------------- stats, tokenize, Tunix

def test_stats_padding_efficiency_and_serialisation():
    c = sft(6)
    c([([5, 6], [7, 8, 1]), ([9, 5, 6, 4], [7, 1])])  # 5 + 6 real tokens in 2 x 6 slots
    d = c.stats.to_dict()
    assert d["real_tokens"] == 11 and d["computed_tokens"] == 12
    assert d["padding_efficiency"] == pytest.approx(11 / 12)
    assert json.loads(json.dumps(d)) == d
    assert "padding efficiency 91.7%" in str(c.stats)
    assert CollateStats().padding_efficiency == 0.0


def test_tokenize_uses_any_encoder_and_validates():
    assert tokenize(["ab", ""], CharTokenizer()) == [[97, 98], []]
    with pytest.raises(TypeError, match="single str"):
        tokenize("ab", CharTokenizer())
    with pytest.raises(TypeError, match=r"texts\[1\] is a int"):
        tokenize(["a", 3], CharTokenizer())

    class Broken:
        def encode(self, text):
            return [1.5]

    with pytest.raises(TypeError, match=r"tokenizer.encode\(texts\[0\]\)\[0\]=1.5"):
        tokenize(["a"], Broken())


def test_batches_are_accepted_by_tunix_training_inputs():
    from tunix.sft import peft_trainer
    from tunix.sft.dpo import dpo_trainer

    sft_batch = sft(6)([([5, 6], [7, 8, 1])])
    tunix_sft = peft_trainer.TrainingInput(**sft_batch)
    np.testing.assert_array_equal(tunix_sft.input_mask, sft_batch["input_mask"])

    dpo_batch = dpo(3, 4)([([5, 6], [7, 1], [8, 9, 1])])
    tunix_dpo = dpo_trainer._preprocess_dict(dpo_batch)
    assert isinstance(tunix_dpo, dpo_trainer.TrainingInput)
    np.testing.assert_array_equal(tunix_dpo.prompt_ids, dpo_batch["prompt_ids"])
