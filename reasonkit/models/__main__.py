"""Rebuild the shipped tiny base model: ``python -m reasonkit.models [out_root]``.

Pretrains the tiny preset's base from scratch with the recipe of
:mod:`reasonkit.models._tiny` (:func:`reasonkit.models._sources.build_tiny_checkpoint` with
``force=True``, built under ``out_root`` or the cache) and copies the files the package
ships into ``reasonkit/assets/tiny`` (:data:`reasonkit.models._tiny.ASSET`).
"""

from __future__ import annotations

import shutil
import sys

from reasonkit.models import _tiny as tiny
from reasonkit.models._sources import build_tiny_checkpoint
from reasonkit.presets import get_preset

__all__ = ["main"]

SHIPPED = ("config.json", "model.safetensors", "tokenizer.model", "pretrain.json")


def main(argv: list[str]) -> None:
    """Build the tiny checkpoint under ``argv[0]`` (else the cache) and copy it into the package."""
    built = build_tiny_checkpoint(get_preset("tiny").model, force=True,
                                  out_root=argv[0] if argv else None)
    tiny.ASSET.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED:
        shutil.copy(built / name, tiny.ASSET / name)
    print(f"tiny checkpoint -> {tiny.ASSET}")


if __name__ == "__main__":
    main(sys.argv[1:])
