"""Leftovers of the trust work: the benchmark runner dies with its parent, student folders get the
usual permissions, and temporary files left by a kill are cleaned at the next start."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

PARENT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from tinyglot.devices.bench import LocalTarget, build_inputs
    from tinyglot.devices.profiles import load_profile
    from tinyglot.tokenizer import Tokenizer

    student, tmp = Path(sys.argv[1]), Path(sys.argv[2])
    inputs = build_inputs(Tokenizer.load(student / "tokenizer.model"), [16], tmp / "inputs.npz")
    print("measuring", flush=True)
    LocalTarget(load_profile("host")).measure(
        {"runtime": "torch", "model": str(student), "inputs": str(inputs), "threads": 1, "batch": 1, "seq": 16,
         "warmup": 1, "warmup_seconds": 0, "min_queries": 10**9, "min_seconds": 600, "max_seconds": 600},
        timeout=900)
""")


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_benchmark_runner_dies_with_its_parent(student_dir, tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(student_dir), str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    runners: list[int] = []
    try:
        assert parent.stdout.readline().strip() == "measuring"
        deadline = time.time() + 60
        while not (runners := _children(parent.pid)) and time.time() < deadline:
            time.sleep(0.1)
        assert runners, "the runner did not start"
        time.sleep(1.0)  # the runner is importing / loading / measuring (600 s if left alone)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 10
        while any(_alive(r) for r in runners) and time.time() < deadline:
            time.sleep(0.1)
        assert not any(_alive(r) for r in runners), "the runner outlived its parent"
    finally:
        parent.kill()
        parent.wait()
        for r in runners:  # an orphan would measure for 600 s: end it (the runners this test started)
            if _alive(r):
                os.kill(r, signal.SIGKILL)


def test_student_folders_get_the_usual_permissions(tokenizer, tmp_path):
    import torch
    from tinyglot.distill.config import StudentConfig
    from tinyglot.distill.student import Student, save_student

    torch.manual_seed(0)
    cfg = StudentConfig(hidden_size=32, num_layers=1, num_heads=2, ffn_size=64, max_len=16, dropout=0.0,
                        vocab_size=tokenizer.vocab_size)
    old = os.umask(0o022)
    try:
        out = save_student(Student(cfg), tokenizer, tmp_path / "student")
    finally:
        os.umask(old)
    modes = {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in [out, *out.rglob("*")]}
    assert modes.pop(".") == 0o755
    assert modes.pop("model") == 0o755
    assert set(modes.values()) == {0o644}, modes


def test_temporaries_a_killed_run_named_in_its_lock_are_removed_at_the_next_start(tmp_path):
    """The lock file of a run killed with -9 names its temporaries (see also tests/test_user_files.py);
    the next run removes exactly those, files and folders, and keeps everything else."""
    from tinyglot.locks import LOCK_NAME, run_lock

    out = tmp_path / "run"
    (out / "teacher" / "model").mkdir(parents=True)
    stale = [out / ".last.pt.k2j4h5a1.tmp", out / "teacher" / ".config.json.abcd1234.tmp", out / ".student.q1w2e3r4"]
    keep = [out / "last.pt", out / "teacher" / "model" / "weights.tmp", out / ".notes", out / ".student.old"]
    for path in stale + keep:
        if path.suffix == ".tmp" or path.name in ("last.pt", ".notes"):
            path.write_text("x")
        else:
            path.mkdir()
            (path / "part.bin").write_text("x")
    (out / LOCK_NAME).write_text(json.dumps({"pid": 2**22 + 7, "host": socket.gethostname(), "started": 1.0,
                                             "temporaries": [str(p.relative_to(out)) for p in stale]
                                             + ["../outside", "/etc/passwd"]}))
    with run_lock(out, "test", "teacher-run", legacy=lambda folder: ["teacher", "last.pt", ".notes", ".student.old"]
                  + [p.name for p in stale]):
        pass
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in keep)


def test_export_removes_only_what_tinyglot_wrote(student_dir, tmp_path, capsys):
    from tinyglot.app.cli import main

    out = tmp_path / "bundle"
    assert main(["export", "--model", str(student_dir), "--out", str(out), "--max-sentences", "10"]) == 0
    (out / ".export-abcd1234").mkdir()  # named like tinyglot's temporaries, recorded nowhere: the user's
    assert main(["export", "--model", str(student_dir), "--out", str(out), "--max-sentences", "10"]) == 2
    assert (out / ".export-abcd1234").is_dir()
    assert ".export-abcd1234" in capsys.readouterr().err
