"""Run benchmark sweeps on a device and store every measurement in SQLite.

    from tinyglot.devices import run_bench
    run = run_bench(["bundles/small-fp32", "bundles/small-int8"], "host", threads=[1, 2],
                    batch=[1, 32], seq=[16, 64])
    for row in run.rows: print(row["runtime"], row["threads"], row["p90_ms"])

Every (bundle, threads, batch, seq) combination runs ``runner.py`` in a fresh process (its peak
memory is its own): locally with this python, on ``ssh`` boards with the board's python after
copying the runner, the model file and the inputs with scp, and on ``adb`` phones with TFLite's
``benchmark_model`` (its text output is read by :func:`parse_benchmark_model`).  Inputs are real
sentences of the embedded test set tokenised here with the bundle's tokenizer and padded or
truncated to exactly ``seq`` tokens; string-in bundles (``onnx-text``, ``tflite-mediapipe``) get
prefixes of the same sentences that tokenise to about ``seq`` tokens, as text, so their latency
includes tokenisation (``extra["tokenisation"]``, the ``tokenisation`` column of the tables).
Rows go to the ``measurements`` table of ``db_path``.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tinyglot.errors import TinyglotError
from tinyglot.locks import file_lock

from .bench_inputs import PROFILE_RUNTIME, STRING_RUNTIMES, BenchModel, bench_sentences, \
    build_inputs, resolve_model, tokenisation_label
from .bench_output import benchmark_model_result, parse_benchmark_model
from .bench_store import COLUMNS, DEFAULT_DB, connect, insert_measurement, read_measurements
from .bench_targets import AdbTarget, LocalTarget, SshTarget, tflite_signature
from .profiles import DeviceProfile, load_profile

DEFAULT_SEQ = (16, 32, 64, 128)
# Bounds of a measurement's shape: its inputs are built in memory (past them: a clear error, not a MemoryError)
MAX_BATCH = 4096
MAX_SEQ = 16384


@dataclass
class BenchRun:
    device: str
    db_path: Path
    rows: list[dict] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    host: dict = field(default_factory=dict)


def make_target(profile: DeviceProfile):
    return {"local": LocalTarget, "ssh": SshTarget, "adb": AdbTarget}[profile.kind](profile)


def _progress(enabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, \
        TimeElapsedColumn, TimeRemainingColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(),
                    disable=not enabled or os.environ.get("TINYGLOT_NO_PROGRESS") == "1")


def run_bench(
    bundles: Sequence[str | Path],
    device_profile: str | Path | DeviceProfile = "host",
    threads: Sequence[int] | None = None,
    batch: Sequence[int] = (1,),
    seq: Sequence[int] = DEFAULT_SEQ,
    min_queries: int = 1000,
    min_seconds: float = 60.0,
    warmup: int = 10,
    db_path: str | Path = DEFAULT_DB,
    progress: bool | Callable[[dict], None] = True,
    *,
    warmup_seconds: float = 0.5,
    max_seconds: float = 600.0,
    sentences: Sequence[str] | None = None,
    keep_latencies: bool = False,
    say: Callable[[str], None] | None = None,
) -> BenchRun:
    """Measure every (bundle, threads, batch, seq) combination on a device; store and return the rows.

    ``threads`` defaults to the profile's.  A query is one batch; the runner stops after at least
    ``min_queries`` queries AND ``min_seconds`` (MLPerf Mobile: 1,024 queries and 60 s), or at
    ``max_seconds``.  Sequence lengths above a bundle's ``max_len`` are skipped (listed in
    ``skipped``); a failed combination is listed in ``failed`` and the sweep goes on.
    ``progress``: a rich progress bar (True), none (False), or a callable given each row.
    """
    profile = load_profile(device_profile)
    threads = [int(t) for t in (threads or profile.threads)]
    batch, seq = [int(b) for b in batch], [int(s) for s in seq]
    for name, values in (("threads", threads), ("batch", batch), ("seq", seq)):
        if not values or min(values) < 1:
            raise TinyglotError(f"{name} must be a non-empty list of integers >= 1, got {values}")
    if min_queries < 1 or min_seconds < 0 or warmup < 0 or max_seconds <= 0:
        raise TinyglotError("min_queries must be >= 1, min_seconds and warmup >= 0, max_seconds > 0")
    if not bundles:
        raise TinyglotError("no bundle to benchmark", "pass --bundle PATH (repeat for more)")
    models = [resolve_model(b) for b in bundles]
    sizing = next((m.tokenizer_path for m in models if m.tokenizer_path is not None), None)
    if sizing is None:
        raise TinyglotError("only peers to benchmark: their input texts are sized in tokens of a tinyglot model",
                            "bench the peers beside a bundle or student folder")
    for m in models:
        if PROFILE_RUNTIME.get(m.runtime, m.runtime) not in profile.runtimes:
            raise TinyglotError(f"device {profile.name} does not run {m.runtime} ({m.name})",
                                f"it runs: {', '.join(profile.runtimes)}")
    import tinyglot
    from tinyglot.tokenizer import Tokenizer

    target = make_target(profile)
    host = target.host_info()
    run = BenchRun(profile.name, Path(db_path), host=host)
    combos = [(m, t, b, s) for m in models for t in threads for b in batch for s in seq]
    callback = progress if callable(progress) else None
    with file_lock(Path(f"{db_path}.lock"), "tinyglot bench"), \
            tempfile.TemporaryDirectory(prefix="tinyglot-bench-") as tmp, _progress(progress is True) as bar:
        conn = connect(db_path)  # one bench at a time per database (no interleaved runs, no "database is locked")
        task = bar.add_task(f"bench on {profile.name}", total=len(combos))
        inputs: dict[str, Path] = {}
        prepared: dict[tuple[str, str], dict] = {}
        for m, t, b, s in combos:
            label = f"{m.name} {m.runtime} t{t} b{b} s{s}"
            bar.update(task, description=label)
            if s > m.max_len:
                run.skipped.append((label, f"seq {s} > the model's max_len {m.max_len}"))
                bar.advance(task)
                continue
            tok_key = str(m.tokenizer_path or sizing)  # peers get the same texts as the first model
            if tok_key not in inputs:
                path = Path(tmp) / f"inputs-{hashlib.sha256(tok_key.encode()).hexdigest()[:12]}.npz"
                inputs[tok_key] = build_inputs(Tokenizer.load(tok_key), seq, path, sentences)
            try:
                if (m.sha256, tok_key) not in prepared:
                    prepared[m.sha256, tok_key] = target.prepare(m, inputs[tok_key])
                settings = {**prepared[m.sha256, tok_key], "runtime": m.runtime, "threads": t, "batch": b, "seq": s,
                            "warmup": warmup, "warmup_seconds": warmup_seconds, "min_queries": min_queries,
                            "min_seconds": min_seconds, "max_seconds": max_seconds,
                            "cpus": list(profile.cpus), "keep_latencies": keep_latencies}
                result = target.measure(settings, timeout=max_seconds + 300 + 10 * warmup_seconds)
            except TinyglotError as exc:
                run.failed.append((label, str(exc)))
                if say:
                    say(f"{label}: {exc}")
                bar.advance(task)
                continue
            row = _row(profile, m, result, host, tinyglot.__version__)
            row["id"] = insert_measurement(conn, row)
            row["extra"] = json.loads(row["extra_json"])
            run.rows.append(row)
            if callback:
                callback(row)
            bar.advance(task)
        conn.close()
    return run


def _row(profile: DeviceProfile, m: BenchModel, r: dict, host: dict, version: str) -> dict:
    extra = {k: r.get(k) for k in ("stopped_by", "min_queries", "min_seconds", "max_seconds", "warmup_ms",
                                   "base_rss_mb", "after_load_rss_mb", "qps", "real_token_fraction",
                                   "output_shape", "pinned_cpus", "n_sentences", "input_rows", "latencies_ms",
                                   "tokenisation", "frameworks")
             if r.get(k) is not None}
    extra.update(r.get("info") or {})
    return {
        "device": profile.name, "device_kind": profile.kind, "runtime": r.get("runtime", m.runtime),
        "runtime_version": r.get("runtime_version"), "bundle": str(m.path), "bundle_name": m.name,
        "bundle_hash": m.sha256, "format": m.fmt, "quantization": m.quantization,
        "threads": r.get("threads"), "batch": r.get("batch"), "seq": r.get("seq"),
        "n_queries": r.get("n_queries"), "warmup_runs": r.get("warmup_runs"), "duration_s": r.get("duration_s"),
        "mean_ms": r.get("mean_ms"), "std_ms": r.get("std_ms"), "min_ms": r.get("min_ms"), "max_ms": r.get("max_ms"),
        "p50_ms": r.get("p50_ms"), "p90_ms": r.get("p90_ms"), "p99_ms": r.get("p99_ms"),
        "throughput_sps": r.get("throughput_sps"), "peak_mb": r.get("peak_rss_mb"),
        "mem_delta_mb": r.get("peak_delta_mb"), "load_ms": r.get("load_ms"), "first_ms": r.get("first_ms"),
        "file_bytes": m.file_bytes, "timestamp": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "host_json": json.dumps(host, sort_keys=True), "tinyglot_version": version,
        "extra_json": json.dumps(extra, sort_keys=True),
    }


__all__ = ["COLUMNS", "DEFAULT_DB", "STRING_RUNTIMES", "AdbTarget", "BenchModel", "BenchRun",
           "LocalTarget", "SshTarget", "bench_sentences", "benchmark_model_result", "build_inputs", "connect",
           "insert_measurement", "parse_benchmark_model", "read_measurements", "resolve_model", "run_bench",
           "tflite_signature", "tokenisation_label"]
