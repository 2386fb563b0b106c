"""Device profiles (where and how a benchmark runs) and detection of the host CPU.

A profile is a small TOML file (shipped ones live in ``devices/profiles/``)::

    name = "raspberry-pi-4"
    kind = "ssh"                      # local | ssh | adb
    host = "pi@raspberrypi.local"     # ssh: user@host; port, python, workdir optional
    threads = [1, 4]                  # default thread counts to measure
    arch = "aarch64"
    int8_preset = "arm64"             # the dynamic-int8 export preset for this CPU
    runtimes = ["onnx", "tflite"]
    cpus = [0]                        # local only: pin the runner process to these cores
    isa = "avx2"                      # local only: hide AVX-512 and VNNI from the runner (devices/isa.py)
    benchmark_model = "/data/local/tmp/benchmark_model"   # adb: TFLite's benchmark tool on the phone
    extra_args = ["--use_xnnpack=true"]                  # adb: more benchmark_model flags

:func:`load_profile` takes a shipped name (``host``, ``host-1thread``, ``host-avx2``, ``raspberry-pi-4``,
``raspberry-pi-5``, ``pixel-8``, ``android-generic``), a path to a ``.toml`` file,
``ssh://user@host[:port]`` or ``adb[://SERIAL]``.  :func:`detect_host` describes this machine
(CPU model, cores, ISA flags, memory, OS) for the results database, and
:func:`preferred_int8_preset` maps ISA flags to the export preset (``avx512-vnni``, ``avx2``,
``arm64``).
"""

from __future__ import annotations

import os
import platform
import re
import sys
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable

from tinyglot.errors import TinyglotError

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
KINDS = ("local", "ssh", "adb")
RUNTIMES = ("onnx", "tflite", "torch")
# the flags worth recording (x86: /proc/cpuinfo "flags"; arm: "Features")
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
             "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
             "neon", "asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "sve2", "sme")


@dataclass
class DeviceProfile:
    name: str
    kind: str = "local"
    description: str = ""
    threads: list[int] = field(default_factory=lambda: [1])
    runtimes: list[str] = field(default_factory=lambda: list(RUNTIMES))
    arch: str = ""
    int8_preset: str = ""
    cpus: list[int] = field(default_factory=list)
    isa: str = "native"  # local only: "avx2" hides AVX-512 and VNNI from the runner (tinyglot.devices.isa)
    # ssh
    host: str = ""
    port: int = 22
    python: str = "python3"
    workdir: str = "~/.cache/tinyglot-bench"
    identity_file: str = ""
    ssh_options: list[str] = field(default_factory=list)
    # adb
    serial: str = ""
    benchmark_model: str = "/data/local/tmp/benchmark_model"
    extra_args: list[str] = field(default_factory=list)
    source: str = ""

    def validate(self) -> DeviceProfile:
        if self.kind not in KINDS:
            raise TinyglotError(f"device profile {self.name!r}: unknown kind {self.kind!r}",
                                f"use one of: {', '.join(KINDS)}")
        if self.kind == "ssh" and not self.host:
            raise TinyglotError(f"device profile {self.name!r} is an ssh device without a host",
                                "set host = \"user@host\" or pass --device ssh://user@host")
        bad = [r for r in self.runtimes if r not in RUNTIMES]
        if bad:
            raise TinyglotError(f"device profile {self.name!r}: unknown runtime(s) {bad}",
                                f"use some of: {', '.join(RUNTIMES)}")
        from tinyglot.devices.isa import NATIVE, check_isa

        check_isa(self.isa)
        if self.isa != NATIVE and self.kind != "local":
            raise TinyglotError(f"device profile {self.name!r}: isa = {self.isa!r} applies to local profiles only",
                                "measure a remote device with its own instruction sets (leave isa out)")
        if not self.threads or any(int(t) < 1 for t in self.threads):
            raise TinyglotError(f"device profile {self.name!r}: threads must be a list of counts >= 1")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_profiles() -> list[str]:
    """Names of the shipped profiles."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def _from_mapping(data: dict, source: str) -> DeviceProfile:
    known = set(DeviceProfile.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise TinyglotError(f"device profile {source}: unknown key(s) {unknown}",
                            f"known keys: {', '.join(sorted(known - {'source'}))}")
    if "name" not in data:
        data = {**data, "name": Path(source).stem}
    return DeviceProfile(**{**data, "source": source}).validate()


def parse_ssh_url(url: str) -> tuple[str, int]:
    """``ssh://user@host[:port]`` -> (``user@host``, port)."""
    m = re.fullmatch(r"ssh://([^/:]+)(?::(\d+))?/?", url)
    if not m:
        raise TinyglotError(f"cannot read the ssh device {url!r}", "write it as ssh://user@host or ssh://user@host:2222")
    return m.group(1), int(m.group(2) or 22)


def load_profile(spec: str | Path | DeviceProfile | None = "host") -> DeviceProfile:
    """A profile by shipped name, ``.toml`` path, ``ssh://user@host[:port]`` or ``adb[://SERIAL]``."""
    if isinstance(spec, DeviceProfile):
        return spec.validate()
    spec = str(spec or "host")
    if spec.startswith("ssh://"):
        host, port = parse_ssh_url(spec)
        return DeviceProfile(name=spec, kind="ssh", host=host, port=port, description=f"{host} over ssh",
                             threads=[1], runtimes=["onnx", "tflite"], source=spec).validate()
    if spec == "adb" or spec.startswith("adb://"):
        serial = spec[len("adb://"):] if spec.startswith("adb://") else ""
        base = _from_mapping(tomllib.loads((PROFILE_DIR / "android-generic.toml").read_text()), "android-generic")
        base.name, base.serial, base.source = spec, serial, spec
        return base
    path = Path(spec)
    if path.suffix == ".toml" or path.is_file():
        if not path.is_file():
            raise TinyglotError(f"device profile not found: {path}")
    else:
        path = PROFILE_DIR / f"{spec}.toml"
        if not path.is_file():
            raise TinyglotError(f"unknown device {spec!r}",
                                f"use one of: {', '.join(list_profiles())}, a .toml file, ssh://user@host or adb")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TinyglotError(f"{path} is not valid TOML ({exc})") from None
    return _from_mapping(data, str(path))


# ------------------------------------------------------------------ host detection
def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _cpuinfo_fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if ":" in line:
            key, _, value = line.partition(":")
            out.setdefault(key.strip().lower(), value.strip())
    return out


def _physical_cores() -> int | None:
    try:
        import psutil

        return psutil.cpu_count(logical=False)
    except Exception:  # psutil missing or unsupported platform
        pass
    text = _read("/proc/cpuinfo")
    pairs = set(re.findall(r"physical id\s*:\s*(\d+)[\s\S]*?core id\s*:\s*(\d+)", text))
    return len(pairs) or None


def _memory_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:
        pass
    m = re.search(r"MemTotal:\s+(\d+) kB", _read("/proc/meminfo"))
    if m:
        return int(m.group(1)) * 1024
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def describe_cpu(cpuinfo_text: str, machine: str = "") -> dict[str, Any]:
    """CPU model, ISA flags (``flags`` list and ``isa`` booleans) and int8 preset from a
    ``/proc/cpuinfo`` text (this machine's or a remote board's)."""
    fields = _cpuinfo_fields(cpuinfo_text)
    model = fields.get("model name") or fields.get("hardware") or fields.get("cpu model") or ""
    if not model and "cpu part" in fields:
        model = f"ARM implementer {fields.get('cpu implementer', '?')} part {fields['cpu part']}"
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    if machine in ("aarch64", "arm64") and not flags:
        flags.add("asimd")  # ARMv8-A always has Advanced SIMD
    return _describe(model, flags, machine)


def _describe(model: str, flags: set[str], machine: str) -> dict[str, Any]:
    isa = {f: (f in flags) for f in ISA_FLAGS}
    isa["neon"] = isa["neon"] or isa["asimd"]  # the arm64 kernel calls NEON "asimd"; report both
    isa["amx"] = isa["amx_int8"] or isa["amx_tile"]
    return {"cpu_model": model or machine, "machine": machine, "flags": sorted(f for f, on in isa.items() if on),
            "isa": isa, "int8_preset": preferred_int8_preset(flags, machine)}


def detect_host(cpuinfo_text: str | None = None) -> dict[str, Any]:
    """CPU model, cores, ISA flags, memory and OS of this machine (keys always present).

    ``cpuinfo_text`` replaces ``/proc/cpuinfo`` (tests).  py-cpuinfo is used when installed and
    ``/proc/cpuinfo`` says nothing (macOS, Windows).
    """
    machine = platform.machine()
    text = _read("/proc/cpuinfo") if cpuinfo_text is None else cpuinfo_text
    cpu = describe_cpu(text, machine)
    if not text.strip() and cpuinfo_text is None:
        try:
            import cpuinfo  # py-cpuinfo

            info = cpuinfo.get_cpu_info()
            cpu = _describe(info.get("brand_raw", ""), set(info.get("flags", [])), machine)
        except Exception:
            pass
    if cpu["cpu_model"] == machine and platform.processor():
        cpu["cpu_model"] = platform.processor()
    affinity: int | None
    try:
        affinity = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = os.cpu_count()
    versions = {"python": sys.version.split()[0]}
    for mod in ("numpy", "onnxruntime", "ai_edge_litert", "torch"):
        module = sys.modules.get(mod)
        if module is not None:
            versions[mod] = getattr(module, "__version__", "?")
    return {
        "hostname": platform.node(),
        **cpu,
        "cores_logical": os.cpu_count(),
        "cores_physical": _physical_cores(),
        "cores_available": affinity,
        "memory_bytes": _memory_bytes(),
        "os": platform.system(),
        "os_release": platform.release(),
        "os_name": _os_name(),
        "versions": versions,
    }


def _os_name() -> str:
    m = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', _read("/etc/os-release"), re.M)
    return m.group(1) if m else platform.platform()


def preferred_int8_preset(flags: Iterable[str] | dict[str, bool], machine: str | None = None) -> str:
    """The dynamic-int8 export preset for a CPU with these ISA flags.

    ``avx512-vnni`` with AVX512-VNNI (or AVX-VNNI / AMX-INT8: same int8 dot products), ``arm64``
    on ARM (``asimd``/``neon`` flags or an aarch64 machine), else ``avx2``.
    """
    if isinstance(flags, dict):
        flags = [k for k, v in flags.items() if v]
    flags = {str(f).lower() for f in flags}
    if flags & {"avx512_vnni", "avx512vnni", "avx_vnni", "amx_int8"}:
        return "avx512-vnni"
    arm = machine in ("aarch64", "arm64", "armv8l") if machine else False
    if arm or flags & {"asimd", "neon", "asimddp"}:
        return "arm64"
    return "avx2"


__all__ = ["DeviceProfile", "ISA_FLAGS", "KINDS", "PROFILE_DIR", "RUNTIMES", "describe_cpu", "detect_host",
           "list_profiles", "load_profile", "parse_ssh_url", "preferred_int8_preset"]
