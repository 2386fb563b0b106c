"""Released students: every model under ``tinyglot/released/`` is checked against its manifest
(file hashes, embeddings recorded at release, a process that imports only onnxruntime, ``tinyglot.load(NAME)``),
and ``tinyglot release`` is run end to end on a tiny student trained here (load by name, ``tinyglot models``,
the size limit, the licence and name checks, the model card).

The checks of a released folder are one function, :func:`check_released`: the end-to-end test runs it on the
tiny release, and the parametrised test on every model the package ships (none until the first release; they
are covered as soon as their folder is added).
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tinyglot
from tinyglot.data.pairs import source_counts
from tinyglot.errors import TinyglotError
from tinyglot.released import (
    CARD,
    LICENSES,
    MANIFEST,
    MAX_RELEASE_BYTES,
    PACKAGE_ROOT,
    ROOT_ENV,
    read_manifest,
    released_names,
    verify,
)

SHIPPED = released_names(PACKAGE_ROOT)
# modules a stock-runtime process must not have loaded (MediaPipe may import TensorFlow itself where it is installed)
FORBIDDEN = {"onnx-text": ("tinyglot", "torch", "transformers", "sentencepiece", "tensorflow"),
             "tflite-mediapipe": ("tinyglot", "torch", "transformers", "sentencepiece")}

# A process with onnxruntime only: the onnxruntime-extensions ops library is located without importing the
# Python package (whose __init__ imports torch and transformers when they are installed).
ONNX_ONLY = textwrap.dedent('''
    import glob, importlib.machinery, importlib.util, json, os, sys
    import numpy as np
    import onnxruntime as ort

    spec = importlib.util.find_spec("onnxruntime_extensions")
    folder = next(iter(spec.submodule_search_locations))
    lib = next(f for s in importlib.machinery.EXTENSION_SUFFIXES
               for f in glob.glob(os.path.join(folder, "_extensions_pydll" + s)))
    so = ort.SessionOptions()
    so.register_custom_ops_library(lib)
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
    sentences = json.loads(sys.argv[2])
    # one sentence per run, as recorded: dynamic int8 quantises activations per call, so a row depends
    # on the other rows of its batch
    rows = [session.run(None, {"text": np.array([s], dtype=object)})[0][0].tolist() for s in sentences]
    print(json.dumps({"rows": rows, "modules": sorted(sys.modules)}))
''')
MEDIAPIPE_ONLY = textwrap.dedent('''
    import json, sys
    from mediapipe.tasks.python.core import base_options
    from mediapipe.tasks.python.text import text_embedder

    options = text_embedder.TextEmbedderOptions(
        base_options=base_options.BaseOptions(model_asset_path=sys.argv[1]), l2_normalize=False, quantize=False)
    rows = []
    with text_embedder.TextEmbedder.create_from_options(options) as embedder:
        for sentence in json.loads(sys.argv[2]):
            heads = {e.head_name: e.embedding for e in embedder.embed(sentence).embeddings}
            rows.append([float(x) for x in heads["sentence_embedding"]])
    print(json.dumps({"rows": rows, "modules": sorted(sys.modules)}))
''')


def _stock_process(script: str, model: Path, sentences: list[str]) -> dict:
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "GLOG_minloglevel": "2", "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, "-I", "-c", script, str(model), json.dumps(sentences)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _tolerance(manifest: dict) -> tuple[float, float]:
    """Same int8 kernels and runtime versions as the release machine: the strict tolerance, else the wider one."""
    from tinyglot.app.release import _int8_kernels, _runtime_versions

    rec = manifest["recorded"]
    tol = rec["tolerance"]
    made = manifest["made"].get("runtimes", {})
    now = _runtime_versions()
    same = rec.get("int8_kernels") == _int8_kernels() and all(
        made.get(k) == now.get(k) for k in ("onnxruntime", "onnxruntime-extensions", "mediapipe"))
    return (tol["abs"], tol["cosine"]) if same else (tol["other_kernels_abs"], tol["other_kernels_cosine"])


def _matches(rows: np.ndarray, recorded: dict, manifest: dict, where: str) -> None:
    atol, ctol = _tolerance(manifest)
    rows = np.asarray(rows, dtype=np.float64)
    dims = manifest["recorded"]["dims"]
    assert rows.shape == (len(manifest["recorded"]["sentences"]), manifest["dim"]), where
    np.testing.assert_allclose(rows[:, :dims], np.array(recorded["rows"]), atol=atol, rtol=0, err_msg=where)
    np.testing.assert_allclose(rows @ rows.T, np.array(recorded["cosines"]), atol=ctol, rtol=0, err_msg=where)


def check_released(folder: Path) -> dict:
    """Every check a released model's folder must pass; returns its manifest."""
    from tinyglot.export.bundle import read_bundle

    manifest = verify(folder)  # every file's sha256, no unlisted file
    name = manifest["name"]
    assert name == folder.name
    total = sum((folder / f).stat().st_size for f in manifest["files"])
    assert total == manifest["bytes"] and total + (folder / MANIFEST).stat().st_size <= MAX_RELEASE_BYTES
    assert {CARD, LICENSES} <= set(manifest["files"])
    assert manifest["licences"]["teacher"]["licence"] and manifest["licences"]["model"]
    sentences = manifest["recorded"]["sentences"]
    for fmt, info in manifest["formats"].items():
        cfg = read_bundle(folder / fmt, fmt)  # the bundle's own integrity record too
        assert cfg["dim"] == manifest["dim"] and cfg["quantization"]["mode"] == "dynamic"
        assert info["parity"]["passed"] and info["parity"]["gated"], (name, fmt)
        if fmt == "tflite-mediapipe":
            pytest.importorskip("mediapipe")
        spec = name if fmt == manifest["default_format"] else f"{name}?format={fmt}"
        enc = tinyglot.load(spec)
        try:
            rows = np.concatenate([enc.encode([s]) for s in sentences])  # one per call, as recorded
            _matches(rows, manifest["recorded"]["formats"][fmt], manifest, f"{spec} (tinyglot)")
        finally:
            close = getattr(enc, "close", None)
            if callable(close):
                close()
        script = ONNX_ONLY if fmt == "onnx-text" else MEDIAPIPE_ONLY
        answer = _stock_process(script, folder / info["model_file"], sentences)
        loaded = [m for m in answer["modules"] if m.split(".")[0] in FORBIDDEN[fmt]]
        assert not loaded, f"the stock-runtime process of {spec} imported {loaded[:5]}"
        _matches(answer["rows"], manifest["recorded"]["formats"][fmt], manifest, f"{spec} (stock runtime)")
    return manifest


@pytest.mark.parametrize("name", SHIPPED or [pytest.param("none", marks=pytest.mark.skip(
    reason="no model is released yet (tinyglot/released/ holds none)"))])
def test_every_shipped_model_matches_its_manifest(name, monkeypatch):
    monkeypatch.delenv(ROOT_ENV, raising=False)
    manifest = check_released(PACKAGE_ROOT / name)
    assert manifest["results"]["tests"], f"{name} was released without its P@1 on the shared tests"
    assert manifest["licences"]["data"], f"{name} was released without its data attributions"


@pytest.mark.parametrize("name", SHIPPED or [pytest.param("none", marks=pytest.mark.skip(
    reason="no model is released yet (tinyglot/released/ holds none)"))])
def test_every_shipped_model_has_its_recipe_in_the_repository(name):
    """release/make.sh NAME makes it again from a fresh clone: a case for it, its card data, the same bundles,
    and the settings the student recorded it was trained with."""
    from tinyglot.app.pipeline import load_config
    from tinyglot.app.release import read_card_data
    from tinyglot.config import from_dict, to_dict

    repo = Path(__file__).resolve().parents[1]
    script = (repo / "release" / "make.sh").read_text(encoding="utf-8")
    assert subprocess.run(["bash", "-n", str(repo / "release" / "make.sh")]).returncode == 0
    case = script.split(f"\n    {name})", 1)
    assert len(case) == 2, f"release/make.sh has no recipe for {name}"
    recipe = case[1].split(";;", 1)[0]

    def given(pattern: str, text: str) -> str:
        found = re.search(pattern, text)
        assert found, f"release/make.sh gives no {pattern!r} for {name}"
        return found.group(1)

    # the e5 profile as make.sh runs it for this model (the settings with a path in them left out)
    command = script.split("tinyglot run --profile e5", 1)[1].split("\n\n", 1)[0]
    sets = [a.rstrip(");") for a in re.findall(r"--set\s+(\S+)", recipe + command) if "$" not in a]
    made_cfg = load_config("e5", sets=sets)
    made = made_cfg.student_preset()
    manifest = json.loads((PACKAGE_ROOT / name / MANIFEST).read_text(encoding="utf-8"))
    tier = given(r"tier=([^;\s]+)", recipe) if "tier=" in recipe else "permissive"
    assert manifest["tier"] == tier
    # the profile's word lists are CC-BY-SA: in no permissive student; a share-alike one takes its build's
    # (vocab_words=auto: GENERAL/words, recorded as the path it resolved to on the machine that made it)
    assert made.train.vocab_words == ("" if tier == "permissive" else "auto")
    recorded = manifest["made"].get("settings")
    assert recorded, f"{name}'s release.json does not record the settings it was trained with"
    if made.train.vocab_words == "auto":
        assert recorded["train"]["vocab_words"].endswith("commonvoice/words")
        recorded = {**recorded, "train": {**recorded["train"], "vocab_words": "auto"}}
    # everything the student was trained with, as make.sh gives it today; the recorded settings read as
    # today's code reads them (a setting added since takes its default, which must be what make.sh gives)
    def read(section: str, like: object) -> dict:
        return to_dict(from_dict(type(like), recorded[section]))

    assert read("train", made.train) == to_dict(made.train) and read("loss", made.loss) == to_dict(made.loss)
    assert read("student", made.student) == {**to_dict(made.student), "vocab_size": made_cfg.distill.vocab_size}
    formats = given(r"formats=([^;\s]+)", recipe)
    assert set(formats.split(",")) == set(manifest["formats"])
    release_line = script.split("\ntinyglot release ", 1)[1]
    assert manifest["made"]["quantization"] == given(r"--quantize (\S+)", release_line)
    max_mb = float(given(r"max_mb=([^;\s]+)", recipe))
    assert manifest["bytes"] <= max_mb * 1e6, f"{name} takes {manifest['bytes'] / 1e6:.1f} MB, its recipe {max_mb}"
    card, _ = read_card_data(repo / "release" / f"{name}.json")
    assert card["training"]["command"].startswith(f"release/make.sh {name}")
    words = card["training"]["command"].replace(";", " ").split()
    missing = [a for a in sets if not any(w == "--set" and v == a for w, v in itertools.pairwise(words))]
    assert not missing, f"release/{name}.json's training command lacks {missing}"
    assert f" --card-data release/{name}.json" in manifest["made"]["release_command"]


# ====================================================================== the release, end to end
@pytest.fixture(scope="module")
def trained_student(small_pairs, tiny_teacher_dir, tmp_path_factory) -> Path:
    """A lealla-tiny student distilled for 60 steps from the tiny EMS teacher of conftest (at 20 steps its
    P@1 was about 30 and int8 rounding moved it by more than the parity gates allow)."""
    from tinyglot.distill.config import get_preset
    from tinyglot.distill.lealla import LeallaTrainer
    from tinyglot.distill.run import teacher_tokenizer
    from tinyglot.encoders import load_encoder

    out = tmp_path_factory.mktemp("distill") / "run"
    teacher = load_encoder(str(tiny_teacher_dir))
    preset = get_preset("lealla-tiny", {"train": {"max_steps": 60, "eval_every": 60, "save_every": 60,
                                                  "dev_fraction": 0.1, "dev_pairs_per_lang": 30}})
    trainer = LeallaTrainer(preset, out, small_pairs, teacher, teacher.identity(),
                            teacher_tokenizer(str(tiny_teacher_dir)), "lealla-tiny", out / "cache", progress=False)
    result = trainer.train()
    return result.student_dir


def _peers_json(path: Path) -> Path:
    """A results file as benchmarks/peers.py writes it: the student, e5-small and USE-m on one test set."""
    def row(kind, spec, p1, sps):
        return {"kind": kind, "spec": spec, "threads": 1, "p50_ms": 1000 / sps, "p90_ms": 1200 / sps,
                "sentences_per_s": sps, "size_mb": 1.0, "p1": statistics_mean(p1),
                "p1_by_test": {"shared": {"p1": statistics_mean(p1), "per_lang": p1}}}

    rows = [row("onnx", "runs/student-onnx-text", {"de": 40.0, "fr": 50.0, "ja": 20.0, "ru": 30.0}, 900.0),
            row("peer", "e5-small", {"de": 95.0, "fr": 96.0, "ja": 92.0, "ru": 94.0}, 16.0),
            row("peer", "use-m", {"de": 90.0, "fr": 91.0, "ja": 85.0, "ru": 88.0}, 120.0),
            row("peer", "minilm", {"de": 10.0}, 400.0)]
    path.write_text(json.dumps({"settings": {"threads": 1, "batch": 32}, "rows": rows}), encoding="utf-8")
    return path


def statistics_mean(values: dict) -> float:
    return float(np.mean(list(values.values())))


@pytest.mark.slow
def test_release_end_to_end(trained_student, small_corpus, small_pairs, tmp_path, monkeypatch, capsys):
    from tinyglot.app.cli import main
    from tinyglot.app.release import release_student

    root = tmp_path / "released"
    monkeypatch.setenv(ROOT_ENV, str(root))
    card = {"description": "tiny test student", "teacher": "e5-small",
            "training": {"command": "pytest tests/test_released.py", "steps": 20, "data": "the small corpus"},
            "corpus": [str(small_corpus)], "results": str(_peers_json(tmp_path / "peers.json")),
            "test_sets": {"shared": "four languages of the embedded test set"}}
    card_path = tmp_path / "card.json"
    card_path.write_text(json.dumps(card), encoding="utf-8")
    manifest = release_student(trained_student, "tiny-test", card_path, max_sentences=10)
    folder = root / "tiny-test"
    assert manifest == read_manifest(folder)
    check_released(folder)

    # the manifest: what the card data and the student said
    assert manifest["dim"] == 32 and set(manifest["languages"]) >= {"de", "fr", "ja", "ru"}
    assert set(manifest["formats"]) == {"onnx-text", "tflite-mediapipe"}
    shared = manifest["results"]["tests"]["shared"]
    assert shared["mean"] == {"student": 35.0, "teacher": 94.25, "use-m": 88.5}
    assert shared["languages"]["ja"] == {"student": 20.0, "teacher": 92.0, "use-m": 85.0}
    assert {r["model"] for r in manifest["speed"]} >= {"tiny-test (onnx-text int8)", "e5-small", "use-m"}
    assert "minilm" not in {r["model"] for r in manifest["speed"]}
    data = {a["src"]: a for a in manifest["licences"]["data"]}
    assert sum(a["rows"] for a in data.values()) == len(small_pairs)
    assert data["libreoffice-help"]["license"] == "MPL-2.0"
    assert manifest["made"]["steps"] == 20 and manifest["made"]["teacher"] == "e5-small"
    # the settings the student recorded it was trained with, which release/make.sh's recipes are checked against
    made = manifest["made"]["settings"]
    assert made["train"]["max_steps"] == 60 and made["train"]["eval_every"] == 60 and made["loss"]["beta"] > 0
    assert made["student"]["hidden_size"] == 32
    assert manifest["made"]["release_command"].startswith("tinyglot release --model ")

    # the card: how it was made, P@1 against the teacher and USE-m, speed, use from Python, Android, the browser
    text = (folder / CARD).read_text(encoding="utf-8")
    for needle in ("# tiny-test: tiny test student", "| ja | 20.0 | 92.0 | 85.0 | 22 % |",
                   "| **mean** (4 languages) | **35.0** | 94.2 | 88.5 |", "pytest tests/test_released.py",
                   'tinyglot.load("tiny-test")', "TextEmbedder.createFromOptions(context, options)",
                   "@mediapipe/tasks-text", "examples/web/index.html?model=", "onnxruntime_extensions",
                   "measured at release", "LICENSES.md"):
        assert needle in text, needle
    licences = (folder / LICENSES).read_text(encoding="utf-8")
    assert "MIT License" in licences and "Copyright (c) Microsoft Corporation" in licences
    assert "| libreoffice-help | MPL-2.0 |" in licences and "The Document Foundation" in licences

    # by name: tinyglot.load, the bench's resolver, eval and models
    enc = tinyglot.load("tiny-test")
    assert type(enc).__name__ == "OnnxTextEncoder" and enc.encode(["Hallo Welt"]).shape == (1, 32)
    assert type(tinyglot.load("tiny-test", format="tflite-mediapipe")).__name__ == "MediaPipeTextEncoder"
    from tinyglot.devices.bench_inputs import resolve_model

    assert resolve_model("tiny-test?format=tflite-mediapipe").runtime == "mediapipe"
    test_file = tmp_path / "de.tsv"
    test_file.write_text("".join(f"{p.en}\t{p.x}\n" for p in [p for p in small_pairs if p.lang == "de"][:50]),
                         encoding="utf-8")
    assert main(["eval", "--model", "tiny-test", "--data", str(test_file), "--json", str(tmp_path / "e.json")]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["model"] == "tiny-test"
    capsys.readouterr()
    assert main(["models", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in listed] == ["tiny-test"]
    assert listed[0]["p1"] == {"shared": {"student": 35.0, "teacher": 94.25, "use-m": 88.5}}
    assert listed[0]["languages"] == len(manifest["languages"]) and listed[0]["dim"] == 32
    assert listed[0]["speed"]["format"] == "onnx-text" and listed[0]["speed"]["sentences_per_s"] > 0
    assert main(["models"]) == 0
    assert "tiny-test" in capsys.readouterr().out

    # a release again replaces the folder as a whole (the folder is tinyglot's)
    # (and its token table in 4-bit blocks: the same gates, recorded in the manifest and the card)
    assert manifest["made"]["quantization"] == "dynamic"
    assert {b["quantization"] for b in manifest["formats"].values()} == {"dynamic"}
    again = release_student(trained_student, "tiny-test", card_path, formats=["onnx-text"], max_sentences=10,
                            quantize="dynamic-int4-embeddings")
    assert set(again["formats"]) == {"onnx-text"} and not (folder / "tflite-mediapipe").exists()
    assert again["made"]["quantization"] == again["formats"]["onnx-text"]["quantization"] == "dynamic-int4-embeddings"
    assert again["formats"]["onnx-text"]["model_file_bytes"] < manifest["formats"]["onnx-text"]["model_file_bytes"]
    assert "tiny-test (onnx-text dynamic-int4-embeddings)" in {r["model"] for r in again["speed"]}
    card_text = (folder / CARD).read_text(encoding="utf-8")  # no MediaPipe code for a file it does not hold
    assert "holds no `tflite-mediapipe` bundle" in card_text and "TextEmbedder.createFromOptions" not in card_text
    assert "int8, the ONNX token table in 4-bit blocks" in card_text
    check_released(folder)
    with pytest.raises(TinyglotError, match="not 'static'"):
        release_student(trained_student, "tiny-test", card_path, quantize="static")
    with pytest.raises(TinyglotError, match="no 'tflite-mediapipe' bundle"):
        tinyglot.load("tiny-test?format=tflite-mediapipe")

    # bigger than the limit: refused, nothing released, the earlier release untouched
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with pytest.raises(TinyglotError, match="more than the 0.10 MB a released model may take"):
        release_student(trained_student, "tiny-test", card_path, formats=["onnx-text"], max_sentences=10,
                        max_bytes=100_000)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    said: list[str] = []  # and without any record of its training data it says that their licences went unchecked
    with pytest.raises(TinyglotError, match="more than"):
        release_student(trained_student, "too-big", {k: v for k, v in card.items() if k != "corpus"},
                        formats=["onnx-text"], max_sentences=10, max_bytes=100_000, say=said.append)
    assert any("no record of the training data" in line for line in said)
    assert not (root / "too-big").exists() and released_names() == ["tiny-test"]
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no staging folder left

    # the guard sees a changed or an added file
    import shutil

    copy = tmp_path / "copy" / "tiny-test"
    shutil.copytree(folder, copy)
    (copy / "notes.txt").write_text("extra")
    with pytest.raises(TinyglotError, match="does not list: notes.txt"):
        verify(copy)
    (copy / "notes.txt").unlink()
    with open(copy / "onnx-text" / "model.onnx", "ab") as fh:
        fh.write(b"\0")
    with pytest.raises(TinyglotError, match="model.onnx is not the file"):
        verify(copy)


def test_refresh_rewrites_a_released_graph_and_keeps_its_rows(trained_student, tmp_path, monkeypatch, capsys):
    """``tinyglot release --refresh NAME`` on a release made as before the SkipLayerNormalization rewrite
    (the export's unfuse step skipped): its onnx-text graph loses the fused nodes, gives the same rows in
    a stock onnxruntime process, and its digests, card and manifest follow; a second refresh changes nothing."""
    from tinyglot.app.cli import main
    from tinyglot.app.release import release_student
    from tinyglot.export import quantize
    from tinyglot.onnx_graph import skip_layer_norm_count

    root = tmp_path / "released"
    monkeypatch.setenv(ROOT_ENV, str(root))
    with monkeypatch.context() as old_export:
        old_export.setattr(quantize, "unfuse_file", lambda path: 0)
        before = release_student(trained_student, "tiny-old", {"teacher": "e5-small"}, formats=["onnx-text"],
                                 max_sentences=10)
    folder = root / "tiny-old"
    graph = folder / before["formats"]["onnx-text"]["model_file"]
    fused = skip_layer_norm_count(graph)
    assert fused > 0
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    assert main(["release", "--refresh", "tiny-old"]) == 0
    assert f"{fused} SkipLayerNormalization nodes rewritten" in capsys.readouterr().out
    after = check_released(folder)  # hashes, recorded rows (tinyglot and a stock-runtime process)
    assert skip_layer_norm_count(graph) == 0
    changed = {name for name, data in files.items() if (folder / name).read_bytes() != data}
    assert changed == {"onnx-text/model.onnx", "onnx-text/config.json", CARD, MANIFEST}, changed
    np.testing.assert_allclose(after["recorded"]["formats"]["onnx-text"]["rows"],
                               before["recorded"]["formats"]["onnx-text"]["rows"], atol=1e-3)
    assert after["made"]["refreshed"][0]["graphs"] == [
        f"onnx-text: {fused} fused SkipLayerNormalization -> Add + Sum + LayerNormalization"]
    assert after["speed"] == before["speed"] and after["results"] == before["results"]

    again = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert main(["release", "--refresh", "tiny-old"]) == 0
    assert "no graph to rewrite" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == again
    assert main(["release", "--refresh", "tiny-old", "--name", "x"]) == 2
    assert main(["release", "--refresh", "nothing-here"]) == 2


# ====================================================================== refusals before any work
def test_release_refuses_bad_names_copyleft_data_and_foreign_folders(student_dir, tmp_path):
    from tinyglot.app.release import release_student

    root = tmp_path / "released"
    for name, match in (("e5-small", "shadow"), ("use-m", "shadow"), ("tfidf", "shadow"), ("released", "shadow"),
                        ("Fast_Small", "cannot name"), ("../x", "cannot name"), ("a/b", "cannot name")):
        with pytest.raises(TinyglotError, match=match):
            release_student(student_dir, name, root=root)
    gpl = tmp_path / "gpl.jsonl.gz"
    with gzip.open(gpl, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"lang": "de", "en": "Open", "x": "Öffnen", "src": "weblate",
                             "license": "GPL-3.0-or-later"}) + "\n")
        fh.write(json.dumps({"lang": "de", "en": "Close", "x": "Schließen", "src": "django",
                             "license": "BSD-3-Clause"}) + "\n")
    with pytest.raises(TinyglotError, match=r"weblate \(GPL-3.0-or-later, 1 rows\)"):
        release_student(student_dir, "tiny", root=root, corpus=[gpl])
    # GPL text never goes into a shipped model, whatever --allow-licence says; CC-BY-SA only in share-alike
    with pytest.raises(TinyglotError, match="GPL-family text never goes into a shipped model"):
        release_student(student_dir, "tiny", root=root, corpus=[gpl], allowed_licences=["GPL-3.0-or-later"])
    sa = tmp_path / "sa.jsonl.gz"
    with gzip.open(sa, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps({"lang": "de", "en": "A chair.", "x": "Ein Stuhl.", "src": "cataclysm-dda",
                             "license": "CC-BY-SA-3.0"}) + "\n")
    with pytest.raises(TinyglotError, match=r"a permissive release may not carry: cataclysm-dda \(CC-BY-SA-3.0"):
        release_student(student_dir, "tiny", root=root, corpus=[sa])
    with pytest.raises(TinyglotError, match="not 'gpl'"):
        release_student(student_dir, "tiny", root=root, corpus=[sa], tier="gpl")
    with pytest.raises(TinyglotError, match="at most 33 MB, not 50 MB"):
        release_student(student_dir, "tiny", root=root, corpus=[sa], tier="share-alike", max_bytes=50_000_000)
    # no corpus: the sources a pipeline run recorded beside its student (distill/summary.json) are checked
    run_student = tmp_path / "run" / "distill" / "student"
    shutil.copytree(student_dir, run_student)
    (run_student.parent / "summary.json").write_text(json.dumps({"sources": source_counts(
        [("django", "BSD-3-Clause", "de"), ("general:wesnoth", "GPL-2.0+", "de")])}))
    with pytest.raises(TinyglotError, match=r"wesnoth \(GPL-2.0\+, 1 rows\)"):
        release_student(run_student, "tiny", root=root)
    foreign = root / "tiny"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(TinyglotError, match="not written by tinyglot"):
        release_student(student_dir, "tiny", root=root, corpus=[sa], tier="share-alike", formats=["onnx-text"])
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    with pytest.raises(TinyglotError, match="unknown keys: colour"):
        release_student(student_dir, "tiny2", {"colour": "blue"}, root=root)
    # a note naming a test the results lack stops the release before anything is exported or written
    said: list[str] = []
    with pytest.raises(TinyglotError, match=r"\{docs\}"):
        release_student(student_dir, "tiny3", {"notes": "docs {docs}", "results": {
            "libreoffice": {"student": {"de": 80}, "teacher": {"de": 85}}}}, root=root, say=said.append)
    assert not (root / "tiny3").exists() and not [m for m in said if "export" in m], said


def test_release_and_models_commands_refuse_and_list(student_dir, tmp_path, capsys):
    from tinyglot.app.cli import main

    root = tmp_path / "released"
    assert main(["release", "--model", str(student_dir), "--name", "e5-small", "--root", str(root)]) == 2
    assert "would shadow it" in capsys.readouterr().err
    assert not root.exists()
    assert main(["models", "--root", str(root)]) == 0
    assert "no released models" in capsys.readouterr().out
    assert main(["models", "--root", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    # the command a manifest records names every option that changes the release, defaults left out
    from tinyglot.app.cli import build_parser
    from tinyglot.app.commands.release import _command

    given = ["release", "--model", "runs/x/distill/student", "--name", "x", "--card-data", "release/x.json"]
    assert _command(build_parser().parse_args(given)) == " ".join(["tinyglot", *given])
    options = ["--formats", "onnx-text", "--quantize", "dynamic-int4-embeddings", "--tier", "share-alike",
               "--max-mb", "25"]
    shuffled = [*options[6:], *options[2:6], *options[:2]]  # the order given does not matter
    assert _command(build_parser().parse_args(given + shuffled)) == " ".join(["tinyglot", *given, *options])


def test_models_names_the_machine_of_each_speed(capsys):
    """Speeds measured at release on different machines are not comparable: each row names its machine, and
    the table says so where the shipped models' machines differ."""
    from tinyglot.app.cli import main
    from tinyglot.released import list_released

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    rows: dict[str, list[str]] = {}  # name -> its cells, a wrapped cell's lines joined
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0]:
            name, rows[cells[0]] = cells[0], cells
        elif cells:
            rows[name] = [f"{a} {b}".strip() for a, b in zip(rows[name], cells, strict=True)]
    listed = list_released(PACKAGE_ROOT)
    assert sorted(rows) == sorted(m["name"] for m in listed)
    for m in listed:
        assert f"({m['speed']['format']}; {m['speed']['machine']})" in rows[m["name"]][6], rows[m["name"]]
    assert ("on the machine each row names" in out) == (len({m["speed"]["machine"] for m in listed}) > 1)


def test_names_resolve_only_to_released_models(tmp_path, monkeypatch):
    """Unreleased names list the released ones; a path of the same name comes first; peers stay peers."""
    from tinyglot.encoders import tinyglot_folder
    from tinyglot.released import check_name, parse_released, resolve

    root = tmp_path / "released"
    (root / "fake-model").mkdir(parents=True)
    (root / "fake-model" / MANIFEST).write_text(json.dumps({"tinyglot_release": 1, "name": "fake-model",
                                                            "formats": {"onnx-text": {}}, "files": {}}))
    monkeypatch.setenv(ROOT_ENV, str(root))
    assert released_names() == ["fake-model"]
    assert resolve("fake-model") == root / "fake-model" / "onnx-text"
    assert resolve("released:fake-model") == root / "fake-model" / "onnx-text"
    assert tinyglot_folder("fake-model") == root / "fake-model" / "onnx-text"
    assert parse_released("e5-small") is None and parse_released("tfidf") is None
    with pytest.raises(TinyglotError, match=r"no released model is named 'nope' \(released: fake-model\)"):
        resolve("released:nope")
    with pytest.raises(TinyglotError, match=r"no released model has that name either \(released: fake-model\)"):
        tinyglot.load("fake-modle")
    with pytest.raises(TinyglotError, match="has no 'tflite-mediapipe' bundle"):
        tinyglot.load("fake-model", format="tflite-mediapipe")
    with pytest.raises(TinyglotError, match="is not a released model"):
        tinyglot.load("tfidf", format="onnx-text")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fake-model").mkdir()  # a folder of that name here comes first
    assert resolve("fake-model") is None
    for reserved in ("e5-small", "minilm", "peer", "tinyglot"):
        with pytest.raises(TinyglotError):
            check_name(reserved)


def test_results_in_every_accepted_form(tmp_path):
    from tinyglot.app.release import read_results

    eval_json = tmp_path / "teacher.json"
    eval_json.write_text(json.dumps({"languages": [{"lang": "de", "n": 10, "x2en": 0.9, "en2x": 0.8, "mean": 0.85},
                                                   {"lang": "ja", "n": 10, "x2en": 0.7, "en2x": 0.7, "mean": 0.7}]}))
    card = {"results": {"libreoffice": {"student": {"de": 80, "ja": 60}, "teacher": "teacher.json",
                                        "use-m": {"de": 70}}}}
    results, speed = read_results(card, tmp_path, "x", "e5-small")
    block = results["tests"]["libreoffice"]
    assert block["languages"]["de"] == {"student": 80.0, "teacher": 85.0, "use-m": 70.0}
    assert block["languages"]["ja"]["use-m"] is None
    assert block["mean_over"] == ["de"] and block["mean"] == {"student": 80.0, "teacher": 85.0, "use-m": 70.0}
    assert speed == []
    several = {"rows": [{"kind": "onnx", "spec": "a", "p1_by_test": {}}, {"kind": "torch", "spec": "b"}]}
    (tmp_path / "p.json").write_text(json.dumps(several))
    with pytest.raises(TinyglotError, match="must say which is the released student"):
        read_results({"results": "p.json"}, tmp_path, "x", "e5-small")
    results, _ = read_results({"results": "p.json", "student_spec": "a"}, tmp_path, "x", "e5-small")
    assert results["tests"] == {}
    with pytest.raises(TinyglotError, match="must be"):
        read_results({"results": {"t": {"student": {"de": 1}, "labse": {"de": 2}}}}, tmp_path, "x", "e5-small")


def test_card_means_are_taken_before_rounding(tmp_path):
    """A language's P@1 rounded to two decimals, then its mean to one, would show 44.8 for a run that reports
    44.7 (tinyglot-mini's narrative test, 44.7475): the card's one-decimal figure is the run report's."""
    from tinyglot.app.release import read_results

    card = {"results": {"general": {"student": {"de": 44.7475, "ja": 44.7475}, "teacher": {"de": 87.6, "ja": 87.6}}}}
    results, _ = read_results(card, tmp_path, "x", "e5-small")
    mean = results["tests"]["general"]["mean"]
    assert f"{mean['student']:.1f}" == "44.7" and mean["teacher"] == 87.6
    assert results["tests"]["general"]["languages"]["de"]["student"] == 44.75   # the table keeps two decimals


def test_source_counts_name_each_source_once_largest_first():
    rows = [("django", "BSD-3-Clause", "de"), ("general:fortunes-it", "public-domain", "it"),
            ("django", "BSD-3-Clause", "fr"), ("", "", "ja")]
    assert source_counts(rows) == [
        {"src": "django", "license": "BSD-3-Clause", "rows": 2, "languages": 2},
        {"src": "fortunes-it", "license": "public-domain", "rows": 1, "languages": 1},
        {"src": "unknown", "license": "unknown", "rows": 1, "languages": 1}]


def test_results_of_a_pipeline_run(tmp_path):
    """A ``tinyglot run``'s eval/results.json: the int8 onnx-text bundle is the student column, every test set."""
    from tinyglot.app.release import read_results

    def row(name, kind, p1):
        return {"name": name, "kind": kind, "path": "", "result": {"languages": [
            {"lang": lang, "n": 300, "x2en": v, "en2x": v, "mean": v} for lang, v in p1.items()]}}

    def models(base):
        return [row("TF-IDF", "tfidf", {"de": 0.1}), row("teacher", "teacher", {"de": base + 0.1}),
                row("student (PyTorch)", "student", {"de": base - 0.2}),
                row("onnx-dynamic", "bundle", {"de": base - 0.1}), row("onnx-text-dynamic", "bundle", {"de": base}),
                row("peer use-m", "peer", {"de": base + 0.05})]

    run = {"testset": "../shared/data/test/libreoffice (first 300 pairs per language)", "models": models(0.8),
           "extra": [{"name": "docs", "testset": "/h/general/docs-test", "models": models(0.5)}]}
    (tmp_path / "results.json").write_text(json.dumps(run))
    results, speed = read_results({"results": "results.json"}, tmp_path, "x", "e5-small")
    assert list(results["tests"]) == ["libreoffice", "docs"] and speed == []
    assert results["tests"]["libreoffice"]["languages"]["de"] == {"student": 80.0, "teacher": 90.0, "use-m": 85.0}
    assert results["tests"]["docs"]["mean"] == {"student": 50.0, "teacher": 60.0, "use-m": 55.0}
    run["models"] = [m for m in run["models"] if m["kind"] not in ("bundle", "student")]
    (tmp_path / "results.json").write_text(json.dumps(run))
    with pytest.raises(TinyglotError, match="no student row"):
        read_results({"results": "results.json"}, tmp_path, "x", "e5-small")


def test_notes_take_their_numbers_from_the_results():
    """A model card's note names P@1 by test, filled from the release's own results: it cannot keep the numbers of
    an earlier run (tinyglot-small's note said 92.3 on docs after a re-release that scored 92.6)."""
    from tinyglot.app.release import fill_notes

    results = {"tests": {"docs": {"mean": {"student": 92.6, "teacher": 99.2, "use-m": 84.8}},
                         "pretix": {"mean": {"student": 91.94, "teacher": None, "use-m": 98.5}}}}
    note = "docs {docs} against {docs:teacher}, {docs:share}; USE-m {docs:use-m}; pretix {pretix}"
    assert fill_notes(note, results) == "docs 92.6 against 99.2, 93.3 %; USE-m 84.8; pretix 91.9"
    assert fill_notes("no fields, {not a field}", results) == "no fields, {not a field}"
    assert fill_notes(None, results) is None
    with pytest.raises(TinyglotError, match=r"(?s)\{general\}.*name one of: docs, pretix"):
        fill_notes("general {general}", results)
    with pytest.raises(TinyglotError, match="no student and teacher"):
        fill_notes("{pretix:share}", results)
    with pytest.raises(TinyglotError, match="no use-m"):
        fill_notes("{docs:use-m}", {"tests": {"docs": {"mean": {"student": 1.0}}}})


@pytest.mark.parametrize("name", SHIPPED or [pytest.param("none", marks=pytest.mark.skip(
    reason="no model is released yet (tinyglot/released/ holds none)"))])
def test_every_shipped_note_matches_its_results(name):
    """The shipped card's note is its card data's template filled from the shipped results."""
    from tinyglot.app.release import fill_notes, read_card_data

    manifest = json.loads((PACKAGE_ROOT / name / MANIFEST).read_text(encoding="utf-8"))
    card, _ = read_card_data(Path(__file__).resolve().parents[1] / "release" / f"{name}.json")
    assert manifest["notes"] == fill_notes(card.get("notes"), manifest["results"])
    assert manifest["notes"] in (PACKAGE_ROOT / name / CARD).read_text(encoding="utf-8")
    assert manifest["made"]["training_time"] and "TIME" not in manifest["made"]["training_time"]
