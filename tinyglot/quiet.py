"""A quiet terminal: tinyglot prints its own lines; third-party output is kept back, shown on request.

Two parts:

* :func:`configure` (run by ``import tinyglot``) sets what must be set before the third-party
  imports: environment defaults (``USE_TF=0``: transformers then never imports TensorFlow in a torch
  process; TensorFlow's and glog's C++ log levels), warnings filters for named third-party
  deprecation warnings, and the levels of the loggers that log at import time (torchao's "Failed
  to load ..._C_mxfp8...so", torch pytree's "<enum ...> is an Enum subclass ...").  Only what the
  user has not set is changed.
* :func:`third_party_output` wraps the noisy calls (quantizers, converters, interpreter
  creation): their stdout and stderr, Python's and the C libraries' (file descriptors 1 and 2,
  redirected with ``dup2`` to a temporary file), are captured and written to stderr only when the
  call fails.

Verbose mode (``tinyglot -v``, or ``TINYGLOT_VERBOSE=1`` for library users) captures nothing and
changes no logger level or filter: everything third-party shows, as it would without tinyglot.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator

VERBOSE_ENV = "TINYGLOT_VERBOSE"

# Always, unless the user set them: they change what gets imported, not only what gets printed.
# transformers imports TensorFlow when it is installed (the [tf] extra) unless USE_TF=0: seconds of
# import, threads, and TensorFlow's C++ log lines in processes that only run torch.
BEHAVIOUR_ENV = {"USE_TF": "0", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}
# Quiet mode only, unless the user set them: C++ log levels read when the library loads.
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "GLOG_minloglevel": "2"}
# Loggers that log at import time what a user cannot act on: torchao (transformers imports it when
# litert-torch installed it) warns that its CUDA kernels do not load on this machine, and registers
# enums with torch's pytree, which logs a deprecation warning per enum.
QUIET_LOGGERS = {"torchao": logging.ERROR, "torch.utils._pytree": logging.ERROR}
# (category, message regex) of third-party warnings a user cannot act on: torch.export's pytree
# deprecation, raised from litert-torch's conversion (shown as coming from copyreg).
QUIET_WARNINGS = ((FutureWarning, r"`?isinstance\(treespec, LeafSpec\)`? is deprecated"),)
# Root-logger records from third-party code (onnxruntime's quantizer logs through the root logger).
QUIET_ROOT_PREFIXES = ("Please consider to run pre-processing before quantization",
                       "Please consider pre-processing before quantization")

class _State:
    verbose: bool | None = None  # the mode configure() applied last
    env: dict[str, str] = {}  # environment variables quiet mode set (the user had not)
    levels: dict[str, int] = {}  # logger levels quiet mode changed, with the level before


_state = _State()


class _DropThirdPartyRoot(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(QUIET_ROOT_PREFIXES))


_ROOT_FILTER = _DropThirdPartyRoot()


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def is_verbose() -> bool:
    """Verbose mode: ``TINYGLOT_VERBOSE`` is set (``tinyglot -v`` sets it)."""
    return _truthy(os.environ.get(VERBOSE_ENV))


def configure(verbose: bool | None = None) -> None:
    """Apply the quiet (or, with ``verbose``, the verbose) settings; ``None``: from ``TINYGLOT_VERBOSE``.
    Idempotent; switching to verbose undoes what quiet mode set (environment variables take effect
    only for libraries not imported yet)."""
    if verbose is None:
        verbose = is_verbose()
    for key, value in BEHAVIOUR_ENV.items():
        os.environ.setdefault(key, value)
    if _state.verbose is verbose:
        return
    _state.verbose = verbose
    root = logging.getLogger()
    if verbose:
        os.environ[VERBOSE_ENV] = "1"  # also for child processes
        for key, value in _state.env.items():  # only the values quiet mode set
            if os.environ.get(key) == value:
                del os.environ[key]
        _state.env = {}
        for name, level in _state.levels.items():
            logging.getLogger(name).setLevel(level)
        _state.levels = {}
        for category, message in QUIET_WARNINGS:
            warnings.filterwarnings("default", message=message, category=category)
        root.removeFilter(_ROOT_FILTER)
        return
    for key, value in QUIET_ENV.items():
        if key not in os.environ:
            os.environ[key] = _state.env[key] = value
    for name, level in QUIET_LOGGERS.items():
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:  # a level the user set stays
            _state.levels[name] = logger.level
            logger.setLevel(level)
    for category, message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    root.addFilter(_ROOT_FILTER)


def set_verbose(verbose: bool) -> None:
    """Verbose on or off for this process and its children (``tinyglot -v``)."""
    if not verbose:
        os.environ.pop(VERBOSE_ENV, None)
    configure(verbose)


# ------------------------------------------------------------------ captured output
class Captured:
    """What a :func:`third_party_output` block printed (empty in verbose mode: nothing is captured)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.text = ""


def _flush_c_stdio() -> None:
    """fflush(NULL): C code's buffered stdout (a file is fully buffered) lands before the fds move back."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # pragma: no cover - no libc (Windows)
        pass


def _flush(*streams) -> None:
    for stream in streams:
        with contextlib.suppress(Exception):
            stream.flush()


@contextlib.contextmanager
def third_party_output(what: str = "third-party output") -> Iterator[Captured]:
    """Capture everything written to stdout and stderr inside the block (Python's ``sys.stdout``/
    ``sys.stderr``, ``print``, warnings, log handlers, tqdm bars, and C/C++ writes to file
    descriptors 1 and 2, child processes included) into a temporary file.  On an exception the
    captured text goes to stderr before the exception propagates; otherwise it is dropped (it stays
    in the yielded :class:`Captured`).  Verbose mode: a no-op.

    Wrap third-party calls only: tinyglot's own lines printed inside the block are captured too.
    The descriptors are process-wide: output of other threads meanwhile is captured as well."""
    box = Captured(what)
    if is_verbose():
        yield box
        return
    old_out, old_err = sys.stdout, sys.stderr
    _flush(old_out, old_err, sys.__stdout__, sys.__stderr__)
    _flush_c_stdio()
    with tempfile.TemporaryFile() as tmp:
        saved: dict[int, int] = {}
        for fd in (1, 2):
            try:
                saved[fd] = os.dup(fd)
                os.dup2(tmp.fileno(), fd)
            except OSError:  # pragma: no cover - no such descriptor (pythonw, closed stdio)
                saved.pop(fd, None)
        # Python-level writes go to the same open file (shared offset), so the order is kept
        stream = io.TextIOWrapper(os.fdopen(os.dup(tmp.fileno()), "wb"), encoding="utf-8", errors="replace",
                                  line_buffering=True, write_through=True)
        sys.stdout = sys.stderr = stream
        failed = False
        try:
            yield box
        except BaseException:
            failed = True
            raise
        finally:
            _flush(stream, old_out, old_err, sys.__stdout__, sys.__stderr__)
            _flush_c_stdio()
            sys.stdout, sys.stderr = old_out, old_err
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            stream.close()
            tmp.seek(0)
            box.text = tmp.read().decode("utf-8", errors="replace")
            if failed and box.text.strip():
                try:
                    old_err.write(f"--- {what} (captured; TINYGLOT_VERBOSE=1 or tinyglot -v shows it live) ---\n")
                    old_err.write(box.text if box.text.endswith("\n") else box.text + "\n")
                    old_err.write(f"--- end of {what} ---\n")
                    old_err.flush()
                except Exception:  # noqa: BLE001 - never hide the original exception  # pragma: no cover
                    pass


# ------------------------------------------------------------------ imports that pull TensorFlow in
@contextlib.contextmanager
def optional_modules_hidden(*names: str) -> Iterator[None]:
    """Inside the block, ``import NAME`` raises ModuleNotFoundError for each of ``names`` not imported
    yet, as if it were not installed.  For libraries that use a module only when it is installed:
    MediaPipe imports TensorFlow for a decorator of its API-docs build (``optional_dependencies``)
    and for ``tf.io.gfile`` in its metadata module (plain ``open`` otherwise), which costs seconds
    and prints TensorFlow's C++ log lines on stderr.  Modules already imported are left alone."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def mediapipe_without_tensorflow() -> contextlib.AbstractContextManager[None]:
    """Import MediaPipe inside this block: it then never imports TensorFlow (see
    :func:`optional_modules_hidden`)."""
    return optional_modules_hidden("tensorflow")


__all__ = ["VERBOSE_ENV", "Captured", "configure", "is_verbose", "mediapipe_without_tensorflow",
           "optional_modules_hidden", "set_verbose", "third_party_output"]
