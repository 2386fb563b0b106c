"""What tinyglot tells a user about time is measured: no message carries a hard-coded duration.

A long stage (the teacher, the e5 pass, distillation, evaluation) says how long it is expected to take once
it has timed a part of itself on this machine (``tinyglot.training.Progress``), never from a constant that
held on one CPU.  This test reads every string literal that reaches a message (a ``say``, a log call,
``print``, a ``TinyglotError``, a console print, an argument's help) in the package's source and refuses a
duration written in it; then it checks the estimate that ``Progress`` prints comes from what it timed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tinyglot.training import Progress

ROOT = Path(__file__).resolve().parents[1]
SOURCE_FOLDERS = ("tinyglot", "app", "teacher", "distill", "export", "devices")
MESSAGE_CALLS = {"say", "print", "info", "warning", "warn", "error", "debug", "exception", "log", "TinyglotError",
                 "UnknownLanguageError", "add_argument", "add_parser", "echo", "status", "write"}
DURATION = re.compile(
    r"\b\d[\d,.]*\s*(?:-\s*\d[\d,.]*\s*)?(?:s|secs?|seconds?|ms|min|mins|minutes?|h|hrs?|hours?|days?)\b(?![-/])"
    r"|\b(?:a few|several|some|about an?|under an?|within an?|in an?|a couple of) (?:seconds?|minutes?|hours?)\b",
    re.IGNORECASE)


def message_strings(tree: ast.AST):
    """(line, text) of each string constant inside a message call (f-strings: their literal parts)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in MESSAGE_CALLS:
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            for sub in ast.walk(arg):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    yield sub.lineno, sub.value


def test_no_message_carries_a_hard_coded_duration():
    found = []
    for folder in SOURCE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for line, text in message_strings(tree):
                for match in DURATION.finditer(text):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r} in {text[:80]!r}")
    assert not found, "durations written into messages (measure them instead):\n" + "\n".join(found)


def test_the_scan_catches_what_it_is_for():
    code = ('say(f"training first (about 10 minutes on 2 CPU cores)")\n'
            'log.info("once, a few seconds")\n'
            'raise TinyglotError("x", "it takes 3-5 min")\n'
            'say(f"done in {seconds:.1f} s")\n')  # the last one is measured: no literal number
    texts = [t for _, t in message_strings(ast.parse(code))]
    assert {t for t in texts if DURATION.search(t)} == {
        "training first (about 10 minutes on 2 CPU cores)", "once, a few seconds", "it takes 3-5 min"}
    assert "done in " in texts and " s" in texts


def plain_bar(total: int, description: str, **kwargs) -> Progress:
    """A :class:`Progress` in its plain form: lines on stdout, as when stdout is no terminal."""
    bar = Progress(total, description, enabled=True, **kwargs)
    bar._bar, bar._plain = None, True
    return bar


def test_progress_estimates_from_what_it_timed(clock, capsys):
    clock[0] = 1000.0
    bar = plain_bar(100, "distill x", interval=1e9, unit="steps")
    with bar.run():
        clock[0] += 30.0  # the first step holds the warm-up: not part of the rate
        bar.update(1)
        for step in range(2, 12):
            clock[0] += 0.5
            bar.update(step)
    out = capsys.readouterr().out
    # 10 steps in 5.0 s after the first: 0.5 s a step; 35 s so far, 89 steps left: 35 + 44.5 = 1:20
    assert "distill x: expected 1:20 for 100 steps on this machine (0.5 s a step over the 10 timed)" in out
    assert out.count("expected") == 1 and "revised" not in out  # the same pace after: no second line


def test_progress_revises_an_estimate_the_pace_since_belies(clock, capsys):
    bar = plain_bar(100, "distill y", interval=1e9, unit="steps")
    with bar.run():
        bar.update(1)
        for step in range(2, 12):  # 1 s a step while warming up: at step 6 (5 s timed) 5 + 94 = 99 s
            clock[0] += 1.0
            bar.update(step)
        for step in range(12, 60):  # then 0.5 s a step: revised once a tenth of the rest (9.4 steps) is done
            clock[0] += 0.5
            bar.update(step)
    out = capsys.readouterr().out
    assert "distill y: expected 1:39 for 100 steps on this machine (1 s a step over the 5 timed)" in out
    # at step 16: 12.5 s so far, 7.5 s over the 10 steps since the estimate, 84 left: 12.5 + 63 = 75.5 s
    assert "distill y: revised to 1:16 for 100 steps on this machine (0.75 s a step over the 10 timed)" in out
    assert out.count("revised") == 1


def test_progress_follows_the_cost_where_items_differ(clock, capsys):
    bar = plain_bar(10, "teacher embeddings", interval=1e9, unit="sentences", cost_total=100.0)
    with bar.run():
        clock[0] += 1.0
        bar.update(1, cost=4.0)  # the first: its warm-up is not timed
        for step, cost in ((2, 6.0), (3, 8.0), (4, 10.0)):
            clock[0] += 2.0
            bar.update(step, cost=cost)  # 6 cost units in 6 s (the later sentences cost more): 90 left take 90 s
    assert "expected 1:37 for 10 sentences" in capsys.readouterr().out


def test_a_resumed_pass_times_only_the_work_it_does(clock, capsys):
    # a teacher pass resumed at half its cost: the ETA is the pace of this run's own work, applied to what
    # is left; the resumed half is no part of that pace
    bar = plain_bar(10, "teacher embeddings", interval=0.0, unit="sentences", cost_total=100.0)
    with bar.run(start=5, start_cost=50.0):
        for step in (6, 7, 8, 9):
            clock[0] += 10.0
            bar.update(step, cost=10.0 * step)  # 10 cost units in 10 s
    lines = capsys.readouterr().out.splitlines()
    assert "teacher embeddings: 6/10 (60 %), 0:10 elapsed, eta 0:40" in lines  # 40 left at 1 a second
    assert "teacher embeddings: 8/10 (80 %), 0:30 elapsed, eta 0:20" in lines
    # the estimate (after the untimed first update) says what it covers: the rest, not the whole pass
    assert any(x.startswith("teacher embeddings: expected 0:50 for the 5 sentences left of 10 on this machine")
               for x in lines), lines


@pytest.mark.parametrize("setting", ["1"])
def test_no_estimate_when_progress_is_off(monkeypatch, capsys, setting):
    monkeypatch.setenv("TINYGLOT_NO_PROGRESS", setting)
    bar = Progress(10, "x", enabled=True)
    with bar.run():
        for step in range(1, 11):
            bar.update(step)
    assert "expected" not in capsys.readouterr().out
