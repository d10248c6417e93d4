"""Tokenizer, base model (tiny or Gemma from Kaggle / HF / disk), LoRA, merge and export.

Every base model, the tiny one included, is a directory in Hugging Face layout
(config.json, model.safetensors, tokenizer.model) loaded through Tunix's safetensors
loaders, so the tiny preset exercises the same path as Gemma. Only the *source* differs:
the tiny directory is built (:func:`build_tiny_checkpoint`) with the recipe of
:mod:`reasonkit.models.tiny`, the others are downloaded. This package is the public face;
its modules, each importing only those before it: :mod:`~reasonkit.models.architecture`
(config.json <-> Tunix's config), :mod:`~reasonkit.models.tokenizer`,
:mod:`~reasonkit.models.checkpoint` (build, check, save, load),
:mod:`~reasonkit.models.tiny` (the tiny base's recipe), :mod:`~reasonkit.models.sources`
(where the weights come from), :mod:`~reasonkit.models.lora` and
:mod:`~reasonkit.models.export`. ``python -m reasonkit.models`` rebuilds the shipped tiny
base model.
"""

from reasonkit.models import tiny
from reasonkit.models.adapters import free, frozen_reference, load_policy, restore_lora
from reasonkit.models.architecture import (
    CheckpointError,
    config_from_hf,
    hf_config,
    read_config_json,
    tunix_config,
)
from reasonkit.models.checkpoint import (
    REQUIRED_FILES,
    attention_impl,
    check_checkpoint_dir,
    hf_shapes,
    load_model,
    model_class,
    new_model,
    save_hf_checkpoint,
    to_hf_tensors,
)
from reasonkit.models.export import (
    GEMMA_NOTICE,
    export_adapter,
    export_config,
    export_generation_config,
    export_merged,
    export_readme,
    peft_tensors,
)
from reasonkit.models.lora import apply_lora, base_params, lora_params, lora_trace_input, merge_lora
from reasonkit.models.sources import (
    DOWNLOAD_FILES,
    build_tiny_checkpoint,
    cache_dir,
    load_base,
    read_platform_secrets,
    resolve_source,
)
from reasonkit.models.tokenizer import (
    CHAT_TEMPLATE,
    HF_TOKENIZER_FILES,
    TOKENIZER_FILES,
    export_tokenizer,
    hf_tokenizer_files,
    load_tokenizer,
    stop_token_ids,
    token_counter,
    train_tokenizer,
)

__all__ = [
    # architecture: config.json <-> ModelConfig <-> Tunix's ModelConfig
    "CheckpointError", "read_config_json", "tunix_config", "hf_config", "config_from_hf",
    # tokenizer
    "TOKENIZER_FILES", "HF_TOKENIZER_FILES", "CHAT_TEMPLATE", "load_tokenizer", "token_counter",
    "stop_token_ids", "train_tokenizer", "hf_tokenizer_files", "export_tokenizer",
    # checkpoint: Hugging Face-layout directories
    "REQUIRED_FILES", "model_class", "attention_impl", "new_model", "hf_shapes", "check_checkpoint_dir",
    "to_hf_tensors", "save_hf_checkpoint", "load_model",
    # the tiny base's recipe, and where every base model comes from
    "tiny", "DOWNLOAD_FILES", "cache_dir", "read_platform_secrets", "resolve_source", "load_base",
    "build_tiny_checkpoint",
    # LoRA
    "lora_trace_input", "apply_lora", "lora_params", "base_params", "merge_lora",
    # export
    "GEMMA_NOTICE", "export_config", "export_generation_config", "export_readme", "export_merged",
    "peft_tensors", "export_adapter",
    # adapters: a stage's model, restored from its run's checkpoint
    "restore_lora", "load_policy", "frozen_reference", "free",
]
