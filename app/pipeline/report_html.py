"""A self-contained HTML page from a Markdown report (CommonMark and tables, rendered by markdown-it-py),
with every local PNG embedded as base64: one file to send around."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token

STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #1b1f24; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; }
th { background: #f6f8fa; }
td[style*="right"], th[style*="right"] { font-variant-numeric: tabular-nums; }
code { background: #f6f8fa; padding: 1px 4px; border-radius: 4px; font-size: 90%; }
pre { background: #f6f8fa; padding: 10px; overflow-x: auto; border-radius: 6px; }
pre code { padding: 0; }
img { max-width: 100%; border: 1px solid #d0d7de; }
h1, h2 { border-bottom: 1px solid #d8dee4; padding-bottom: 0.2em; }
"""


def embedded_src(src: str, base: Path) -> str:
    """A local PNG as a ``data:`` URL; any other source as it is."""
    path = base / src
    if "://" not in src and path.suffix.lower() == ".png" and path.is_file():
        return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    return src


def markdown_renderer(base: Path) -> MarkdownIt:
    """CommonMark with tables; images read relative to ``base`` and embedded; raw HTML in the Markdown is
    escaped (reports quote paths and specs, which are text, not markup)."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    assert isinstance(md.renderer, RendererHTML)
    default_image = md.renderer.rules["image"]

    def image(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
        token = tokens[idx]
        token.attrSet("src", embedded_src(str(token.attrGet("src") or ""), base))
        return default_image(tokens, idx, options, env)

    md.add_render_rule("image", image)
    return md


def markdown_to_html(markdown: str, base: str | Path = ".", title: str = "tinyglot report") -> str:
    """The page for ``markdown``; images are read relative to ``base`` and embedded."""
    body = markdown_renderer(Path(base)).render(markdown)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + body + "</body>\n</html>\n")


__all__ = ["markdown_to_html"]
