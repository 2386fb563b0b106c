"""The SQLite store of benchmark measurements: one row per (model, device, threads, batch, seq)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

from tinyglot.errors import TinyglotError

DEFAULT_DB = Path("runs/bench/results.sqlite")
SCHEMA = """
CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    device TEXT NOT NULL, device_kind TEXT, runtime TEXT NOT NULL, runtime_version TEXT,
    bundle TEXT NOT NULL, bundle_name TEXT, bundle_hash TEXT, format TEXT, quantization TEXT,
    threads INTEGER, batch INTEGER, seq INTEGER,
    n_queries INTEGER, warmup_runs INTEGER, duration_s REAL,
    mean_ms REAL, std_ms REAL, min_ms REAL, max_ms REAL, p50_ms REAL, p90_ms REAL, p99_ms REAL,
    throughput_sps REAL, peak_mb REAL, mem_delta_mb REAL, load_ms REAL, first_ms REAL, file_bytes INTEGER,
    timestamp TEXT, host_json TEXT, tinyglot_version TEXT, extra_json TEXT
);
CREATE INDEX IF NOT EXISTS measurements_device ON measurements(device);
CREATE TABLE IF NOT EXISTS evals (
    bundle_hash TEXT NOT NULL, bundle TEXT, testset TEXT NOT NULL, p1 REAL, source TEXT, timestamp TEXT,
    PRIMARY KEY (bundle_hash, testset)
);
"""
COLUMNS = ("device", "device_kind", "runtime", "runtime_version", "bundle", "bundle_name", "bundle_hash", "format",
           "quantization", "threads", "batch", "seq", "n_queries", "warmup_runs", "duration_s", "mean_ms",
           "std_ms", "min_ms", "max_ms", "p50_ms", "p90_ms", "p99_ms", "throughput_sps", "peak_mb",
           "mem_delta_mb", "load_ms", "first_ms", "file_bytes", "timestamp", "host_json", "tinyglot_version",
           "extra_json")


def connect(db_path: str | Path) -> sqlite3.Connection:
    """The benchmark database at ``db_path`` (created if missing); a clear error for a folder, a file
    that is not SQLite or one that cannot be written."""
    db_path = Path(db_path)
    if db_path.is_dir():
        raise TinyglotError(f"--db {db_path} is a folder, not a database file", "pass a file path, e.g. bench.sqlite")
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(db_path)
        conn.row_factory = sqlite3.Row
        conn.executescript(SCHEMA)
    except sqlite3.DatabaseError as exc:
        raise TinyglotError(f"--db {db_path} is not a tinyglot benchmark database ({exc}); it was not changed",
                            "pass a new file path, or the SQLite file an earlier `tinyglot bench` wrote") from None
    except OSError as exc:
        raise TinyglotError(f"cannot open the benchmark database {db_path}: {exc.strerror or exc}",
                            "pass a file path in a folder you can write to") from None
    return conn


def insert_measurement(conn: sqlite3.Connection, row: dict) -> int:
    values = [row.get(c) for c in COLUMNS]
    values = [None if isinstance(v, float) and math.isnan(v) else v for v in values]
    cur = conn.execute(f"INSERT INTO measurements ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                       values)
    conn.commit()
    if cur.lastrowid is None:  # pragma: no cover - sqlite sets it after every INSERT
        raise TinyglotError("the measurement was not stored")
    return cur.lastrowid


def read_measurements(db_path: str | Path, device: str | None = None) -> list[dict]:
    """All rows (newest last), ``host``/``extra`` decoded from their JSON columns."""
    if not Path(db_path).is_file():
        raise TinyglotError(f"no benchmark database at {db_path}", "run `tinyglot bench --bundle ...` first")
    with connect(db_path) as conn:
        query = "SELECT * FROM measurements" + (" WHERE device = ?" if device else "") + " ORDER BY id"
        rows = [dict(r) for r in conn.execute(query, (device,) if device else ())]
    for r in rows:
        r["host"] = json.loads(r["host_json"] or "{}")
        r["extra"] = json.loads(r["extra_json"] or "{}")
    return rows
