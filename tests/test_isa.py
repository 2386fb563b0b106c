"""Hiding AVX-512 and VNNI from a process (``tinyglot.devices.isa``, ``benchmarks/regimes.py --isa avx2``):
what numpy's own CPU detection then sees, that the released bundles give the same embeddings on the AVX2
kernels, that the regimes' rows carry the ISA, and the errors where a machine cannot do it.  The masked
tests need Linux on x86-64 with CPUID faulting and a C compiler; elsewhere they are skipped."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tinyglot.devices import regimes
from tinyglot.devices.isa import NATIVE, isa_env, mask_library, mask_problem, masked_isa
from tinyglot.errors import TinyglotError

PROBLEM = mask_problem("avx2") or (None if shutil.which("cc") or shutil.which("gcc") else "no C compiler")
needs_mask = pytest.mark.skipif(PROBLEM is not None, reason=f"cannot hide AVX-512 here: {PROBLEM}")
SENTENCES = ["Where is the nearest train station?", "Das Wetter ist heute schön, aber morgen soll es regnen.",
             "彼は毎朝コーヒーを飲みます。", "Сохранить документ перед закрытием?", "ok"]


def _run(code: str, env: dict[str, str]) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env, "TINYGLOT_NO_PROGRESS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def avx2_env(tmp_path_factory):
    return isa_env("avx2", home=tmp_path_factory.mktemp("isa"))


@needs_mask
def test_a_masked_process_sees_an_avx2_only_cpu(avx2_env):
    # numpy's own run-time detection (it reads CPUID when it loads), not ours
    code = ("import json, os; from numpy._core._multiarray_umath import __cpu_features__ as f; "
            "print(json.dumps({k: f[k] for k in ('AVX2', 'FMA3', 'AVX512F', 'AVX512BW', 'AVX512VNNI')} "
            "| {'marker': os.environ.get('TINYGLOT_CPUID_MASKED')}))")
    seen = json.loads(_run(code, avx2_env))
    assert seen == {"AVX2": True, "FMA3": True, "AVX512F": False, "AVX512BW": False, "AVX512VNNI": False,
                    "marker": "avx2"}
    assert json.loads(_run(code, {}))["marker"] is None and masked_isa() == NATIVE  # this process is not masked
    # threads started later in a masked process are masked too (the faulting setting is inherited)
    threaded = ("import threading, json; out = {}; "
                "t = threading.Thread(target=lambda: out.update(__import__('numpy')._core._multiarray_umath"
                ".__cpu_features__)); t.start(); t.join(); print(json.dumps(out['AVX512F']))")
    assert _run(threaded, avx2_env) == "false"


@needs_mask
def test_the_programs_own_segfault_handler_keeps_the_mask_and_gets_real_faults(avx2_env):
    # Python's faulthandler installs a SIGSEGV handler: CPUID is still answered, a real fault still reaches it
    code = "from numpy._core._multiarray_umath import __cpu_features__ as f; print(f['AVX512F'])"
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **avx2_env})
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-1000:]
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", "import ctypes; ctypes.string_at(0)"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **avx2_env})
    assert proc.returncode == -11 and "Fatal Python error: Segmentation fault" in proc.stderr, proc


@needs_mask
@pytest.mark.parametrize("spec", ["tinyglot-mini", "tinyglot-mini?format=tflite-mediapipe"])
def test_released_bundles_embed_the_same_on_avx2_kernels(avx2_env, spec):
    # onnxruntime's int8 kernels without VNNI (and XNNPACK's without AVX-512) give the shipped embeddings
    code = (f"import json, tinyglot; m = tinyglot.load({spec!r}); "
            f"print(json.dumps(m.encode({SENTENCES!r}).tolist()))")
    native, avx2 = (np.array(json.loads(_run(code, env))) for env in ({}, avx2_env))
    assert native.shape == (len(SENTENCES), 128)
    assert float(np.min(np.sum(native * avx2, axis=1))) > 0.999


@needs_mask
def test_regimes_rows_record_the_isa_their_process_saw():
    sets = [regimes.SentenceSet("s", SENTENCES, "test")]
    (row,) = regimes.run_regimes(["tinyglot-mini"], sets, threads=1, repeats=1, isa="avx2")
    assert row.get("isa") == "avx2" and row["sets"]["s"]["sentences_per_s"]["bulk"] > 0, row
    (row,) = regimes.run_regimes(["tinyglot-mini"], sets, threads=1, repeats=1)
    assert row.get("isa") == NATIVE, row


@needs_mask
def test_the_library_is_built_once_and_a_broken_compiler_is_named(tmp_path, monkeypatch):
    lib = mask_library(tmp_path)
    assert lib.is_file() and mask_library(tmp_path) == lib and lib.parent == tmp_path / "isa"
    monkeypatch.setenv("CC", "false")
    with pytest.raises(TinyglotError, match="false could not build"):
        mask_library(tmp_path / "other")
    assert not (tmp_path / "other" / "isa").exists() or not any((tmp_path / "other" / "isa").iterdir())


@needs_mask
def test_any_command_runs_masked_from_the_command_line():
    code = "import os; print(os.environ['TINYGLOT_CPUID_MASKED'])"
    proc = subprocess.run([sys.executable, "-m", "tinyglot.devices.isa", "avx2", sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "avx2", proc.stderr[-1000:]
    proc = subprocess.run([sys.executable, "-m", "tinyglot.devices.isa", "avx512", "true"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "unknown ISA 'avx512'" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "tinyglot.devices.isa", "avx2", "no-such-command-tg"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 127 and "cannot run 'no-such-command-tg'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_machines_that_cannot_hide_instruction_sets_are_named():
    flags = "processor : 0\nflags : fpu sse2 avx avx2 avx512f\n"
    assert "Linux on x86-64" in mask_problem("avx2", flags, machine="arm64", system="Darwin")
    assert "cpuid_fault" in mask_problem("avx2", flags, machine="x86_64", system="Linux")
    assert "no AVX2" in mask_problem("avx2", "flags : sse2 avx cpuid_fault\n", machine="x86_64", system="Linux")
    assert mask_problem("avx2", flags.replace("avx512f", "cpuid_fault"), machine="x86_64", system="Linux") is None
    with pytest.raises(TinyglotError, match="(?s)unknown ISA 'avx512'.*native, avx2"):
        isa_env("avx512")
    assert isa_env("native") == {}


@needs_mask
def test_the_host_avx2_device_profile_benches_on_avx2_kernels(tmp_path):
    from tinyglot.devices.bench import run_bench
    from tinyglot.released import released_root

    bundle = released_root() / "tinyglot-mini" / "onnx-text"
    run = run_bench([bundle], "host-avx2", batch=[2], seq=[16], db_path=tmp_path / "b.sqlite", min_queries=5,
                    min_seconds=0, warmup=1, warmup_seconds=0, progress=False)
    (row,) = run.rows
    assert row["device"] == "host-avx2" and row["throughput_sps"] > 0
    host = run.host
    assert host["cpuid_mask"] == "avx2" and host["int8_preset"] == "avx2"
    assert host["isa"]["avx2"] and not host["isa"]["avx512f"] and not host["isa"]["avx512_vnni"]


def test_a_device_profile_names_a_known_isa_and_masks_only_locally(tmp_path):
    from tinyglot.devices.profiles import load_profile

    assert load_profile("host-avx2").isa == "avx2" and load_profile("host").isa == NATIVE
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nkind = "local"\nisa = "avx9"\n')
    with pytest.raises(TinyglotError, match="unknown ISA 'avx9'"):
        load_profile(bad)
    bad.write_text('name = "pi"\nkind = "ssh"\nhost = "pi@pi"\nisa = "avx2"\n')
    with pytest.raises(TinyglotError, match="local profiles only"):
        load_profile(bad)
