"""Reading the text output of TFLite's ``benchmark_model`` (stdout, or logcat of the Android app)."""

from __future__ import annotations

import math
import re
from typing import Any

from tinyglot.errors import TinyglotError

_NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
# logcat prefixes ("07-08 15:34:26.201 I/tflite  ( 5395): ", threadtime "07-08 15:34:26.201  5395  5395 I tflite  : ")
# and the tool's own severity prefix ("INFO: ")
_PREFIX = re.compile(r"^(?:\d\d-\d\d \d\d:\d\d:\d\d\.\d+\s.*?:\s+)?(?:(?:INFO|WARNING|ERROR|VERBOSE):\s*)?")


def parse_benchmark_model(text: str) -> dict[str, Any]:
    """The numbers of a TFLite ``benchmark_model`` run (stdout, or logcat of the Android app).

    Times are in microseconds as the tool prints them (``Init``, ``First inference``, ``Warmup
    (avg)``, ``Inference (avg)``; ``measured``/``warmup``: the ``count= first= curr= min= max= avg=
    std=`` statistics and, in newer versions, ``p5= median= p95=``), memory in MB (``mem_init_mb``,
    ``mem_overall_mb``: deltas of max RSS from the tool's start; ``peak_mem_mb``: periodic
    monitoring, when enabled).  Raises :class:`TinyglotError` when the timings line is missing.
    """
    out: dict[str, Any] = {"params": {}, "stats": []}
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw.strip())
        if not line:
            continue
        m = re.match(r"^Inference timings in us: Init: " + _NUM + r", First inference: " + _NUM
                     + r", Warmup \(avg\): " + _NUM + r", Inference \(avg\): " + _NUM, line)
        if m:
            out["init_us"], out["first_us"], out["warmup_avg_us"], out["avg_us"] = map(float, m.groups())
            continue
        m = re.match(r"^Memory footprint delta from the start of the tool \(MB\): init=" + _NUM + " overall=" + _NUM,
                     line)
        if m:
            out["mem_init_mb"], out["mem_overall_mb"] = map(float, m.groups())
            continue
        m = re.match(r"^Overall peak memory footprint \(MB\) via periodic monitoring: " + _NUM, line)
        if m:
            out["peak_mem_mb"] = float(m.group(1))
            continue
        m = re.match(r"^The input model file size \(MB\): " + _NUM, line)
        if m:
            out["model_size_mb"] = float(m.group(1))
            continue
        m = re.match(r"^Initialized session in " + _NUM + "ms", line)
        if m:
            out["init_session_ms"] = float(m.group(1))
            continue
        m = re.match(r"^Running benchmark for at least (\d+) iterations and at least " + _NUM
                     + r" seconds but terminate if exceeding " + _NUM + " seconds", line)
        if m:
            out["stats"].append({"min_iterations": int(m.group(1)), "min_secs": float(m.group(2)),
                                 "max_secs": float(m.group(3))})
            continue
        if line.startswith("count="):
            stats = {k: float(v) for k, v in re.findall(r"(\w+)=" + _NUM, line)}
            if out["stats"] and "count" not in out["stats"][-1]:
                out["stats"][-1].update(stats)
            else:
                out["stats"].append(stats)
            continue
        m = re.match(r"^([A-Za-z#][^:\[\]]*): \[(.*)\]$", line)
        if m:
            out["params"][m.group(1).strip()] = m.group(2)
            continue
        if "delegate" in line.lower() and ("created" in line.lower() or "applied" in line.lower()):
            out.setdefault("delegates", []).append(line)
    if "avg_us" not in out:
        tail = "\n".join(text.strip().splitlines()[-5:])
        raise TinyglotError("benchmark_model printed no 'Inference timings in us' line",
                            f"check the binary and flags; its last output: {tail or '(nothing)'}")
    if out["stats"]:
        out["measured"] = out["stats"][-1]
        out["warmup"] = out["stats"][-2] if len(out["stats"]) > 1 else None
    params = out["params"]
    threads = params.get("#threads used for CPU inference") or params.get("Num threads")
    out["num_threads"] = int(threads) if threads and threads.isdigit() else None
    out["graph"] = params.get("Graph")
    out["signature"] = params.get("Signature to run") or None
    return out


def benchmark_model_result(parsed: dict, settings: dict) -> dict:
    """A runner-shaped result from :func:`parse_benchmark_model` (p90/p99 are not printed by the tool)."""
    meas = parsed.get("measured") or {}
    avg_ms = parsed["avg_us"] / 1000
    n = int(meas.get("count", 0)) or None
    batch = int(settings.get("batch", 1))
    mean_s = parsed["avg_us"] / 1e6
    return {
        "runtime": "tflite", "runtime_version": "benchmark_model",
        "threads": parsed.get("num_threads") or settings.get("threads"), "batch": batch, "seq": settings.get("seq"),
        "n_queries": n, "warmup_runs": int((parsed.get("warmup") or {}).get("count", 0)) or None,
        "duration_s": n * mean_s if n else None,
        "mean_ms": avg_ms, "std_ms": meas.get("std", math.nan) / 1000, "min_ms": meas.get("min", math.nan) / 1000,
        "max_ms": meas.get("max", math.nan) / 1000,
        "p50_ms": meas["median"] / 1000 if "median" in meas else None, "p90_ms": None, "p99_ms": None,
        "throughput_sps": batch / mean_s if mean_s > 0 else None,
        "load_ms": parsed["init_us"] / 1000, "first_ms": parsed["first_us"] / 1000,
        "peak_rss_mb": parsed.get("peak_mem_mb"), "peak_delta_mb": parsed.get("mem_overall_mb"),
        "info": {"tool": "benchmark_model", "p5_ms": meas["p5"] / 1000 if "p5" in meas else None,
                 "p95_ms": meas["p95"] / 1000 if "p95" in meas else None, "signature": parsed.get("signature"),
                 "mem_init_mb": parsed.get("mem_init_mb"), "delegates": parsed.get("delegates", [])},
    }
