"""Per-device latency, throughput, memory and size benchmarks of exported bundles.

Conventions of MLPerf Mobile (single-stream) and TFLite's ``benchmark_model``: load the model
(load time), warm up, then measure queries one after the other, at least 1,000 queries and 60 s
by default (``min_queries`` / ``min_seconds``, lower for tests); report p50/p90/p99 latency,
throughput (sentences/s), peak memory, load time and file size, always with the thread count,
batch size and sequence length they were measured at.  Inputs are real sentences of the embedded
test set, tokenised with the bundle's tokenizer and padded/truncated to exactly ``seq`` tokens.

Modules:

- :mod:`~tinyglot.devices.profiles`: device profiles (``devices/profiles/*.toml``: ``host``,
  ``host-1thread``, ``raspberry-pi-4``/``-5`` over ssh, ``pixel-8``/``android-generic`` over adb),
  :func:`detect_host` (CPU model, cores, ISA flags, memory, OS), :func:`preferred_int8_preset`;
- :mod:`~tinyglot.devices.runner`: the self-contained measurement script (numpy + onnxruntime or
  ai_edge_litert; the ``torch`` reference imports tinyglot), one process per measurement;
- :mod:`~tinyglot.devices.bench`: :func:`run_bench` sweeps threads x batch x seq locally, over
  ssh (scp + the board's python) or adb (TFLite ``benchmark_model``, read by
  :func:`parse_benchmark_model`) and stores one SQLite row per measurement;
- :mod:`~tinyglot.devices.report`: Markdown tables and PNG plots (latency vs sequence length,
  size / P@1 / latency Pareto view).

    from tinyglot.devices import run_bench, build_report
    run_bench(["bundles/small-fp32", "bundles/small-int8"], "host", threads=[1, 2], batch=[1, 32],
              seq=[16, 64], db_path="runs/bench/results.sqlite")
    build_report("runs/bench/results.sqlite", "runs/bench/report")

Command line: ``tinyglot bench --bundle B [--bundle B2] --device host --threads 1,2 --batch 1,32
--seq 16,64``, ``tinyglot bench report``, ``tinyglot bench devices``.  Names are imported lazily.
"""

from __future__ import annotations

from tinyglot.lazy import lazy_exports

_EXPORTS = {
    "DeviceProfile": "profiles",
    "detect_host": "profiles",
    "list_profiles": "profiles",
    "load_profile": "profiles",
    "preferred_int8_preset": "profiles",
    "BenchRun": "bench",
    "parse_benchmark_model": "bench",
    "read_measurements": "bench",
    "run_bench": "bench",
    "build_report": "report",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

