"""Bad input gives tinyglot's own error naming the file, the line and the fix, and writes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tinyglot.app.cli import main
from tinyglot.data.readers import ReadStats, read_corpus, read_jsonl, read_tmx, read_tsv
from tinyglot.errors import DataError, TinyglotError


def _prepare_fails(path: Path, out: Path, capsys, *extra: str) -> str:
    """`tinyglot data prepare` exits with status 2 and writes nothing; its stderr."""
    assert main(["data", "prepare", str(path), "--out", str(out), *extra]) == 2
    assert not out.exists() or not any(out.iterdir())
    return capsys.readouterr().err


def _refused(path: Path, reader, line: int, fragments: tuple[str, ...], capsys) -> str:
    """``reader`` raises a DataError at ``line`` whose text has every fragment, and `tinyglot data
    prepare` fails naming ``<file>:<line>``; prepare's stderr."""
    with pytest.raises(DataError) as exc:
        list(reader(path))
    assert exc.value.line == line and all(f in str(exc.value) for f in fragments), str(exc.value)
    err = _prepare_fails(path, path.parent / "out", capsys)
    assert f"{path.name}:{line}" in err
    return err


def _tmx(body: str, decl: str = "") -> str:
    return (f'{decl}<tmx version="1.4"><header/><body>\n<tu><tuv xml:lang="en"><seg>Hello</seg></tuv>'
            f'<tuv xml:lang="de"><seg>Hallo</seg></tuv></tu>\n{body}</body></tmx>\n')


def test_tmx_with_100k_nested_tags(tmp_path, capsys):
    path = tmp_path / "deep.tmx"
    path.write_text(_tmx('<tu><tuv xml:lang="en"><seg>' + "<hi>" * 100_000 + "x" + "</hi>" * 100_000
                         + '</seg></tuv></tu>\n'))
    _refused(path, read_tmx, 3, ("nested more than", "fix:"), capsys)


def test_tmx_declaring_an_unknown_encoding(tmp_path, capsys):
    path = tmp_path / "enc.tmx"
    path.write_text(_tmx("", '<?xml version="1.0" encoding="x-klingon"?>\n'))
    _refused(path, read_tmx, 1, ("x-klingon", "UTF-8"), capsys)


def test_jsonl_line_of_40k_nested_brackets(tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"lang": "de", "x": "Hallo", "en": "Hello"}\n'
                    '{"lang": "de", "x": ' + "[" * 40_000 + "]" * 40_000 + ', "en": "a"}\n')
    _refused(path, read_jsonl, 2, ("nested too deeply",), capsys)


def test_jsonl_string_with_a_lone_surrogate(tmp_path, capsys):
    path = tmp_path / "sur.jsonl"
    path.write_text('{"lang": "de", "x": "Hallo", "en": "Hello"}\n{"lang": "de", "x": "a\\ud800b", "en": "ab"}\n')
    assert "surrogate" in _refused(path, read_jsonl, 2, ("surrogate",), capsys)


def _broken_student(student_dir: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "student"
    shutil.copytree(student_dir, folder)
    weights = folder / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return folder


def test_truncated_safetensors_in_eval_and_export(student_dir, tmp_path, capsys):
    folder = _broken_student(student_dir, tmp_path)
    assert main(["eval", "--model", str(folder)]) == 2
    assert "cannot be read" in capsys.readouterr().err
    out = tmp_path / "bundle"
    assert main(["export", "--model", str(folder), "--out", str(out)]) == 2
    assert "cannot be read" in capsys.readouterr().err
    assert not out.exists() or not (out / "config.json").exists()


@pytest.mark.parametrize("content", ["[1, 2]", '"a string"', "null", "3"])
def test_config_json_that_is_not_an_object(student_dir, tmp_path, capsys, content):
    folder = tmp_path / "student"
    shutil.copytree(student_dir, folder)
    (folder / "config.json").write_text(content)
    out = tmp_path / "bundle"
    commands = [["eval", "--model", str(folder)], ["export", "--model", str(folder), "--out", str(out)],
                ["bench", "--bundle", str(folder), "--db", str(tmp_path / "bench.sqlite")]]
    for argv in commands:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "config.json" in err and "not an object" in err, (argv, err)
    assert not out.exists() or not (out / "config.json").exists()


def test_tsv_header_row_is_not_read_as_a_pair(tmp_path, capsys):
    path = tmp_path / "de.tsv"
    path.write_text("english\tgerman\nHello\tHallo\nThank you\tDanke\n")
    stats = ReadStats()
    assert [p.x for p in read_tsv(path, stats=stats)] == ["Hallo", "Danke"]
    assert stats.skipped_header == 1
    assert len(list(read_tsv(path, header=False))) == 3
    assert [p.x for p in read_corpus(path)] == ["Hallo", "Danke"]

    other = tmp_path / "fr.tsv"
    other.write_text("en\tfr\nyes\tno\n")  # "no" is a language code, "yes" is no column name
    assert [p.x for p in read_tsv(other)] == ["no"]
    plain = tmp_path / "ja.tsv"
    plain.write_text("yes\tja\nno\tいいえ\n")
    assert [p.x for p in read_tsv(plain)] == ["ja", "いいえ"]
    assert [p.x for p in read_tsv(plain, header=True)] == ["いいえ"]

    out = tmp_path / "out"
    assert main(["data", "prepare", str(plain), "--out", str(out), "--header", "--dev-fraction", "0"]) == 0
    from tinyglot.data.embedded import load_pairs

    assert [p.x for p in load_pairs(out / "train.jsonl.gz")] == ["いいえ"]


def test_model_config_errors_are_tinyglot_errors(tmp_path):
    from tinyglot.models import read_model_config

    (tmp_path / "config.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(TinyglotError, match="not valid JSON"):
        read_model_config(tmp_path)
    (tmp_path / "config.json").write_text("[" * 100_000)
    with pytest.raises(TinyglotError, match="not valid JSON"):
        read_model_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"loader": 5}))
    with pytest.raises(TinyglotError, match="names no loader"):
        import tinyglot

        tinyglot.load(tmp_path)
