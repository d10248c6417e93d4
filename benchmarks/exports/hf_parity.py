"""Loader and exports against Hugging Face transformers and PEFT (PyTorch, CPU, float32).

Needs torch and peft beside the pinned stack, which CI does not install (torch is about
190 MB); run it after changing the loader or the exports:

    .venv/bin/pip install torch peft    # CPU wheels are enough
    .venv/bin/python -m benchmarks.exports.hf_parity

For each config below it writes a random Gemma checkpoint in Hugging Face's layout (the
tiny preset's 512-piece tokenizer, so the export can write its tokenizer files), and
compares logits on sequences longer than the sliding window:

  loader     reasonkit's loader (Tunix) vs transformers on the same checkpoint
  ignored    transformers on the same weights with the config's RoPE scaling and query
             scalar dropped: what the loader computed before it read those fields
  merged     the float32 merged export reloaded in transformers vs the LoRA model in JAX
  jax        the merged export reloaded by reasonkit's loader vs the LoRA model
  peft       the adapter export applied by PEFT to the source checkpoint vs the LoRA model
  chat       the export's tokenizer (AutoTokenizer) encodes the chat as reasonkit does, and
             generate() stops at the turn end

Errors are max |a - b| / max |b| over all logits; "argmax" is the share of positions
whose top token agrees. Prints a table; exits 1 when an error passes --tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from flax import nnx
from safetensors.numpy import save_file

from reasonkit import masks, models, template
from reasonkit.config import LoraConfig, ModelConfig
from reasonkit.presets import get_preset

LORA = LoraConfig(rank=4, alpha=8.0)
SEQ = 48  # three sliding windows of 16

# name: (family, shapes, config.json fields beyond the shapes)
CASES = {
    "gemma3 (1b-like)": ("gemma3", dict(num_layers=6, embed_dim=64, num_heads=4, head_dim=16,
                                        num_kv_heads=1), {"query_pre_attn_scalar": 16}),
    "gemma3 rope x8, scalar 24": ("gemma3", dict(num_layers=6, embed_dim=96, num_heads=4, head_dim=32,
                                                 num_kv_heads=2),
                                  {"query_pre_attn_scalar": 24,
                                   "rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
    "gemma3 rope_parameters, layer_types": (
        "gemma3", dict(num_layers=7, embed_dim=64, num_heads=2, head_dim=32, num_kv_heads=2),
        {"query_pre_attn_scalar": 32,
         "layer_types": ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"],
         "rope_parameters": {
             "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 500_000.0},
             "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 20_000.0}}}),
    "gemma2 (2b-like), softcaps": ("gemma2", dict(num_layers=4, embed_dim=64, num_heads=4, head_dim=16,
                                                  num_kv_heads=2),
                                   {"query_pre_attn_scalar": 16, "final_logit_softcapping": 5.0,
                                    "attn_logit_softcapping": 3.0}),
    "gemma2 layer_types, other caps": (
        "gemma2", dict(num_layers=4, embed_dim=64, num_heads=4, head_dim=16, num_kv_heads=4),
        {"query_pre_attn_scalar": 16, "final_logit_softcapping": 8.0, "attn_logit_softcapping": None,
         "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"]}),
}


def rel(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


def agree(a, b) -> float:
    return float((np.asarray(a).argmax(-1) == np.asarray(b).argmax(-1)).mean())


def jax_logits(model, tokens):
    tokens = jnp.asarray(tokens)
    mask = tokens != 0
    logits, _ = model(tokens, masks.positions_from_mask(mask), None, masks.causal_mask(mask))
    return np.asarray(logits, np.float64)


def torch_logits(model, tokens):
    import torch

    with torch.no_grad():
        return model(torch.as_tensor(tokens)).logits.double().numpy()


def case_config(family: str, shapes: dict) -> ModelConfig:
    return ModelConfig(family=family, source="hf-parity", vocab_size=512, hidden_dim=2 * shapes["embed_dim"],
                       sliding_window=16, dtype="float32", **shapes)


def write_checkpoint(path: pathlib.Path, cfg: ModelConfig, extra: dict, tokenizer: pathlib.Path, seed=0):
    rng = np.random.default_rng(seed)
    tensors = {k: rng.normal(0, 0.05, s).astype(np.float32) for k, s in models.hf_shapes(cfg).items()}
    for k in tensors:  # norms near their trained scale, so the softcaps and windows matter
        if k.endswith("norm.weight"):
            tensors[k] = rng.normal(0.5, 0.2, tensors[k].shape).astype(np.float32)
    path.mkdir(parents=True)
    save_file(tensors, str(path / "model.safetensors"))
    fields = {"model_type": "gemma3_text" if cfg.family == "gemma3" else "gemma2",
              "architectures": ["Gemma3ForCausalLM" if cfg.family == "gemma3" else "Gemma2ForCausalLM"],
              "hidden_size": cfg.embed_dim, "intermediate_size": cfg.hidden_dim,
              "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
              "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
              "vocab_size": cfg.vocab_size, "sliding_window": cfg.sliding_window,
              "torch_dtype": "float32", **extra}
    (path / "config.json").write_text(json.dumps(fields, indent=2))
    (path / "tokenizer.model").write_bytes(tokenizer.read_bytes())


def hf_model(path, family, **kw):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                **kw).eval()


def check_case(name, family, shapes, extra, root: pathlib.Path, tokenizer: pathlib.Path):
    from peft import PeftModel

    cfg = case_config(family, shapes)
    src = root / name.replace(" ", "_").replace(",", "")
    write_checkpoint(src, cfg, extra, tokenizer)
    tokens = np.random.default_rng(1).integers(10, 512, (2, SEQ))
    tokens[:, 0] = 2  # BOS
    row = {"case": name}

    base = models.load_model(src, cfg)
    hf_base = hf_model(src, family)
    want = torch_logits(hf_base, tokens)
    row["loader"] = rel(jax_logits(base, tokens), want)
    row["loader argmax"] = agree(jax_logits(base, tokens), want)
    fields = json.loads((src / "config.json").read_text())
    plain = {k: v for k, v in fields.items() if k not in ("rope_scaling", "rope_parameters")}
    plain["query_pre_attn_scalar"] = cfg.head_dim
    if plain != fields:  # what the loader computed before it read these fields
        ign = src.parent / (src.name + "_ignored")
        ign.mkdir()
        for f in ("model.safetensors", "tokenizer.model"):
            (ign / f).symlink_to(src / f)
        (ign / "config.json").write_text(json.dumps(plain))
        row["ignored"] = rel(torch_logits(hf_model(ign, family), tokens), want)

    lora_model = models.apply_lora(base, LORA)
    lora_b = [v for path, v in nnx.iter_graph(lora_model)
              if isinstance(v, nnx.LoRAParam) and str(path[-1]).endswith("lora_b")]
    for i, v in enumerate(lora_b):  # adapters start at b = 0: give them a real delta
        v[...] = 0.02 * jax.random.normal(jax.random.key(i), v.shape)
    lora_logits = jax_logits(lora_model, tokens)
    row["lora effect"] = rel(want, lora_logits)
    merged = models.export_merged(lora_model, cfg, LORA, src.parent / (src.name + "_merged"), src)
    adapter = models.export_adapter(lora_model, cfg, LORA, src.parent / (src.name + "_adapter"), src)
    hf_merged = hf_model(merged, family)
    row["merged"] = rel(torch_logits(hf_merged, tokens), lora_logits)
    row["merged argmax"] = agree(torch_logits(hf_merged, tokens), lora_logits)
    row["jax"] = rel(jax_logits(models.load_model(merged, cfg), tokens), lora_logits)
    peft_model = PeftModel.from_pretrained(hf_model(src, family), adapter).eval()
    row["peft"] = rel(torch_logits(peft_model, tokens), lora_logits)
    row["adapter KB"] = (adapter / "adapter_model.safetensors").stat().st_size / 1024
    row["chat"] = check_chat(merged, hf_merged)
    return row


def check_chat(path, hf):
    """The tokenizer encodes as reasonkit does, and generate() ends at <end_of_turn>."""
    import torch
    from transformers import AutoTokenizer, LogitsProcessor, LogitsProcessorList

    tok = AutoTokenizer.from_pretrained(path)
    sp = models.load_tokenizer(path / "tokenizer.model")
    q = "Sort 3 1 2 from smallest to largest."
    messages = [{"role": "user", "content": f"{template.INSTRUCTION}\n{q}"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True,
                                  return_tensors="pt")["input_ids"]
    same = ids[0].tolist() == [sp.bos_id()] + sp.EncodeAsIds(template.format_prompt(q))
    # Random weights never choose <end_of_turn>: force it as the first token; generate() must
    # then stop there, through the export's generation_config.json alone.
    eot = sp.PieceToId(template.END_OF_TURN)

    class ForceEndOfTurn(LogitsProcessor):
        def __call__(self, input_ids, scores):
            forced = torch.full_like(scores, -float("inf"))
            forced[:, eot] = 0.0
            return forced

    out = hf.generate(ids, max_new_tokens=5, do_sample=False,
                      logits_processor=LogitsProcessorList([ForceEndOfTurn()]))
    stops = out.shape[1] == ids.shape[1] + 1 and int(out[0, -1]) == eot
    return "ok" if same and stops else f"ids {'ok' if same else 'DIFFER'}, stop {'ok' if stops else 'NO'}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args(argv)
    import torch

    torch.manual_seed(0)
    tiny = models.resolve_source(get_preset("tiny").model) / "tokenizer.model"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (family, shapes, extra) in CASES.items():
            rows.append(check_case(name, family, shapes, extra, pathlib.Path(tmp), tiny))
            print(rows[-1], flush=True)
    cols = ["case", "loader", "loader argmax", "ignored", "lora effect", "merged", "merged argmax", "jax",
            "peft", "adapter KB", "chat"]
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        cells = [r.get(c, "-") for c in cols]
        print("| " + " | ".join(f"{c:.2e}" if isinstance(c, float) and c < 0.5 else
                                f"{c:.3f}" if isinstance(c, float) else str(c) for c in cells) + " |")
    bad = [(r["case"], k, r[k]) for r in rows for k in ("loader", "merged", "jax", "peft")
           if r[k] > args.tolerance] + [(r["case"], "chat", r["chat"]) for r in rows if r["chat"] != "ok"]
    for case, key, value in bad:
        print(f"FAIL {case}: {key} = {value}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
