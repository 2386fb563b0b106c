"""report.html: the run's Markdown report as one self-contained page (tables, headings, embedded figures)."""

from __future__ import annotations

import base64
import re

from tinyglot.app.pipeline.report_html import markdown_to_html

# the smallest valid PNG: 1x1, one grey pixel
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg==")


def test_tables_headings_and_inline_markup_render(tmp_path):
    md = ("# Run report\n\nThe **student** is `onnx-dynamic`.\n\n## P@1\n\n"
          "| lang | teacher | student |\n|---|---:|---:|\n| de | 91.0 | 88.5 |\n| ja | 80.2 | 75.1 |\n\n"
          "- one\n- two <b>not markup</b>\n\n```toml\nprofile = \"tiny\"\n```\n")
    page = markdown_to_html(md, base=tmp_path, title="tiny <run>")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<title>tiny &lt;run&gt;</title>" in page
    assert "<h1>Run report</h1>" in page and "<h2>P@1</h2>" in page
    assert "<strong>student</strong>" in page and "<code>onnx-dynamic</code>" in page
    table = page[page.index("<table>"):page.index("</table>")]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", table) == ["lang", "teacher", "student"]
    assert re.findall(r"<td[^>]*>([^<]*)</td>", table) == ["de", "91.0", "88.5", "ja", "80.2", "75.1"]
    assert table.count('style="text-align:right"') == 2 + 4  # the numeric columns, header and body
    assert "<li>one</li>" in page and "&lt;b&gt;not markup&lt;/b&gt;" in page  # raw HTML is escaped
    assert '<code class="language-toml">profile = &quot;tiny&quot;\n</code>' in page


def test_local_png_figures_are_embedded_and_others_kept(tmp_path):
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "pareto.png").write_bytes(PNG)
    md = ("![Pareto view](figures/pareto.png)\n\n![missing](figures/none.png)\n\n"
          "![remote](https://example.org/x.png)\n")
    page = markdown_to_html(md, base=tmp_path)
    embedded = re.search(r'<img src="data:image/png;base64,([^"]+)" alt="Pareto view"', page)
    assert embedded and base64.b64decode(embedded.group(1)) == PNG
    assert '<img src="figures/none.png" alt="missing"' in page  # not there: linked as written
    assert '<img src="https://example.org/x.png" alt="remote"' in page
    assert page.count("data:image/png;base64,") == 1
