"""The kernels a CPU without AVX-512 and VNNI gets, measured on one that has them.

Runtimes pick their kernels when they start, from what CPUID reports: onnxruntime's MLAS runs int8
matrices on VNNI where it is there, oneDNN (TensorFlow) and XNNPACK (LiteRT) likewise.  ``isa_env("avx2")``
gives the environment in which a process sees an AVX2-only CPU: ``cpuid_mask.c`` (built once with the
machine's C compiler into ``$TINYGLOT_HOME/isa/``) preloaded, answering CPUID with AVX-512, VNNI,
BF16/FP16 and AMX cleared, and glibc's own string functions kept to AVX2.  It needs Linux on x86-64 with
CPUID faulting: the ``cpuid_fault`` flag in ``/proc/cpuinfo``, which a virtual machine has only where its
hypervisor passes it on (this project's Intel Ice Lake VMs do).  The program's own SIGSEGV handlers
(Python's ``faulthandler``, pytest's) are kept behind the library's and get the real faults.

What it measures is the ISA's share of the speed (which kernels run), on this machine's cores: an AVX2-only
CPU also differs in its cores, caches and clocks.  ``python -m tinyglot.devices.isa avx2 CMD ...`` runs any
command so (``... avx2 python -m pytest tests/test_released.py``).  A masked process carries
``TINYGLOT_CPUID_MASKED`` (set by the library itself, so its presence proves the library loaded);
:func:`masked_isa` reads it."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from tinyglot.config import tinyglot_home
from tinyglot.errors import TinyglotError
from tinyglot.io import atomic_path

NATIVE = "native"
ISAS = {NATIVE: "this CPU's own instruction sets",
        "avx2": "AVX2 only: AVX-512, AVX-512 VNNI, AVX-VNNI, BF16/FP16 and AMX hidden from CPUID"}
SOURCE = Path(__file__).with_name("cpuid_mask.c")
MARKER = "TINYGLOT_CPUID_MASKED"  # set by cpuid_mask.c in every process it masks
# glibc picks its string functions before the library loads: keep them to AVX2 too
GLIBC_TUNABLES = ("glibc.cpu.hwcaps=-AVX512F,-AVX512CD,-AVX512BW,-AVX512DQ,-AVX512VL,-AVX512ER,-AVX512PF,"
                  "-AVX512_VNNI,-AVX_VNNI,-AVX512_BF16,-AVX512_FP16")


def check_isa(isa: str) -> str:
    if isa not in ISAS:
        raise TinyglotError(f"unknown ISA {isa!r}", f"one of: {', '.join(ISAS)}")
    return isa


def cpu_flags(cpuinfo_text: str | None = None) -> set[str]:
    """The flags of ``/proc/cpuinfo`` (or of ``cpuinfo_text``); empty where there is none."""
    if cpuinfo_text is None:
        try:
            cpuinfo_text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return set()
    line = next((x for x in cpuinfo_text.splitlines() if x.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def mask_problem(isa: str, cpuinfo_text: str | None = None, machine: str | None = None,
                 system: str | None = None) -> str | None:
    """Why this machine cannot show ``isa`` to a process (None: it can)."""
    system, machine = system or platform.system(), machine or platform.machine()
    if system != "Linux" or machine not in ("x86_64", "AMD64"):
        return f"hiding instruction sets needs Linux on x86-64 (this is {system} on {machine})"
    flags = cpu_flags(cpuinfo_text)
    if "cpuid_fault" not in flags:
        return ("this CPU or its hypervisor cannot fault CPUID (no cpuid_fault flag in /proc/cpuinfo), which "
                "hiding instruction sets needs")
    if isa == "avx2" and "avx2" not in flags:
        return "this CPU has no AVX2 to keep"
    return None


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    raise TinyglotError(f"no C compiler to build {SOURCE.name} (hiding instruction sets from a process)",
                        "install one (Debian: apt-get install gcc) or set CC")


def mask_library(home: Path | None = None) -> Path:
    """``cpuid_mask.c`` built into ``home/isa/`` (default ``$TINYGLOT_HOME``), once per version of its source."""
    source = SOURCE.read_bytes()
    lib = (home or tinyglot_home()) / "isa" / f"cpuid_mask-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if lib.is_file():
        return lib
    compiler = _compiler()
    with atomic_path(lib) as tmp:
        proc = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(SOURCE), "-ldl"],
                              capture_output=True, text=True)
        if proc.returncode:
            raise TinyglotError(f"{compiler} could not build {SOURCE}: {proc.stderr.strip()[-500:]}",
                                "needs the C library's headers (Debian: apt-get install gcc libc6-dev)")
    return lib


def isa_env(isa: str, home: Path | None = None) -> dict[str, str]:
    """Environment variables under which a new process sees ``isa`` ({} for ``native``); checked by starting
    one such process.  A clear error where this machine cannot hide instruction sets."""
    if check_isa(isa) == NATIVE:
        return {}
    problem = mask_problem(isa)
    if problem:
        raise TinyglotError(problem, "measure on a CPU that lacks those instruction sets instead")
    lib = str(mask_library(home))
    preload = " ".join(x for x in (lib, os.environ.get("LD_PRELOAD", "")) if x)
    tunables = ":".join(x for x in (os.environ.get("GLIBC_TUNABLES", ""), GLIBC_TUNABLES) if x)
    env = {"LD_PRELOAD": preload, "GLIBC_TUNABLES": tunables}
    proc = subprocess.run([sys.executable, "-c", f"import os; print(os.environ.get({MARKER!r}, ''))"],
                          capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode or proc.stdout.strip() != isa:
        raise TinyglotError(f"a process under {lib} did not report {isa} (exit {proc.returncode}: "
                            f"{(proc.stderr or proc.stdout).strip()[-300:]})",
                            "measure on a CPU that lacks those instruction sets instead")
    return env


def shown_flags(isa: str, flags: dict[str, bool]) -> dict[str, bool]:
    """``flags`` (:func:`~tinyglot.devices.profiles.detect_host`'s ``isa``) as a process shown ``isa`` sees them."""
    if check_isa(isa) == NATIVE:
        return dict(flags)
    return {k: v and not k.startswith(("avx512", "avx_vnni", "amx")) for k, v in flags.items()}


def masked_isa() -> str:
    """The ISA this process was shown: ``avx2`` under ``cpuid_mask.c``, else ``native``."""
    return os.environ.get(MARKER) or NATIVE


def main(argv: list[str] | None = None) -> int:
    """``python -m tinyglot.devices.isa avx2 CMD [ARG ...]``: run a command where the CPU shows only that ISA."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print(f"usage: python -m tinyglot.devices.isa {{{','.join(ISAS)}}} CMD [ARG ...]", file=sys.stderr)
        return 2
    try:
        env = isa_env(args[0])
    except TinyglotError as exc:
        print(f"tinyglot: {exc}", file=sys.stderr)
        return 1
    try:
        os.execvpe(args[1], args[1:], {**os.environ, **env})
    except OSError as exc:  # exec returns only when it failed
        print(f"tinyglot: cannot run {args[1]!r}: {exc.strerror}\n  fix: give a command on PATH, or its path",
              file=sys.stderr)
        return 127


__all__ = ["ISAS", "NATIVE", "check_isa", "cpu_flags", "isa_env", "mask_library", "mask_problem", "masked_isa",
           "shown_flags"]


if __name__ == "__main__":
    sys.exit(main())
