"""onnxruntime-extensions' ops library, loaded before TensorFlow.

Registered after ``import tensorflow``, onnxruntime-extensions crashes the process (SIGSEGV); loaded
before, both work.  Every place that may import TensorFlow (SavedModel teachers and bundles, MediaPipe
bundles) calls :func:`preload_ortx` first, so onnx-text bundles still open in the same process.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tinyglot.errors import TinyglotError


def ortx_library_path() -> str:
    """The onnxruntime-extensions ops library (``onnxruntime_extensions.get_library_path()``), found
    without importing the package: its ``__init__`` imports torch and transformers when installed."""
    import importlib.machinery
    import importlib.util

    spec = importlib.util.find_spec("onnxruntime_extensions")
    folder = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
    found = [str(folder / f"_extensions_pydll{suffix}") for suffix in importlib.machinery.EXTENSION_SUFFIXES
             if folder is not None and (folder / f"_extensions_pydll{suffix}").is_file()]
    if not found:
        raise TinyglotError("onnx-text bundles need onnxruntime-extensions (its ops library was not found)",
                            "pip install 'tinyglot[export]' (or: pip install onnxruntime-extensions)")
    return found[0]


_ORTX_LOADED: list = []  # the SessionOptions that loaded the ops library, kept for the life of the process


def tensorflow_loaded() -> bool:
    return any(m == "tensorflow" or m.startswith("tensorflow.") for m in list(sys.modules))


def preload_ortx() -> bool:
    """Load onnxruntime-extensions' ops library into this process now; True if it is loaded.

    It must come before TensorFlow (which MediaPipe and SavedModel bundles import): registered
    after ``import tensorflow``, onnxruntime crashes the process (SIGSEGV, measured with
    tensorflow 2.21, mediapipe 1.2.2, onnxruntime 1.32, onnxruntime-extensions 0.15.2); loaded
    before, both work.  The SavedModel adapter, ``tflite_mediapipe`` and ``savedmodel`` call this
    before importing them.
    """
    if _ORTX_LOADED:
        return True
    if tensorflow_loaded():
        return False
    try:
        import onnxruntime as ort

        path = ortx_library_path()
    except (ImportError, TinyglotError):
        return False
    so = ort.SessionOptions()
    so.register_custom_ops_library(path)
    _ORTX_LOADED.append(so)
    return True


__all__ = ["ortx_library_path", "preload_ortx", "tensorflow_loaded"]
