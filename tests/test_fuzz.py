"""Property-based fuzzing: any bytes in -> pairs (or an encoder) out, or a TinyglotError; never
another exception.

Inputs are random bytes and seeded mutations of valid files (byte flips, inserted tokens that
matter to the format, cut and duplicated ranges).  Every test is bounded (``max_examples``,
no deadline) so that the whole file runs in well under two minutes on one core.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyglot.errors import TinyglotError

FUZZ = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
FUZZ_MODELS = settings(FUZZ, max_examples=80)

TOKENS = [b"\t", b"\n", b"\r\n", b"\r", b" ", b"\x00", b"\xff", b"\xef\xbb\xbf", b"\xc3", b"\xed\xa0\x80",
          b'"', b"\\", b"\\u", b"\\ud800", b"{", b"}", b"[", b"]", b":", b",", b"null", b"1e999", b"9" * 5000,
          b"<", b">", b"</", b"/>", b"<tu>", b"</tu>", b"<tuv xml:lang=\"de\">", b"<seg>", b"</seg>", b"<hi>",
          b"&amp;", b"&#0;", b"&#xD800;", b"&undefined;", b"<!DOCTYPE x [<!ENTITY a \"b\">]>", b"<![CDATA[",
          b'<?xml version="1.0" encoding="x-none"?>', b'encoding="utf-16"', b"xml:lang=\"\"",
          b"msgid ", b"msgstr ", b"msgstr[0] ", b"msgctxt ", b"#, fuzzy\n", b"#~ ", b'"Language: xx\\n"',
          b"lang", b"\"lang\": \"zz\"", b"\"x\": 1", b"en\tde\n", b"\x1f\x8b\x08"]

SEEDS = {
    "tsv": b"Hello\tHallo\nThank you\tDanke\n",
    "jsonl": b'{"lang": "de", "x": "Hallo", "en": "Hello", "src": "t", "license": "cc"}\n'
             b'{"lang": "fr", "x": "Merci", "en": "Thanks"}\n',
    "po": b'msgid ""\nmsgstr ""\n"Language: de\\n"\n\n#, fuzzy\nmsgid "a"\nmsgstr "b"\n\n'
          b'msgid "Open"\nmsgstr "\\"Offnen\\"\\n"\n\nmsgid "File"\nmsgid_plural "Files"\n'
          b'msgstr[0] "Datei"\nmsgstr[1] "Dateien"\n',
    "tmx": b'<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4"><header/><body>\n'
           b'<tu><tuv xml:lang="en"><seg>Hello <hi>you</hi></seg></tuv><tuv xml:lang="de"><seg>Hallo '
           b'<bpt i="1">x</bpt>du</seg></tuv></tu>\n</body></tmx>\n',
    "lines_x": b"Hallo\nDanke\n\nTschuss\n",
    "lines_en": b"Hello\nThanks\n\nBye\n",
}


def mutate(seed: bytes, rng_seed: int) -> bytes:
    """``seed`` after 1-8 random edits drawn from ``random.Random(rng_seed)``: byte flips, random
    bytes, format tokens (sometimes repeated 3000 times), deleted, duplicated or cut ranges."""
    rng = random.Random(rng_seed)
    data = bytearray(seed)
    for _ in range(rng.randint(1, 8)):
        op = rng.choice(["flip", "insert", "token", "token", "delete", "dup", "cut"])
        pos = 0 if rng.random() < 0.1 else rng.randint(0, len(data))
        if op == "flip" and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op == "insert":
            data[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == "token":
            data[pos:pos] = rng.choice(TOKENS) * rng.choice([1, 1, 1, 2, 3000])
        elif op == "delete":
            del data[pos:pos + rng.randint(1, 32)]
        elif op == "dup":
            data[pos:pos] = data[pos:pos + rng.randint(1, 64)] * rng.randint(1, 3)
        elif op == "cut":
            del data[pos:]
    return bytes(data)


def mutated(seed: bytes) -> st.SearchStrategy[bytes]:
    return st.integers(0, 2**32 - 1).map(lambda n: mutate(seed, n))


def file_bytes(seed: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=400), mutated(seed), mutated(seed))


def _consume(read: Callable[[], object]) -> None:
    """Read everything; pairs must be well-formed strings; only TinyglotError may escape."""
    try:
        for pair in read():  # type: ignore[attr-defined]
            assert isinstance(pair.x, str) and isinstance(pair.en, str) and pair.x and pair.en
            pair.x.encode("utf-8")
            pair.en.encode("utf-8")
    except TinyglotError:
        pass


def _write(folder: Path, name: str, data: bytes, gz: bool = False) -> Path:
    path = folder / (name + (".gz" if gz else ""))
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


# ------------------------------------------------------------------------------ readers
@pytest.mark.parametrize("fmt,name", [("tsv", "de.tsv"), ("jsonl", "c.jsonl"), ("po", "de.po"), ("tmx", "c.tmx")])
@FUZZ
@given(data=st.data())
def test_single_file_readers(fmt, name, data):
    from tinyglot.data.readers import (
        read_corpus,
        read_jsonl,
        read_po,
        read_tmx,
        read_tsv,
    )

    reader = {"tsv": read_tsv, "jsonl": read_jsonl, "po": read_po, "tmx": read_tmx}[fmt]
    blob = data.draw(file_bytes(SEEDS[fmt]))
    gz = data.draw(st.booleans())
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), name, blob, gz)
        _consume(lambda: reader(path))
        _consume(lambda: read_corpus(path))
        _consume(lambda: read_corpus(tmp))


@FUZZ
@given(blob=st.one_of(st.binary(max_size=300), mutated(gzip.compress(SEEDS["tsv"], mtime=0))),
       name=st.sampled_from(["de.tsv.gz", "c.jsonl.gz", "c.tmx.gz", "corpus.de"]))
def test_corrupt_gzip(blob, name):
    from tinyglot.data.readers import read_corpus

    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), name, blob)
        _write(Path(tmp), "corpus.en", blob)
        _consume(lambda: read_corpus(path))


@pytest.mark.parametrize("kind", ["moses", "tatoeba"])
@FUZZ
@given(data=st.data())
def test_line_aligned_readers(kind, data):
    from tinyglot.data.readers import read_corpus, read_moses, read_tatoeba

    x = data.draw(file_bytes(SEEDS["lines_x"]))
    en = data.draw(file_bytes(SEEDS["lines_en"]))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if kind == "moses":
            xp, ep = _write(folder, "corpus.de", x), _write(folder, "corpus.en", en)
            _consume(lambda: read_moses(xp, ep))
        else:
            xp = _write(folder, "tatoeba.deu-eng.deu", x)
            _write(folder, "tatoeba.deu-eng.eng", en)
            _consume(lambda: read_tatoeba(folder / "tatoeba.deu-eng"))
        _consume(lambda: read_corpus(xp))


# ------------------------------------------------------------------------------ model folders
def _open_and_encode(folder: Path) -> None:
    import tinyglot

    try:
        encoder = tinyglot.load(folder)
        encoder.encode(["Hallo Welt", "Hello world"])
    except TinyglotError:
        pass


def _fuzz_file(source: Path, rel: str, blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        shutil.copytree(source, folder)
        (folder / rel).write_bytes(blob)
        _open_and_encode(folder)


def _config_variants(cfg: dict) -> st.SearchStrategy[bytes]:
    """Mutated bytes of ``cfg``, and well-formed JSON with one key set to an odd value."""
    odd = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(), st.text(max_size=12),
                    st.sampled_from(["../x", "/etc/passwd", "", ".", "model", "tokenizer.model", "site:addsitedir"]),
                    st.lists(st.text(max_size=8), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(),
                                                                                max_size=2))
    edited = st.builds(lambda key, value: json.dumps({**cfg, key: value}).encode(),
                       st.sampled_from(sorted(cfg)), odd)
    dropped = st.builds(lambda key: json.dumps({k: v for k, v in cfg.items() if k != key}).encode(),
                        st.sampled_from(sorted(cfg)))
    return st.one_of(edited, dropped, mutated(json.dumps(cfg).encode()))


@pytest.fixture(scope="module")
def onnx_bundle(student_dir, tmp_path_factory) -> Path:
    from tinyglot.export.onnx import export_onnx

    out = tmp_path_factory.mktemp("fuzz-bundle") / "onnx"
    export_onnx(student_dir, out, "none", max_sentences=20)
    return out


@pytest.mark.parametrize("which", ["student", "bundle", "teacher"])
@FUZZ_MODELS
@given(data=st.data())
def test_model_folder_config(which, data, student_dir, onnx_bundle, tiny_teacher_dir):
    source = {"student": student_dir, "bundle": onnx_bundle, "teacher": tiny_teacher_dir}[which]
    cfg = json.loads((source / "config.json").read_text())
    _fuzz_file(source, "config.json", data.draw(_config_variants(cfg)))


@pytest.mark.parametrize("which", ["student", "bundle"])
@FUZZ_MODELS
@given(data=st.data())
def test_model_folder_tokenizer(which, data, student_dir, onnx_bundle):
    source = student_dir if which == "student" else onnx_bundle
    seed = (source / "tokenizer.model").read_bytes()
    _fuzz_file(source, "tokenizer.model", data.draw(st.one_of(st.binary(max_size=200), mutated(seed))))


@FUZZ_MODELS
@given(data=st.data())
def test_student_weights(data, student_dir):
    seed = (student_dir / "model" / "model.safetensors").read_bytes()
    head = st.integers(1, 400).map(lambda n: seed[:n])  # the JSON header and truncations
    blob = data.draw(st.one_of(st.binary(max_size=200), head, mutated(seed[:4096]).map(lambda b: b + seed[4096:])))
    _fuzz_file(student_dir, "model/model.safetensors", blob)


@FUZZ_MODELS
@given(data=st.data())
def test_teacher_checkpoint(data, tiny_teacher_dir):
    seed = (tiny_teacher_dir / "best.pt").read_bytes()
    blob = data.draw(st.one_of(st.binary(max_size=200), st.integers(1, len(seed) - 1).map(lambda n: seed[:n]),
                               mutated(seed[:2048]).map(lambda b: b + seed[2048:])))
    _fuzz_file(tiny_teacher_dir, "best.pt", blob)


@FUZZ_MODELS
@given(data=st.data())
def test_bundle_model_file(data, onnx_bundle):
    seed = (onnx_bundle / "model.onnx").read_bytes()
    blob = data.draw(st.one_of(st.binary(max_size=200), st.integers(1, len(seed) - 1).map(lambda n: seed[:n])))
    _fuzz_file(onnx_bundle, "model.onnx", blob)


# ------------------------------------------------------------------------------ evaluation inputs
@pytest.mark.parametrize("kind", ["testset", "sts"])
@FUZZ
@given(data=st.data())
def test_evaluation_files(kind, data):
    from tinyglot.data.embedded import load_testset
    from tinyglot.evaluation.tasks import read_sts

    seed = b"de\tHello\tHallo\nfr\tThanks\tMerci\n" if kind == "testset" else b"a cat\tone cat\t4.5\nx\ty\t0\n"
    blob = data.draw(file_bytes(seed))
    with tempfile.TemporaryDirectory() as tmp:
        path = _write(Path(tmp), "test.tsv", blob, data.draw(st.booleans()))
        try:
            result = load_testset(path) if kind == "testset" else read_sts(path)
        except TinyglotError:
            return
        if kind == "sts":
            a, b, gold = result
            assert len(a) == len(b) == len(gold)
        else:
            assert all(isinstance(p.x, str) and p.x for pairs in result.values() for p in pairs)


# ------------------------------------------------------------------------------ sizes in config.json
ODD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), st.floats(), st.text(max_size=6),
                       st.sampled_from([0, 1, 2**31, 2**63, 100_000, 10**9]))


@pytest.mark.parametrize("where", ["student", "transformers"])
@FUZZ_MODELS
@given(data=st.data())
def test_model_folder_sizes(where, data, student_dir):
    """One size of a student's config.json (or of its transformers model/config.json) set to an odd value:
    the folder loads and encodes, or gives a TinyglotError, at once (nothing huge is built)."""
    rel = "config.json" if where == "student" else "model/config.json"
    cfg = json.loads((student_dir / rel).read_text())
    section = cfg["student"] if where == "student" else cfg
    keys = sorted(k for k, v in section.items() if isinstance(v, int) and not isinstance(v, bool))
    key, value = data.draw(st.sampled_from(keys)), data.draw(ODD_VALUES)
    edited = json.loads(json.dumps(cfg))
    (edited["student"] if where == "student" else edited)[key] = value
    _fuzz_file(student_dir, rel, json.dumps(edited).encode())


# ------------------------------------------------------------------------------ command options
FUZZ_CLI = settings(FUZZ, max_examples=60)
ODD_TEXT = st.one_of(st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e13", "10000000000000", "", "[1]", "a.b",
                                      "1,2", "true", "\udcff", "1" * 400, "none", "100000000000000"]),
                     st.text(max_size=8), st.integers(-10, 10**14).map(str))
RUN_KEYS = ["distill.max_steps", "distill.overrides.train.lr", "distill.overrides.loss.beta", "eval.batch_size",
            "eval.threads", "bench.batch", "bench.seq", "bench.threads", "bench.min_seconds", "bench.min_queries",
            "export.threads", "export.parity_sentences", "export.tflite_buckets", "data.max_pairs_per_lang",
            "teacher.overrides.train.weight_decay", "distill.vocab_size", "threads", "distill.student"]


def _no_traceback(capsys, run: Callable[[], int]) -> None:
    """``run()`` (a command) is refused with status 2 and tinyglot's message, or argparse's usage error."""
    try:
        code = run()
    except SystemExit as exc:  # argparse: usage and "error: argument ..."
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and "error" in err, err


@FUZZ_CLI
@given(key=st.sampled_from(RUN_KEYS), value=ODD_TEXT)
def test_run_options(key, value, tmp_path_factory, capsys):
    """`tinyglot run --set KEY=odd`: a clear error (the --out given is a file, so a valid value stops there,
    after every setting was checked, and nothing runs)."""
    from tinyglot.app.cli import main

    out = tmp_path_factory.getbasetemp() / "run-out-is-a-file"
    out.write_text("x")
    _no_traceback(capsys, lambda: main(["run", "--profile", "tiny", "--out", str(out), "--no-progress",
                                        "--set", f"{key}={value}"]))
    assert out.read_text() == "x"


@FUZZ_CLI
@given(option=st.sampled_from(["--threads", "--max-sentences", "--quantize", "--buckets", "--batch-sizes",
                               "--languages", "--format", "--optimize", "--corpus"]), value=ODD_TEXT)
def test_export_options(option, value, student_dir, tmp_path_factory, capsys):
    from tinyglot.app.cli import main

    out = tmp_path_factory.getbasetemp() / "export-out-is-a-file"
    out.write_text("x")
    _no_traceback(capsys, lambda: main(["export", "--model", str(student_dir), "--out", str(out), option, value]))
    assert out.read_text() == "x"


@FUZZ_CLI
@given(option=st.sampled_from(["--threads", "--batch", "--seq", "--min-queries", "--min-seconds", "--max-seconds",
                               "--warmup", "--warmup-seconds", "--device", "--db"]), value=ODD_TEXT)
def test_bench_options(option, value, tmp_path_factory, capsys):
    from tinyglot.app.cli import main

    missing = tmp_path_factory.getbasetemp() / "no-such-bundle"
    db = tmp_path_factory.getbasetemp() / "bench-fuzz.sqlite"
    args = ["bench", "--bundle", str(missing), "--db", str(db), option, value]
    _no_traceback(capsys, lambda: main(args))
