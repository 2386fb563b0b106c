"""Where a measurement runs: this machine, an ``ssh`` board or an ``adb`` phone.

Each target runs one measurement per call: ``runner.py`` in a fresh process (its peak memory is its
own) locally with this python, or on ``ssh`` boards with the board's python after copying the
runner, the model file and the inputs with scp; on ``adb`` phones TFLite's ``benchmark_model``
(its text output is read by :func:`~tinyglot.devices.bench_output.parse_benchmark_model`).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tinyglot.errors import TinyglotError

from .bench_inputs import BenchModel
from .bench_output import benchmark_model_result, parse_benchmark_model
from .isa import NATIVE, isa_env, shown_flags
from .profiles import DeviceProfile, describe_cpu, detect_host, preferred_int8_preset
from .runner import PARENT_ENV, input_roles

RUNNER = Path(__file__).resolve().parent / "runner.py"
RESULT_TAG = "TINYGLOT_BENCH_RESULT"
ERROR_TAG = "TINYGLOT_BENCH_ERROR"


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
        self._isa_env: dict[str, str] | None = None  # the profile's isa: built and checked on first use

    def isa_env(self) -> dict[str, str]:
        if self._isa_env is None:
            self._isa_env = isa_env(self.profile.isa)
        return self._isa_env

    def host_info(self) -> dict:
        info = detect_host()
        try:
            import onnxruntime

            info["versions"]["onnxruntime"] = onnxruntime.__version__
        except ImportError:
            pass
        if self.profile.cpus:
            info["pinned_cpus"] = list(self.profile.cpus)
        if self.profile.isa != NATIVE:  # what the runner sees, and the int8 preset for that CPU
            info["cpuid_mask"] = self.profile.isa
            info["isa"] = shown_flags(self.profile.isa, info["isa"])
            info["int8_preset"] = preferred_int8_preset(info["isa"], info.get("machine"))
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
                                  timeout=timeout,
                                  env={**os.environ, **self.isa_env(), PARENT_ENV: str(os.getpid())})
        except subprocess.TimeoutExpired:
            raise TinyglotError(f"the runner took more than {timeout:.0f} s",
                                "lower --min-seconds/--min-queries") from None
        finally:
            os.unlink(fh.name)
        result = _parse_runner_output(proc.stdout, proc.stderr, "the runner")
        if result.get("isa", NATIVE) != self.profile.isa:
            raise TinyglotError(f"the runner saw the ISA {result.get('isa', NATIVE)}, not the profile's "
                                f"{self.profile.isa}",
                                "the runner's python must honour LD_PRELOAD (not a static or setuid one)")
        return result


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
        errors = []
        # OpenSSH >= 9 copies over SFTP; boards without an sftp server (dropbear) need -O (legacy protocol)
        for legacy in ([], ["-O"]):
            cmd = ["scp", "-q", *legacy, "-P", str(self.profile.port), *self._ssh_base(), *map(str, files),
                   f"{self.profile.host}:{remote_dir}/"]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            if proc.returncode == 0:
                return
            errors.append(proc.stderr.strip())
        raise TinyglotError(f"scp to {self.profile.host}:{remote_dir} failed: {errors[-1]}")

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
        release = self.shell("getprop ro.build.version.release").strip()
        info.update(hostname=model, soc=soc, os="Android", os_release=release,
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
    tflite = model.config.get("tflite")
    tcfg: dict = tflite if isinstance(tflite, dict) else {}
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
