"""The call regimes of ``tinyglot.devices.regimes`` (single sentences, arrival-order batches of 32, one
bulk call): the calls each makes, the rows each returns (the caller's order, equal to one-by-one
encoding, for an ONNX and a MediaPipe bundle), the sentence sets and the per-process runner.  Prints
no timings and asserts none (``benchmarks/regimes.py`` measures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinyglot
from tinyglot.devices import regimes
from tinyglot.devices.regimes import REGIMES, SentenceSet, load_set, parse_set, regime_calls, run_regime
from tinyglot.errors import TinyglotError


def test_regime_calls_cover_every_sentence_once_in_order():
    for n in (0, 1, 31, 32, 33, 100):
        for regime in REGIMES:
            calls = regime_calls(n, regime)
            assert [i for call in calls for i in call] == list(range(n))
        assert all(len(c) == 1 for c in regime_calls(n, "single"))
        assert [len(c) for c in regime_calls(n, "arrival-32")] == [32] * (n // 32) + ([n % 32] if n % 32 else [])
        assert len(regime_calls(n, "bulk")) == (1 if n else 0)
    with pytest.raises(TinyglotError, match="unknown regime"):
        regime_calls(3, "sorted")


def _mixed(small_pairs, n: int = 70) -> list[str]:
    """Arrival order: one word to long help sentences, several languages, and a blank one."""
    pool = sorted({s for p in small_pairs for s in (p.x, p.en)}, key=len)
    picks = np.linspace(0, len(pool) - 1, n - 1).round().astype(int)
    batch = [pool[i] for i in picks] + ["  "]
    np.random.default_rng(0).shuffle(batch)
    return batch


def _same_rows_as_one_by_one(enc, sentences: list[str]) -> None:
    want = np.concatenate([enc.encode([s]) for s in sentences])
    assert np.abs(want).sum(axis=1).min() == 0 and np.abs(want).sum(axis=1).max() > 0  # a blank row, real rows
    for regime in REGIMES:
        got = run_regime(enc, sentences, regime)
        assert got.shape == want.shape, regime
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0, err_msg=regime)


@pytest.fixture(scope="module")
def onnx_bundle(student_dir, tmp_path_factory):
    pytest.importorskip("onnxruntime")
    from tinyglot.export.onnx import export_onnx

    return export_onnx(student_dir, tmp_path_factory.mktemp("regimes") / "onnx", "none", max_sentences=20).out


def test_onnx_bundle_rows_in_every_regime_equal_one_by_one(onnx_bundle, small_pairs):
    _same_rows_as_one_by_one(tinyglot.load(onnx_bundle), _mixed(small_pairs))


@pytest.mark.slow  # the shared MediaPipe bundle (conftest) is converted once per session
def test_mediapipe_bundle_rows_in_every_regime_equal_one_by_one(mediapipe_bundle, small_pairs):
    enc = tinyglot.load(mediapipe_bundle)
    try:
        _same_rows_as_one_by_one(enc, _mixed(small_pairs))
    finally:
        enc.close()


def test_parse_set_specs():
    assert parse_set("lo=embedded") == ("lo", ["embedded"], 0)
    assert parse_set("prose@15=pydoc+embedded-corpus#libreoffice-help", 3) == (
        "prose", ["pydoc", "embedded-corpus#libreoffice-help"], 15)
    assert parse_set("pydoc", 7) == ("pydoc", ["pydoc"], 7)
    for bad in ("x@many=pydoc", "=pydoc", "x="):
        with pytest.raises(TinyglotError):
            parse_set(bad)


def test_sentence_sets_are_seeded_mixed_and_long_where_asked():
    manual = regimes.pydoc_sentences(15)
    assert len(manual) > 300 and all(len(s.split()) >= 15 and s[-1] in ".!?" for s in manual)
    assert not any("::=" in s or ">>>" in s for s in manual)
    prose = load_set("prose@15=pydoc+embedded-corpus#libreoffice-help", 200, seed=0, languages=["de", "ja"])
    again = load_set("prose@15=pydoc+embedded-corpus#libreoffice-help", 200, seed=0, languages=["de", "ja"])
    assert prose.sentences == again.sentences and len(prose.sentences) == 200
    assert prose.name == "prose" and prose.min_words == 15
    from_manual = set(manual) & set(prose.sentences)
    assert 80 <= len(from_manual) <= 120  # an equal share per source
    others = [s for s in prose.sentences if s not in from_manual]
    assert any(any("\u3040" <= c <= "\u30ff" or "\u4e00" <= c <= "\u9fff" for c in s) for s in others)  # ja
    assert sum(len(s) for s in prose.sentences) / 200 > 100
    short = load_set("lo=embedded", 300, seed=1)
    assert len(short.sentences) == 300 and len(set(short.sentences)) == 300
    assert short.sentences != load_set("lo=embedded", 300, seed=2).sentences  # arrival order: a seeded shuffle
    with pytest.raises(TinyglotError, match="empty"):
        load_set("x@500=embedded", 10)
    with pytest.raises(TinyglotError, match="no test set or corpus"):
        load_set("x=/no/such/folder", 10)


def test_run_regimes_measures_each_model_in_its_own_process(onnx_bundle, small_pairs):
    sentences = _mixed(small_pairs, 40)
    sets = [SentenceSet("a", sentences[:20], "test"), SentenceSet("b", sentences[20:], "test")]
    rows = regimes.run_regimes([str(onnx_bundle), "/no/such/model"], sets, threads=1, repeats=1)
    ok, bad = rows
    assert bad["spec"] == "/no/such/model" and "error" in bad
    assert ok["spec"] == str(onnx_bundle) and ok["threads"] == 1
    for name in ("a", "b"):
        assert set(ok["sets"][name]["sentences_per_s"]) == set(REGIMES)
        assert all(v > 0 for v in ok["sets"][name]["sentences_per_s"].values())
        assert ok["sets"][name]["tokens"]["mean"] > 0
    # the table: one line per model and regime, ratios to a baseline row when there is one
    base = {"spec": "peer:use-m", "sets": {n: {"sentences_per_s": dict.fromkeys(REGIMES, 10.0), "tokens": {}}
                                           for n in ("a", "b")}}
    table = regimes.regimes_table([ok, bad, base], sets)
    assert table.count("| single |") == 2 and "error:" in table and "× use-m" in table
    single = ok["sets"]["a"]["sentences_per_s"]["single"]
    assert f"{single / 10:.2f}×" in table
    assert regimes.tokens_table([base], sets).splitlines()[-1] == "| peer:use-m | – | – |"  # no tokenizer


def test_a_bundles_process_does_not_import_torch(onnx_bundle, student_dir):
    # each target is measured in its own process: an ONNX bundle's runs onnxruntime alone (importing torch
    # there cost 1.8 s of its 2.2 s load), a torch model's sets torch's threads
    code = ("import sys; from tinyglot.devices.regimes import open_target; open_target(sys.argv[1], 1); "
            "t = sys.modules.get('torch'); print('TORCH', t.get_num_threads() if t else None)")
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    got = [subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env,
                          timeout=300) for path in (onnx_bundle, student_dir)]
    lines = [p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-2000:] for p in got]
    assert lines == ["TORCH None", "TORCH 1"]


def test_rows_are_labelled_by_the_name_the_caller_gave(tmp_path):
    """Two released students open as bundles of the same kind: the table names them by their spec."""
    bundle_name = "onnx-text-dynamic (onnx-text)"
    assert regimes.row_label({"spec": "tinyglot-mini", "name": bundle_name}) == "tinyglot-mini"
    assert regimes.row_label({"spec": "tinyglot-mini?format=tflite-mediapipe", "name": "x"}) == \
        "tinyglot-mini?format=tflite-mediapipe"
    assert regimes.row_label({"spec": str(tmp_path), "name": bundle_name}) == bundle_name  # a folder: its kind
    assert regimes.row_label({"spec": str(tmp_path), "name": bundle_name}, {str(tmp_path): "mine"}) == "mine"
    # two folders' bundles of the same kind: each by its path, so that the table tells them apart
    a, b = tmp_path / "a" / "onnx-dynamic", tmp_path / "b" / "onnx-dynamic"
    for folder in (a, b):
        folder.mkdir(parents=True)
    rows = [{"spec": str(a), "name": bundle_name}, {"spec": str(b), "name": bundle_name},
            {"spec": "peer:use-m", "name": "use-m"}]
    assert regimes.row_labels(rows) == [str(a), str(b), "peer:use-m"]
    speeds = {"x": {"sentences_per_s": dict.fromkeys(REGIMES, 5.0), "tokens": {"mean": 3.0, "p90": 4.0}}}
    table = regimes.regimes_table([{**r, "sets": speeds} for r in rows], ["x"])
    assert f"| {a} | single |" in table and f"| {b} | single |" in table
    assert f"| {b} | 3.0 / 4 |" in regimes.tokens_table([{**r, "sets": speeds} for r in rows], ["x"])


def test_the_benchmark_says_a_bad_input_in_two_lines_not_a_traceback(tmp_path):
    """benchmarks/regimes.py: a missing test set (or --isa avx2 on a CPU that cannot fault CPUID) is tinyglot's
    error, its problem and its fix, with exit status 2."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "regimes.py"
    proc = subprocess.run([sys.executable, str(script), "use-m", "--test", f"lo={tmp_path / 'none'}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.startswith(f"error: no test set or corpus at {tmp_path / 'none'}") and "fix:" in proc.stderr


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2, reason="needs 2 CPUs, Linux")
def test_a_pinned_run_says_its_cpus_in_the_header_and_the_json(onnx_bundle, tmp_path):
    """Under `taskset` every model's process inherits the pinning; the table's header and --json say which CPU."""
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "regimes.py"
    out = tmp_path / "regimes.json"
    proc = subprocess.run([sys.executable, str(script), str(onnx_bundle), "--test", "a=embedded", "--max-sentences",
                           "8", "--repeats", "1", "--json", str(out)], capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{os.cpu_count()} cores (pinned to CPU 0), 1 thread(s)" in proc.stdout.splitlines()[0]
    assert json.loads(out.read_text())["settings"]["cpus"] == [0]
