"""The docs stay readable: a short README that maps the docs, every page in the mkdocs nav (CI builds them
with `mkdocs build --strict`, which fails on a broken link or anchor)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 250


def test_readme_is_short_and_maps_every_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= README_MAX_LINES
    assert "python -m pytest -q" in readme  # .ci/run calls the README's test command
    pages = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    missing = [p for p in pages if p not in readme and p != "docs/index.md"]
    assert not missing, f"README's map of the docs lacks {missing}"


def test_every_page_is_in_the_mkdocs_nav():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    listed = set(re.findall(r"([\w-]+\.md)", nav))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == listed, (pages - listed, listed - pages)
