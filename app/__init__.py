"""The application layer: the ``tinyglot`` command line, its commands, and ``tinyglot run`` (the
pipeline and its report).  Library code (the core and the stages) never imports it."""
