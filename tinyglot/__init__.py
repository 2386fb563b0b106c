"""tinyglot: turn a multilingual sentence encoder into a small, fast on-device model.

The core (this package) holds the data readers, the SentencePiece tokenizer, the ``Encoder``
protocol, the encoder adapters and evaluation.  The stages install as subpackages: ``tinyglot.teacher``,
``tinyglot.distill``, ``tinyglot.export`` and ``tinyglot.devices``; the command line and ``tinyglot run``
are the application layer on top, ``tinyglot.app``.
"""

from __future__ import annotations

import os

# transformers imports TensorFlow when it is installed (the [tf] extra); torch-only processes do
# not need it, and importing it costs seconds and oversubscribes threads.
os.environ.setdefault("USE_TF", "0")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

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
