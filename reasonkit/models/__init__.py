"""Tokenizer, base model (tiny or Gemma from Kaggle / HF / disk), LoRA, merge and export.

Every base model, the tiny one included, is a directory in Hugging Face layout
(config.json, model.safetensors, tokenizer.model) loaded through Tunix's safetensors
loaders, so the tiny preset exercises the same path as Gemma. Only the *source* differs:
the tiny directory is built (:func:`~reasonkit.models.sources.build_tiny_checkpoint`) with the recipe of
:mod:`reasonkit.models.tiny`, the others are downloaded. This package is the public face;
its modules, each importing only those before it: :mod:`~reasonkit.models.architecture`
(config.json <-> Tunix's config), :mod:`~reasonkit.models.tokenizer`,
:mod:`~reasonkit.models.checkpoint` (build, check, save, load),
:mod:`~reasonkit.models.tiny` (the tiny base's recipe), :mod:`~reasonkit.models.sources`
(where the weights come from), :mod:`~reasonkit.models.lora`,
:mod:`~reasonkit.models.adapters` (a stage's adapters restored onto a base),
:mod:`~reasonkit.models.export` (merged, adapter and GGUF exports) and
:mod:`~reasonkit.models.publish` (an export to the Hugging Face Hub or Kaggle Models).
``python -m reasonkit.models`` rebuilds the shipped tiny base model.
"""

from reasonkit.models import tiny
from reasonkit.models.adapters import free, frozen_reference, load_policy
from reasonkit.models.architecture import CheckpointError, hf_config
from reasonkit.models.checkpoint import hf_shapes, load_model, new_model, to_hf_tensors, use_optimisations
from reasonkit.models.export import export_adapter, export_gguf, export_merged, gguf_file_name
from reasonkit.models.lora import apply_lora, base_params, lora_params, merge_lora
from reasonkit.models.publish import PushError, plan_push, push
from reasonkit.models.sources import load_base, read_platform_secrets, resolve_source
from reasonkit.models.tokenizer import (
    hf_tokenizer_files,
    load_tokenizer,
    stop_token_ids,
    token_counter,
    train_tokenizer,
)

__all__ = ["CheckpointError", "hf_config", "load_tokenizer", "token_counter", "stop_token_ids",
           "train_tokenizer", "hf_tokenizer_files", "new_model", "hf_shapes", "to_hf_tensors",
           "load_model", "use_optimisations", "tiny", "read_platform_secrets", "resolve_source",
           "load_base", "apply_lora",
           "lora_params", "base_params", "merge_lora", "export_merged", "export_adapter", "export_gguf",
           "gguf_file_name", "PushError", "plan_push", "push", "load_policy", "frozen_reference", "free"]
