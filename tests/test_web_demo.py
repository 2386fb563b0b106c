"""The browser demo (examples/web): MediaPipe's TextEmbedder from npm, in headless Chromium, embeds
sentences with an exported tflite-mediapipe bundle; the embeddings must match the Python encoder.

Needs Debian's ``chromium`` and ``npm install`` in examples/web (``.ci/run`` does it).  Skipped
outside CI when either is missing; under CI (``CI=true``) a missing piece is a failure.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.parse
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

WEB = Path(__file__).resolve().parents[1] / "examples" / "web"
SENTENCES = ["Where is the printer?", "Wo ist der Drucker?", "Où est l'imprimante ?", "プリンターはどこですか？",
             "OPEN THE FILE 😀", "Öffnen Sie die Datei."]

pytestmark = pytest.mark.slow


def _chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _need(what: str, ok: bool) -> None:
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"the browser test needs {what}")
        pytest.skip(f"the browser test needs {what}")


def _server(model: Path, results: list, done: threading.Event) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.SimpleHTTPRequestHandler):
        extensions_map: ClassVar[dict[str, str]] = {
            **http.server.SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
            ".mjs": "text/javascript"}

        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(WEB), **kwargs)

        def translate_path(self, path):
            if urllib.parse.urlparse(path).path == "/model.tflite":
                return str(model)
            return super().translate_path(path)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            results.append(json.loads(body))
            self.send_response(204)
            self.end_headers()
            done.set()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_browser_demo_matches_the_python_encoder(student_dir, mediapipe_bundle, tmp_path):
    chromium = _chromium()
    _need("Debian's chromium (apt-get install chromium)", chromium is not None)
    _need("npm install in examples/web", (WEB / "node_modules" / "@mediapipe" / "tasks-text" / "wasm").is_dir())
    from tinyglot.export.bundle import load_source

    from tinyglot.models import TorchEncoder

    bundle = mediapipe_bundle
    results: list = []
    done = threading.Event()
    server = _server(bundle / "model.tflite", results, done)
    port = server.server_address[1]
    query = urllib.parse.urlencode({"model": "/model.tflite", "sentences": json.dumps(SENTENCES), "report": "/report"})
    url = f"http://127.0.0.1:{port}/index.html?{query}"
    proc = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--user-data-dir={tmp_path / 'profile'}", url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        finished = done.wait(timeout=180)
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        server.shutdown()
    assert finished, f"the page reported nothing; chromium said: {err.decode(errors='replace')[-2000:]}"
    answer = results[0]
    assert "error" not in answer, answer.get("error")
    assert answer["sentences"] == SENTENCES
    got = np.asarray(answer["embeddings"], dtype=np.float64)
    model, tok, cfg = load_source(student_dir)
    want = TorchEncoder(tok, model.embed, cfg["max_len"]).encode(SENTENCES).astype(np.float64)
    cos = (got * want).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert got.shape == want.shape and cos.min() >= 0.999, cos
    matrix = np.asarray(answer["matrix"])
    assert matrix.shape == (6, 6) and np.allclose(np.diag(matrix), 1, atol=1e-5)
    assert np.allclose(matrix, want @ want.T, atol=1e-3)


def test_the_demo_opens_a_released_model_by_default():
    """Without ?model= the page loads the released tinyglot-mini (served from the repository root)."""
    import re

    from tinyglot.export.bundle import read_bundle

    default = re.search(r'params\.get\("model"\) \|\| "([^"]+)"', (WEB / "app.js").read_text(encoding="utf-8"))
    assert default is not None, "app.js names no default model"
    model = (WEB / default.group(1)).resolve()
    assert model.is_file() and model.parent.parent.parent.name == "released", model
    assert read_bundle(model.parent, "tflite-mediapipe")["quantization"]["mode"] == "dynamic"
