"""The SentencePiece tokenizer: load, train, count, stop ids, and its Hugging Face files.

reasonkit tokenizes with the SentencePiece model a checkpoint carries (tokenizer.model);
:func:`load_tokenizer` checks it against the model's vocabulary, :func:`train_tokenizer`
makes a Gemma-style one (the tiny base's). For exports, :func:`hf_tokenizer_files` writes
the files transformers loads (tokenizer.json, tokenizer_config.json with Gemma's turn
format as :data:`CHAT_TEMPLATE`, special_tokens_map.json) and :func:`export_tokenizer`
copies a source's own files, writing only those it lacks.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Callable, Iterable

import sentencepiece as spm

from reasonkit import template
from reasonkit.models._architecture import CheckpointError, _quiet_transformers

__all__ = ["TOKENIZER_FILES", "HF_TOKENIZER_FILES", "CHAT_TEMPLATE", "load_tokenizer", "token_counter",
           "stop_token_ids", "train_tokenizer", "hf_tokenizer_files", "export_tokenizer"]


# The tokenizer files a Hugging Face Gemma directory may hold: downloaded, and copied into exports.
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
                   "chat_template.json")


def load_tokenizer(path: str | os.PathLike, vocab_size: int | None = None) -> spm.SentencePieceProcessor:
    """A SentencePiece tokenizer; with ``vocab_size``, check it matches the model's.

    The model's embedding (``num_embed``) must equal the tokenizer's vocabulary, or
    the sampler emits ids SentencePiece cannot decode.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no tokenizer at {path}")
    tok = spm.SentencePieceProcessor()
    try:
        tok.Load(str(path))
    except Exception as e:  # sentencepiece raises a bare OSError/RuntimeError
        raise CheckpointError(f"{path}: not a SentencePiece model ({e})") from e
    if vocab_size is not None and tok.GetPieceSize() != vocab_size:
        raise CheckpointError(
            f"{path}: tokenizer vocabulary has {tok.GetPieceSize()} pieces but the model's "
            f"vocab_size (num_embed) is {vocab_size}; they must be equal")
    return tok


def token_counter(tok: spm.SentencePieceProcessor) -> Callable[[str], int]:
    """``count(text)``: the tokens ``tok`` makes of ``text``, BOS not included (what
    :func:`reasonkit.data.build_splits` measures budgets with, adding the BOS itself)."""
    return lambda text: len(tok.EncodeAsIds(text))


def stop_token_ids(tok: spm.SentencePieceProcessor) -> list[int]:
    """Ids that end a model turn: ``<eos>`` and ``<end_of_turn>`` (1 and 106 for Gemma 3)."""
    ids = [tok.eos_id()]
    eot = tok.PieceToId(template.END_OF_TURN)
    if eot != tok.unk_id() and eot not in ids:
        ids.append(eot)
    return ids


def train_tokenizer(texts: Iterable[str], out_prefix: str | os.PathLike, vocab_size: int) -> pathlib.Path:
    """Train a Gemma-style SentencePiece model: pad 0, eos 1, bos 2, unk 3, turn and tag symbols.

    Returns the path of ``<out_prefix>.model``.
    """
    if hasattr(spm, "set_random_generator_seed"):
        spm.set_random_generator_seed(0)  # deterministic sampling inside the trainer
    out_prefix = pathlib.Path(out_prefix)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(list(texts)), model_prefix=str(out_prefix),
        vocab_size=vocab_size, model_type="bpe", character_coverage=1.0,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, byte_fallback=True,
        user_defined_symbols=list(template.SPECIAL_TOKENS), split_digits=True,
        max_sentence_length=8192, num_threads=2, minloglevel=2,
        # Keep text byte-exact (newlines, leading spaces) like Gemma's tokenizer.
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        add_dummy_prefix=False, allow_whitespace_only_pieces=True,
        hard_vocab_limit=True,
    )
    return out_prefix.with_suffix(".model")


# Gemma's turn format as a chat template (what Gemma's own template gives for text): BOS, each
# turn trimmed between the turn markers, `assistant` named `model`, a system message put at
# the head of the first user turn, and the model's turn opened by add_generation_prompt.
CHAT_TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set prefix = messages[0]['content'] + '\\n\\n' -%}{%- set turns = messages[1:] -%}"
    "{%- else -%}{%- set prefix = '' -%}{%- set turns = messages -%}{%- endif -%}"
    "{{ bos_token }}"
    "{%- for message in turns -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user / assistant / user / ...') }}"
    "{%- endif -%}"
    "{%- if message['content'] is string -%}{%- set text = message['content'] | trim -%}"
    "{%- else -%}{%- set text = message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | map('trim') | join('') -%}{%- endif -%}"
    "{{ '<sot>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n'"
    " + (prefix if loop.first else '') + text + '<eot>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<sot>model\\n' }}{%- endif -%}"
).replace("<sot>", template.START_OF_TURN).replace("<eot>", template.END_OF_TURN)


HF_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def hf_tokenizer_files(tokenizer_model: str | os.PathLike,
                       names: Iterable[str] = HF_TOKENIZER_FILES) -> dict[str, str]:
    """``names`` of tokenizer.json, tokenizer_config.json and special_tokens_map.json for a
    Gemma-style SentencePiece model: BOS added on encoding, the chat template, the turn
    markers special.

    tokenizer.json is the model converted by transformers (quick for a small vocabulary,
    slow for Gemma's 262k pieces, which is why a Gemma source's own file is copied
    instead); the other two are written directly.
    """
    import shutil
    import tempfile

    names = list(names)
    tok = load_tokenizer(tokenizer_model)
    # A special the model lacks (id -1: a GGUF file's tokenizer may have no unknown piece)
    # is left out, not looked up.
    specials = {f"{name}_token": tok.IdToPiece(i) for name, i in
                (("bos", tok.bos_id()), ("eos", tok.eos_id()), ("unk", tok.unk_id()),
                 ("pad", tok.pad_id())) if i >= 0}
    turn_markers = [m for m in (template.START_OF_TURN, template.END_OF_TURN)
                    if tok.PieceToId(m) != tok.unk_id()]
    files = {}
    if "tokenizer.json" in names:
        with _quiet_transformers(), tempfile.TemporaryDirectory() as tmp:
            from transformers import GemmaTokenizer

            shutil.copy(tokenizer_model, pathlib.Path(tmp) / "tokenizer.model")
            fast = GemmaTokenizer.from_pretrained(tmp, **specials, mask_token=None,
                                                  add_bos_token=True, add_eos_token=False)
            backend = json.loads(fast.backend_tokenizer.to_str())
        # As in Gemma's tokenizer.json: the turn markers are special (decode(...,
        # skip_special_tokens=True) drops them); other single pieces, such as the answer
        # tags, are text.
        for added in backend.get("added_tokens", []):
            if added["content"] in turn_markers:
                added["special"] = True
        files["tokenizer.json"] = json.dumps(backend, ensure_ascii=False)
    if "tokenizer_config.json" in names:
        files["tokenizer_config.json"] = json.dumps(
            {"tokenizer_class": "GemmaTokenizer", **specials, "add_bos_token": True,
             "add_eos_token": False, "clean_up_tokenization_spaces": False,
             "spaces_between_special_tokens": False, "chat_template": CHAT_TEMPLATE},
            indent=2, ensure_ascii=False)
    if "special_tokens_map.json" in names:
        files["special_tokens_map.json"] = json.dumps(
            {**specials, "additional_special_tokens": turn_markers}, indent=2, ensure_ascii=False)
    return files


def export_tokenizer(source_dir: str | os.PathLike, out_dir: str | os.PathLike) -> list[str]:
    """Copy the source's tokenizer files; write the Hugging Face ones it lacks. Returns the names."""
    import shutil

    source, out = pathlib.Path(source_dir), pathlib.Path(out_dir)
    names = [n for n in TOKENIZER_FILES if (source / n).is_file()]
    for name in names:
        if (source / name).resolve() != (out / name).resolve():
            shutil.copy(source / name, out / name)
    missing = [n for n in HF_TOKENIZER_FILES if n not in names]
    for name, text in hf_tokenizer_files(source / "tokenizer.model", missing).items():
        (out / name).write_text(text)
    return sorted(names + missing)
