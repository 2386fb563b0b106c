"""Never lose a user's files, never let a model folder exhaust the machine: one probe per case, through
the public commands.  Each fails if a user's file is touched or a traceback reaches the terminal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tinyglot
from tinyglot.app.cli import main
from tinyglot.errors import TinyglotError
from tinyglot.locks import LOCK_NAME
from tinyglot.outputs import RECORD


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` (hidden ones included) and its bytes (None for a folder)."""
    return {p.relative_to(folder).as_posix(): (None if p.is_dir() else p.read_bytes())
            for p in sorted(folder.rglob("*"))}


def _user_folder(root: Path) -> Path:
    """A folder of a user's own files, named like tinyglot's temporaries and bundle files."""
    out = root / "mine"
    for rel in (".backup.20241125/notes.txt", "photos/.album.old/cat.jpg", ".vscode.settings/settings.json",
                "a/b/.cache.abcdefgh/blob", ".draft.12345678.tmp", "model.onnx", "tokenizer.model", "parity.json"):
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"the user's {rel}".encode())
    return out


def _refused(argv: list[str], capsys, *words: str) -> str:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error:" in err, err
    for word in words:
        assert word in err, err
    return err


# ------------------------------------------------------------------ output folders are tinyglot's alone
def test_export_into_a_folder_of_user_files_is_refused_and_touches_nothing(student_dir, tmp_path, capsys):
    out = _user_folder(tmp_path)
    before = _snapshot(out)
    _refused(["export", "--model", str(student_dir), "--format", "onnx", "--out", str(out), "--max-sentences", "10"],
             capsys, "not written by tinyglot", "nothing was changed")
    assert _snapshot(out) == before  # no lock, no record, no hidden folder removed, no file overwritten


def test_teacher_train_refuses_a_folder_with_a_foreign_config_json(tmp_path, capsys):
    out = tmp_path / "project"
    (out / ".git.objects.abcdefgh").mkdir(parents=True)
    (out / ".git.objects.abcdefgh" / "pack").write_text("keep")
    (out / "config.json").write_text('{"name": "my web app"}')
    before = _snapshot(out)
    err = _refused(["teacher", "train", "--preset", "ems-tiny", "--out", str(out), "--no-progress"], capsys,
                   "not written by tinyglot")
    assert "another tinyglot model" not in err
    assert _snapshot(out) == before


@pytest.mark.parametrize("command", ["export", "run", "teacher", "distill"])
def test_out_that_is_a_file_is_a_clear_error(command, student_dir, tmp_path, capsys):
    out = tmp_path / "a-file"
    out.write_text("the user's file")
    argv = {"export": ["export", "--model", str(student_dir), "--out", str(out)],
            "run": ["run", "--profile", "tiny", "--out", str(out), "--no-progress"],
            "teacher": ["teacher", "train", "--preset", "ems-tiny", "--out", str(out), "--no-progress"],
            "distill": ["distill", "--student", "lealla-small", "--out", str(out), "--no-progress"]}[command]
    _refused(argv, capsys, "is a file, not a folder")
    assert out.read_text() == "the user's file"


@pytest.mark.parametrize("command", ["export", "run", "teacher"])
def test_out_that_cannot_be_written_is_a_clear_error(command, student_dir, capsys):
    out = Path("/proc/tinyglot-cannot-be-created/out")  # /proc takes no new folders, not even for root
    argv = {"export": ["export", "--model", str(student_dir), "--out", str(out)],
            "run": ["run", "--profile", "tiny", "--out", str(out), "--no-progress"],
            "teacher": ["teacher", "train", "--preset", "ems-tiny", "--out", str(out), "--no-progress"]}[command]
    _refused(argv, capsys, "cannot create")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_out_is_a_clear_error(student_dir, tmp_path, capsys):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    try:
        _refused(["export", "--model", str(student_dir), "--out", str(out)], capsys, "not writable")
    finally:
        out.chmod(0o755)


def test_reexport_replaces_the_bundle_and_refuses_a_bundle_folder_with_user_files(student_dir, tmp_path, capsys):
    out = tmp_path / "bundle"
    argv = ["export", "--model", str(student_dir), "--format", "onnx", "--out", str(out), "--max-sentences", "10"]
    assert main(argv) == 0
    first = _snapshot(out)
    assert main(argv) == 0  # a re-export into its own bundle folder
    assert sorted(p.name for p in out.iterdir()) == sorted([RECORD, "config.json", "model.onnx", "parity.json",
                                                            "tokenizer.model"])
    assert [p.name for p in tmp_path.iterdir()] == ["bundle"]  # no staging folder left beside it
    assert _snapshot(out)["model.onnx"] == first["model.onnx"]
    (out / "my-notes.txt").write_text("mine")
    before = _snapshot(out)
    _refused(argv, capsys, "did not write", "my-notes.txt")
    assert _snapshot(out) == before


def test_a_bundle_folder_of_an_earlier_tinyglot_is_taken_without_record(student_dir, tmp_path):
    out = tmp_path / "bundle"
    assert main(["export", "--model", str(student_dir), "--out", str(out), "--max-sentences", "10"]) == 0
    (out / RECORD).unlink()  # as written before ownership records
    assert main(["export", "--model", str(student_dir), "--out", str(out), "--max-sentences", "10"]) == 0
    assert json.loads((out / RECORD).read_text())["kind"] == "bundle"


KILLER = """
import sys
from tinyglot.export.onnx import export_onnx
export_onnx(sys.argv[1], sys.argv[2], "none", max_sentences=10, say=lambda m: print(m, flush=True))
"""


@pytest.mark.slow
def test_a_reexport_killed_midway_leaves_the_old_bundle(student_dir, tmp_path):
    out = tmp_path / "bundle"
    assert main(["export", "--model", str(student_dir), "--out", str(out), "--max-sentences", "10"]) == 0
    old = tinyglot.load(out).encode(["hallo welt", "hello world"])
    before = _snapshot(out)
    proc = subprocess.Popen([sys.executable, "-c", KILLER, str(student_dir), str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        for line in proc.stdout:  # the staging folder is written; the parity check has begun
            if line.startswith("checking parity"):
                break
        staged = [p for p in tmp_path.iterdir() if p.name != "bundle"]
        assert staged and (staged[0] / "model.onnx").exists()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _snapshot(out) == before
    np.testing.assert_allclose(tinyglot.load(out).encode(["hallo welt", "hello world"]), old)
    # the next export removes what the killed one left beside the bundle (its record names it), and only that
    (tmp_path / ".bundle.tinyglot-mine").mkdir()
    assert main(["export", "--model", str(student_dir), "--out", str(out), "--max-sentences", "10"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [".bundle.tinyglot-mine", "bundle"]


def test_temporaries_of_a_killed_run_are_removed_by_its_record_not_by_their_names(tmp_path):
    from tinyglot.io import atomic_path
    from tinyglot.locks import run_lock

    out = tmp_path / "run"
    code = (f"import os\nfrom tinyglot.io import atomic_path\nfrom tinyglot.locks import run_lock\n"
            f"with run_lock({str(out)!r}, 'test', 'teacher-run'):\n"
            f"    with atomic_path({str(out / 'last.pt')!r}) as tmp:\n"
            f"        tmp.write_bytes(b'half')\n        print(tmp, flush=True)\n        os.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    left = Path(proc.stdout.strip())
    assert proc.returncode == -9 and left.exists() and (out / LOCK_NAME).exists()
    lookalike = out / ".last.pt.abcd1234.tmp"  # named like a temporary, but not in the record: a user's
    lookalike.write_text("mine")
    with run_lock(out, "test", "teacher-run"), atomic_path(out / "x.json") as tmp:
        tmp.write_text("{}")
    assert not left.exists()
    assert lookalike.read_text() == "mine"
    assert sorted(p.name for p in out.iterdir()) == sorted([RECORD, ".last.pt.abcd1234.tmp", "x.json"])


def test_a_refused_run_of_another_kind_touches_nothing(tmp_path, capsys):
    out = tmp_path / "teacher"
    (out).mkdir()
    (out / RECORD).write_text(json.dumps({"tinyglot": 1, "kind": "teacher-run", "files": []}))
    before = _snapshot(out)
    _refused(["run", "--profile", "tiny", "--out", str(out), "--no-progress"], capsys, "teacher-run")
    assert _snapshot(out) == before


# ------------------------------------------------------------------ bounds for untrusted folders
def _copy(source: Path, tmp_path: Path, name: str = "model") -> Path:
    folder = tmp_path / name
    shutil.copytree(source, folder, symlinks=True)
    return folder


def _edit_config(folder: Path, edit) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    edit(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize("where", ["config", "transformers"])
def test_absurd_model_sizes_are_refused_before_anything_is_built(student_dir, tmp_path, capsys, where):
    folder = _copy(student_dir, tmp_path)
    if where == "config":
        _edit_config(folder, lambda cfg: cfg["student"].update(num_layers=100000))
    else:
        hf = folder / "model" / "config.json"
        hf.write_text(json.dumps({**json.loads(hf.read_text()), "num_hidden_layers": 200, "hidden_size": 4096,
                                  "intermediate_size": 16384}))
    start = time.perf_counter()
    with pytest.raises(TinyglotError, match="nothing was built|not a whole number|config.json says"):
        tinyglot.load(folder)
    _refused(["eval", "--model", str(folder)], capsys)
    assert time.perf_counter() - start < 30  # refused at once, not after building layers


def test_a_huge_tokenizer_file_is_refused_before_it_is_read(student_dir, tmp_path, capsys):
    folder = _copy(student_dir, tmp_path)
    with open(folder / "tokenizer.model", "wb") as fh:
        fh.truncate(5 << 30)  # 5 GB, sparse: nothing is allocated until read
    _refused(["eval", "--model", str(folder)], capsys, "tokenizer.model", "not read")


def test_a_symlinked_model_folder_is_refused(student_dir, tmp_path, capsys):
    outside = _copy(student_dir, tmp_path, "elsewhere")
    folder = _copy(student_dir, tmp_path)
    shutil.rmtree(folder / "model")
    (folder / "model").symlink_to(outside / "model")
    with pytest.raises(TinyglotError, match="outside the model folder"):
        tinyglot.load(folder)
    _refused(["eval", "--model", str(folder)], capsys, "outside the model folder")


@pytest.fixture(scope="module")
def bundle(student_dir, tmp_path_factory) -> Path:
    from tinyglot.export.onnx import export_onnx

    return export_onnx(student_dir, tmp_path_factory.mktemp("bundle") / "onnx", "none", max_sentences=10).out


@pytest.mark.parametrize("record", ["deleted", "empty", "config-digest-deleted"])
def test_a_bundle_without_its_integrity_record_is_refused_unless_allowed(bundle, tmp_path, capsys, record,
                                                                         monkeypatch):
    monkeypatch.delenv("TINYGLOT_ALLOW_UNVERIFIED", raising=False)  # main() sets it; restored unset afterwards
    folder = _copy(bundle, tmp_path)

    def edit(cfg: dict) -> None:
        if record == "deleted":
            del cfg["sha256"]
        elif record == "empty":
            cfg["sha256"] = {}
        else:
            del cfg["config_sha256"]

    _edit_config(folder, edit)
    if record == "empty":  # an empty record covers no file: the model is read unverified
        with pytest.raises(TinyglotError, match="records no digest"):
            tinyglot.load(folder)
        return
    with pytest.raises(TinyglotError, match="no integrity record"):
        tinyglot.load(folder)
    _refused(["eval", "--model", str(folder)], capsys, "--allow-unverified")
    assert main(["--allow-unverified", "eval", "--model", str(folder)]) == 0
    assert "UNVERIFIED" in capsys.readouterr().err


def test_an_edited_bundle_config_is_refused(bundle, tmp_path, capsys):
    folder = _copy(bundle, tmp_path)
    _edit_config(folder, lambda cfg: cfg.update(max_len=100000))
    with pytest.raises(TinyglotError, match="changed after the export"):
        tinyglot.load(folder)
    _refused(["eval", "--model", str(folder)], capsys, "changed after the export")


def test_onnx_external_data_is_covered_by_the_record(bundle, tmp_path):
    import onnx

    from tinyglot.export.bundle import config_digest, verified_files
    from tinyglot.integrity import file_digests

    folder = _copy(bundle, tmp_path)
    model = onnx.load(str(folder / "model.onnx"))
    onnx.save_model(model, str(folder / "model.onnx"), save_as_external_data=True, location="weights.bin",
                    size_threshold=4096)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["sha256"] = file_digests(folder, ["model.onnx", "tokenizer.model"])  # a record that misses weights.bin
    cfg["config_sha256"] = config_digest(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TinyglotError, match="weights.bin"):
        tinyglot.load(folder)
    assert "weights.bin" in verified_files(folder, cfg)
    cfg["sha256"] = file_digests(folder, verified_files(folder, cfg))
    cfg["config_sha256"] = config_digest(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))
    assert tinyglot.load(folder).encode(["hallo"]).shape == (1, 32)
    (folder / "weights.bin").write_bytes((folder / "weights.bin").read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(TinyglotError, match="weights.bin is not the file"):
        tinyglot.load(folder)


# ------------------------------------------------------------------ every entry point's bad input
@pytest.mark.parametrize("text", ["hello\0world", "\ud800", "ok \udfff"])
def test_nul_and_lone_surrogates_are_refused_the_same_in_every_format(student_dir, bundle, text):
    for folder in (student_dir, bundle):
        with pytest.raises(TinyglotError, match="NUL|surrogate"):
            tinyglot.load(folder).encode(["fine", text])


@pytest.mark.slow
def test_nul_is_refused_by_the_raw_string_bundle(student_dir, tmp_path):
    from tinyglot.export.formats import export_string_bundle

    out = export_string_bundle("onnx-text", student_dir, tmp_path / "text", "none", max_sentences=10).out
    encoder = tinyglot.load(out)
    with pytest.raises(TinyglotError, match="NUL"):
        encoder.encode(["hello\0world"])
    with pytest.raises(TinyglotError, match="surrogate"):
        encoder.encode(["\ud800"])


@pytest.mark.parametrize("sets,words", [
    (["a.b=1", "a.b.c=2"], ["conflicts"]),
    (["a.b.c=2", "a.b=1"], ["conflicts"]),
    (["train.lr=inf"], ["finite"]),
    (["train.weight_decay=nan"], ["finite"]),
    (["loss.beta=nan"], ["finite"]),
    (["train..lr=1"], ["not a setting name"]),
])
def test_bad_settings_are_clear_errors_and_leave_no_folder(tmp_path, capsys, sets, words):
    out = tmp_path / "never"
    argv = ["distill", "--student", "lealla-small", "--out", str(out), "--no-progress"]
    for item in sets:
        argv += ["--set", item]
    _refused(argv, capsys, *words)
    assert not out.exists()


def test_bad_pipeline_settings_leave_no_folder(tmp_path, capsys):
    out = tmp_path / "never"
    _refused(["run", "--profile", "tiny", "--out", str(out), "--no-progress", "--set",
              "distill.overrides.train.lr=nan"], capsys, "finite")
    assert not out.exists()


@pytest.mark.parametrize("option,value", [("--batch", "10000000000000"), ("--seq", "0"), ("--threads", "1e9"),
                                          ("--min-seconds", "nan"), ("--max-seconds", "inf"), ("--warmup", "-1")])
def test_absurd_bench_options_are_refused(student_dir, tmp_path, capsys, option, value):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--bundle", str(student_dir), "--db", str(tmp_path / "b.sqlite"), option, value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err
    assert not (tmp_path / "b.sqlite").exists()


@pytest.mark.parametrize("db", ["not-sqlite", "folder"])
def test_bench_db_that_is_not_a_database_is_a_clear_error(student_dir, tmp_path, capsys, db):
    path = tmp_path / "bench.db"
    if db == "folder":
        path.mkdir()
    else:
        path.write_text("my spreadsheet")
    _refused(["bench", "--bundle", str(student_dir), "--db", str(path), "--seq", "16", "--min-queries", "1",
              "--min-seconds", "0"], capsys, str(path))
    if db == "not-sqlite":
        assert path.read_text() == "my spreadsheet"


def test_huge_eval_batch_size_works_or_is_clear(student_dir, capsys):
    assert main(["eval", "--model", str(student_dir), "--batch-size", "10000000000000"]) in (0, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_transformers_folder_bounds_without_an_outer_config(student_dir, tmp_path):
    """A multi-stage model's model/ folder has no outer config to agree with: its own sizes are bounded,
    with the estimated memory in the error."""
    from tinyglot.models import check_transformers_folder

    folder = _copy(student_dir, tmp_path)
    hf = folder / "model" / "config.json"
    hf.write_text(json.dumps({**json.loads(hf.read_text()), "num_hidden_layers": 200, "hidden_size": 4096,
                              "intermediate_size": 16384}))
    with pytest.raises(TinyglotError, match=r"GiB in memory|weights hold only"):
        check_transformers_folder(folder / "model", folder)
    hf.write_text(json.dumps({**json.loads(hf.read_text()), "num_hidden_layers": 100000}))
    with pytest.raises(TinyglotError, match="num_layers is 100000"):
        check_transformers_folder(folder / "model", folder)
