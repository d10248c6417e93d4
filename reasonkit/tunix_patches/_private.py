"""Reading and setting Tunix's private attributes, with an error that names the version.

Written for google-tunix 0.1.7, the version requirements.txt and pyproject.toml pin. Every
private attribute of Tunix that a patch reads or sets goes through :func:`tunix_private` /
:func:`set_tunix_private`, so a Tunix that renamed one fails at once with the attribute's
name and both versions, instead of deep inside a stage.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

__all__ = ["TUNIX_PINNED", "tunix_version", "tunix_private", "set_tunix_private"]


TUNIX_PINNED = "0.1.7"


_MISSING = object()


def tunix_version() -> str:
    """The installed google-tunix version, or ``"not installed"``."""
    try:
        return importlib.metadata.version("google-tunix")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _private_error(obj: Any, path: str, holder: Any, name: str) -> AttributeError:
    where = type(holder).__module__ + "." + type(holder).__name__
    inside = "" if holder is obj else f" (reached from a {type(obj).__name__})"
    return AttributeError(
        f"Tunix private attribute {path!r} not found: a {where}{inside} has no {name!r}. "
        f"reasonkit reaches into this private part of Tunix as google-tunix {TUNIX_PINNED} "
        f"has it; installed: google-tunix {tunix_version()}. Install google-tunix=="
        f"{TUNIX_PINNED} (requirements.txt), or update reasonkit for this version.")


def tunix_private(obj: Any, path: str) -> Any:
    """``obj.<path>`` for a dotted ``path`` into Tunix's private attributes (Tunix 0.1.7).

    A missing attribute raises an AttributeError naming the path, the type that lacks
    it and the pinned and installed Tunix versions.

    >>> class Trainer: _ref_model_exists = True
    >>> tunix_private(Trainer(), "_ref_model_exists")
    True
    >>> tunix_private(Trainer(), "_sampler._transformer_graphdef")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AttributeError: Tunix private attribute '_sampler._transformer_graphdef' not found: ...
    """
    value = obj
    for name in path.split("."):
        holder, value = value, getattr(value, name, _MISSING)
        if value is _MISSING:
            raise _private_error(obj, path, holder, name)
    return value


def set_tunix_private(obj: Any, path: str, value: Any) -> None:
    """Set ``obj.<path>`` (:func:`tunix_private`'s dotted path) to ``value``.

    Only an attribute Tunix has: setting one it lacks would change nothing Tunix reads,
    so that raises :func:`tunix_private`'s error too.
    """
    head, _, name = path.rpartition(".")
    holder = tunix_private(obj, head) if head else obj
    if getattr(holder, name, _MISSING) is _MISSING:
        raise _private_error(obj, path, holder, name)
    setattr(holder, name, value)
