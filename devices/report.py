"""``tinyglot bench report``: Markdown tables and PNG plots from the benchmark database.

For each device: a table (runtime, bundle, quantization, threads, batch, seq, p50/p90/p99 latency,
sentences/s, peak memory, load time, size), a plot of latency against sequence length (one line
per runtime/bundle, one panel per threads x batch) and a Pareto view of size, P@1 and latency
across bundles.  P@1 (percent, mean of both directions over languages) is read from the bundle's
``parity.json`` (``p1_exported``) or ``config.json`` (``p1``) or ``eval.json`` (``tinyglot eval
--json``) when present, else measured once with :func:`tinyglot.evaluation.evaluate_bitext` on the
embedded test set and cached in the database's ``evals`` table.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

from tinyglot.errors import TinyglotError

from .bench_store import DEFAULT_DB, connect, read_measurements

EMBEDDED_TESTSET = "embedded"
KEY = ("device", "bundle_hash", "runtime", "threads", "batch", "seq")


@dataclass
class Report:
    markdown: Path
    plots: list[Path] = field(default_factory=list)
    p1: dict[str, tuple[float | None, str]] = field(default_factory=dict)  # bundle hash -> (P@1 %, source)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "device"


def latest_rows(rows: Sequence[dict]) -> list[dict]:
    """The newest row of each (device, bundle, runtime, threads, batch, seq), in a stable order."""
    latest: dict[tuple, dict] = {}
    for r in rows:  # rows come oldest first
        latest[tuple(r[k] for k in KEY)] = r
    return sorted(latest.values(), key=lambda r: (r["device"], r["runtime"], r["bundle_name"] or "",
                                                  r["quantization"] or "", r["threads"], r["batch"], r["seq"]))


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def _size(n: int | None) -> str:
    if not n:
        return "–"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1000
    return str(size)  # pragma: no cover


# ------------------------------------------------------------------ P@1
def _p1_from_files(bundle: Path) -> tuple[float | None, str]:
    parity = bundle / "parity.json"
    if parity.is_file():
        try:
            data = json.loads(parity.read_text())
            if data.get("p1_exported") is not None:
                n = data.get("n_sentences")
                return float(data["p1_exported"]), f"parity.json ({n} sentences)" if n else "parity.json"
        except (json.JSONDecodeError, TypeError, ValueError):
            pass
    cfg_path = bundle / "config.json"
    if cfg_path.is_file():
        try:
            cfg = json.loads(cfg_path.read_text())
            if isinstance(cfg.get("p1"), (int, float)):
                return float(cfg["p1"]), "config.json"
        except json.JSONDecodeError:
            pass
    ev = bundle / "eval.json"
    if ev.is_file():
        try:
            data = json.loads(ev.read_text())
            return 100 * float(data["primary_metric"]), "eval.json"
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            pass
    return None, ""


P1_FROM = ("auto", "files", "eval")


def bundle_p1(conn, bundle: str | Path, bundle_hash: str, p1_from: str = "auto",
              max_pairs: int | None = None) -> tuple[float | None, str]:
    """P@1 (%) of a bundle and where it came from.

    ``auto``: parity.json / config.json / eval.json, else an evaluation on the embedded test set
    (cached in the ``evals`` table); ``files``: never evaluate; ``eval``: always the (cached)
    evaluation, so that every bundle is scored on the same test set.
    """
    if p1_from not in P1_FROM:
        raise TinyglotError(f"p1_from must be one of {P1_FROM}, got {p1_from!r}")
    bundle = Path(bundle)
    if p1_from != "eval":
        p1, source = _p1_from_files(bundle) if bundle.is_dir() else (None, "")
        if p1 is not None:
            return p1, source
    testset_key = EMBEDDED_TESTSET + (f":{max_pairs}" if max_pairs else "")
    row = conn.execute("SELECT p1, source FROM evals WHERE bundle_hash = ? AND testset = ?",
                       (bundle_hash, testset_key)).fetchone()
    if row is not None:
        return row["p1"], row["source"] + " (cached)"
    if p1_from == "files" or not bundle.is_dir():
        return None, ""
    import tinyglot
    from tinyglot.data.embedded import load_testset
    from tinyglot.evaluation import evaluate_bitext

    testset = load_testset()
    if max_pairs:
        testset = {lang: pairs[:max_pairs] for lang, pairs in testset.items()}
    result = evaluate_bitext(tinyglot.load(bundle), testset, model_name=str(bundle), testset_name=testset_key)
    p1 = 100 * float(result.primary_metric)
    source = f"evaluate_bitext on the embedded test set ({sum(len(v) for v in testset.values())} pairs)"
    conn.execute("INSERT OR REPLACE INTO evals VALUES (?, ?, ?, ?, ?, ?)",
                 (bundle_hash, str(bundle), testset_key, p1, source,
                  _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")))
    conn.commit()
    return p1, source


# ------------------------------------------------------------------ Markdown
TABLE_HEADER = ("runtime", "bundle", "quantization", "tokenisation", "threads", "batch", "seq", "p50 ms",
                "p90 ms", "p99 ms", "sentences/s", "peak MB", "load ms", "size")


def markdown_table(rows: Sequence[dict]) -> str:
    lines = ["| " + " | ".join(TABLE_HEADER) + " |",
             "|" + "|".join("---" if i < 4 else "---:" for i in range(len(TABLE_HEADER))) + "|"]
    from .bench_inputs import tokenisation_label

    for r in rows:
        lines.append("| " + " | ".join([
            r["runtime"], r["bundle_name"] or Path(r["bundle"]).name, r["quantization"] or "",
            tokenisation_label(r["runtime"]), str(r["threads"]), str(r["batch"]), str(r["seq"]),
            _fmt(r["p50_ms"], 3), _fmt(r["p90_ms"], 3),
            _fmt(r["p99_ms"], 3), _fmt(r["throughput_sps"], 1), _fmt(r["peak_mb"], 1), _fmt(r["load_ms"], 1),
            _size(r["file_bytes"])]) + " |")
    return "\n".join(lines)


def _host_line(host: dict) -> str:
    if not host:
        return ""
    mem = host.get("memory_bytes")
    parts = [host.get("cpu_model") or "?", host.get("machine") or ""]
    if host.get("cores_logical"):
        parts.append(f"{host['cores_logical']} logical cores"
                     + (f" ({host['cores_physical']} physical)" if host.get("cores_physical") else ""))
    if host.get("pinned_cpus"):
        parts.append(f"pinned to cores {host['pinned_cpus']}")
    if host.get("flags"):
        parts.append("ISA " + " ".join(host["flags"]))
    if mem:
        parts.append(f"{mem / 2**30:.1f} GiB RAM")
    parts.append(" ".join(x for x in (host.get("os_name") or host.get("os"), host.get("os_release")) if x))
    versions = host.get("versions") or {}
    if versions:
        parts.append(", ".join(f"{k} {v}" for k, v in versions.items()))
    return "; ".join(p for p in parts if p)


# ------------------------------------------------------------------ plots
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series_label(r: dict) -> str:
    q = r["quantization"] or ""
    return f"{r['runtime']} {r['bundle_name']}" + (f" [{q}]" if q and q not in r["bundle_name"] else "")


def plot_latency_vs_seq(rows: Sequence[dict], path: Path, device: str) -> Path:
    plt = _plt()
    threads = sorted({r["threads"] for r in rows})
    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(len(threads), len(batches), figsize=(5.2 * len(batches), 3.8 * len(threads)),
                             squeeze=False, sharex=True)
    labels = sorted({_series_label(r) for r in rows})
    colors = {lab: plt.cm.tab10(i % 10) for i, lab in enumerate(labels)}
    for i, t in enumerate(threads):
        for j, b in enumerate(batches):
            ax = axes[i][j]
            for lab in labels:
                pts = sorted((r["seq"], r["p50_ms"], r["p90_ms"]) for r in rows
                             if _series_label(r) == lab and r["threads"] == t and r["batch"] == b
                             and r["p50_ms"] is not None)
                if not pts:
                    continue
                xs = [p[0] for p in pts]
                ax.plot(xs, [p[1] for p in pts], marker="o", color=colors[lab], label=lab)
                p90 = [p[2] for p in pts]
                if all(v is not None for v in p90):
                    ax.plot(xs, p90, linestyle="--", linewidth=0.8, color=colors[lab])
            ax.set_title(f"{t} thread{'s' if t > 1 else ''}, batch {b}", fontsize=10)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({r["seq"] for r in rows}))
            ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("sequence length (tokens)")
            ax.set_ylabel("latency per batch, ms")
            ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{device}: p50 latency (solid) and p90 (dashed) vs sequence length")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def reference_setting(rows: Sequence[dict]) -> tuple[int, int, int]:
    """(threads, batch, seq) to compare bundles at: single-stream (batch 1 if measured), the fewest
    threads, and the sequence length closest to 64 that every bundle has."""
    batch = 1 if any(r["batch"] == 1 for r in rows) else min(r["batch"] for r in rows)
    sub = [r for r in rows if r["batch"] == batch]
    threads = min(r["threads"] for r in sub)
    sub = [r for r in sub if r["threads"] == threads]
    bundles = {(r["bundle_hash"], r["runtime"]) for r in sub}
    common = set.intersection(*({r["seq"] for r in sub if (r["bundle_hash"], r["runtime"]) == b} for b in bundles))
    seqs = common or {r["seq"] for r in sub}
    seq = min(seqs, key=lambda s: (abs(math.log2(s / 64)), s))
    return threads, batch, seq


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats (lower x = latency, higher y = P@1), by x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def plot_pareto(rows: Sequence[dict], p1: dict[str, tuple[float | None, str]], path: Path, device: str) -> Path | None:
    plt = _plt()
    t, b, s = reference_setting(rows)
    sub = [r for r in rows if (r["threads"], r["batch"], r["seq"]) == (t, b, s) and r["p50_ms"] is not None]
    known = [(r, p1.get(r["bundle_hash"], (None, ""))[0]) for r in sub]
    pts: list[tuple[dict, float]] = [(r, v) for r, v in known if v is not None]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    if not pts:
        for a in (ax, ax2):
            a.text(0.5, 0.5, "no P@1 known for these bundles", ha="center", va="center", transform=a.transAxes)
    else:
        sizes = [r["file_bytes"] or 0 for r, _ in pts]
        smax = max(sizes) or 1
        xs, ys = [r["p50_ms"] for r, _ in pts], [v for _, v in pts]
        sc = ax.scatter(xs, ys, s=[60 + 600 * z / smax for z in sizes], c=[z / 1e6 for z in sizes],
                        cmap="viridis", alpha=0.8, edgecolors="black")
        fig.colorbar(sc, ax=ax, label="model file, MB")
        front = pareto_front(list(zip(xs, ys, strict=True)))
        ax.plot([xs[i] for i in front], [ys[i] for i in front], color="crimson", linewidth=1, marker="*",
                markersize=12, label="Pareto front")
        for (r, v), x in zip(pts, xs, strict=True):
            ax.annotate(f"{_series_label(r)}\n{_size(r['file_bytes'])}", (x, v), fontsize=7,
                        textcoords="offset points", xytext=(6, 4))
        ax.set_xlabel(f"p50 latency, ms ({t} thread{'s' if t > 1 else ''}, batch {b}, seq {s})")
        ax.set_ylabel("P@1, %")
        ax.legend(fontsize=8)
        ax2.scatter([z / 1e6 for z in sizes], ys, c=xs, cmap="magma_r", edgecolors="black")
        for (r, v), z in zip(pts, sizes, strict=True):
            ax2.annotate(_series_label(r), (z / 1e6, v), fontsize=7, textcoords="offset points", xytext=(6, 4))
        ax2.set_xlabel("model file, MB")
        ax2.set_ylabel("P@1, %")
        ax2.set_title("size vs P@1 (colour: latency)", fontsize=10)
        for a in (ax, ax2):
            a.grid(True, alpha=0.3)
    ax.set_title(f"{device}: latency vs P@1 (marker: size)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ------------------------------------------------------------------ the report
def build_report(db_path: str | Path = DEFAULT_DB, out: str | Path = "runs/bench/report",
                 devices: Sequence[str] | None = None, p1_from: str = "auto", eval_pairs: int | None = None,
                 say: Callable[[str], None] | None = None) -> Report:
    """Write ``report.md`` and the PNG plots for every device of the database to ``out``."""
    rows = latest_rows(read_measurements(db_path))
    if devices:
        rows = [r for r in rows if r["device"] in set(devices)]
    if not rows:
        raise TinyglotError(f"no measurements in {db_path}" + (f" for {', '.join(devices)}" if devices else ""),
                            "run `tinyglot bench --bundle ... --device ...` first")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out / "report.md")
    conn = connect(db_path)
    try:
        for h in dict.fromkeys(r["bundle_hash"] for r in rows):
            bundle = next(r["bundle"] for r in rows if r["bundle_hash"] == h)
            try:
                report.p1[h] = bundle_p1(conn, bundle, h, p1_from=p1_from, max_pairs=eval_pairs)
            except TinyglotError as exc:
                report.p1[h] = (None, f"evaluation failed: {exc}")
                if say:
                    say(f"P@1 of {bundle}: {exc}")
    finally:
        conn.close()
    md = ["# Device benchmarks", "",
          f"Database `{db_path}`, generated {_dt.datetime.now(_dt.UTC).isoformat(timespec='seconds')}.",
          "Latency is per query (one batch of `batch` sentences of exactly `seq` tokens), measured one query "
          "after another after warm-up (MLPerf Mobile single-stream / TFLite benchmark_model conventions); "
          "p50/p90/p99 are nearest-rank percentiles; sentences/s = batch x queries / measured time; peak MB "
          "is the benchmark process's peak resident set size; size is the model file.", ""]
    for device in dict.fromkeys(r["device"] for r in rows):
        drows = [r for r in rows if r["device"] == device]
        n_q = sorted({r["n_queries"] for r in drows if r["n_queries"]})
        md += [f"## {device}", "", f"Host: {_host_line(drows[-1]['host'])}", "",
               f"Queries per measurement: {n_q[0]}–{n_q[-1]}" if n_q else "", "", markdown_table(drows), ""]
        name = slug(device)
        lat = plot_latency_vs_seq(drows, out / f"latency_vs_seq_{name}.png", device)
        report.plots.append(lat)
        md += [f"![latency vs sequence length]({lat.name})", ""]
        par = plot_pareto(drows, report.p1, out / f"pareto_{name}.png", device)
        if par is not None:
            report.plots.append(par)
            t, b, s = reference_setting(drows)
            md += [f"![size vs P@1 vs latency]({par.name})", "",
                   f"Pareto view at {t} thread(s), batch {b}, seq {s}:", "",
                   "| runtime | bundle | quantization | P@1 % | p50 ms | size | P@1 from |",
                   "|---|---|---|---:|---:|---:|---|"]
            for r in drows:
                if (r["threads"], r["batch"], r["seq"]) == (t, b, s):
                    v, src = report.p1.get(r["bundle_hash"], (None, ""))
                    md.append(f"| {r['runtime']} | {r['bundle_name']} | {r['quantization']} | {_fmt(v, 1)} | "
                              f"{_fmt(r['p50_ms'], 3)} | {_size(r['file_bytes'])} | {src or '–'} |")
            md.append("")
    report.markdown.write_text("\n".join(md) + "\n", encoding="utf-8")
    return report


__all__ = ["P1_FROM", "Report", "build_report", "bundle_p1", "latest_rows", "markdown_table", "pareto_front",
           "plot_latency_vs_seq", "plot_pareto", "reference_setting"]
