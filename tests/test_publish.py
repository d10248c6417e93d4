"""Pushing an export to the Hugging Face Hub or Kaggle Models, up to the network.

The exports are written by hand with the exporters' own card and Modelfile (no model is
built); the clients' methods that would reach the network are replaced by recorders, so
what is checked is what huggingface_hub and kagglehub would be asked to send, in their own
terms (their ignore-pattern filters, kagglehub's handle parsing).
"""

import dataclasses
import hashlib
import json
import sys
import types

import pytest

from reasonkit import models
from reasonkit.config import ModelConfig
from reasonkit.models import _export as export
from reasonkit.models import _publish as publish
from reasonkit.presets import get_preset

TINY = get_preset("tiny")
GEMMA = dataclasses.replace(TINY.model, source="hf:google/gemma-3-1b-it")


def write_export(path, cfg: ModelConfig, kind: str = "gguf"):
    """An export directory as the exporters leave it: card, licence file, the kind's files."""
    path.mkdir(parents=True)
    gguf = export.gguf_file_name("f16")
    (path / "README.md").write_text(export.export_readme(cfg, TINY.lora, kind, "base", [1, 106],
                                                         name="run x", gguf_file=gguf))
    (path / ("LICENSE" if cfg.source == "tiny" else "NOTICE")).write_text("licence\n")
    if kind == "gguf":
        (path / "Modelfile").write_text(export.ollama_modelfile(gguf, cfg))
        (path / gguf).write_bytes(b"GGUF" + bytes(100))
    else:
        for name in publish.REQUIRED[kind]:
            (path / name).write_text("{}")
    return path


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    clear_credentials(tmp_path, monkeypatch)


def clear_credentials(tmp_path, monkeypatch):
    """No token in the environment, in huggingface_hub's token file or in ~/.kaggle."""
    import huggingface_hub.constants

    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-hf-token"))
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path / "no-kaggle"))
    monkeypatch.setenv("HOME", str(tmp_path))  # kagglesdk also reads ~/.kaggle/access_token


@pytest.fixture
def hub(monkeypatch, no_credentials):
    """HfApi with its two network calls recorded: ``calls`` holds (method, kwargs)."""
    from huggingface_hub import CommitInfo, HfApi

    calls = []

    def create_repo(self, repo_id, **kw):
        calls.append(("create_repo", {"repo_id": repo_id, **kw}))

    def upload_folder(self, **kw):
        calls.append(("upload_folder", kw))
        return CommitInfo(commit_url=f"https://huggingface.co/{kw['repo_id']}/commit/abc", commit_message="m",
                          commit_description="", oid="abc")

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    return calls


def sent_to_hub(call, folder):
    """The files huggingface_hub's own filter lets through ``upload_folder``'s ignore patterns."""
    from huggingface_hub.utils import filter_repo_objects

    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return sorted(filter_repo_objects(names, ignore_patterns=call["ignore_patterns"]))


def test_destinations_are_checked_before_anything_else(tmp_path):
    for bad in ("me/x", "hf:me", "hf:me/x/y", "kaggle:me/x", "kaggle:me/x/transformers/", "s3:me/x"):
        with pytest.raises(publish.PushError, match=rf"destination '{bad}': not 'hf:<owner>/<name>' or "
                                                    r"'kaggle:<owner>/<model>/<framework>/<variation>'"):
            publish.plan_push(tmp_path, bad)


def test_a_complete_export_is_planned_with_its_card_and_licence(tmp_path):
    out = write_export(tmp_path / "gguf", TINY.model)
    kind, licence, files = publish.check_export(out)
    assert (kind, licence) == ("gguf", "apache-2.0")
    assert [f.name for f in files] == ["LICENSE", "Modelfile", "README.md", "model-f16.gguf"]
    plan = publish.plan_push(out, "hf:me/reasonkit-tiny")
    digest = hashlib.sha256((out / "Modelfile").read_bytes()).hexdigest()
    assert plan.files["Modelfile"] == ((out / "Modelfile").stat().st_size, digest)
    assert plan.url == "https://huggingface.co/me/reasonkit-tiny" and plan.pushed_at is None
    text = plan.describe()
    assert "gguf export, licence apache-2.0" in text and "the Hugging Face Hub me/reasonkit-tiny" in text
    assert "    model-f16.gguf      104 B  sha256 " in text and "\n  4 files, " in text
    gemma = write_export(tmp_path / "merged", GEMMA, kind="merged")
    assert publish.check_export(gemma)[:2] == ("merged", "gemma")
    assert publish.plan_push(gemma, "kaggle:me/reasonkit/transformers/1b").url == (
        "https://www.kaggle.com/models/me/reasonkit/transformers/1b")


@pytest.mark.parametrize("damage, missing", [
    (lambda d: (d / "NOTICE").unlink(), r"missing NOTICE \(the gemma licence's file: 'Gemma is provided"),
    (lambda d: (d / "README.md").unlink(), r"missing README\.md$"),
    (lambda d: (d / "model-f16.gguf").rename(d / "model-f16.gguf.tmp"),
     r"missing model-f16\.gguf\.tmp \(a file still being written.*; "
     r"model-f16\.gguf \(the Modelfile's FROM\)"),
    (lambda d: (d / "README.md").write_text("# an older card\n"),
     r"missing README\.md's licence \(its metadata says license: None"),
], ids=["notice", "card", "interrupted", "old-card"])
def test_an_incomplete_export_is_refused_naming_what_is_missing(tmp_path, damage, missing):
    out = write_export(tmp_path / "gguf", GEMMA)
    damage(out)
    with pytest.raises(publish.PushError, match=rf"gguf: an incomplete gguf export, {missing}"):
        publish.push(out, "hf:me/x", dry_run=True)


def test_other_directories_are_refused(tmp_path):
    with pytest.raises(publish.PushError, match=r"absent: no such export directory"):
        publish.check_export(tmp_path / "absent")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(publish.PushError, match=r"not a reasonkit export"):
        publish.check_export(tmp_path)
    out = write_export(tmp_path / "adapter", GEMMA, kind="adapter")
    (out / "adapter_model.safetensors").unlink()
    with pytest.raises(publish.PushError, match=r"incomplete adapter export, missing adapter_model"):
        publish.check_export(out)


def test_a_dry_run_sends_nothing_and_names_the_missing_secret(tmp_path, no_credentials, capsys,
                                                               monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", None)  # calling it would fail
    out = write_export(tmp_path / "gguf", TINY.model)
    plan = publish.push(out, "hf:me/reasonkit-tiny", dry_run=True)
    assert plan.status == "dry run" and not (out / publish.RECORD).exists()
    printed = capsys.readouterr().out
    assert printed.startswith(f"dry run: {out} (gguf export") and "model-f16.gguf" in printed
    assert "credentials: none found, a push would stop here: no Hugging Face token: add a secret named " \
           "HF_TOKEN" in printed
    plan = publish.push(out, "kaggle:me/reasonkit/gguf/tiny", dry_run=True)
    assert "add secrets named KAGGLE_USERNAME and KAGGLE_KEY" in plan.credentials


def test_missing_credentials_stop_a_push_naming_the_secret(tmp_path, no_credentials):
    out = write_export(tmp_path / "gguf", TINY.model)
    with pytest.raises(publish.PushError, match=r"cannot push .*gguf to hf:me/x: no Hugging Face token: add "
                                                r"a secret named HF_TOKEN .* on Kaggle, Add-ons > Secrets"):
        publish.push(out, "hf:me/x")
    with pytest.raises(publish.PushError, match=r"no Kaggle credentials: add secrets named KAGGLE_USERNAME "
                                                r"and KAGGLE_KEY .*on Colab, the key icon"):
        publish.push(out, "kaggle:me/reasonkit/gguf/tiny")
    assert not (out / publish.RECORD).exists()


def test_a_kaggle_notebook_secret_is_read_as_a_token(tmp_path, hub, monkeypatch):
    """models.read_platform_secrets copies the notebook's secret into the environment."""
    monkeypatch.delenv("HF_TOKEN")
    client = types.SimpleNamespace(get_secret=lambda name: {"HF_TOKEN": "hf_secret"}.get(name))
    secrets = types.SimpleNamespace(UserSecretsClient=lambda: client)
    monkeypatch.setitem(sys.modules, "kaggle_secrets", secrets)
    out = write_export(tmp_path / "gguf", TINY.model)
    assert publish.push(out, "hf:me/x").status == "pushed"
    import os

    assert os.environ["HF_TOKEN"] == "hf_secret"  # (monkeypatch's delenv restores the test's state)


def test_a_hub_push_creates_the_repo_uploads_the_folder_and_records_it(tmp_path, hub):
    out = write_export(tmp_path / "gguf", TINY.model)
    plan = publish.push(out, "hf:me/reasonkit-tiny", private=True)
    assert plan.status == "pushed"
    (name, create), (_, upload) = hub
    assert name == "create_repo" and create == {"repo_id": "me/reasonkit-tiny", "repo_type": "model",
                                                "private": True, "exist_ok": True}
    assert upload["repo_id"] == "me/reasonkit-tiny" and upload["folder_path"] == str(out)
    assert upload["commit_message"] == "reasonkit gguf export (gguf)"
    record = json.loads((out / publish.RECORD).read_text())["pushes"]
    assert [r["to"] for r in record] == ["hf:me/reasonkit-tiny"]
    assert record[0]["url"] == "https://huggingface.co/me/reasonkit-tiny/commit/abc"
    assert record[0]["files"] == {n: d for n, (_, d) in plan.files.items()}
    # What huggingface_hub sends: the card, the licence, the model, not the push record.
    assert sent_to_hub(upload, out) == sorted(plan.files) == ["LICENSE", "Modelfile", "README.md",
                                                               "model-f16.gguf"]


def test_nothing_is_pushed_twice_unless_forced_or_changed(tmp_path, hub, capsys):
    out = write_export(tmp_path / "gguf", TINY.model)
    first = publish.push(out, "hf:me/x")
    hub.clear()
    again = publish.push(out, "hf:me/x")
    assert again.status == "already pushed" and again.pushed_at == first.pushed_at and hub == []
    assert "these files went there already" in capsys.readouterr().out
    assert publish.push(out, "hf:me/other").status == "pushed"  # another place: it goes
    assert publish.push(out, "hf:me/x", force=True).status == "pushed"
    hub.clear()
    (out / "README.md").write_text((out / "README.md").read_text() + "\nmore\n")
    assert publish.push(out, "hf:me/x").status == "pushed" and len(hub) == 2  # new files: a new commit
    record = json.loads((out / publish.RECORD).read_text())["pushes"]
    assert [r["to"] for r in record] == ["hf:me/x", "hf:me/other", "hf:me/x", "hf:me/x"]
    (out / publish.RECORD).write_text("{not json")
    with pytest.raises(publish.PushError, match=r"pushed\.json: not a push record"):
        publish.plan_push(out, "hf:me/x")


def test_a_kaggle_push_uploads_each_file_to_the_variation(tmp_path, monkeypatch, no_credentials):
    """kagglehub.model_upload runs for real up to its three network calls."""
    import kagglehub.gcs_upload
    import kagglehub.models

    monkeypatch.setenv("KAGGLE_USERNAME", "me")
    monkeypatch.setenv("KAGGLE_KEY", "key")
    sent, made = [], []
    monkeypatch.setattr(kagglehub.models, "create_model_if_missing", lambda owner, model: made.append(
        (owner, model)))
    monkeypatch.setattr(kagglehub.gcs_upload, "_upload_file", lambda file_path, item_type, quiet: sent.append(
        file_path) or f"token-{len(sent)}")
    monkeypatch.setattr(kagglehub.models, "create_model_instance_or_version",
                        lambda handle, files, licence, notes, sigstore: made.append((handle, licence, notes)))
    out = write_export(tmp_path / "merged", GEMMA, kind="merged")
    (out / publish.RECORD).write_text(json.dumps({"pushes": []}))
    assert publish.push(out, "kaggle:me/reasonkit/transformers/1b").status == "pushed"
    assert sorted(p.rsplit("/", 1)[1] for p in sent) == sorted(publish.plan_push(out, "hf:me/x").files)
    assert publish.RECORD not in {p.rsplit("/", 1)[1] for p in sent}
    (owner, model), (handle, licence, notes) = made
    assert (owner, model) == ("me", "reasonkit")
    assert (handle.owner, handle.model, handle.framework, handle.variation) == (
        "me", "reasonkit", "transformers", "1b")
    assert licence == "Gemma" and notes == "reasonkit merged export (merged)"


def test_the_face_names_push():
    assert models.push is publish.push and models.PushError is publish.PushError
