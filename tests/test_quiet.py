"""A quiet terminal: tinyglot's own lines only; third-party output captured, shown on request.

The end-to-end checks run in subprocesses with a clean environment (no USE_TF, no TF_CPP_MIN_LOG_LEVEL,
no TINYGLOT_VERBOSE: .ci/run exports USE_TF=0, which would hide TensorFlow's import noise), as a
user's shell would start them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tinyglot.quiet import VERBOSE_ENV, third_party_output

from .conftest import clean_env

# What tinyglot itself writes to stderr: its console's "error:"/"fix:"/"interrupted:" lines, and its
# own loggers through the CLI's log format ("WARNING tinyglot.export.bundle: ...").  Progress bars
# are off (TINYGLOT_NO_PROGRESS=1).  Any other line is third-party noise.
OWN_STDERR = re.compile(r"^(error:|\s*fix:|interrupted:|(DEBUG|INFO|WARNING|ERROR|CRITICAL) tinyglot(\.[\w.]+)?: )")
# Third-party lines seen on stdout before (ai-edge-quantizer prints its sizes; tqdm; C++ runtimes)
THIRD_PARTY_STDOUT = re.compile(r"Original model size|Quantized model size|Quantization Ratio|^Total time:|it/s\]|"
                                r"^INFO: |^WARNING: |^[IWE]\d{4} |absl::|oneDNN|XNNPACK|FutureWarning|"
                                r"DeprecationWarning|Please consider")


def foreign_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not OWN_STDERR.match(line)]


LOAD_SCRIPT = textwrap.dedent("""
    import sys
    import tinyglot

    enc = tinyglot.load(sys.argv[1])
    vecs = enc.encode(["Hallo Welt", "bonjour le monde"])
    assert vecs.shape[0] == 2, vecs.shape
    print("tensorflow" in sys.modules)
""")


def load_and_encode(path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOAD_SCRIPT, str(path)], capture_output=True, text=True,
                          env=clean_env(**env), timeout=300)


def assert_quiet_load(path: Path, tensorflow_allowed: bool = False) -> None:
    proc = load_and_encode(path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert foreign_lines(proc.stderr) == [], f"{path.name}: third-party lines on stderr:\n{proc.stderr}"
    assert proc.stdout.strip().splitlines()[-1:] == ["False"] or tensorflow_allowed, \
        f"{path.name}: loading it imported TensorFlow"


# ------------------------------------------------------------------ the capture itself
def test_capture_takes_python_and_c_level_output_and_drops_it(capfd, monkeypatch):
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    with third_party_output("test") as box:
        print("python stdout")
        print("python stderr", file=sys.stderr)
        os.write(1, b"fd 1\n")
        os.write(2, b"fd 2\n")
        subprocess.run([sys.executable, "-c", "import os; os.write(2, b'child\\n')"], check=True)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    for text in ("python stdout", "python stderr", "fd 1", "fd 2", "child"):
        assert text in box.text
    print("after")  # the descriptors are back
    assert capfd.readouterr().out == "after\n"


def test_capture_replays_on_failure(capfd, monkeypatch):
    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    with pytest.raises(RuntimeError), third_party_output("the converter's output"):
        os.write(2, b"why it failed\n")
        raise RuntimeError("boom")
    err = capfd.readouterr().err
    assert "why it failed" in err and "the converter's output" in err


def test_verbose_shows_it_live(capfd, monkeypatch):
    monkeypatch.setenv(VERBOSE_ENV, "1")
    with third_party_output("test") as box:
        os.write(2, b"shown\n")
    assert capfd.readouterr().err == "shown\n" and box.text == ""


def test_cli_verbose_flag_turns_verbose_on_for_the_command_only(monkeypatch):
    from tinyglot.app import cli

    monkeypatch.delenv(VERBOSE_ENV, raising=False)
    seen = {}

    def parser():
        import argparse

        p = argparse.ArgumentParser()
        p.add_argument("-v", "--verbose", action="store_true")
        p.set_defaults(func=lambda args: seen.update(verbose=os.environ.get(VERBOSE_ENV)))
        return p

    assert cli.run(["-v"], parser) == 0
    assert seen["verbose"] == "1" and VERBOSE_ENV not in os.environ


def test_import_tinyglot_sets_the_quiet_defaults():
    code = ("import logging, os, tinyglot; print(os.environ.get('USE_TF'), os.environ.get('TF_CPP_MIN_LOG_LEVEL'), "
            "logging.getLogger('torchao').level, logging.getLogger('torch.utils._pytree').level)")
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), check=True)
    assert quiet.stdout.split() == ["0", "2", "40", "40"]
    loud = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=clean_env(**{VERBOSE_ENV: "1", "USE_TF": "1"}))
    assert loud.stdout.split() == ["1", "None", "0", "0"]  # the user's USE_TF stays


def test_mediapipe_paths_import_no_tensorflow():
    pytest.importorskip("mediapipe")
    code = textwrap.dedent("""
        import sys
        from tinyglot.export.tflite_mediapipe import _metadata_writer, _require_mediapipe
        _require_mediapipe()  # what opening a bundle imports
        _metadata_writer()  # what exporting one imports
        print("tensorflow" in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False"]


def test_loading_a_student_is_quiet_and_torch_only(student_dir):
    """torchao's "Failed to load ..._C_mxfp8...so", torch pytree's enum warnings: gone; no TensorFlow."""
    assert_quiet_load(student_dir)


# ------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_tiny_run_and_every_bundle_print_only_tinyglot_lines(tiny_run):
    """The tiny pipeline of tests/test_pipeline.py (conftest), run in a user's environment: stopped while
    its teacher trains (stdout and stderr together), then rerun to the end (every other stage)."""
    proc, out = tiny_run.resumed, tiny_run.out
    assert tiny_run.env.get("USE_TF") is None and tiny_run.env.get("TF_CPP_MIN_LOG_LEVEL") is None
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert foreign_lines(proc.stderr) == [], f"third-party lines on stderr:\n{proc.stderr}"
    for text in (proc.stdout, tiny_run.interrupted.stdout):
        noisy = [line for line in text.splitlines() if THIRD_PARTY_STDOUT.search(line)]
        assert noisy == [], "third-party lines on stdout:\n" + "\n".join(noisy)

    bundles = sorted(p for p in (out / "bundles").iterdir() if (p / "config.json").is_file())
    kinds = {p.name.rsplit("-", 1)[0] for p in bundles}
    assert {"onnx", "tflite", "onnx-text", "tflite-mediapipe"} <= kinds, kinds
    for folder in [out / "distill" / "student", *bundles]:
        assert_quiet_load(folder)
