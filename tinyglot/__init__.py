"""tinyglot: turn a multilingual sentence encoder into a small, fast on-device model.

The core (this package) holds the data readers, the SentencePiece tokenizer, the ``Encoder``
protocol, the encoder adapters and evaluation.  The stages install as subpackages: ``tinyglot.teacher``,
``tinyglot.distill``, ``tinyglot.export`` and ``tinyglot.devices``; the command line and ``tinyglot run``
are the application layer on top, ``tinyglot.app``.
"""

from __future__ import annotations

import os

from tinyglot.quiet import configure as _configure_quiet

# Before any third-party import: USE_TF=0 (transformers then never imports TensorFlow in a torch
# process), C++ log levels, and the import-time warnings and logs a user cannot act on
# (tinyglot.quiet; TINYGLOT_VERBOSE=1 shows them).
_configure_quiet()

from tinyglot.encoder import Encoder, l2_normalize  # noqa: E402
from tinyglot.errors import TinyglotError  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Encoder", "TinyglotError", "l2_normalize", "load", "__version__"]


def load(path: str | os.PathLike[str], device: str = "cpu") -> Encoder:
    """Open any tinyglot model folder (teacher run, student, exported bundle) as an ``Encoder``.

    ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``mps`` or ``auto``) is where a PyTorch model runs;
    exported bundles run on their runtime's CPU provider whatever it says."""
    from tinyglot.models import load_encoder

    return load_encoder(os.fspath(path), device=device)
