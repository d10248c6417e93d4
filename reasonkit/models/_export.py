"""Exports: directories that transformers, PEFT, llama.cpp, Ollama and LM Studio load.

A merged export (:func:`export_merged`) is a whole model: the source checkpoint's own
config.json (only the dtype, and for a multimodal Gemma 3 the text-only architecture,
change), a generation_config.json that stops at the turn end, the source's tokenizer files
(or ones written from tokenizer.model). An adapter export (:func:`export_adapter`) is
PEFT's adapter_config.json + adapter_model.safetensors: exact (no bf16 merge rounding) and
small, applied to the source model. A GGUF export (:func:`export_gguf`) is the merged model
as one GGUF file (f16 or q8_0; chat template and stop token inside) with an Ollama
Modelfile beside it.

Each also holds a model card (README.md: the Hub's metadata, how to prompt and load it,
which runtimes were checked and how) and the licence: the Gemma notice (NOTICE) for a
model made from Gemma, reasonkit's Apache-2.0 LICENSE for the tiny model, which holds no
Gemma weights. The weights file is written last: its presence means the export is complete.
"""

from __future__ import annotations

import importlib.metadata
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
from reasonkit.models._architecture import _text_part, read_config_json
from reasonkit.models._checkpoint import to_hf_tensors
from reasonkit.models._gguf_file import GGUF_TYPES, write_gguf_tensors
from reasonkit.models._lora import merge_lora
from reasonkit.models._tokenizer import export_tokenizer, load_tokenizer, stop_token_ids

__all__ = ["GEMMA_NOTICE", "EXPORT_KINDS", "export_licence", "export_config", "export_generation_config",
           "export_readme", "export_merged", "peft_tensors", "export_adapter", "gguf_file_name",
           "OLLAMA_TEMPLATE", "ollama_modelfile", "export_gguf"]


GEMMA_NOTICE = ("Gemma is provided under and subject to the Gemma Terms of Use found at "
                "ai.google.dev/gemma/terms")
EXPORT_KINDS = ("merged", "adapter", "gguf")


def export_licence(cfg: ModelConfig) -> str:
    """The licence of an export of ``cfg``, as the Hugging Face Hub names it: ``"gemma"`` for a
    model made from Gemma, ``"apache-2.0"`` for the tiny model (reasonkit's own, no Gemma weights)."""
    return "apache-2.0" if cfg.source == "tiny" else "gemma"


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


def _front_matter(cfg: ModelConfig, kind: str) -> list[str]:
    """The model card's metadata block, which the Hugging Face Hub reads (licence, base model, tags)."""
    lines = ["---", f"license: {export_licence(cfg)}"]
    if cfg.source.startswith("hf:"):  # the Hub links the card to its base model
        lines.append(f"base_model: {cfg.source.removeprefix('hf:')}")
    library = {"merged": "transformers", "adapter": "peft"}.get(kind)
    if library:
        lines.append(f"library_name: {library}")
    tags = ["reasonkit", cfg.family, "lora", *(["gguf"] if kind == "gguf" else [])]
    return lines + ["pipeline_tag: text-generation", "tags:", *(f"- {t}" for t in tags), "---", ""]


# How each kind of export was checked, for its README: what read it, and against what.
_CHECKED = {
    "merged": [
        "reasonkit (Tunix): reloaded, it gives the LoRA model's logits; transformers' AutoTokenizer "
        "encodes the chat as reasonkit does (reasonkit's tests, every CI run).",
        "transformers: the same logits as reasonkit on random Gemma 2 and Gemma 3 checkpoints, float32, "
        "and `generate` stops at the turn end (reasonkit's `benchmarks/exports/hf_parity.py`, run by "
        "hand: it needs PyTorch).",
    ],
    "adapter": [
        "reasonkit: W + alpha / r * B @ A on the source's weights is the merged export (every CI run).",
        "PEFT: applied to the source checkpoint, it gives the merged model's logits (reasonkit's "
        "`benchmarks/exports/hf_parity.py`, run by hand: it needs PyTorch).",
    ],
    "gguf": [
        "reasonkit's own GGUF reader: the file converts back to the merged weights, to f16's or q8_0's "
        "rounding (every CI run).",
        "transformers' GGUF loader: an f16 file of a random Gemma 3 with head_dim 256 gives the LoRA "
        "model's logits within a relative error of 2e-3, and transformers and reasonkit read f16 and "
        "q8_0 files alike (reasonkit's `benchmarks/exports/gguf_export.py`, run by hand: it needs "
        "PyTorch). transformers assumes query_pre_attn_scalar 256: for another head_dim, pass "
        "`query_pre_attn_scalar=<head_dim>` to `from_pretrained` (checked on the tiny model, same "
        "benchmark).",
        "Ollama's template: Go's text/template, Ollama's engine, renders the Modelfile's TEMPLATE as the "
        "chat template's text (same benchmark).",
        "Not run by reasonkit: llama.cpp, Ollama and LM Studio themselves. The file follows llama.cpp's "
        "Gemma conventions as its converter writes them and its loader reads them.",
    ],
}


def _commented(commands: list[tuple[str, str]]) -> list[str]:
    """Shell commands with their comments aligned in one column."""
    width = max(len(c) for c, note in commands if note) + 2
    return [f"{c.ljust(width)}# {note}" if note else c for c, note in commands]


def export_readme(cfg: ModelConfig, lora: LoraConfig, kind: str, base: str, stops: list[int], *,
                  name: str | None = None, gguf_file: str | None = None) -> str:
    """The README.md of an export (``kind`` one of :data:`EXPORT_KINDS`): a model card with the
    Hub's metadata, what it is, how to prompt and load it, which runtimes were checked, licence."""
    if kind not in EXPORT_KINDS:
        raise ValueError(f"kind={kind!r}: must be one of {EXPORT_KINDS}")
    family = {"gemma3": "Gemma 3", "gemma2": "Gemma 2"}[cfg.family]
    eager = ', attn_implementation="eager"' if cfg.family == "gemma2" else ""
    vllm_rank = max(8, 1 << (lora.rank - 1).bit_length())  # vLLM takes powers of two from 8
    what = {"merged": f"the base model with the LoRA adapters merged into its weights ({cfg.dtype})",
            "adapter": f"LoRA adapters in PEFT's format (exact values), for the base `{base}`",
            "gguf": f"the base model with the LoRA adapters merged in, as one GGUF file (`{gguf_file}`) "
                    "for llama.cpp, Ollama and LM Studio"}[kind]
    lines = [*_front_matter(cfg, kind), f"# {name or 'reasonkit export'}", "",
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
            "llama.cpp, Ollama, LM Studio: reasonkit writes the GGUF file and an Ollama Modelfile "
            "itself (its GGUF export, `grpo/gguf` beside this folder when 05_grpo made one).", ""]
    elif kind == "adapter":
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
            "`model.merge_and_unload()` gives a plain transformers model.", ""]
    else:
        lines += [
            "## Run it", "",
            "The file holds the chat template, and marks "
            f"`{template.END_OF_TURN}` as the end of the model's turn, where generation stops.", "",
            "```bash", *_commented([
                (f"llama-cli -m {gguf_file}", "llama.cpp: a chat in the terminal"),
                (f"llama-server -m {gguf_file} --jinja", "llama.cpp: an OpenAI-compatible chat API"),
                ("ollama create reasonkit -f Modelfile", "Ollama: from the Modelfile beside this README"),
                ('ollama run reasonkit "<the instruction, a newline, the question>"', "")]), "```", "",
            f"LM Studio: load `{gguf_file}`; it reads the chat template from the file.", ""]
    lines += ["## Checked", "", *(f"- {line}" for line in _CHECKED[kind])]
    if kind == "merged":
        lines += ["- Not run by reasonkit: vLLM, which reads this layout "
                  "(`vllm serve path/to/this/folder`)."]
    elif kind == "adapter":
        lines += [f"- Not run by reasonkit: vLLM's LoRA serving (`vllm serve {base} --enable-lora "
                  f"--max-lora-rank {vllm_rank} --lora-modules reasonkit=path/to/this/folder`)."]
    lines += ["", "## Licence", ""]
    if cfg.source == "tiny":
        lines += ["reasonkit pretrained this model from scratch on its synthetic tasks (Gemma 3's "
                  "architecture, no Gemma weights); it is Apache-2.0, like reasonkit (LICENSE).", ""]
    else:
        lines += [f"{GEMMA_NOTICE}.", "",
                  f"This is a Model Derivative of Gemma: reasonkit modified `{cfg.source}` by "
                  "fine-tuning (LoRA). Whoever you share it with is bound by the Gemma Terms of Use, "
                  "including the use restrictions of the Gemma Prohibited Use Policy "
                  "(ai.google.dev/gemma/prohibited_use_policy); pass the terms on with it.", ""]
    return "\n".join(lines)


def _reasonkit_licence() -> str:
    """reasonkit's Apache-2.0 LICENSE text: the checkout's, or the one installed with the package."""
    found = [pathlib.Path(__file__).resolve().parents[2] / "LICENSE"]
    try:
        found += [f.locate() for f in importlib.metadata.distribution("reasonkit").files or []
                  if f.name == "LICENSE"]
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
        pass
    for path in found:
        text = pathlib.Path(path).read_text() if pathlib.Path(path).is_file() else ""
        if "Apache License" in text and "Version 2.0" in text:
            return text
    return "Apache License, Version 2.0: https://www.apache.org/licenses/LICENSE-2.0\n"


def _write_notices(out: pathlib.Path, cfg: ModelConfig, readme: str) -> None:
    """The model card, and the licence: the Gemma notice, or reasonkit's LICENSE for tiny."""
    (out / "README.md").write_text(readme)
    if cfg.source != "tiny":  # the Gemma Terms ask for the notice in a "Notice" text file
        (out / "NOTICE").write_text(GEMMA_NOTICE + "\n")
    else:
        (out / "LICENSE").write_text(_reasonkit_licence())


def _merged_tensors(lora_model: nnx.Module, cfg: ModelConfig, lora: LoraConfig) -> dict[str, np.ndarray]:
    """Base + merged LoRA in Hugging Face's names, merged in a copy (the LoRA model is left as it is)."""
    graph, state = nnx.split(lora_model)
    copy = nnx.merge(graph, jax.tree.map(lambda x: x, state))
    merge_lora(copy, lora)
    return to_hf_tensors(copy, cfg)


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
    tmp = out / "model.safetensors.tmp"
    save_file(_merged_tensors(lora_model, cfg, lora), str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    return out


def gguf_file_name(kind: str) -> str:
    """The GGUF file's name in a GGUF export of tensor type ``kind``: ``model-f16.gguf``."""
    if kind not in GGUF_TYPES:
        raise ValueError(f"kind={kind!r}: must be one of {GGUF_TYPES}")
    return f"model-{kind}.gguf"


# Gemma's turn format in Go's text/template, which Ollama runs: the chat template's text for
# every conversation it accepts (a system message opens the next user turn; the model's turn is
# opened at the end). BOS is not written: Ollama adds it, as the GGUF file asks (add_bos_token).
OLLAMA_TEMPLATE = (
    '{{- $prefix := "" }}{{ range .Messages }}'
    '{{ if eq .Role "system" }}{{ $prefix = printf "%s\\n\\n" .Content }}'
    '{{ else }}<sot>{{ if eq .Role "assistant" }}model{{ else }}{{ .Role }}{{ end }}\n'
    '{{ $prefix }}{{ .Content }}<eot>\n{{ $prefix = "" }}{{ end }}'
    '{{ end }}<sot>model\n'
).replace("<sot>", template.START_OF_TURN).replace("<eot>", template.END_OF_TURN)


def ollama_modelfile(gguf_file: str, cfg: ModelConfig) -> str:
    """An Ollama Modelfile for the GGUF file ``gguf_file`` beside it: the file, Gemma's turn
    format (:data:`OLLAMA_TEMPLATE`), the stop at the turn end, and the licence."""
    licence = (GEMMA_NOTICE if cfg.source != "tiny" else
               "Apache-2.0 (reasonkit's tiny model: no Gemma weights); see LICENSE beside this file")
    return "\n".join([
        "# Ollama: `ollama create reasonkit -f Modelfile`, then `ollama run reasonkit`.",
        f"# {licence}",
        f"FROM ./{gguf_file}",
        f'TEMPLATE """{OLLAMA_TEMPLATE}"""',
        f'PARAMETER stop "{template.END_OF_TURN}"',
        f'LICENSE """{licence}"""', ""])


def export_gguf(lora_model: nnx.Module, cfg: ModelConfig, lora: LoraConfig,
                out_dir: str | os.PathLike, source_dir: str | os.PathLike, *,
                name: str | None = None, kind: str = "f16") -> pathlib.Path:
    """Save base + merged LoRA as one GGUF file for llama.cpp, Ollama and LM Studio, with a Modelfile.

    The arguments are :func:`export_merged`'s, plus the tensor type ``kind`` ("f16", or
    "q8_0": llama.cpp's 8-bit blocks, half the size; "f32" too). ``out_dir`` gets
    ``model-<kind>.gguf`` (:func:`~reasonkit.models._gguf_file.write_gguf_tensors`: the
    config's shapes and RoPE, the tokenizer, the chat template of the source or reasonkit's,
    ``<end_of_turn>`` as the end of turn), an Ollama ``Modelfile``, the model card and the
    licence. The GGUF file is written last, so its presence means the export is complete.
    """
    source, out = pathlib.Path(source_dir), pathlib.Path(out_dir)
    file = gguf_file_name(kind)
    out.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(source / "tokenizer.model", vocab_size=cfg.vocab_size)
    (out / "Modelfile").write_text(ollama_modelfile(file, cfg))
    base = _base_model_id(cfg, source)
    _write_notices(out, cfg, export_readme(cfg, lora, "gguf", base, stop_token_ids(tok), name=name,
                                           gguf_file=file))
    write_gguf_tensors(_merged_tensors(lora_model, cfg, lora), export_config(source, cfg), source, cfg,
                       out / file, kind, name=name or "reasonkit export", license=export_licence(cfg),
                       base_model=base if cfg.source.startswith("hf:") else cfg.source)
    return out


# qwix's adapter layouts (see :func:`reasonkit.models._lora.merge_lora`) and the transformers
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
