"""``python -m tinyglot ...`` (used by ``torchrun -m tinyglot teacher train ...``): the entry point of the
application layer, :func:`tinyglot.app.cli.main`."""

import sys

from tinyglot.app.cli import main

sys.exit(main())
