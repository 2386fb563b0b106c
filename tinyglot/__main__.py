"""``python -m tinyglot ...`` (used by ``torchrun -m tinyglot teacher train ...``)."""

import sys

from tinyglot.cli import main

sys.exit(main())
