#!/usr/bin/env python3
"""Moved into the package: ``tinyglot data general`` (:mod:`tinyglot.data.general`).  This shim keeps old
commands working: ``python data/build_general.py --out DIR ...`` runs ``tinyglot data general --out DIR ...``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout that is not installed

from tinyglot.app.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["data", "general", *sys.argv[1:]]))
