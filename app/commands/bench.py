"""``tinyglot bench``: measure bundles on a device; ``tinyglot bench report``; ``tinyglot bench devices``."""

from __future__ import annotations

import argparse
from pathlib import Path

from tinyglot.app.commands.common import bounded_ints, bounded_number, int_list  # noqa: F401 (tests import them here)
from tinyglot.console import make_console


seconds = bounded_number(float, 0, 10**7, "a number of seconds")
count = bounded_number(int, 0, 10**9, "a whole number")


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from tinyglot.errors import TinyglotError

    from tinyglot.devices.bench import run_bench, tokenisation_label

    if not args.bundle:
        raise TinyglotError("no bundle to benchmark", "pass --bundle PATH (repeat it for more), or use "
                                                      "`tinyglot bench report` / `tinyglot bench devices`")
    console = make_console()
    run = run_bench(args.bundle, args.device, threads=args.threads, batch=args.batch, seq=args.seq,
                    min_queries=args.min_queries, min_seconds=args.min_seconds, warmup=args.warmup,
                    db_path=args.db, progress=True, warmup_seconds=args.warmup_seconds,
                    max_seconds=args.max_seconds, say=lambda m: console.print(escape(m)))
    host = run.host
    table = Table(title=f"{run.device}: {host.get('cpu_model', '?')} ({host.get('cores_logical', '?')} cores)")
    for col in ("runtime", "bundle", "quant", "tokenisation", "threads", "batch", "seq", "p50 ms", "p90 ms",
                "p99 ms", "sent/s", "peak MB", "load ms", "queries"):
        table.add_column(col, justify="left" if col in ("runtime", "bundle", "quant", "tokenisation") else "right")
    f = lambda v, d=2: "–" if v is None else f"{v:,.{d}f}"  # noqa: E731
    for r in run.rows:
        table.add_row(r["runtime"], r["bundle_name"], r["quantization"], tokenisation_label(r["runtime"]),
                      str(r["threads"]), str(r["batch"]),
                      str(r["seq"]), f(r["p50_ms"], 3), f(r["p90_ms"], 3), f(r["p99_ms"], 3),
                      f(r["throughput_sps"], 1), f(r["peak_mb"], 1), f(r["load_ms"], 1), str(r["n_queries"]))
    console.print(table)
    for label, why in run.skipped:
        console.print(escape(f"skipped {label}: {why}"), soft_wrap=True)
    for label, why in run.failed:
        console.print(f"[red]failed[/] {escape(label)}: {escape(why)}", soft_wrap=True)
    console.print(escape(f"{len(run.rows)} measurement(s) stored in {run.db_path}; "
                         f"`tinyglot bench report --db {run.db_path}` renders tables and plots"), soft_wrap=True)
    return 1 if run.failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    from rich.markup import escape

    from tinyglot.devices.report import build_report

    console = make_console()
    report = build_report(args.db, args.out, devices=args.device, p1_from=args.p1_from,
                          eval_pairs=args.eval_pairs, say=lambda m: console.print(escape(m)))
    console.print(escape(f"wrote {report.markdown}"), soft_wrap=True)
    for p in report.plots:
        console.print(escape(f"wrote {p}"), soft_wrap=True)
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    from rich.markup import escape
    from rich.table import Table

    from tinyglot.devices.profiles import detect_host, list_profiles, load_profile

    console = make_console()
    table = Table(title="device profiles (--device NAME, a .toml file, ssh://user@host[:port] or adb[://SERIAL])")
    table.add_column("name", no_wrap=True, min_width=15)
    for col in ("kind", "threads", "runtimes", "int8 preset", "description"):
        table.add_column(col, overflow="fold")
    for name in list_profiles():
        p = load_profile(name)
        table.add_row(p.name, p.kind, ",".join(map(str, p.threads)), ",".join(p.runtimes),
                      p.int8_preset or "(detected)", escape(p.description))
    console.print(table)
    h = detect_host()
    console.print(escape(f"this host: {h['cpu_model']} ({h['machine']}), {h['cores_logical']} logical / "
                         f"{h['cores_physical']} physical cores, ISA {' '.join(h['flags']) or '-'}, "
                         f"{(h['memory_bytes'] or 0) / 2**30:.1f} GiB, {h['os_name']}; "
                         f"int8 export preset: {h['int8_preset']}"))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    from tinyglot.config import MAX_THREADS
    from tinyglot.devices.bench import DEFAULT_DB, MAX_BATCH, MAX_SEQ

    p.add_argument("--bundle", "--model", action="append", type=Path, default=[],
                   help="an exported bundle (onnx, tflite; onnx-text and tflite-mediapipe take raw text: "
                        "tokenisation included), a released student by name (tinyglot models; "
                        "NAME?format=tflite-mediapipe for its MediaPipe bundle), or a student folder / teacher "
                        "run (torch fp32 reference), or a peer beside them (peer:use-m, peer:e5-small: its own "
                        "Python API on this host); repeat for more")
    p.add_argument("--device", default="host",
                   help="a profile name (tinyglot bench devices), a .toml file, ssh://user@host[:port] or adb[://SERIAL]")
    p.add_argument("--threads", type=bounded_ints(MAX_THREADS), default=None,
                   help="thread counts, e.g. 1,2,4 (default: the profile's)")
    p.add_argument("--batch", type=bounded_ints(MAX_BATCH), default=[1],
                   help="batch sizes (sentences per query), e.g. 1,32")
    p.add_argument("--seq", type=bounded_ints(MAX_SEQ), default=[16, 32, 64, 128],
                   help="sequence lengths in tokens (inputs padded/truncated to exactly this length)")
    p.add_argument("--min-queries", type=count, default=1000, help="measured queries per combination, at least")
    p.add_argument("--min-seconds", type=seconds, default=60.0, help="measured seconds per combination, at least")
    p.add_argument("--max-seconds", type=seconds, default=600.0, help="stop a combination after this long anyway")
    p.add_argument("--warmup", type=count, default=10, help="warm-up queries (at least)")
    p.add_argument("--warmup-seconds", type=seconds, default=0.5, help="warm-up seconds (at least)")
    p.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite file the measurements are added to")
    p.set_defaults(func=cmd_bench)


def register(sub) -> None:
    from tinyglot.devices.bench import DEFAULT_DB

    p = sub.add_parser(
        "bench", help="latency, throughput, memory and size of bundles per device and runtime",
        description="Benchmark bundles on a device: every threads x batch x seq combination in its own process "
                    "(warm-up, then at least --min-queries queries and --min-seconds), p50/p90/p99 latency, "
                    "sentences/s, peak memory, load time and file size, stored in SQLite.")
    add_arguments(p)
    bsub = p.add_subparsers(dest="bench_command", metavar="ACTION")
    r = bsub.add_parser("report", help="Markdown tables and PNG plots from the benchmark database")
    r.add_argument("--db", type=Path, default=DEFAULT_DB, help="SQLite file of the measurements")
    r.add_argument("--out", type=Path, default=Path("runs/bench/report"), help="folder for report.md and the PNGs")
    r.add_argument("--device", action="append", default=None, help="only this device (repeatable)")
    r.add_argument("--p1-from", choices=["auto", "files", "eval"], default="auto",
                   help="P@1 of each bundle: auto = parity.json/config.json/eval.json, else evaluate on the "
                        "embedded test set (cached in the database); files = never evaluate; eval = always "
                        "evaluate (the same test set for every bundle)")
    r.add_argument("--eval-pairs", type=int, default=None,
                   help="test pairs per language for that evaluation (default: all of them)")
    r.set_defaults(func=cmd_report)
    d = bsub.add_parser("devices", help="the shipped device profiles and this host's CPU")
    d.set_defaults(func=cmd_devices)
