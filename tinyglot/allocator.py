"""The memory allocator of the commands that train: mimalloc, preloaded into the process (Linux).

A training step allocates and frees the same large activations again and again, with sizes that change
with each batch's width.  glibc's malloc either maps and unmaps them at every step (the kernel then
zeroes every page again: about a third of a run's time went to system time) or, with a high mmap
threshold, fragments its heap until it holds twice the working set (docs/results.md, "Training memory
on the CPU").  mimalloc (the ``cmeel-mimalloc`` wheel, a dependency on Linux) reuses the freed blocks
of one step in the next without either cost.

It has to be in place before the interpreter allocates anything, so ``tinyglot teacher train``,
``distill`` and ``run`` start, parse their arguments and replace themselves (``execve``) with the same
command under ``LD_PRELOAD=libmimalloc.so`` (:func:`reexec_with_mimalloc`); the new process puts
``LD_PRELOAD`` back as it was (:func:`restore_environment`), so the processes it starts (converters,
runtimes) run on the system's allocator.  mimalloc is told to keep freed pages
(``MIMALLOC_PURGE_DELAY``); the training loop hands them back to the OS itself at chosen points
(:func:`collect`: when training starts, before an evaluation).

``TINYGLOT_ALLOCATOR=system`` keeps the system's allocator (and the glibc settings of
:func:`tinyglot.training.limit_allocator_growth`).  Nothing here imports torch: the command line calls it
before any heavy import.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("tinyglot")

ALLOCATOR_ENV = "TINYGLOT_ALLOCATOR"  # "mimalloc" (the default on Linux) or "system"
CHOICES = ("mimalloc", "system")
# mimalloc returns freed pages to the OS after this many milliseconds (its default: 10): about 11 days,
# i.e. only when tinyglot asks (collect()).  Measured on 200 ems-small steps: with the default delay
# the kernel's time was 26 % of user time, with this one 3 %.
PURGE_DELAY_MS = 1_000_000_000
# set in the re-executed process's environment: LD_PRELOAD as it was before (restore_environment)
_SAVED_PRELOAD = "TINYGLOT_SAVED_LD_PRELOAD"


def requested() -> str:
    """The allocator ``TINYGLOT_ALLOCATOR`` asks for (default: mimalloc)."""
    value = os.environ.get(ALLOCATOR_ENV, "").strip().lower() or "mimalloc"
    if value not in CHOICES:
        from tinyglot.errors import TinyglotError

        raise TinyglotError(f"{ALLOCATOR_ENV}={value!r} is not an allocator tinyglot knows",
                            f"set it to one of {', '.join(CHOICES)}, or unset it")
    return value


def mimalloc_library() -> Path | None:
    """``libmimalloc.so`` of the installed ``cmeel-mimalloc`` wheel, or None (not installed, not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    from importlib import metadata

    try:
        files = metadata.distribution("cmeel-mimalloc").files or []
    except metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name.startswith("libmimalloc.so"):
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return path
    return None


@functools.cache
def _mimalloc_in_process() -> ctypes.CDLL | None:
    """The process's symbols when mimalloc serves its ``malloc`` (it exports ``mi_collect``), else None."""
    if not sys.platform.startswith("linux"):
        return None
    process = ctypes.CDLL(None)
    return process if hasattr(process, "mi_collect") else None


@functools.cache
def glibc() -> Any:
    """The C library when it is glibc (it has ``mallopt`` and ``malloc_trim``), else None."""
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # musl and other libcs lack one or both
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def active() -> str:
    """The allocator serving this process: ``mimalloc``, ``glibc`` or ``system`` (another libc)."""
    if _mimalloc_in_process() is not None:
        return "mimalloc"
    return "glibc" if glibc() is not None else "system"


def collect() -> bool:
    """Hand mimalloc's free pages back to the OS now (``mi_collect(true)``); False when mimalloc is not
    this process's allocator."""
    process = _mimalloc_in_process()
    if process is None:
        return False
    process.mi_collect(ctypes.c_bool(True))
    return True


def preload_environment(environ: dict[str, str], library: Path) -> dict[str, str]:
    """``environ`` for a process that starts with ``library`` (mimalloc) preloaded, keeping its freed pages."""
    env = dict(environ)
    before = environ.get("LD_PRELOAD", "")
    env[_SAVED_PRELOAD] = before
    env["LD_PRELOAD"] = f"{library}:{before}" if before else str(library)
    env["MIMALLOC_PURGE_DELAY"] = str(PURGE_DELAY_MS)
    return env


def restore_environment() -> None:
    """In a process :func:`reexec_with_mimalloc` started: ``LD_PRELOAD`` as the user had it and mimalloc's
    settings dropped, so that the processes this one starts use the system's allocator."""
    saved = os.environ.pop(_SAVED_PRELOAD, None)
    if saved is None:
        return
    if not saved:  # it was unset (or empty: the same to the loader)
        os.environ.pop("LD_PRELOAD", None)
    else:
        os.environ["LD_PRELOAD"] = saved
    os.environ.pop("MIMALLOC_PURGE_DELAY", None)


def reexec_with_mimalloc(argv: Sequence[str]) -> None:
    """Replace this process with ``python -m tinyglot ARGV`` under mimalloc (see the module docstring).

    Returns, doing nothing, when mimalloc serves this process already, when ``TINYGLOT_ALLOCATOR=system``,
    when this process was started this way before (no loop), or when the wheel's library is not there."""
    if requested() != "mimalloc" or _mimalloc_in_process() is not None or _SAVED_PRELOAD in os.environ:
        return
    library = mimalloc_library()
    if library is None:
        log.info("memory allocator: the system's (the cmeel-mimalloc wheel is not installed)")
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        os.execve(sys.executable, [sys.executable, "-m", "tinyglot", *argv],
                  preload_environment(dict(os.environ), library))
    except OSError as exc:  # the command goes on in this process, on the system's allocator
        log.info("memory allocator: the system's (restarting under mimalloc failed: %s)", exc)
