"""Hostile model folders run no code: each folder below would run a payload (create a marker
folder) or read files outside itself with a naive loader; tinyglot refuses it with a clear error."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import tinyglot
from tinyglot.app.cli import main
from tinyglot.errors import TinyglotError


class _Payload:
    """Unpickling this calls ``os.mkdir(marker)``: the stand-in for arbitrary code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _all_entry_points(folder: Path, capsys) -> list[str]:
    """Open ``folder`` through tinyglot.load, `tinyglot eval --model` and the teacher loader; the
    error messages (each must be a TinyglotError / exit status 2)."""
    from tinyglot.encoders import load_encoder

    messages = []
    with pytest.raises(TinyglotError) as exc:
        tinyglot.load(folder)
    messages.append(str(exc.value))
    assert main(["eval", "--model", str(folder)]) == 2
    messages.append(capsys.readouterr().err)
    with pytest.raises(TinyglotError) as exc:
        load_encoder(str(folder))
    messages.append(str(exc.value))
    return messages


def test_pickled_payload_in_a_teacher_checkpoint_is_not_run(tiny_teacher_dir, tmp_path, capsys):
    folder = tmp_path / "teacher"
    shutil.copytree(tiny_teacher_dir, folder)
    marker = tmp_path / "pwned"
    for name in ("best.pt", "last.pt"):
        good = torch.load(folder / name, weights_only=True)
        torch.save({**good, "evil": _Payload(marker)}, folder / name)
    torch.load(folder / "best.pt", weights_only=False)  # the payload is real: a plain load runs it
    assert marker.exists()
    marker.rmdir()

    for message in _all_entry_points(folder, capsys):
        assert "best.pt" in message and "not loaded" in message
    from tinyglot.export.bundle import load_source

    with pytest.raises(TinyglotError):
        load_source(folder)  # `tinyglot export --model`
    assert not marker.exists()


def test_loader_outside_the_registry_is_never_imported(student_dir, tmp_path, capsys):
    folder = tmp_path / "student"
    shutil.copytree(student_dir, folder)
    marker = tmp_path / "pwned"
    (folder / "evil.pth").write_text(f"import os; os.mkdir({str(marker)!r})\n")
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "loader": "site:addsitedir"}))

    for message in _all_entry_points(folder, capsys):
        assert "site:addsitedir" in message and "not one of tinyglot's loaders" in message
    assert not marker.exists()


def test_registered_loader_strings_still_open_existing_folders(student_dir):
    from tinyglot.models import LOADERS, loader_function

    assert json.loads((student_dir / "config.json").read_text())["loader"] in LOADERS
    assert tinyglot.load(student_dir).encode(["hallo welt"]).shape == (1, 32)
    for loader in LOADERS:
        if "tflite" not in loader and "savedmodel" not in loader:  # heavy optional runtimes
            assert callable(loader_function(loader))


def _student_with_tokenizer(student_dir: Path, tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "student"
    shutil.copytree(student_dir, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "tokenizer": name}))
    return folder


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_file_references_are_confined_to_the_model_folder(student_dir, tmp_path, capsys, kind):
    outside = tmp_path / "elsewhere" / "tokenizer.model"
    outside.parent.mkdir()
    shutil.copy(student_dir / "tokenizer.model", outside)  # a real, loadable file outside the folder
    if kind == "dotdot":
        folder = _student_with_tokenizer(student_dir, tmp_path, "../elsewhere/tokenizer.model")
    elif kind == "absolute":
        folder = _student_with_tokenizer(student_dir, tmp_path, str(outside))
    else:
        folder = _student_with_tokenizer(student_dir, tmp_path, "tokenizer.model")
        (folder / "tokenizer.model").unlink()
        (folder / "tokenizer.model").symlink_to(outside)
    for message in _all_entry_points(folder, capsys):
        assert "outside the model folder" in message


def test_bundle_file_references_are_confined(tmp_path, student_dir):
    from tinyglot.export.bundle import read_bundle

    (tmp_path / "secret.onnx").write_bytes(b"not yours")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(student_dir / "tokenizer.model", bundle / "tokenizer.model")
    cfg = {"loader": "tinyglot.export.onnx:load_onnx_bundle", "kind": "bundle", "format": "onnx",
           "files": ["../secret.onnx"], "tokenizer": "tokenizer.model", "max_len": 48}
    (bundle / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TinyglotError, match="outside the model folder"):
        read_bundle(bundle)
    with pytest.raises(TinyglotError, match="outside the model folder"):
        tinyglot.load(bundle)


def test_checkpoints_are_byte_reproducible_and_hold_no_pickled_objects(tmp_path):
    import hashlib
    import random

    import numpy as np

    from tinyglot.training import (
        load_checkpoint,
        rng_state,
        save_checkpoint,
        seed_everything,
        set_rng_state,
    )

    seed_everything(3)
    model = torch.nn.Linear(4, 3)
    payload = {"meta": {"kind": "x"}, "model": model.state_dict(), "rng": rng_state(), "step": 7}
    save_checkpoint(tmp_path / "a.pt", payload)
    save_checkpoint(tmp_path / "b" / "other-name.pt", payload)
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "a.pt", tmp_path / "b" / "other-name.pt")]
    assert digest[0] == digest[1]
    ck = load_checkpoint(tmp_path / "a.pt")  # weights_only: the RNG state is plain values
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(ck["rng"])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws


@pytest.fixture(scope="module")
def onnx_bundle(student_dir, tmp_path_factory) -> Path:
    from tinyglot.export.onnx import export_onnx

    return export_onnx(student_dir, tmp_path_factory.mktemp("bundle") / "onnx", "none", max_sentences=20).out


def test_bundle_records_the_sha256_of_its_files_and_refuses_a_swapped_one(onnx_bundle, tmp_path, capsys):
    import hashlib

    from tinyglot.devices.bench import resolve_model

    cfg = json.loads((onnx_bundle / "config.json").read_text())
    assert set(cfg["sha256"]) == {"model.onnx", "tokenizer.model"}
    assert cfg["sha256"]["model.onnx"] == hashlib.sha256((onnx_bundle / "model.onnx").read_bytes()).hexdigest()
    assert tinyglot.load(onnx_bundle).encode(["hallo"]).shape == (1, 32)

    for name in ("model.onnx", "tokenizer.model"):
        bundle = tmp_path / name / "bundle"
        shutil.copytree(onnx_bundle, bundle)
        data = bytearray((bundle / name).read_bytes())
        data[len(data) // 2] ^= 0x01  # same size, one bit: still a loadable file
        (bundle / name).write_bytes(bytes(data))
        with pytest.raises(TinyglotError, match=f"{name} is not the file this bundle was exported with"):
            tinyglot.load(bundle)
        assert main(["eval", "--model", str(bundle)]) == 2
        assert "sha256" in capsys.readouterr().err
        with pytest.raises(TinyglotError, match="sha256"):
            resolve_model(bundle)  # tinyglot bench


def test_file_hashes_are_cached_by_inode_size_and_mtime(tmp_path):
    from tinyglot.integrity import sha256_file

    path = tmp_path / "corpus.tsv"
    path.write_text("a\tb\n")
    first = sha256_file(path)
    stat = path.stat()
    path.write_text("c\td\n")  # same size; a new mtime makes it a new version
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert sha256_file(path) != first


def test_stage_inputs_keyed_by_content_even_with_the_same_size_and_mtime(tmp_path):
    from tinyglot.stagecache import StageStore, hash_json

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    path = corpus / "de.tsv"
    path.write_text("Hello\tHallo\n")
    store = StageStore(tmp_path / "run")
    before = store.fingerprint(corpus)
    assert json.loads((tmp_path / "run" / "stages" / ".digests.json").read_text())  # hashed once, kept
    stat = path.stat()
    with open(path, "r+") as fh:  # replaced in place: same inode, same size, mtime set back
        fh.write("Hellu\tHallo\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    after = StageStore(tmp_path / "run").fingerprint(corpus)
    assert hash_json(after) != hash_json(before)


def test_dimred_folder_cannot_name_python_code_as_its_teacher(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "pwned"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "evil_teacher_mod.py").write_text(
        f"import os\ndef make():\n    os.mkdir({str(marker)!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))  # an installed module with a no-argument callable
    folder = tmp_path / "dimred"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "loader": "tinyglot.distill.dimred:load_dimred", "kind": "dimred", "teacher": "python:evil_teacher_mod:make",
        "teacher_identity": "x", "dim": 8, "teacher_dim": 16}))
    for message in _all_entry_points(folder, capsys):
        assert "may not choose code to run" in message
    assert not marker.exists()


def test_every_loader_tinyglot_writes_is_registered():
    """Each module that writes a config.json with a "loader" has that loader in the registry, or its
    own folders would be refused."""
    import importlib

    from tinyglot.models import LOADERS

    for module in ("tinyglot.teacher.train", "tinyglot.distill.student", "tinyglot.distill.multistage",
                   "tinyglot.distill.dimred", "tinyglot.export.onnx", "tinyglot.export.onnx_text",
                   "tinyglot.export.tflite", "tinyglot.export.tflite_mediapipe", "tinyglot.export.savedmodel"):
        assert importlib.import_module(module).LOADER in LOADERS, module
