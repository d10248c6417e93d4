"""Upload an export to the Hugging Face Hub or to Kaggle Models, once: ``python -m reasonkit push``.

An export directory (:mod:`reasonkit.models._export`: merged, adapter or GGUF) goes up
whole: its weights, its model card (README.md, whose metadata names the licence) and its
licence file (NOTICE for a model made from Gemma, LICENSE for the tiny model). Where to:

    hf:<owner>/<name>                               a Hugging Face model repository
    kaggle:<owner>/<model>/<framework>/<variation>  a Kaggle Models variation (each push a version)

:func:`plan_push` checks that the export is complete (naming what is missing) and says
what would go where, without the network (a dry run). :func:`push` then checks the
credentials (HF_TOKEN; KAGGLE_USERNAME and KAGGLE_KEY, or KAGGLE_API_TOKEN; on Kaggle and
Colab they are notebook secrets), uploads with huggingface_hub or kagglehub, and records the
push in the export's ``pushed.json``: where, when, and each file's sha256. The same files
are not pushed to the same place twice unless ``force=True``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pathlib
import re

from reasonkit.models._export import EXPORT_KINDS, GEMMA_NOTICE
from reasonkit.models._gguf_file import file_sha256
from reasonkit.models._sources import read_platform_secrets

__all__ = ["RECORD", "HUBS", "REQUIRED", "LICENCE_FILES", "KAGGLE_LICENCES", "PushError", "PushPlan",
           "parse_destination", "check_export", "plan_push", "credentials_problem", "push"]

RECORD = "pushed.json"  # in the export directory: every push made from it, never uploaded
HUBS = {"hf": "the Hugging Face Hub", "kaggle": "Kaggle Models"}
# The files each kind of export needs besides its model card and licence file (a GGUF
# export also needs the .gguf file its Modelfile names).
REQUIRED = {
    "merged": ("config.json", "generation_config.json", "model.safetensors", "tokenizer.model",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"),
    "adapter": ("adapter_config.json", "adapter_model.safetensors"),
    "gguf": ("Modelfile",),
}
# The model card's licence (its metadata's `license:`, the Hub's names) -> the file that must ship.
LICENCE_FILES = {"gemma": "NOTICE", "apache-2.0": "LICENSE"}
KAGGLE_LICENCES = {"gemma": "Gemma", "apache-2.0": "Apache 2.0"}  # as Kaggle Models names them
_HF_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_KAGGLE_SLUG = re.compile(r"^[A-Za-z0-9][\w.-]*$")


class PushError(RuntimeError):
    """A push that cannot go ahead: says which export or destination, and what to do."""


def parse_destination(to: str) -> tuple[str, str]:
    """``(hub, handle)`` of a destination.

    >>> parse_destination("hf:me/reasonkit-grpo")
    ('hf', 'me/reasonkit-grpo')
    >>> parse_destination("kaggle:me/reasonkit/transformers/tiny")
    ('kaggle', 'me/reasonkit/transformers/tiny')
    """
    hub, _, handle = to.partition(":")
    if hub == "hf" and _HF_REPO.match(handle):
        return hub, handle
    parts = handle.split("/")
    if hub == "kaggle" and len(parts) == 4 and all(_KAGGLE_SLUG.match(p) for p in parts):
        return hub, handle
    raise PushError(f"destination {to!r}: not 'hf:<owner>/<name>' or "
                    "'kaggle:<owner>/<model>/<framework>/<variation>'")


def _card_licence(readme: pathlib.Path) -> str | None:
    """The ``license:`` of the model card's metadata block (between the leading ``---`` lines)."""
    lines = readme.read_text().splitlines()
    if not lines or lines[0] != "---" or "---" not in lines[1:]:
        return None
    for line in lines[1:lines.index("---", 1)]:
        key, _, value = line.partition(":")
        if key.strip() == "license":
            return value.strip()
    return None


def _files(export_dir: pathlib.Path) -> list[pathlib.Path]:
    """What an upload carries: every file but the push record and hidden files (relative paths)."""
    return sorted(p.relative_to(export_dir) for p in export_dir.rglob("*")
                  if p.is_file() and p.name != RECORD
                  and not any(part.startswith(".") for part in p.relative_to(export_dir).parts))


def check_export(export_dir: str | os.PathLike) -> tuple[str, str, list[pathlib.Path]]:
    """``(kind, licence, files)`` of a complete export directory; a PushError naming what is missing.

    The kind is read from the files there (adapter_config.json: adapter; a Modelfile or
    .gguf file: gguf; config.json or model.safetensors: merged), the licence from the model
    card's metadata. A ``*.tmp`` file is an export still being written, or one that stopped.
    """
    path = pathlib.Path(export_dir)
    if not path.is_dir():
        raise PushError(f"{path}: no such export directory")
    files = _files(path)
    names = {f.as_posix() for f in files}
    if "adapter_config.json" in names or "adapter_model.safetensors" in names:
        kind = "adapter"
    elif "Modelfile" in names or any(n.endswith(".gguf") for n in names):
        kind = "gguf"
    elif "config.json" in names or "model.safetensors" in names:
        kind = "merged"
    else:
        raise PushError(f"{path}: not a reasonkit export (no model.safetensors, adapter_model.safetensors "
                        f"or .gguf file); one of {EXPORT_KINDS} from reasonkit.models._export")
    missing = [n for n in (*REQUIRED[kind], "README.md") if n not in names]
    missing += [f"{n} (a file still being written, or an export that stopped: export again)"
                for n in sorted(names) if n.endswith(".tmp")]
    if kind == "gguf" and "Modelfile" in names:
        found = re.search(r"^FROM\s+(\S+)", (path / "Modelfile").read_text(), re.M)
        weights = found.group(1).removeprefix("./") if found else "<the .gguf file>"
        if weights not in names:
            missing.append(f"{weights} (the Modelfile's FROM)")
    licence = _card_licence(path / "README.md") if "README.md" in names else None
    if "README.md" in names and licence not in LICENCE_FILES:
        missing.append(f"README.md's licence (its metadata says license: {licence}; one of "
                       f"{sorted(LICENCE_FILES)} expected: an export older than reasonkit's model "
                       "cards, export again)")
    elif licence and LICENCE_FILES[licence] not in names:
        missing.append(f"{LICENCE_FILES[licence]} (the {licence} licence's file"
                       + (f": {GEMMA_NOTICE!r}" if licence == "gemma" else "") + ")")
    if missing:
        raise PushError(f"{path}: an incomplete {kind} export, missing " + "; ".join(missing))
    return kind, licence, files


def _records(export_dir: pathlib.Path) -> list[dict]:
    path = export_dir / RECORD
    if not path.is_file():
        return []
    try:
        return list(json.loads(path.read_text())["pushes"])
    except (ValueError, KeyError, TypeError) as e:
        raise PushError(f"{path}: not a push record ({type(e).__name__}: {e}); move it away to "
                        "push again") from e


def _size(n: int) -> str:
    """``n`` bytes for people: 512 B, 7.8 kB, 2.0 GB."""
    value, units = float(n), ["B", "kB", "MB", "GB", "TB"]
    while value >= 1000 and len(units) > 1:
        value, units = value / 1000, units[1:]
    return f"{n} B" if units[0] == "B" else f"{value:.1f} {units[0]}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class PushPlan:
    """What a push sends where: an export's files and their sha256, and whether it went already."""

    export_dir: pathlib.Path
    to: str  # "hf:<owner>/<name>" or "kaggle:<owner>/<model>/<framework>/<variation>"
    kind: str  # merged / adapter / gguf
    licence: str  # the model card's: "gemma" or "apache-2.0"
    files: dict[str, tuple[int, str]]  # relative path -> (bytes, sha256)
    pushed_at: str | None = None  # when these same files went to the same place, if they did
    status: str = "planned"  # then "dry run", "pushed" or "already pushed"
    credentials: str | None = None  # None: found; else what to add

    @property
    def hub(self) -> str:
        return parse_destination(self.to)[0]

    @property
    def handle(self) -> str:
        return parse_destination(self.to)[1]

    @property
    def url(self) -> str:
        if self.hub == "hf":
            return f"https://huggingface.co/{self.handle}"
        return f"https://www.kaggle.com/models/{self.handle}"

    def describe(self) -> str:
        """The plan in words: where, each file with its size, and what stands in the way."""
        total = sum(size for size, _ in self.files.values())
        width = max(len(name) for name in self.files)
        lines = [f"{self.status}: {self.export_dir} ({self.kind} export, licence {self.licence}) -> "
                 f"{HUBS[self.hub]} {self.handle}, {self.url}",
                 f"  {len(self.files)} files, {_size(total)}:"]
        lines += [f"    {name.ljust(width)}  {_size(size):>9}  sha256 {digest[:12]}"
                  for name, (size, digest) in self.files.items()]
        if self.pushed_at:
            lines.append(f"  these files went there already, at {self.pushed_at} ({RECORD}); "
                         "force=True (--force) pushes them again")
        if self.credentials:
            lines.append(f"  credentials: {self.credentials}")
        return "\n".join(lines)


def plan_push(export_dir: str | os.PathLike, to: str) -> PushPlan:
    """What :func:`push` would do, without the network: the export checked complete, its files
    hashed, and whether the same files went to ``to`` before (its ``pushed.json``)."""
    parse_destination(to)
    path = pathlib.Path(export_dir)
    kind, licence, files = check_export(path)
    hashed = {f.as_posix(): ((path / f).stat().st_size, file_sha256(path / f)) for f in files}
    digests = {name: digest for name, (_, digest) in hashed.items()}
    before = [r for r in _records(path) if r.get("to") == to and r.get("files") == digests]
    return PushPlan(export_dir=path, to=to, kind=kind, licence=licence, files=hashed,
                    pushed_at=before[-1].get("at") if before else None)


def credentials_problem(hub: str) -> str | None:
    """None when ``hub``'s credentials are there (notebook secrets copied in first); else what
    to add, and where. Reads no value out."""
    if hub == "hf":
        read_platform_secrets(("HF_TOKEN",))
        import huggingface_hub

        if huggingface_hub.get_token():
            return None
        return ("no Hugging Face token: add a secret named HF_TOKEN holding a token with write access "
                "(huggingface.co/settings/tokens): on Kaggle, Add-ons > Secrets, attached to this "
                "notebook; on Colab, the key icon, with notebook access on; elsewhere "
                "`export HF_TOKEN=...` or `hf auth login`")
    read_platform_secrets(("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"))
    from kagglehub import config as kaggle_config

    if kaggle_config.get_kaggle_credentials():
        return None
    return ("no Kaggle credentials: add secrets named KAGGLE_USERNAME and KAGGLE_KEY (kaggle.com > "
            "Settings > API > Create New Token gives both; or one named KAGGLE_API_TOKEN): on Kaggle, "
            "Add-ons > Secrets, attached to this notebook; on Colab, the key icon, with notebook access "
            "on; elsewhere export them, or put kaggle.json in ~/.kaggle")


def _upload(plan: PushPlan, message: str, private: bool) -> str:
    """Send the plan's files; returns where they landed (a commit's URL, or the model's)."""
    ignore = [RECORD, ".*", "*/.*"]  # what _files leaves out (fnmatch: * spans /), for both clients
    if plan.hub == "hf":
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(plan.handle, repo_type="model", private=private, exist_ok=True)
        info = api.upload_folder(repo_id=plan.handle, repo_type="model", folder_path=str(plan.export_dir),
                                 commit_message=message, ignore_patterns=ignore)
        return getattr(info, "commit_url", None) or plan.url
    import kagglehub

    kagglehub.model_upload(plan.handle, str(plan.export_dir), license_name=KAGGLE_LICENCES[plan.licence],
                           version_notes=message, ignore_patterns=ignore)
    return plan.url


def push(export_dir: str | os.PathLike, to: str, *, dry_run: bool = False, force: bool = False,
         private: bool = False, message: str | None = None) -> PushPlan:
    """Upload the export in ``export_dir`` to ``to`` (``hf:...`` or ``kaggle:...``), once.

    Prints the plan (:meth:`PushPlan.describe`) and returns it with its ``status``:
    ``"dry run"`` (nothing sent; missing credentials said, not raised), ``"already pushed"``
    (the same files went to ``to`` before; ``force=True`` sends them again) or ``"pushed"``.
    An incomplete export, a malformed destination or missing credentials raise a PushError
    naming what to fix. ``private`` makes a new Hugging Face repository private.
    """
    plan = plan_push(export_dir, to)
    problem = credentials_problem(plan.hub)
    if dry_run:
        plan = dataclasses.replace(plan, status="dry run", credentials=problem and (
            f"none found, a push would stop here: {problem}"))
        print(plan.describe())
        return plan
    if plan.pushed_at and not force:
        plan = dataclasses.replace(plan, status="already pushed")
        print(plan.describe())
        return plan
    if problem:
        raise PushError(f"cannot push {plan.export_dir} to {to}: {problem}")
    message = message or f"reasonkit {plan.kind} export ({plan.export_dir.name})"
    where = _upload(plan, message, private)
    record = {"to": to, "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "url": where, "files": {name: digest for name, (_, digest) in plan.files.items()}}
    records = _records(plan.export_dir) + [record]
    (plan.export_dir / RECORD).write_text(json.dumps({"pushes": records}, indent=2) + "\n")
    plan = dataclasses.replace(plan, status="pushed", pushed_at=record["at"])
    print(plan.describe() + f"\n  landed at {where}")
    return plan
