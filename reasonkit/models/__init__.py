"""Tokenizer, base model (tiny or Gemma from Kaggle / HF / disk), LoRA, merge and export.

Every base model, the tiny one included, is a directory in Hugging Face layout
(config.json, model.safetensors, tokenizer.model) loaded through Tunix's safetensors
loaders, so the tiny preset exercises the same path as Gemma. Only the *source* differs:
the tiny directory is built (:func:`~reasonkit.models._sources.build_tiny_checkpoint`) with the recipe of
:mod:`reasonkit.models._tiny`, the others are downloaded. This package is the public face
(``tiny`` is the recipe's module); its private modules, each importing only those before
it: :mod:`~reasonkit.models._architecture`
(config.json <-> Tunix's config), :mod:`~reasonkit.models._tokenizer`,
:mod:`~reasonkit.models._checkpoint` (build, check, save, load),
:mod:`~reasonkit.models._tiny` (the tiny base's recipe), :mod:`~reasonkit.models._sources`
(where the weights come from), :mod:`~reasonkit.models._lora`,
:mod:`~reasonkit.models._adapters` (a stage's adapters restored onto a base),
:mod:`~reasonkit.models._export` (merged, adapter and GGUF exports) and
:mod:`~reasonkit.models._publish` (an export to the Hugging Face Hub or Kaggle Models).
``python -m reasonkit.models`` rebuilds the shipped tiny base model.
"""

from reasonkit.models import _tiny as tiny
from reasonkit.models._adapters import free, frozen_reference, load_policy
from reasonkit.models._architecture import CheckpointError, hf_config
from reasonkit.models._checkpoint import hf_shapes, load_model, new_model, to_hf_tensors, use_optimisations
from reasonkit.models._export import (
    OLLAMA_TEMPLATE,
    export_adapter,
    export_gguf,
    export_merged,
    gguf_file_name,
)
from reasonkit.models._gguf_file import convert_gguf
from reasonkit.models._lora import apply_lora, base_params, lora_params
from reasonkit.models._publish import PushError, push
from reasonkit.models._sources import load_base, read_platform_secrets, resolve_source
from reasonkit.models._tokenizer import (
    CHAT_TEMPLATE,
    hf_tokenizer_files,
    load_tokenizer,
    stop_token_ids,
    token_counter,
    train_tokenizer,
)

__all__ = ["CheckpointError", "hf_config", "CHAT_TEMPLATE", "load_tokenizer", "token_counter",
           "stop_token_ids", "train_tokenizer", "hf_tokenizer_files", "new_model", "hf_shapes",
           "to_hf_tensors", "load_model", "use_optimisations", "convert_gguf", "tiny",
           "read_platform_secrets", "resolve_source", "load_base", "apply_lora", "lora_params",
           "base_params", "export_merged", "export_adapter", "export_gguf", "gguf_file_name",
           "OLLAMA_TEMPLATE", "PushError", "push", "load_policy", "frozen_reference", "free"]
