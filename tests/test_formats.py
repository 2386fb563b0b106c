"""One record per bundle format (tinyglot.export.formats): complete, and the only place the command line,
the pipeline, pruning and the bench learn which formats exist and what each exporter takes."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from tinyglot.app.cli import build_parser, main
from tinyglot.errors import TinyglotError
from tinyglot.export.formats import (BUNDLE_FORMATS, COMMON_KWARGS, BundleFormat, bundle_runtimes, format_names,
                                     get_format, quantization_names)


def _function(target: str) -> ast.FunctionDef:
    """The definition of ``module:function``, read from the source (no import: no torch, no TensorFlow)."""
    module_name, func_name = target.split(":")
    spec = importlib.util.find_spec(module_name)
    assert spec is not None and spec.origin, target
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    found = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == func_name]
    assert found, f"{target} is not defined"
    return found[0]


@pytest.mark.parametrize("name", sorted(BUNDLE_FORMATS))
def test_every_format_record_is_complete(name):
    from tinyglot.devices.runner import RUNTIMES
    from tinyglot.models import LOADERS

    fmt = BUNDLE_FORMATS[name]
    assert fmt.name == name and fmt.summary and fmt.quantize_help
    assert fmt.quantizations and fmt.quantizations[0] == "none"
    assert len(set(fmt.quantizations)) == len(fmt.quantizations)
    assert fmt.loader in LOADERS  # tinyglot.load opens its bundles
    _function(fmt.loader)
    assert fmt.bench_runtime is None or fmt.bench_runtime in RUNTIMES
    exporter = _function(fmt.exporter)
    positional = [a.arg for a in exporter.args.args]
    assert positional[:3] == ["model", "out", "quantization"], fmt.exporter
    keywords = {a.arg for a in exporter.args.kwonlyargs}
    # the record lists exactly the keywords its exporter takes beyond the common ones
    declared = set(COMMON_KWARGS) | set(fmt.options)
    assert keywords == declared, (fmt.exporter, keywords ^ declared)


def test_the_bench_runs_the_formats_whose_record_names_a_runtime():
    from tinyglot.devices import bench_inputs

    assert bundle_runtimes() == {"onnx": "onnx", "tflite": "tflite", "onnx-text": "onnx-text",
                                 "tflite-mediapipe": "mediapipe"}
    assert not hasattr(bench_inputs, "BUNDLE_RUNTIMES")  # no second list to keep in step


def test_unknown_format_is_a_clear_error():
    with pytest.raises(TinyglotError, match="unknown export format 'coreml'") as exc:
        get_format("coreml")
    assert "onnx, tflite" in str(exc.value)


def _choices(parser, *path: str, option: str) -> list[str]:
    for name in path:
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = sub.choices[name]
    return list(next(a for a in parser._actions if option in a.option_strings).choices)


@pytest.fixture
def fake_format(monkeypatch):
    """A format registered the way a package would: it shows up everywhere formats are read."""
    calls: list[tuple] = []

    def export(model, out, quantization, **kwargs):
        calls.append((Path(model), Path(out), quantization, kwargs))
        Path(out).mkdir(parents=True, exist_ok=True)
        parity = SimpleNamespace(passed=True, to_table=lambda: "parity: fake")
        return SimpleNamespace(out=Path(out), parity=parity, sizes={"model.fake": 3}, config={"files": ["model.fake"]},
                               source_bytes=0)

    fmt = BundleFormat("fake", "tinyglot.export.onnx:export_onnx", ("none", "int3"),
                       "tinyglot.export.onnx:load_onnx_bundle", "onnx", ("buckets",), summary="a test format",
                       quantize_help="none, int3")
    monkeypatch.setitem(BUNDLE_FORMATS, "fake", fmt)
    monkeypatch.setattr(BundleFormat, "exporter_function", lambda self: export)
    return calls


def test_a_registered_format_reaches_the_cli_the_pipeline_and_the_bench(fake_format, student_dir, tmp_path):
    from tinyglot.app.pipeline.settings import load_config

    assert "fake" in format_names() and "int3" in quantization_names()
    parser = build_parser()
    assert "fake" in _choices(parser, "export", option="--format")
    assert "int3" in _choices(parser, "export", option="--quantize")
    assert "fake" in bundle_runtimes()
    cfg = load_config("tiny", sets=["export.formats=fake-int3,onnx-dynamic", "export.tflite_buckets=16,32,48"])
    assert ("fake", "int3") in cfg.export.formats
    with pytest.raises(TinyglotError, match="not available for fake"):
        load_config("tiny", sets=["export.formats=fake-fp16"])

    # `tinyglot export --format fake` runs its exporter, with the options its record lists
    out = tmp_path / "bundle"
    assert main(["export", "--model", str(student_dir), "--format", "fake", "--quantize", "int3",
                 "--buckets", "16,32", "--out", str(out)]) == 0
    (model, where, quant, kwargs), = fake_format
    assert (model, where, quant) == (student_dir, out, "int3")
    assert list(kwargs["buckets"]) == [16, 32] and "optimize" not in kwargs and "batch_sizes" not in kwargs
    assert main(["export", "--model", str(student_dir), "--format", "fake", "--quantize", "fp16",
                 "--out", str(tmp_path / "b2")]) == 2


def _old_cli_kwargs(fmt: str) -> tuple[str, dict]:
    """What ``tinyglot export --format FMT`` passes each exporter by default (as before the records, plus
    tflite-mediapipe's input shape)."""
    from tinyglot.export.tflite import DEFAULT_BATCH_SIZES, DEFAULT_BUCKETS

    common = dict(threads=1, max_sentences=100, parity_gate=True)
    return "none", {"onnx": dict(common, optimize="transformers"),
                    "tflite": dict(common, buckets=DEFAULT_BUCKETS, batch_sizes=DEFAULT_BATCH_SIZES),
                    "tflite-mediapipe": dict(common, input_shape="auto")}.get(fmt, common)


@pytest.mark.parametrize("name", ["onnx", "tflite", "savedmodel", "onnx-text", "tflite-mediapipe"])
def test_the_cli_and_the_pipeline_pass_each_exporter_what_they_did(name, student_dir, tmp_path, monkeypatch):
    from tinyglot.app.pipeline.settings import ExportSection
    from tinyglot.app.pipeline.stages import export_bundle

    calls: list[tuple] = []

    def export(model, out, quantization, **kwargs):
        calls.append((quantization, {k: v for k, v in kwargs.items() if k != "say"}))
        Path(out).mkdir(parents=True, exist_ok=True)
        parity = SimpleNamespace(passed=True, to_table=lambda: "")
        return SimpleNamespace(out=Path(out), parity=parity, sizes={}, config={"files": []}, source_bytes=0)

    monkeypatch.setattr(BundleFormat, "exporter_function", lambda self: export)
    assert main(["export", "--model", str(student_dir), "--format", name, "--out", str(tmp_path / "b")]) == 0
    assert calls.pop() == _old_cli_kwargs(name)

    section = ExportSection()
    export_bundle(name, "none", student_dir, tmp_path / "p", section, {"de": []}, print)
    expected = dict(threads=section.threads, max_sentences=section.parity_sentences, testset={"de": []})
    if name == "tflite":
        expected.update(buckets=section.tflite_buckets, batch_sizes=section.tflite_batch_sizes)
    if name in ("onnx-text", "tflite-mediapipe"):
        expected.update(card=False)  # the run writes its own README.md
    assert calls.pop() == ("none", expected)
