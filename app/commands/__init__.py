"""One module per ``tinyglot`` command; each has ``register(sub)`` adding its parser."""
