"""Distillation recipes (LEALLA, multi-stage) — see the project's issues #4 and #5."""
