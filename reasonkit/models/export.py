"""Exports: directories that transformers, PEFT, vLLM and GGUF converters load.

A merged export (:func:`export_merged`) is a whole model: the source checkpoint's own
config.json (only the dtype, and for a multimodal Gemma 3 the text-only architecture,
change), a generation_config.json that stops at the turn end, the source's tokenizer files
(or ones written from tokenizer.model), a README saying how to load it, and the Gemma
notice. An adapter export (:func:`export_adapter`) is PEFT's adapter_config.json +
adapter_model.safetensors: exact (no bf16 merge rounding) and small, applied to the
source model.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
from typing import Any

import jax
import numpy as np
import sentencepiece as spm
from flax import nnx

from reasonkit import template
from reasonkit.config import LoraConfig, ModelConfig
from reasonkit.models.architecture import _text_part, read_config_json
from reasonkit.models.checkpoint import to_hf_tensors
from reasonkit.models.lora import merge_lora
from reasonkit.models.tokenizer import export_tokenizer, load_tokenizer, stop_token_ids

__all__ = ["GEMMA_NOTICE", "export_config", "export_generation_config", "export_readme",
           "export_merged", "peft_tensors", "export_adapter"]


GEMMA_NOTICE = ("Gemma is provided under and subject to the Gemma Terms of Use found at "
                "ai.google.dev/gemma/terms")


def export_config(source_dir: str | os.PathLike, cfg: ModelConfig) -> dict[str, Any]:
    """The export's config.json: the source's own, changing only what the export changes.

    That is the dtype (``cfg.dtype``, the weights written) and, for a multimodal Gemma 3,
    the architecture: the export holds the language model alone (``Gemma3ForCausalLM``
    with the source's ``text_config``). Every other field stays, so RoPE scaling, query
    scaling, layer pattern, ``max_position_embeddings`` and the token ids describe the
    export exactly as they did the source (the loader refused any it could not honour).
    """
    path = pathlib.Path(source_dir) / "config.json"
    raw = read_config_json(path)
    family, text = _text_part(raw, str(path))
    out = dict(text)
    if text is not raw:  # multimodal: its text model, under the text model's own type
        out.update(model_type="gemma3_text", architectures=["Gemma3ForCausalLM"])
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if key in raw and key not in out:
                out[key] = raw[key]
    out.setdefault("architectures", ["Gemma3ForCausalLM" if family == "gemma3" else "Gemma2ForCausalLM"])
    for key in [k for k in ("dtype", "torch_dtype") if k in out] or ["torch_dtype"]:
        out[key] = cfg.dtype
    return out


def export_generation_config(source_dir: str | os.PathLike,
                             tok: spm.SentencePieceProcessor) -> dict[str, Any]:
    """The source's generation_config.json (or one from its config.json), stopping at the turn end.

    ``eos_token_id`` keeps the source's ids and adds :func:`stop_token_ids` (``<eos>`` and
    ``<end_of_turn>``, looked up in the tokenizer): the model ends every answer with
    ``<end_of_turn>``, and transformers' ``generate`` and vLLM stop at these ids.
    """
    source = pathlib.Path(source_dir)
    gen_path = source / "generation_config.json"
    gen = read_config_json(gen_path) if gen_path.is_file() else {}
    config = read_config_json(source / "config.json")
    eos = gen.get("eos_token_id", config.get("eos_token_id"))
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    gen["eos_token_id"] = eos + [i for i in stop_token_ids(tok) if i not in eos]
    gen.setdefault("bos_token_id", tok.bos_id())
    gen.setdefault("pad_token_id", tok.pad_id())
    return gen


def _base_model_id(cfg: ModelConfig, source_dir: str | os.PathLike) -> str:
    """What to load the base model from: the Hugging Face repo when it came from one."""
    return cfg.source.removeprefix("hf:") if cfg.source.startswith("hf:") else str(source_dir)


def export_readme(cfg: ModelConfig, lora: LoraConfig, kind: str, base: str, stops: list[int], *,
                  name: str | None = None) -> str:
    """The README.md of an export (``kind`` "merged" or "adapter"): what it is, how to load it, licence."""
    family = {"gemma3": "Gemma 3", "gemma2": "Gemma 2"}[cfg.family]
    eager = ', attn_implementation="eager"' if cfg.family == "gemma2" else ""
    vllm_rank = max(8, 1 << (lora.rank - 1).bit_length())  # vLLM takes powers of two from 8
    what = (f"the base model with the LoRA adapters merged into its weights ({cfg.dtype})"
            if kind == "merged" else f"LoRA adapters in PEFT's format (exact values), for the base `{base}`")
    lines = [f"# {name or 'reasonkit export'}", "",
             f"A {family} model post-trained for step-by-step answers with "
             f"reasonkit (LoRA rank {lora.rank}, alpha {lora.alpha:g}) "
             f"from `{cfg.source}`: {what}.", "",
             "## Prompt", "",
             "The model learned to answer a user turn that holds this instruction, a newline and the "
             "question, and answers in `<reasoning>...</reasoning>` then `<answer>...</answer>`, "
             f"ending its turn with `{template.END_OF_TURN}`:", "",
             "```python", f"INSTRUCTION = {template.INSTRUCTION!r}",
             'messages = [{"role": "user", "content": INSTRUCTION + "\\n" + "What is 7 * 6?"}]', "```", ""]
    if kind == "merged":
        lines += [
            "## Load it", "",
            "transformers (the chat template and BOS come with the tokenizer; `generate` stops at "
            f"`{template.END_OF_TURN}` through generation_config.json, ids {stops}):", "",
            "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
            'path = "path/to/this/folder"', "tok = AutoTokenizer.from_pretrained(path)",
            f"model = AutoModelForCausalLM.from_pretrained(path{eager})",
            "inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True,",
            '                                 return_tensors="pt")',
            "out = model.generate(**inputs, max_new_tokens=512)",
            'print(tok.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True))', "```", ""]
        if cfg.family == "gemma2":
            lines += ["Gemma 2 needs `attn_implementation=\"eager\"`: transformers' default `sdpa` "
                      "attention ignores Gemma 2's attention logit softcap and gives other logits.", ""]
        lines += [
            "vLLM: `vllm serve path/to/this/folder` (OpenAI-compatible chat API), or "
            "`vllm.LLM(model=path).chat(messages)`.", "",
            "llama.cpp / Ollama: convert to GGUF with llama.cpp's `python convert_hf_to_gguf.py "
            "path/to/this/folder --outfile model.gguf`, then `ollama create` from a Modelfile "
            "holding `FROM ./model.gguf`.", ""]
    else:
        lines += [
            "## Load it", "",
            "PEFT, on the base model (its tokenizer; stop at "
            f"`{template.END_OF_TURN}` with `eos_token_id={stops}` when the base's generation config "
            "does not):", "",
            "```python", "import torch", "from peft import PeftModel",
            "from transformers import AutoModelForCausalLM, AutoTokenizer", "",
            f'base = "{base}"', "tok = AutoTokenizer.from_pretrained(base)",
            f"model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32{eager})",
            'model = PeftModel.from_pretrained(model, "path/to/this/folder")',
            "inputs = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True,",
            '                                 return_tensors="pt")',
            f"out = model.generate(**inputs, max_new_tokens=512, eos_token_id={stops})", "```", "",
            f"vLLM: `vllm serve {base} --enable-lora --max-lora-rank {vllm_rank} "
            "--lora-modules reasonkit=path/to/this/folder`. `model.merge_and_unload()` gives a "
            "plain transformers model.", ""]
    lines += ["## Licence", ""]
    if cfg.source == "tiny":
        lines += ["reasonkit pretrained this model from scratch on its synthetic tasks (Gemma 3's "
                  "architecture, no Gemma weights); it is Apache-2.0, like reasonkit.", ""]
    else:
        lines += [f"{GEMMA_NOTICE}.", "",
                  f"This is a Model Derivative of Gemma: reasonkit modified `{cfg.source}` by "
                  "fine-tuning (LoRA). Whoever you share it with is bound by the Gemma Terms of Use, "
                  "including the use restrictions of the Gemma Prohibited Use Policy "
                  "(ai.google.dev/gemma/prohibited_use_policy); pass the terms on with it.", ""]
    return "\n".join(lines)


def _write_notices(out: pathlib.Path, cfg: ModelConfig, readme: str) -> None:
    (out / "README.md").write_text(readme)
    if cfg.source != "tiny":  # the Gemma Terms ask for the notice in a "Notice" text file
        (out / "NOTICE").write_text(GEMMA_NOTICE + "\n")


def export_merged(lora_model: nnx.Module, cfg: ModelConfig, lora: LoraConfig,
                  out_dir: str | os.PathLike, source_dir: str | os.PathLike, *,
                  name: str | None = None) -> pathlib.Path:
    """Save base + merged LoRA as a complete Hugging Face directory (Gemma 2 and 3).

    ``source_dir`` is the base model's directory (:func:`resolve_source`): its config,
    generation config and tokenizer files are carried over (see :func:`export_config`).
    The LoRA model itself is left unchanged (a copy is merged); model.safetensors is
    written last, so its presence means the export is complete.
    """
    from safetensors.numpy import save_file

    source, out = pathlib.Path(source_dir), pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(source / "tokenizer.model", vocab_size=cfg.vocab_size)
    (out / "config.json").write_text(json.dumps(export_config(source, cfg), indent=2))
    (out / "generation_config.json").write_text(json.dumps(export_generation_config(source, tok), indent=2))
    export_tokenizer(source, out)
    _write_notices(out, cfg, export_readme(cfg, lora, "merged", _base_model_id(cfg, source),
                                           stop_token_ids(tok), name=name))
    graph, state = nnx.split(lora_model)
    copy = nnx.merge(graph, jax.tree.map(lambda x: x, state))
    merge_lora(copy, lora)
    tmp = out / "model.safetensors.tmp"
    save_file(to_hf_tensors(copy, cfg), str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    return out


# qwix's adapter layouts (see :func:`reasonkit.models.lora.merge_lora`) and the transformers
# projections they feed.
_PEFT_LAYOUT = {
    "q_einsum": ("BTD,Dr,rNH->BTNH", "self_attn", ("q_proj",)),
    "kv_einsum": ("BSD,Dr,rCKH->CBSKH", "self_attn", ("k_proj", "v_proj")),
    "qkv_einsum": ("BTD,Dr,rSNH->SBTNH", "self_attn", ("q_proj", "k_proj", "v_proj")),
    "attn_vec_einsum": ("BTNH,NHr,rD->BTD", "self_attn", ("o_proj",)),
}


def peft_tensors(lora_model: nnx.Module) -> tuple[dict[str, np.ndarray], list[str]]:
    """The LoRA adapters in PEFT's layout, and the transformers modules they adapt.

    PEFT adds ``scale * B @ A`` (``scale = alpha / r``, as :func:`merge_lora`) to a
    transformers weight ``[out, in]``; qwix's ``a`` / ``b`` are laid out like the Tunix
    weight. For each adapted module (key prefix ``base_model.model.model.layers.{i}.``):

        Tunix module      a            b             PEFT lora_A [r, in]     lora_B [out, r]
        q_einsum          [D, r]       [r, N, H]     a.T                     b -> [N*H, r]
        kv_einsum         [D, r]       [r, 2, K, H]  a.T (k and v share it)  b[:, c] -> [K*H, r]
        qkv_einsum        [D, r]       [r, 3, N, H]  a.T                     b[:, c] -> [N*H, r]
        attn_vec_einsum   [N, H, r]    [r, D]        a -> [r, N*H]           b.T
        mlp.*_proj        [in, r]      [r, out]      a.T                     b.T
    """
    tensors: dict[str, np.ndarray] = {}
    for path, module in nnx.iter_graph(lora_model):
        if not isinstance(module, nnx.Module) or len(path) != 4 or path[0] != "layers":
            continue
        prefix = f"base_model.model.model.layers.{path[1]}."
        for param in ("w", "kernel"):
            a, b = getattr(module, f"{param}_lora_a", None), getattr(module, f"{param}_lora_b", None)
            if a is None or b is None:
                continue
            a, b = np.asarray(a.value), np.asarray(b.value)
            rank = b.shape[0]
            if param == "kernel":  # nnx.Linear in the MLP: gate_proj / up_proj / down_proj
                pieces = [(f"mlp.{path[3]}", a.T, b.T)]
            else:
                layout = _PEFT_LAYOUT.get(str(path[3]))
                found = getattr(module, "w_lora_einsum_str", None)
                if layout is None or found != layout[0]:
                    raise ValueError(f"{'.'.join(map(str, path))}: LoRA einsum {found!r} has no PEFT "
                                     f"mapping (known: {sorted(_PEFT_LAYOUT)} as {_PEFT_LAYOUT})")
                _, block, names = layout
                if path[3] == "attn_vec_einsum":
                    pieces = [(f"{block}.o_proj", a.reshape(-1, rank).T, b.T)]
                elif len(names) == 1:
                    pieces = [(f"{block}.{names[0]}", a.T, b.reshape(rank, -1).T)]
                else:
                    pieces = [(f"{block}.{n}", a.T, b[:, c].reshape(rank, -1).T) for c, n in enumerate(names)]
            for module_name, lora_a, lora_b in pieces:
                tensors[f"{prefix}{module_name}.lora_A.weight"] = np.ascontiguousarray(lora_a)
                tensors[f"{prefix}{module_name}.lora_B.weight"] = np.ascontiguousarray(lora_b)
    modules = sorted({k.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
                      for k in tensors if k.endswith("lora_A.weight")})
    return tensors, modules


def export_adapter(lora_model: nnx.Module, cfg: ModelConfig, lora: LoraConfig,
                   out_dir: str | os.PathLike, source_dir: str | os.PathLike, *,
                   name: str | None = None) -> pathlib.Path:
    """Save the LoRA adapters alone as a PEFT directory (adapter_config.json + adapter_model.safetensors).

    Exact (the adapters' own values, no merge into bf16 weights) and small; PEFT applies
    them to the source model (``PeftModel.from_pretrained(base, out_dir)``). ``target_modules``
    name transformers' projections (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj,
    down_proj); when the adapters cover some layers only, it is a regular expression of
    the exact module names.
    """
    from safetensors.numpy import save_file

    source, out = pathlib.Path(source_dir), pathlib.Path(out_dir)
    tensors, modules = peft_tensors(lora_model)
    if not tensors:
        raise ValueError("the model has no LoRA adapters to export")
    by_layer: dict[str, set[str]] = {}
    for m in modules:  # "model.layers.3.self_attn.q_proj"
        layer, short = m.split(".")[2], m.rsplit(".", 1)[1]
        by_layer.setdefault(layer, set()).add(short)
    uniform = len(by_layer) == cfg.num_layers and len({frozenset(s) for s in by_layer.values()}) == 1
    targets: list[str] | str = (sorted(next(iter(by_layer.values()))) if uniform
                                else "|".join(re.escape(m) for m in modules))
    adapter_config = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM",
        "base_model_name_or_path": _base_model_id(cfg, source), "r": lora.rank,
        "lora_alpha": lora.alpha, "lora_dropout": 0.0, "target_modules": targets, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "use_rslora": False, "use_dora": False,
        "init_lora_weights": True, "modules_to_save": None, "layers_to_transform": None,
        "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {}, "revision": None,
    }
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(source / "tokenizer.model", vocab_size=cfg.vocab_size)
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2))
    _write_notices(out, cfg, export_readme(cfg, lora, "adapter", _base_model_id(cfg, source),
                                           stop_token_ids(tok), name=name))
    tmp = out / "adapter_model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "adapter_model.safetensors")
    return out
