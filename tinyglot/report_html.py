"""A self-contained HTML page from the Markdown tinyglot writes (headings, paragraphs, lists, tables,
code blocks, images, inline code, bold), with every PNG embedded as base64: one file to send around.

Only that subset is supported: it renders the reports tinyglot generates, not arbitrary Markdown.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #1b1f24; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; }
th { background: #f6f8fa; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code { background: #f6f8fa; padding: 1px 4px; border-radius: 4px; font-size: 90%; }
pre { background: #f6f8fa; padding: 10px; overflow-x: auto; border-radius: 6px; }
pre code { padding: 0; }
img { max-width: 100%; border: 1px solid #d0d7de; }
h1, h2 { border-bottom: 1px solid #d8dee4; padding-bottom: 0.2em; }
"""

_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")


def inline(text: str) -> str:
    """Escape, then `code` and **bold** (code spans are not formatted further)."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if len(part) >= 2 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
        else:
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(part)))
    return "".join(out)


def image(alt: str, src: str, base: Path) -> str:
    path = base / src
    if path.is_file() and path.suffix.lower() == ".png":
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        src_attr = f"data:image/png;base64,{data}"
    else:
        src_attr = html.escape(src)
    return f'<p><img alt="{html.escape(alt)}" src="{src_attr}"></p>'


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table(lines: list[str]) -> str:
    header, align, body = _cells(lines[0]), _cells(lines[1]), [_cells(x) for x in lines[2:]]
    right = [a.endswith(":") for a in align]
    cls = lambda i: ' class="num"' if i < len(right) and right[i] else ""  # noqa: E731
    out = ["<table>", "<thead><tr>" + "".join(f"<th{cls(i)}>{inline(h)}</th>" for i, h in enumerate(header))
           + "</tr></thead>", "<tbody>"]
    for row in body:
        out.append("<tr>" + "".join(f"<td{cls(i)}>{inline(c)}</td>" for i, c in enumerate(row)) + "</tr>")
    out += ["</tbody>", "</table>"]
    return "\n".join(out)


def markdown_to_html(markdown: str, base: str | Path = ".", title: str = "tinyglot report") -> str:
    """The page for ``markdown``; images are read relative to ``base`` and embedded."""
    base = Path(base)
    lines = markdown.splitlines()
    body: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            lang = line[3:].strip()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            code = html.escape("\n".join(lines[i + 1:j]))
            body.append(f'<pre><code class="language-{html.escape(lang)}">{code}</code></pre>')
            i = j + 1
        elif m := re.match(r"^(#{1,6}) (.*)$", line):
            level = len(m.group(1))
            body.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
            i += 1
        elif line.startswith("|"):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            body.append(table(lines[i:j]))
            i = j
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{inline(lines[i][2:])}</li>")
                i += 1
            body.append("<ul>\n" + "\n".join(items) + "\n</ul>")
        elif m := _IMAGE.match(line.strip()):
            body.append(image(m.group(1), m.group(2), base))
            i += 1
        elif not line.strip():
            i += 1
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not re.match(r"^(#|\||- |```|!\[)", lines[i]):
                para.append(lines[i])
                i += 1
            body.append(f"<p>{inline(' '.join(para))}</p>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


__all__ = ["markdown_to_html"]
