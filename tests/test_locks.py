"""One run per folder: a second process is refused with a message naming the first; a lock left
by a killed process is taken over.  Real processes, real commands."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tinyglot.app.cli import main
from tinyglot.locks import (
    LOCK_NAME,
    LockedError,
    acquire,
    file_lock,
    lock_info,
    release,
    run_lock,
)

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tinyglot.locks import file_lock
    with file_lock(Path(sys.argv[1]), "holder"):
        print("ready", flush=True)
        time.sleep(120)
""")


@pytest.fixture
def holder():
    """Start a process holding a lock file; yields (process, lock path) and kills it afterwards."""
    procs = []

    def start(lock: Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_second_process_is_refused_and_a_killed_owner_is_taken_over(tmp_path, holder):
    folder = tmp_path / "run"
    proc = holder(folder / LOCK_NAME)
    info = lock_info(folder / LOCK_NAME)
    assert info["pid"] == proc.pid and info["host"] == socket.gethostname() and info["started"] > 0
    with pytest.raises(LockedError) as exc, run_lock(folder, "test"):
        pass
    assert f"pid {proc.pid}" in str(exc.value) and "holder" in str(exc.value)

    proc.send_signal(signal.SIGKILL)  # dies without removing its lock file
    proc.wait()
    assert (folder / LOCK_NAME).exists()
    with run_lock(folder, "test"):
        assert lock_info(folder / LOCK_NAME)["pid"] == os.getpid()
        with run_lock(folder, "nested"):  # re-entrant within one process
            pass
        assert (folder / LOCK_NAME).exists()
    assert not (folder / LOCK_NAME).exists()


def test_stale_lock_file_of_a_dead_pid_is_taken_over(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = tmp_path / "db.sqlite.lock"
    lock.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": 1.0}))
    with file_lock(lock, "test"):
        assert lock_info(lock)["pid"] == os.getpid()


def test_lock_of_another_host_is_respected(tmp_path):
    lock = tmp_path / "x.lock"
    lock.write_text(json.dumps({"pid": 1, "host": "some-other-host", "started": 1.0, "command": "tinyglot run"}))
    with pytest.raises(LockedError, match="some-other-host"):
        acquire(lock, "test")
    release(lock)  # not held: nothing happens
    assert lock.exists()


def _refused(argv: list[str], proc: subprocess.Popen, capsys) -> None:
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert f"pid {proc.pid}" in err and "in use" in err, err


def test_every_writing_command_is_refused_while_another_holds_its_folder(tmp_path, holder, capsys, student_dir):
    out = tmp_path / "out"
    proc = holder(out / LOCK_NAME)
    _refused(["teacher", "train", "--preset", "ems-tiny", "--out", str(out), "--no-progress"], proc, capsys)
    _refused(["distill", "--student", "lealla-small", "--out", str(out), "--no-progress"], proc, capsys)
    _refused(["run", "--profile", "tiny", "--out", str(out), "--no-progress"], proc, capsys)
    db = tmp_path / "bench.sqlite"
    proc_db = holder(Path(f"{db}.lock"))
    _refused(["bench", "--bundle", str(student_dir), "--db", str(db), "--seq", "16", "--min-queries", "1",
              "--min-seconds", "0"], proc_db, capsys)
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing written by the refused runs


@pytest.mark.slow
def test_two_real_teacher_runs_into_one_folder(tmp_path, holder):
    """Two `tinyglot teacher train` processes at once: the second exits with status 2 naming the first."""
    out = tmp_path / "teacher"
    env = {**os.environ, "TINYGLOT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "tinyglot", "teacher", "train", "--preset", "ems-tiny", "--out", str(out),
           "--no-progress", "--set", "train.max_steps=2000"]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        import time

        deadline = time.time() + 120
        while lock_info(out / LOCK_NAME) is None and time.time() < deadline and first.poll() is None:
            time.sleep(0.2)
        assert lock_info(out / LOCK_NAME)["pid"] == first.pid
        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert second.returncode == 2
        assert f"pid {first.pid}" in second.stderr and "tinyglot teacher train" in second.stderr
    finally:
        first.kill()
        first.wait()


def test_a_failed_teacher_train_leaves_no_empty_folder(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["teacher", "train", "--preset", "ems-tiny", "--data", str(tmp_path / "missing.tsv"),
                 "--out", str(out), "--no-progress"]) == 2
    assert "missing.tsv" in capsys.readouterr().err
    assert not out.exists()
