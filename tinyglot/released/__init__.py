"""Released students: the models that ship inside tinyglot, opened by name.

Each released model is a folder ``tinyglot/released/NAME/`` (package data, in the wheel) written by
``tinyglot release`` (:mod:`tinyglot.app.release`)::

    release.json            the manifest: name, description, languages, dim, sizes, the sha256 of every
                            file, P@1 per test set (student / teacher / USE-m), speed, licences, data
                            attributions, the commands that made it, embeddings recorded for a few sentences
    MODEL_CARD.md           how it was made, its numbers, how to use it (Python, Android, the browser)
    LICENSES.md             the teacher's licence and the data attributions
    onnx-text/              int8 bundle, raw strings in: onnxruntime + onnxruntime-extensions
    tflite-mediapipe/       int8 bundle, raw strings in: MediaPipe's TextEmbedder
    .tinyglot-output.json   the ownership record (a release replaces only a folder tinyglot wrote)

``tinyglot.load("NAME")`` opens the ``onnx-text`` bundle (the default for Python);
``tinyglot.load("NAME?format=tflite-mediapipe")`` (or ``format="tflite-mediapipe"``) the other one;
``released:NAME`` says explicitly that NAME is a released model.  A folder or file of that name in the
working directory comes first (as for the peers), and a release may not take the name of a peer, a
baseline or a spec prefix.  ``TINYGLOT_RELEASED=DIR`` reads released models from ``DIR`` instead of the
package folder (tests, a release being prepared).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from tinyglot.errors import TinyglotError

ROOT_ENV = "TINYGLOT_RELEASED"  # a folder to read (and write) released models from instead of this package's
PACKAGE_ROOT = Path(__file__).resolve().parent
MANIFEST = "release.json"
CARD = "MODEL_CARD.md"
LICENSES = "LICENSES.md"
RELEASED_KIND = "released"  # the ownership record's kind of a released model's folder
MANIFEST_VERSION = 1
FORMATS = ("onnx-text", "tflite-mediapipe")  # the bundles a release holds, the first is Python's default
DEFAULT_FORMAT = FORMATS[0]
MAX_RELEASE_BYTES = 33_000_000  # every file of a released model together, at most USE-m's size (kept in git)
PREFIX = "released"
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
MAX_NAME = 40


def released_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Where released models live: ``root``, else ``$TINYGLOT_RELEASED``, else this package's folder."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(ROOT_ENV)
    return Path(env).expanduser() if env else PACKAGE_ROOT


def reserved_names() -> set[str]:
    """Names a release may not take: the peers, the baselines, the spec prefixes and this one."""
    from tinyglot.peerinfo import PEERS
    from tinyglot.spec import PREFIXES

    return {*PEERS, "tfidf", *PREFIXES, PREFIX, "default", "all", "none"}


def check_name(name: str) -> str:
    """``name`` as a release may take it (lower-case words joined by ``-``, not a peer's, a baseline's,
    a prefix's), else a clear error."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name) or len(name) > MAX_NAME:
        raise TinyglotError(f"{name!r} cannot name a released model",
                            f"use lower-case letters and digits in words joined by '-', at most {MAX_NAME} "
                            "characters, e.g. fast-small or fast-tiny")
    if name in reserved_names():
        raise TinyglotError(f"{name!r} is already the name of a peer, a baseline or a spec prefix: a released "
                            "model of that name would shadow it", "choose another --name")
    return name


def _is_name(text: str) -> bool:
    return bool(NAME_PATTERN.match(text)) and len(text) <= MAX_NAME


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked ``release.json`` of a released model's folder, else a clear error."""
    from tinyglot.io import check_file_size
    from tinyglot.models import read_model_config

    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise TinyglotError(f"{folder} is not a released model (no {MANIFEST})",
                            "release a student with `tinyglot release`")
    check_file_size(path, 16 << 20, MANIFEST)
    data = read_model_config(path)
    formats = data.get("formats")
    if (data.get("tinyglot_release") != MANIFEST_VERSION or data.get("name") != folder.name
            or not isinstance(formats, dict) or not formats or not set(formats) <= set(FORMATS)
            or not isinstance(data.get("files"), dict)):
        raise TinyglotError(f"{path} is not a release manifest for {folder.name!r} (version, name, formats or "
                            "files missing or wrong)", "re-release the model with `tinyglot release`")
    return data


def released_names(root: str | os.PathLike[str] | None = None) -> list[str]:
    """The names of the released models under the released root, sorted (folders holding a manifest)."""
    base = released_root(root)
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir()
                  if p.is_dir() and not p.name.startswith((".", "_")) and _is_name(p.name)
                  and (p / MANIFEST).is_file())


def released_folder(name: str, root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of the released model ``name``, else a clear error listing the released names."""
    if _is_name(name) and name in released_names(root):
        return released_root(root) / name
    raise unknown_name(name, root)


def unknown_name(name: str, root: str | os.PathLike[str] | None = None) -> TinyglotError:
    names = released_names(root)
    listed = ", ".join(names) if names else "none in this installation"
    return TinyglotError(f"no released model is named {name!r} (released: {listed})",
                         "`tinyglot models` lists the released models; pass one of their names, or a model folder")


def unknown_name_hint(text: str, root: str | os.PathLike[str] | None = None) -> str:
    """For the "no model found" error of a spec that could have been a released name: what is released."""
    if not _is_name(text):
        return ""
    names = released_names(root)
    return f"; no released model has that name either (released: {', '.join(names) or 'none'})"


def bundle_folder(name: str, fmt: str | None = None, root: str | os.PathLike[str] | None = None) -> Path:
    """The bundle folder of the released model ``name`` in format ``fmt`` (default: ``onnx-text``, else the
    release's first format)."""
    from tinyglot.models import folder_file

    folder = released_folder(name, root)
    manifest = read_manifest(folder)
    formats = list(manifest["formats"])
    if fmt is None:
        fmt = DEFAULT_FORMAT if DEFAULT_FORMAT in formats else formats[0]
    if fmt not in formats:
        raise TinyglotError(f"the released model {name!r} has no {fmt!r} bundle (it has: {', '.join(formats)})",
                            f"pass format={formats[0]} (or {name}?format={formats[0]})")
    return folder_file(folder, fmt, "'formats'")


def parse_released(spec: str | os.PathLike[str], root: str | os.PathLike[str] | None = None
                   ) -> tuple[str, str | None] | None:
    """``(name, format or None)`` when ``spec`` names a released model (``NAME``, ``NAME?format=F``,
    ``released:NAME[?format=F]``), else None.  A path that exists is never a released name;
    ``released:`` with a name that is not released is an error listing the released names."""
    from tinyglot.spec import parse_spec, split_query

    s = parse_spec(os.fspath(spec))
    if s.prefix == PREFIX:
        body = s.body
    elif s.prefix or Path(s.text).expanduser().exists():
        return None
    else:
        body = s.text
        if not _is_name(body.split("?", 1)[0]) or body.split("?", 1)[0] not in released_names(root):
            return None
    name, opts = split_query(body)
    unknown = set(opts) - {"format"}
    if unknown:
        raise TinyglotError(f"unknown option {sorted(unknown)[0]!r} in {s.text!r}",
                            f"write {name} or {name}?format={FORMATS[1]}")
    if s.prefix == PREFIX and (not _is_name(name) or name not in released_names(root)):
        raise unknown_name(name, root)
    return name, opts.get("format") or None


def resolve(spec: str | os.PathLike[str], fmt: str | None = None,
            root: str | os.PathLike[str] | None = None) -> Path | None:
    """The bundle folder ``spec`` opens when it names a released model, else None.  ``fmt`` (the
    ``format=`` option of :func:`tinyglot.load`) picks the bundle unless the spec's ``?format=`` does."""
    parsed = parse_released(spec, root)
    if parsed is None:
        return None
    name, spec_fmt = parsed
    if fmt is not None and spec_fmt is not None and fmt != spec_fmt:
        raise TinyglotError(f"{os.fspath(spec)!r} asks for format {spec_fmt!r} and the format option for {fmt!r}",
                            "give the format once")
    return bundle_folder(name, spec_fmt or fmt, root)


def verify(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """Check a released model's folder against its manifest: every file it lists has its sha256, and the
    folder holds no other file (the manifest and the ownership record aside).  Returns the manifest."""
    from tinyglot.integrity import check_sha256
    from tinyglot.outputs import RECORD

    folder = Path(folder)
    manifest = read_manifest(folder)
    try:
        check_sha256(folder, manifest["files"], what="released model")
    except TinyglotError as exc:
        raise TinyglotError(exc.problem, "reinstall tinyglot (or check out the folder again); a maintainer "
                                         "re-releases it with `tinyglot release`") from None
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*")
               if p.is_file() and p.name != RECORD and "__pycache__" not in p.parts}
    extra = sorted(present - set(manifest["files"]) - {MANIFEST})
    if extra:
        raise TinyglotError(f"{folder} holds files its {MANIFEST} does not list: {', '.join(extra[:5])}",
                            "re-release the model with `tinyglot release` (or remove those files)")
    return manifest


def summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """The figures ``tinyglot models`` shows of one released model."""
    tests = {}
    for test, block in (manifest.get("results", {}).get("tests") or {}).items():
        mean = block.get("mean") if isinstance(block, dict) else None
        if isinstance(mean, dict):
            tests[test] = {k: mean.get(k) for k in ("student", "teacher", "use-m")}
    speed = next((row for row in manifest.get("speed") or [] if isinstance(row, dict)
                  and row.get("format") == DEFAULT_FORMAT), None)
    return {
        "name": manifest.get("name"),
        "description": manifest.get("description", ""),
        "formats": list(manifest.get("formats") or {}),
        "size_mb": round(int(manifest.get("bytes", 0)) / 1e6, 2),
        "languages": len(manifest.get("languages") or []),
        "dim": manifest.get("dim"),
        "tier": manifest.get("tier", "permissive"),
        "licence": (manifest.get("licences") or {}).get("model"),
        "teacher": (manifest.get("results") or {}).get("teacher") or manifest.get("made", {}).get("teacher"),
        "p1": tests,
        "speed": None if speed is None else {k: speed.get(k) for k in
                                             ("format", "threads", "p50_ms", "sentences_per_s", "machine")},
    }


def list_released(root: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """:func:`summary` of every released model (a folder whose manifest cannot be read is reported as such)."""
    out = []
    for name in released_names(root):
        try:
            out.append(summary(read_manifest(released_root(root) / name)))
        except TinyglotError as exc:
            out.append({"name": name, "error": exc.problem})
    return out


__all__ = ["CARD", "DEFAULT_FORMAT", "FORMATS", "LICENSES", "MANIFEST", "MAX_RELEASE_BYTES", "PACKAGE_ROOT",
           "RELEASED_KIND", "ROOT_ENV", "bundle_folder", "check_name", "list_released", "parse_released",
           "read_manifest", "released_folder", "released_names", "released_root", "reserved_names", "resolve",
           "summary", "unknown_name", "unknown_name_hint", "verify"]
