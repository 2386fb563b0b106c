#!/usr/bin/env python3
"""One benchmark measurement in its own process: ``python runner.py SETTINGS.json``.

Self-contained on purpose (standard library + numpy + the runtime: onnxruntime or ai_edge_litert;
only the ``torch`` reference runtime imports tinyglot), so the same file is copied to a Raspberry
Pi over ssh and run there with the board's python.  One process measures ONE (runtime, model,
threads, batch, seq) combination, so its peak memory belongs to that combination alone.

Settings (JSON)::

    {"runtime": "onnx" | "tflite" | "torch" | "onnx-text" | "mediapipe" | "peer",
     "model": "model.onnx" | "model.tflite" | "student/ folder" | "peer:NAME",
     "inputs": "inputs.npz",         # ids_<seq>, mask_<seq>: int64 (N, seq), real tokenised sentences;
                                     # text_<seq>: str (N,), each about seq tokens long (string-in runtimes)
     "threads": 1, "batch": 1, "seq": 64,
     "warmup": 10, "warmup_seconds": 0.5,
     "min_queries": 1000, "min_seconds": 60, "max_seconds": 600,
     "cpus": [0],                    # optional: pin this process to these cores (Linux)
     "signature": null,              # tflite: force a signature; default: the (batch, seq) bucket
     "ort": {"session.intra_op.allow_spinning": "1"},   # onnxruntime session config entries
     "keep_latencies": false}

Protocol (the conventions of MLPerf Mobile single-stream and TFLite's benchmark_model): load the
model (``load_ms``), run one first query (``first_ms``), warm up (at least ``warmup`` queries and
``warmup_seconds``), then measure queries one after the other until at least ``min_queries``
queries AND ``min_seconds`` have passed, or ``max_seconds`` (a cap, as benchmark_model's
``--max_secs``).  A query is one batch of ``batch`` sentences padded/truncated to exactly ``seq``
tokens.  Percentiles are nearest-rank order statistics of the per-query latencies; throughput is
sentences per second of the measured loop's wall time.  The string-in runtimes (``onnx-text``:
onnxruntime + onnxruntime-extensions, the SentencePiece op in the graph; ``mediapipe``: MediaPipe's
TextEmbedder, one string per call) are fed raw strings: their latency includes tokenisation
(``"tokenisation": "included"`` in the result).  Memory: peak resident set size of the
process (``VmHWM`` on Linux/Android, else ``ru_maxrss``), the resident size before the model was
loaded, and their difference.

Prints one line ``TINYGLOT_BENCH_RESULT {json}`` on stdout (the last line); errors exit with
status 1 and the line ``TINYGLOT_BENCH_ERROR {json}``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
import contextlib
from typing import Any

RESULT_TAG = "TINYGLOT_BENCH_RESULT"
ERROR_TAG = "TINYGLOT_BENCH_ERROR"
PROTOCOL = 1
PARENT_ENV = "TINYGLOT_BENCH_PARENT"  # the pid of the process that started the runner


# ------------------------------------------------------------------ lifetime
def tie_to_parent(parent: int | None) -> str:
    """End this process when ``parent`` dies (a killed ``tinyglot bench`` leaves no runner behind).

    Linux: the kernel sends SIGKILL on the parent's death (``prctl(PR_SET_PDEATHSIG)``); elsewhere a
    daemon thread checks twice a second whether the process was re-parented.  Returns the mechanism.
    """
    if not parent:
        return "none"
    if os.getppid() != parent:  # the parent died before we got here
        os._exit(3)
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0:  # PR_SET_PDEATHSIG
                if os.getppid() != parent:  # died between the check and prctl
                    os._exit(3)
                return "pdeathsig"
        except (OSError, AttributeError):
            pass
    import threading

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()
    return "watchdog"


# ------------------------------------------------------------------ memory
def _rss_bytes() -> int | None:
    """Current resident set size."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:
        return None


def peak_rss_bytes() -> int | None:
    """Peak resident set size of this process's own address space.

    Linux/Android: ``VmHWM`` of /proc/self/status.  Not ``ru_maxrss`` there: it carries over the
    parent's peak through fork/exec, so a runner started by a big parent would report the parent.
    Elsewhere ``ru_maxrss`` (macOS: bytes), then psutil.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # Linux: KiB, macOS: bytes
    except Exception:
        pass
    try:
        import psutil

        info = psutil.Process().memory_info()
        return int(getattr(info, "peak_wset", 0) or info.rss)
    except Exception:
        return None


def _mb(n: int | None) -> float | None:
    return None if n is None else n / 2**20


# ------------------------------------------------------------------ statistics
def percentile(sorted_values, p: float) -> float:
    """Nearest-rank percentile of an ascending list (the value below which p% of the runs lie)."""
    if not sorted_values:
        return math.nan
    k = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return float(sorted_values[min(k, len(sorted_values)) - 1])


def summarize(latencies_ms) -> dict:
    vals = sorted(float(x) for x in latencies_ms)
    n = len(vals)
    mean = sum(vals) / n if n else math.nan
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / n) if n else math.nan
    return {"n": n, "mean_ms": mean, "std_ms": std, "min_ms": vals[0] if n else math.nan,
            "max_ms": vals[-1] if n else math.nan, "p50_ms": percentile(vals, 50),
            "p90_ms": percentile(vals, 90), "p99_ms": percentile(vals, 99)}


# ------------------------------------------------------------------ runtimes
class OnnxRuntime:
    name = "onnx"

    def __init__(self, settings: dict) -> None:
        import onnxruntime as ort

        self.version = ort.__version__
        self.model_path = settings["model"]
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(settings["threads"])
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        for key, value in (settings.get("ort") or {}).items():
            so.add_session_config_entry(str(key), str(value))
        self.session = ort.InferenceSession(self.model_path, so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name: ("int32" if "int32" in i.type else "int64") for i in self.session.get_inputs()}
        self.output = self.session.get_outputs()[0].name
        self.info = {"providers": self.session.get_providers()}

    def prepare(self, ids, mask) -> object:
        import numpy as np

        feed = {"input_ids": ids, "attention_mask": mask}
        return {k: np.ascontiguousarray(feed[k], dtype=dt) for k, dt in self.inputs.items()}

    def run(self, prepared):
        return self.session.run([self.output], prepared)[0]


def input_roles(names) -> dict:
    """{input name: "input_ids" | "attention_mask"} for a graph's input names (``input_ids`` /
    ``attention_mask``, possibly prefixed, or litert-torch's positional ``args_0`` / ``args_1``)."""
    names = list(names)
    if set(names) == {"args_0", "args_1"}:
        return {"args_0": "input_ids", "args_1": "attention_mask"}
    return {n: ("attention_mask" if "mask" in n else "input_ids") for n in names}


class TfliteRuntime:
    """A ``.tflite`` with one signature per fixed (batch, seq) bucket (or a single fixed graph).

    The signature whose ``input_ids`` shape equals (batch, seq) is used; if none does, the smallest
    bucket that holds it, with the query padded into it (``info["bucket"]`` says which).
    """

    name = "tflite"

    def __init__(self, settings: dict) -> None:
        try:
            from ai_edge_litert.interpreter import Interpreter
            import ai_edge_litert

            self.version = getattr(ai_edge_litert, "__version__", "?")
        except ImportError:  # the older package name on some boards
            from tflite_runtime.interpreter import Interpreter
            import tflite_runtime

            self.version = "tflite_runtime " + getattr(tflite_runtime, "__version__", "?")
        self.model_path = settings["model"]
        self.batch, self.seq = int(settings["batch"]), int(settings["seq"])
        self.interpreter = Interpreter(model_path=self.model_path, num_threads=int(settings["threads"]))
        signatures = self.interpreter.get_signature_list() or {}
        self.runner = None
        self.info: dict = {"signatures": sorted(signatures)}
        if signatures:
            name, shape = self._pick(signatures, settings.get("signature"))
            self.runner = self.interpreter.get_signature_runner(name)
            self.details = self.runner.get_input_details()
            self.info.update(signature=name, bucket=list(shape))
        else:  # a single graph: resize its inputs to (batch, seq)
            self.details = {d["name"]: d for d in self.interpreter.get_input_details()}
            for d in self.details.values():
                self.interpreter.resize_tensor_input(d["index"], [self.batch, self.seq])
            self.interpreter.allocate_tensors()
            self.details = {d["name"]: d for d in self.interpreter.get_input_details()}
            self.output_index = self.interpreter.get_output_details()[0]["index"]
            self.info.update(signature=None, bucket=[self.batch, self.seq])
        self.bucket = tuple(self.info["bucket"])

    @staticmethod
    def _ids_name(details: dict) -> str:
        return next(n for n, role in input_roles(details).items() if role == "input_ids")

    def _pick(self, signatures: dict, forced: str | None):
        shapes = {}
        for name in signatures:
            details = self.interpreter.get_signature_runner(name).get_input_details()
            shape = tuple(int(x) for x in details[self._ids_name(details)]["shape"])
            shapes[name] = shape
        if forced:
            if forced not in shapes:
                raise ValueError(f"signature {forced!r} not in {sorted(shapes)}")
            return forced, shapes[forced]
        exact = [n for n, s in shapes.items() if s == (self.batch, self.seq)]
        if exact:
            return exact[0], shapes[exact[0]]
        fits = sorted((s[0] * s[1], n) for n, s in shapes.items()
                      if len(s) == 2 and s[0] >= self.batch and s[1] >= self.seq)
        if not fits:
            raise ValueError(f"no signature holds batch {self.batch} x seq {self.seq}; buckets: "
                             + ", ".join(f"{n}={list(s)}" for n, s in sorted(shapes.items())))
        return fits[0][1], shapes[fits[0][1]]

    def prepare(self, ids, mask):
        import numpy as np

        b, s = self.bucket
        full = {"input_ids": np.zeros((b, s), np.int64), "attention_mask": np.zeros((b, s), np.int64)}
        full["input_ids"][: ids.shape[0], : ids.shape[1]] = ids
        full["attention_mask"][: mask.shape[0], : mask.shape[1]] = mask
        roles = input_roles(self.details)
        return {name: np.ascontiguousarray(full[roles[name]], dtype=d["dtype"]) for name, d in self.details.items()}

    def run(self, prepared):
        if self.runner is not None:
            out = self.runner(**prepared)
            return next(iter(out.values()))
        for name, arr in prepared.items():
            self.interpreter.set_tensor(self.details[name]["index"], arr)
        self.interpreter.invoke()
        return self.interpreter.get_tensor(self.output_index)


class TorchRuntime:
    """The PyTorch fp32 reference: any model folder of :mod:`tinyglot.registry` (a student of any kind or an
    EMS teacher run; imports tinyglot)."""

    name = "torch"

    def __init__(self, settings: dict) -> None:
        import torch

        torch.set_num_threads(int(settings["threads"]))
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(1)
        from tinyglot.registry import load_source

        self.torch = torch
        self.version = torch.__version__
        self.model, _, cfg = load_source(settings["model"])
        self.info = {"source_kind": cfg.get("kind")}

    def prepare(self, ids, mask):
        return self.torch.from_numpy(ids.copy()), self.torch.from_numpy(mask.copy())

    def run(self, prepared):
        with self.torch.inference_mode():
            emb = self.model.embed(*prepared)
            return self.torch.nn.functional.normalize(emb.float(), dim=-1)


class OnnxTextRuntime:
    """A string-in ONNX file (onnx-text bundle): the SentencePiece op of onnxruntime-extensions runs
    inside the graph, so a query's latency includes tokenisation."""

    name = "onnx-text"
    takes_text = True

    def __init__(self, settings: dict) -> None:
        import glob
        import importlib.machinery
        import importlib.metadata
        import importlib.util

        import onnxruntime as ort

        spec = importlib.util.find_spec("onnxruntime_extensions")  # the ops library, without the package's imports
        folder = next(iter(spec.submodule_search_locations)) if spec and spec.submodule_search_locations else ""
        libs = [f for sfx in importlib.machinery.EXTENSION_SUFFIXES
                for f in glob.glob(os.path.join(folder, "_extensions_pydll" + sfx))]
        if not libs:
            raise ImportError("onnxruntime-extensions is not installed")
        self.version = f"{ort.__version__} + ortx {importlib.metadata.version('onnxruntime-extensions')}"
        so = ort.SessionOptions()
        so.register_custom_ops_library(libs[0])
        so.intra_op_num_threads = int(settings["threads"])
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        for key, value in (settings.get("ort") or {}).items():
            so.add_session_config_entry(str(key), str(value))
        self.session = ort.InferenceSession(settings["model"], so, providers=["CPUExecutionProvider"])
        self.output = self.session.get_outputs()[0].name
        self.info = {"providers": self.session.get_providers(), "tokenisation": "included"}

    def prepare_texts(self, texts):
        import numpy as np

        return {"text": np.array([str(t) for t in texts], dtype=object)}

    def run(self, prepared):
        return self.session.run([self.output], prepared)[0]


class MediaPipeRuntime:
    """A tflite-mediapipe file run by MediaPipe's TextEmbedder: MediaPipe tokenises each string (its
    SentencePiece, from the TFLite Metadata), one string per call; a query of ``batch`` strings is
    ``batch`` calls.  Latency includes tokenisation."""

    name = "mediapipe"
    takes_text = True

    def __init__(self, settings: dict) -> None:
        import mediapipe
        from mediapipe.tasks.python.core import base_options
        from mediapipe.tasks.python.text import text_embedder

        self.version = getattr(mediapipe, "__version__", "?")
        options = text_embedder.TextEmbedderOptions(
            base_options=base_options.BaseOptions(model_asset_path=settings["model"]), l2_normalize=False,
            quantize=False)
        self.embedder = text_embedder.TextEmbedder.create_from_options(options)
        self.info = {"tokenisation": "included", "threads_note": "MediaPipe picks its own XNNPACK threads"}

    def prepare_texts(self, texts):
        return [str(t) for t in texts]

    def run(self, prepared):
        return [self.embedder.embed(t).embeddings[0].embedding for t in prepared]


class PeerRuntime:
    """A peer (``peer:use-m``, ``peer:e5-small``: a sentence encoder from a PyPI wheel) through its own
    Python API, as a user who picked it would run it; strings in, so latency includes tokenisation."""

    name = "peer"
    takes_text = True

    def __init__(self, settings: dict) -> None:
        import importlib.metadata

        from tinyglot.encoders.peers import PEERS, load_peer

        name = str(settings["model"]).removeprefix("peer:")
        self.encoder = load_peer(name, threads=int(settings["threads"]))
        self.version = f"{PEERS[name].package} {importlib.metadata.version(PEERS[name].package)}"
        self.info = {"tokenisation": "included", "peer": PEERS[name].model}

    def prepare_texts(self, texts):
        return [str(t) for t in texts]

    def run(self, prepared):
        return self.encoder.encode(prepared, batch_size=len(prepared))


RUNTIMES = {"onnx": OnnxRuntime, "tflite": TfliteRuntime, "torch": TorchRuntime, "onnx-text": OnnxTextRuntime,
            "mediapipe": MediaPipeRuntime, "peer": PeerRuntime}
# The frameworks a measured process may load: its result lists those it did (peak memory includes theirs).
FRAMEWORKS = ("ai_edge_litert", "mediapipe", "onnxruntime", "tensorflow", "tflite_runtime", "torch")


# ------------------------------------------------------------------ the measurement
def _set_thread_env(threads: int) -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)


def measure(settings: dict) -> dict:
    threads, batch, seq = int(settings["threads"]), int(settings["batch"]), int(settings["seq"])
    if threads < 1 or batch < 1 or seq < 1:
        raise ValueError(f"threads, batch and seq must be >= 1 (got {threads}, {batch}, {seq})")
    _set_thread_env(threads)
    pinned = None
    if settings.get("cpus"):
        try:
            os.sched_setaffinity(0, {int(c) for c in settings["cpus"]})
            pinned = sorted(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            pinned = None
    import numpy as np

    runtime_cls: Any = RUNTIMES.get(settings["runtime"])  # the runtimes share a duck-typed interface
    if runtime_cls is None:
        raise ValueError(f"unknown runtime {settings['runtime']!r} (known: {', '.join(RUNTIMES)})")
    takes_text = getattr(runtime_cls, "takes_text", False)
    with np.load(settings["inputs"]) as data:
        ids_all = np.asarray(data[f"ids_{seq}"], dtype=np.int64)
        mask_all = np.asarray(data[f"mask_{seq}"], dtype=np.int64)
        if takes_text and f"text_{seq}" not in data:
            raise ValueError(f"inputs have no text_{seq}: string-in runtimes need the sentences as text")
        texts_all = [str(t) for t in data[f"text_{seq}"]] if takes_text else None
    if ids_all.shape[1] != seq or ids_all.shape[0] < 1:
        raise ValueError(f"inputs ids_{seq} have shape {ids_all.shape}, expected (N, {seq})")
    if settings["runtime"] in ("torch", "peer") and settings.get("tinyglot_path"):
        sys.path.insert(0, settings["tinyglot_path"])
    if settings["runtime"] == "torch":  # libraries imported before the baseline: load_ms is the model alone
        import torch  # noqa: F401
        from transformers import AlbertModel, BertModel  # noqa: F401
        import tinyglot.registry  # noqa: F401
    elif settings["runtime"] in ("onnx", "onnx-text"):
        import onnxruntime  # noqa: F401
    elif settings["runtime"] == "mediapipe":
        # MediaPipe imports TensorFlow, when installed, only for a decorator of its API docs: seconds of
        # start-up and TensorFlow's log lines, hidden as tinyglot.quiet.optional_modules_hidden does
        sys.modules.setdefault("tensorflow", None)  # type: ignore[arg-type]
        from mediapipe.tasks.python.text import text_embedder  # noqa: F401
    base_rss = _rss_bytes()

    t0 = time.perf_counter()
    rt = runtime_cls(settings)
    load_ms = (time.perf_counter() - t0) * 1000
    after_load_rss = _rss_bytes()

    # distinct query batches cycling over the real sentences (rows wrap around when N < batch)
    n_rows = ids_all.shape[0]
    n_batches = max(1, min(64, n_rows // batch))
    queries = []
    for q in range(n_batches):
        rows = [(q * batch + i) % n_rows for i in range(batch)]
        if takes_text:
            queries.append(rt.prepare_texts([texts_all[r] for r in rows] if texts_all is not None else []))
        else:
            queries.append(rt.prepare(ids_all[rows], mask_all[rows]))
    real_tokens = float(mask_all.sum()) / mask_all.size

    t = time.perf_counter()
    out = rt.run(queries[0])
    first_ms = (time.perf_counter() - t) * 1000
    out_shape = list(np.asarray(out).shape)

    warmup, warmup_s = int(settings.get("warmup", 10)), float(settings.get("warmup_seconds", 0.5))
    w, ws = 0, time.perf_counter()
    while w < warmup or time.perf_counter() - ws < warmup_s:
        rt.run(queries[w % n_batches])
        w += 1
    warmup_ms = (time.perf_counter() - ws) * 1000

    min_q = int(settings.get("min_queries", 1000))
    min_s = float(settings.get("min_seconds", 60.0))
    max_s = float(settings.get("max_seconds") or 600.0)
    clock = time.perf_counter_ns
    lat_ns = []
    start = clock()
    i, stopped_by = 0, "min_queries+min_seconds"
    while True:
        q0 = clock()
        rt.run(queries[i % n_batches])
        q1 = clock()
        lat_ns.append(q1 - q0)
        i += 1
        elapsed = (q1 - start) / 1e9
        if i >= min_q and elapsed >= min_s:
            break
        if elapsed >= max_s:
            stopped_by = "max_seconds"
            break
    wall_s = (clock() - start) / 1e9
    lat_ms = [x / 1e6 for x in lat_ns]
    stats = summarize(lat_ms)
    peak = peak_rss_bytes()
    result = {
        "protocol": PROTOCOL,
        "runtime": rt.name,
        "runtime_version": rt.version,
        "model": settings["model"],
        "model_bytes": _model_bytes(settings["model"]),
        "threads": threads, "batch": batch, "seq": seq,
        "n_queries": i, "n_sentences": i * batch,
        "warmup_runs": w, "warmup_ms": warmup_ms,
        "duration_s": wall_s, "stopped_by": stopped_by,
        "min_queries": min_q, "min_seconds": min_s, "max_seconds": max_s,
        **stats,
        "throughput_sps": i * batch / wall_s if wall_s > 0 else math.nan,
        "qps": i / wall_s if wall_s > 0 else math.nan,
        "load_ms": load_ms, "first_ms": first_ms,
        "base_rss_mb": _mb(base_rss), "after_load_rss_mb": _mb(after_load_rss), "peak_rss_mb": _mb(peak),
        "peak_delta_mb": _mb(peak - base_rss) if peak is not None and base_rss is not None else None,
        "output_shape": out_shape, "real_token_fraction": real_tokens, "input_rows": n_rows,
        "tokenisation": "included" if takes_text else "excluded (token ids fed)",
        "pinned_cpus": pinned, "pid": os.getpid(), "machine": platform.machine(),
        "isa": os.environ.get("TINYGLOT_CPUID_MASKED") or "native",  # set by devices/cpuid_mask.c
        "python": sys.version.split()[0], "numpy": np.__version__,
        "frameworks": sorted(m for m in FRAMEWORKS if sys.modules.get(m) is not None),  # what shares its memory
        "info": getattr(rt, "info", {}),
    }
    if settings.get("keep_latencies"):
        result["latencies_ms"] = lat_ms
    return result


def _model_bytes(path: str) -> int:
    if path.startswith("peer:"):
        from tinyglot.encoders.peers import peer_files

        files = peer_files(path.removeprefix("peer:"))
        return _model_bytes(str(files)) if files else 0
    if os.path.isdir(path):
        total = 0
        for root, _, names in os.walk(path):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in names)
        return total
    return os.path.getsize(path) if os.path.exists(path) else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: runner.py SETTINGS.json", file=sys.stderr)
        return 2
    parent = os.environ.get(PARENT_ENV, "")
    tie_to_parent(int(parent) if parent.isdigit() else None)
    try:
        with open(argv[0], encoding="utf-8") as fh:
            settings = json.load(fh)
        base = os.path.dirname(os.path.abspath(argv[0]))
        for key in ("model", "inputs"):  # paths relative to the settings file (remote runs)
            value = settings.get(key)
            if value and not str(value).startswith("peer:") and not os.path.isabs(os.path.expanduser(value)):
                settings[key] = os.path.join(base, settings[key])
        result = measure(settings)
    except Exception as exc:  # reported to the parent as JSON, whatever it was
        print(ERROR_TAG + " " + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(RESULT_TAG + " " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
