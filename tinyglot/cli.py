"""Temporary: keeps ``from tinyglot.cli import load_encoder_arg`` working in library code
(``distill/run.py``, ``distill/multistage.py``) until it moves to ``tinyglot.encoders.load_encoder``.

The command line itself is :mod:`tinyglot.app.cli`.  Delete this module with the last such import.
"""

from tinyglot.app.cli import load_encoder_arg

__all__ = ["load_encoder_arg"]
