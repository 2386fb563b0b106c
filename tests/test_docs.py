"""The docs stay readable: a short README that maps the docs, every page in the mkdocs nav (CI builds them
with `mkdocs build --strict`, which fails on a broken link or anchor)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 150


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


# the shared data folder beside the clone (the corpus, its tests, Common Voice's text): the README's
# commands read these, and a user points them at their own
SHARED = ("../shared/data/train.jsonl.gz", "../shared/data/test", "../shared/data/test/libreoffice",
          "../shared/data/test/pretix", "../shared/data/commonvoice")
PATH = re.compile(r"(?<![\w/.:$-])(?:\.\./shared/data/[\w./-]*[\w]|(?:\.?[\w-]+/)+[\w.-]*[\w]"
                  r"|[\w-]+\.(?:md|py|sh|toml|json))")
REPO_FOLDERS = {"tinyglot", "docs", "release", "tests", "benchmarks", "examples", "app", "teacher", "distill", "export",
                "devices", "data", ".ci", "runs"}
MADE = re.compile(r"--out\s+(\S+)|--(?:json|plot)\s+(\S+)")


def readme_paths(text: str) -> list[tuple[int, str]]:
    """(line, path) of each path-like token of the README, links' targets and code included; URLs left out."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        line = re.sub(r"https?://\S+", "", line)
        found += [(n, m.group(0)) for m in PATH.finditer(line)]
    return found


def test_every_path_the_readme_names_exists_or_is_made_before():
    """A path in the README is in the clone, or in the shared data folder beside it, or under a folder that a
    command given earlier in the README makes (``tinyglot run`` writes runs/pipeline, ``--out DIR`` its DIR)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    made = ["runs/pipeline"]  # `tinyglot run`'s default folder
    missing = []
    lines = text.splitlines()
    for n, path in readme_paths(text):
        made += [a or b for m in MADE.finditer("\n".join(lines[: n - 1])) for a, b in [m.groups()]]
        clean = path.split("#", 1)[0].rstrip("/.")
        first = clean.split("/", 1)[0]
        if clean.startswith("../shared/data"):
            ok = any(clean == s or clean.startswith(s + "/") for s in SHARED)
        elif first in REPO_FOLDERS or re.search(r"\.(md|py|sh|toml|json|gz|tsv|txt|model|onnx|tflite)$", clean):
            ok = (ROOT / clean).exists() or any(clean == m or clean.startswith(m.rstrip("/") + "/") for m in made)
        else:
            continue  # not a path ("sentences/s"), or a placeholder (GENERAL/general-test)
        if not ok:
            missing.append(f"line {n}: {path}")
    assert not missing, "README names paths a fresh clone lacks:\n" + "\n".join(missing)
