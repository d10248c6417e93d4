"""Where a base model's weights come from: built (tiny), downloaded (Kaggle, Hugging Face) or given.

A GGUF file (a path, or ``pip:<package>`` for one a pip package ships) is converted once
into a Hugging Face-layout directory by :mod:`reasonkit.models._gguf_file`.

:func:`resolve_source` turns a preset's ``model.source`` into a local directory in Hugging
Face layout and :func:`load_base` loads it. The tiny base is built here
(:func:`build_tiny_checkpoint`) with the recipe of :mod:`reasonkit.models._tiny`, or taken
from the copy the repository ships; Gemma is downloaded with kagglehub or huggingface_hub,
with credentials from the notebook platform's secrets (:func:`read_platform_secrets`), and
a failed download is turned into advice.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib

import jax

from reasonkit.config import ModelConfig
from reasonkit.models import _tiny as tiny
from reasonkit.models._architecture import CheckpointError
from reasonkit.models._checkpoint import load_model, new_model, save_hf_checkpoint
from reasonkit.models._gguf_file import PIP_PREFIX, convert_gguf, packaged_gguf
from reasonkit.models._tokenizer import TOKENIZER_FILES, load_tokenizer, train_tokenizer

__all__ = ["DOWNLOAD_FILES", "cache_dir", "read_platform_secrets", "resolve_source", "load_base",
           "build_tiny_checkpoint"]


def cache_dir() -> pathlib.Path:
    """``$REASONKIT_CACHE``, else ~/.cache/reasonkit."""
    return pathlib.Path(os.environ.get("REASONKIT_CACHE", pathlib.Path.home() / ".cache" / "reasonkit"))


def read_platform_secrets(
        names: tuple[str, ...] = ("HF_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY")) -> list[str]:
    """Copy credentials from Kaggle / Colab secrets into the environment, never printing them.

    Returns the names it set (not their values).
    """
    found = []
    for name in names:
        if os.environ.get(name):
            continue
        value = None
        try:  # Kaggle notebooks
            from kaggle_secrets import UserSecretsClient  # type: ignore

            value = UserSecretsClient().get_secret(name)
        except Exception:  # noqa: BLE001 - not on Kaggle, or the secret is not attached
            pass
        if value is None:
            try:  # Colab
                from google.colab import userdata  # type: ignore

                value = userdata.get(name)
            except Exception:  # noqa: BLE001 - not on Colab, or no such secret
                pass
        if value:
            os.environ[name] = value
            found.append(name)
    return found


@contextlib.contextmanager
def _download_errors(source: str):
    """Turn a failed download (no network, no credentials, licence not accepted) into advice."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - each client raises its own zoo (requests, httpx, ...)
        raise CheckpointError(
            f"cannot download {source!r} ({type(e).__name__}: {e}). Turn the internet on "
            "(Kaggle: notebook settings), accept the Gemma licence on the model's page and set "
            "KAGGLE_USERNAME + KAGGLE_KEY or HF_TOKEN (models.read_platform_secrets() copies "
            "notebook secrets); or, offline, point the preset at a local copy: "
            'REASONKIT_OVERRIDES=\'{"model.source": "/path/to/model_dir"}\'') from e


# What a Hugging Face download fetches: the weights (with a multimodal repo's vision tower:
# one file), the configs and the tokenizer files, nothing else.
DOWNLOAD_FILES = ("config.json", "generation_config.json", "*.safetensors",
                  "model.safetensors.index.json", *TOKENIZER_FILES)


def resolve_source(cfg: ModelConfig) -> pathlib.Path:
    """A local directory holding ``cfg``'s weights: built (tiny), downloaded, or given."""
    source = cfg.source
    if source == "tiny":
        return build_tiny_checkpoint(cfg)
    if source.startswith("kaggle:"):
        import kagglehub

        with _download_errors(source):
            return pathlib.Path(kagglehub.model_download(source.removeprefix("kaggle:")))
    if source.startswith("hf:"):
        from huggingface_hub import snapshot_download

        with _download_errors(source):
            return pathlib.Path(snapshot_download(
                source.removeprefix("hf:"),
                allow_patterns=list(DOWNLOAD_FILES)))
    if source.startswith(PIP_PREFIX):  # a GGUF file a pip package ships
        gguf = packaged_gguf(source.removeprefix(PIP_PREFIX), cache_dir() / "gguf")
        return convert_gguf(gguf, cfg, cache_dir())
    path = pathlib.Path(source).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return convert_gguf(path, cfg, cache_dir())
    if not path.is_dir():
        raise CheckpointError(
            f"model source {source!r} is not 'tiny', 'kaggle:<handle>', 'hf:<repo>', "
            f"'{PIP_PREFIX}<package>', an existing .gguf file or an existing directory")
    return path


def load_base(cfg: ModelConfig, mesh: jax.sharding.Mesh | None = None):
    """``(model, tokenizer, model_dir)`` for the preset's base model."""
    path = resolve_source(cfg)
    model = load_model(path, cfg, mesh=mesh)
    return model, load_tokenizer(path / "tokenizer.model", vocab_size=cfg.vocab_size), path


def build_tiny_checkpoint(cfg: ModelConfig, *, steps: int = tiny.STEPS, seed: int = 0,
                          out_root: str | os.PathLike | None = None, force: bool = False) -> pathlib.Path:
    """The tiny base model: tokenizer + a pretraining run (:mod:`reasonkit.models._tiny`), in HF layout.

    The repo ships the result for the tiny preset in ``reasonkit/assets/tiny``
    (rebuild it with ``python -m reasonkit.models``); any other config, step count or
    seed is built on first use and cached under ``cache_dir()/tiny-<key>``.
    """
    key = tiny.key(cfg, steps, seed)
    shipped = tiny.ASSET / "pretrain.json"
    if out_root is None and not force and shipped.is_file() and json.loads(
            shipped.read_text()).get("key") == key:
        return tiny.ASSET
    out = pathlib.Path(out_root or cache_dir()) / f"tiny-{key}"
    if (out / "model.safetensors").is_file() and not force:
        return out
    tok_path = train_tokenizer(tiny.tokenizer_texts(seed), out / "tokenizer", cfg.vocab_size)
    tok = load_tokenizer(tok_path, vocab_size=cfg.vocab_size)
    records, excluded = tiny.pretraining_records(seed)
    docs = tiny.corpus(records)
    model = new_model(cfg, seed)
    losses = tiny.pretrain(model, tok, docs, steps=steps, seed=seed, seq_len=tiny.SEQ_LEN)
    save_hf_checkpoint(model, cfg, out, tok_path)
    (out / "tokenizer.vocab").unlink(missing_ok=True)
    (out / "pretrain.json").write_text(json.dumps(
        {"key": key, "steps": steps, "seed": seed, "first_loss": losses[0],
         "final_loss": losses[-1], "documents": len(docs),
         "excluded_pool_prompts": excluded, "loss_every_50": losses[::50]}, indent=2))
    return out
