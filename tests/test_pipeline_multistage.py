"""``tinyglot run`` with a multi-stage (ALBERT-style, recurrent shared layers) student: the settings
(preset lookup over both preset tables, the step budget of the student stages) and the whole pipeline
end to end at the tiny profile's sizes, as a user runs it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from tinyglot.app.pipeline import load_config
from tinyglot.distill.config import PRESETS as LEALLA_PRESETS
from tinyglot.distill.ms_config import PRESETS as MS_PRESETS
from tinyglot.errors import TinyglotError


def test_unknown_student_preset_names_both_preset_lists():
    with pytest.raises(TinyglotError) as err:
        load_config("tiny", sets=["distill.student=ms-huge"])
    assert "unknown student preset distill.student='ms-huge'" in err.value.problem
    fix = err.value.fix or ""
    assert all(name in fix for name in [*LEALLA_PRESETS, *MS_PRESETS]), fix
    assert "LEALLA" in fix and "multi-stage" in fix


def test_max_steps_is_the_budget_of_each_student_stage():
    cfg = load_config("tiny", sets=["distill.student=ms-tiny", "distill.max_steps=7",
                                    "distill.overrides.stage3.max_steps=99", "distill.overrides.stage3.lr=0.01"])
    assert cfg.distill.multistage and not load_config("tiny").distill.multistage
    preset = cfg.student_preset()
    assert [preset.stage_settings(n).max_steps for n in (1, 2, 3, 4)] == [MS_PRESETS["ms-tiny"]().train.max_steps,
                                                                          7, 7, 7]
    assert preset.stage_settings(3).lr == 0.01  # the other overrides still apply


@pytest.mark.parametrize("sets, message", [
    (["distill.assistant=/no/such/assistant"], "only multi-stage students have an assistant"),
    (["distill.student=ms-tiny", "distill.assistant=/no/such/assistant"], "distill.assistant not found"),
])
def test_bad_assistant_settings_are_clear_errors(sets, message):
    with pytest.raises(TinyglotError, match=re.escape(message)):
        load_config("tiny", sets=sets)


def test_a_multistage_setting_error_is_reported_before_any_stage_runs():
    with pytest.raises(TinyglotError, match=re.escape("student.passes")):
        load_config("tiny", sets=["distill.student=ms-tiny", "distill.overrides.student.unit_layers=3"])


@pytest.mark.slow
def test_tiny_run_with_a_multistage_student_end_to_end(tmp_path):
    """The tiny profile with ``distill.student=ms-tiny``: the ems-tiny teacher trained into the run
    folder is the teacher and the assistant; the ALBERT student is exported (ONNX, ONNX with the
    tokenizer in the graph), its bundles pass parity, and the report names it."""
    import tinyglot

    out = tmp_path / "run"
    env = {**os.environ, "TINYGLOT_HOME": str(tmp_path / "home"), "TINYGLOT_NO_PROGRESS": "1"}
    sets = ["distill.student=ms-tiny", "distill.max_steps=6", "export.formats=onnx-dynamic,onnx-text-dynamic",
            "export.teacher_formats=", "bench.torch=false"]
    args = [sys.executable, "-m", "tinyglot", "run", "--profile", "tiny", "--out", str(out)]
    for item in sets:
        args += ["--set", item]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    student = out / "distill" / "student"
    cfg = json.loads((student / "config.json").read_text())
    assert cfg["kind"] == "multistage-student" and cfg["stage"] == 4 and cfg["encoder"] == "albert"
    summary = json.loads((out / "distill" / "summary.json").read_text())
    assert summary["recipe"] == "multi-stage" and summary["student"] == "ms-tiny"
    assert summary["assistant"] == str(out / "teacher")  # the run's EMS teacher, trained in this run
    assert [s["stage"] for s in summary["stages"]] == [1, 2, 3, 4]
    assert [s["steps"] for s in summary["stages"]][1:] == [6, 6, 6]  # max_steps: each student stage's budget
    assert summary["trained_steps"] == sum(s["steps"] for s in summary["stages"])
    assert summary["parameters"]["total"] > 0 and summary["dim"] == cfg["dim"]

    for name in ("onnx-dynamic", "onnx-text-dynamic"):
        bundle = out / "bundles" / name
        parity = json.loads((bundle / "parity.json").read_text())
        assert parity["passed"] is True, parity
        assert json.loads((bundle / "config.json").read_text())["source_kind"] == "multistage-student"
        emb = tinyglot.load(bundle).encode(["Wo ist der Drucker?", "Where is the printer?"])
        assert emb.shape == (2, cfg["dim"])

    report = (out / "report.md").read_text()
    assert "**Student** `ms-tiny`" in report
    assert report.split("## Export parity")[1].split("##")[0].count("| passed |") == 2
    card = (student / "README.md").read_text()
    assert "ms-tiny" in card and "the multi-stage recipe" in card and "AlbertModel" in card


def test_distill_inputs_hash_the_multistage_settings_and_the_assistant_weights(tiny_teacher_dir, tmp_path):
    from tinyglot.app.pipeline import RunContext
    from tinyglot.app.pipeline.stages import distill_inputs
    from tinyglot.stagecache import StageStore, hash_json

    assistant = tmp_path / "assistant"
    shutil.copytree(tiny_teacher_dir, assistant)

    def inputs(*sets: str) -> dict:
        cfg = load_config("tiny", sets=["distill.student=ms-tiny", *sets])
        return distill_inputs(RunContext(cfg, tmp_path / "run", lambda _: None, False, StageStore(tmp_path)))

    default = inputs()
    assert default["recipe"] == "multistage" and default["assistant_sha"] is None
    assert default["settings"]["stage4"]["max_steps"] == load_config("tiny").distill.max_steps
    assert hash_json(inputs("distill.max_steps=3")) != hash_json(default)
    assert hash_json(inputs("distill.overrides.loss.stage4=hard")) != hash_json(default)
    given = inputs(f"distill.assistant={assistant}")
    assert given["assistant_sha"] and hash_json(given) == hash_json(inputs(f"distill.assistant={assistant}"))
    weights = assistant / "best.pt"  # (the weights a teacher run keeps: source_weight_files)
    weights.write_bytes(weights.read_bytes() + b"\0")  # the same folder, other weights: the stage reruns
    assert inputs(f"distill.assistant={assistant}")["assistant_sha"] != given["assistant_sha"]
