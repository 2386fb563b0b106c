"""A monolingual check: how well a model keeps its teacher's view of sentences it has no translation of.

A check folder (``tinyglot data general --commonvoice DIR`` writes ``OUT/commonvoice-test``) holds
``LANG.txt`` (the sentences it scores, one a line) and ``fit/LANG.txt`` (other held-out sentences of the
same language).  For any encoder, a least-squares linear map (with a bias and a little ridge) from its
embeddings to the teacher's is fitted on the ``fit`` sentences of every language together; then, per
language, each check sentence's mapped embedding retrieves among the teacher's embeddings of that
language's check sentences (and each teacher embedding among the mapped ones).  P@1, the mean of both
directions, is 100 % when the model's space is a linear image of the teacher's on those sentences.

It needs no translation, so it scores every language the text has; it measures agreement with the
teacher (its own P@1 is 100 %), and a model of another family (USE-m) is scored through the same kind of map.
The result is a :class:`~tinyglot.evaluation.bitext.BitextResult` whose two directions are
model -> teacher (``x2en``) and teacher -> model (``en2x``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinyglot.encoder import Encoder, l2_normalize
from tinyglot.errors import TinyglotError
from tinyglot.evaluation.bitext import BitextResult, LangResult, encode_checked
from tinyglot.evaluation.metrics import bitext_p_at_1

FIT_FOLDER = "fit"
RIDGE = 1e-3  # relative to the mean squared norm of the model's embeddings


@dataclass(frozen=True)
class MonoCheck:
    """The sentences a check scores, and the ones that fit its map, per language."""

    check: dict[str, list[str]]
    fit: dict[str, list[str]]

    def sentences(self) -> list[str]:
        """Every sentence of the check, in a fixed order (the check's, then the fit's, language by language)."""
        return [s for lang in self.check for s in (*self.check[lang], *self.fit[lang])]


def is_mono_check(folder: str | Path) -> bool:
    """Whether ``folder`` is a monolingual check (``LANG.txt`` files and a ``fit`` folder), not a bitext test."""
    folder = Path(folder)
    return folder.is_dir() and (folder / FIT_FOLDER).is_dir() and any(folder.glob("*.txt"))


def _read(path: Path) -> list[str]:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise TinyglotError(f"check file {path} cannot be read ({exc})",
                            "build the check again: tinyglot data general --commonvoice DIR") from exc
    return [line for line in lines if line]


def read_mono_check(folder: str | Path, max_per_lang: int = 0) -> MonoCheck:
    """A check folder (``LANG.txt`` and ``fit/LANG.txt``), at most ``max_per_lang`` check sentences of each
    language (0: all); a clear error when a language lacks its fit file or either file is empty."""
    folder = Path(folder)
    if not is_mono_check(folder):
        raise TinyglotError(f"{folder} is not a monolingual check (LANG.txt files and a fit/ folder)",
                            "pass the folder that tinyglot data general --commonvoice DIR wrote "
                            "(OUT/commonvoice-test)")
    check: dict[str, list[str]] = {}
    fit: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.txt")):
        lang = path.stem
        fit_path = folder / FIT_FOLDER / path.name
        if not fit_path.is_file():
            raise TinyglotError(f"check {folder}: {lang} has no fit file {fit_path}",
                                "build the check again: tinyglot data general --commonvoice DIR")
        check[lang], fit[lang] = _read(path), _read(fit_path)
        if not check[lang] or not fit[lang]:
            raise TinyglotError(f"check {folder}: {lang} has an empty file",
                                "build the check again: tinyglot data general --commonvoice DIR")
        if max_per_lang:
            check[lang] = check[lang][:max_per_lang]
    return MonoCheck(check, fit)


def fit_linear_map(src: np.ndarray, dst: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """``W`` of shape ``(d_src + 1, d_dst)`` minimising ``|[src, 1] W - dst|^2 + ridge * n * |W|^2`` (the
    bias not penalised), in float64."""
    a = np.hstack([src.astype(np.float64), np.ones((len(src), 1))])
    gram = a.T @ a
    penalty = ridge * len(src) * float(np.mean(np.sum(src.astype(np.float64) ** 2, axis=1)))
    gram[:-1, :-1] += penalty * np.eye(src.shape[1]) / src.shape[1]
    return np.linalg.solve(gram, a.T @ dst.astype(np.float64))


def apply_map(weights: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return l2_normalize((rows.astype(np.float64) @ weights[:-1] + weights[-1]).astype(np.float32))


def _require_determined(n_fit: int, dim: int, name: str, testset_name: str) -> None:
    """A clear error when the fit sentences are too few for a map from ``dim``-d rows: with fewer rows than
    unknowns the map sees only a subspace, and not even the teacher would score 100."""
    if n_fit <= dim:
        raise TinyglotError(f"check {testset_name!r} has {n_fit} fit sentences in all, too few to fit a linear map "
                            f"from {name}'s {dim}-d embeddings",
                            f"give its fit/ files more than {dim} sentences together (tinyglot data general "
                            "--commonvoice writes 300 per language)")


def evaluate_teacher_retrieval(encoder: Encoder, check: MonoCheck, teacher_rows: Mapping[str, np.ndarray], *,
                               batch_size: int = 64, model_name: str = "", testset_name: str = "",
                               on_language: Callable[[str], None] | None = None) -> BitextResult:
    """P@1 of ``encoder`` on ``check`` against the teacher's embeddings ``teacher_rows`` (per language: the
    check's sentences, then the fit's, as :meth:`MonoCheck.sentences` orders them); ``on_language(lang)``
    is called as each language is encoded (a progress bar)."""
    if not check.check:
        raise TinyglotError(f"check {testset_name!r} is empty: there are no languages to evaluate")
    name = model_name or getattr(encoder, "name", None) or type(encoder).__name__
    started = time.perf_counter()
    model_rows: dict[str, np.ndarray] = {}
    dim: int | None = None
    n_fit = sum(len(s) for s in check.fit.values())
    for lang in check.check:
        rows = encode_checked(encoder, [*check.check[lang], *check.fit[lang]], batch_size, name, dim)
        if dim is None:  # the first language gives the dimension: refuse before encoding the others
            _require_determined(n_fit, rows.shape[1], name, testset_name)
        dim = rows.shape[1]
        expected = len(check.check[lang]) + len(check.fit[lang])
        if teacher_rows[lang].shape[0] != expected:
            raise TinyglotError(f"the teacher's rows of {lang} are {teacher_rows[lang].shape[0]}, not {expected}",
                                "the teacher's embeddings were made for another check: embed it again")
        model_rows[lang] = rows
        if on_language is not None:
            on_language(lang)
    n_check = {lang: len(s) for lang, s in check.check.items()}
    weights = fit_linear_map(np.vstack([model_rows[lang][n_check[lang]:] for lang in check.check]),
                             np.vstack([teacher_rows[lang][n_check[lang]:] for lang in check.check]))
    results = []
    for lang in check.check:
        mapped = apply_map(weights, model_rows[lang][: n_check[lang]])
        teacher = l2_normalize(np.asarray(teacher_rows[lang][: n_check[lang]], dtype=np.float32))
        to_teacher, from_teacher = bitext_p_at_1(mapped, teacher)
        results.append(LangResult(lang, n_check[lang], to_teacher, from_teacher))
    return BitextResult(name, testset_name, False, results, time.perf_counter() - started)


def teacher_embeddings(teacher: Encoder, check: MonoCheck, batch_size: int = 64,
                       on_language: Callable[[str], None] | None = None) -> dict[str, np.ndarray]:
    """The teacher's embeddings of each language's check and fit sentences (what
    :func:`evaluate_teacher_retrieval` takes)."""
    name = getattr(teacher, "name", None) or "teacher"
    out: dict[str, np.ndarray] = {}
    dim: int | None = None
    for lang in check.check:
        out[lang] = encode_checked(teacher, [*check.check[lang], *check.fit[lang]], batch_size, name, dim)
        dim = out[lang].shape[1]
        if on_language is not None:
            on_language(lang)
    return out


class KnownRows:
    """An encoder that answers with rows computed before (the teacher's embeddings of a check, from its
    cache): the teacher is scored on its own check without a second pass."""

    def __init__(self, check: MonoCheck, rows: Mapping[str, np.ndarray], name: str = "teacher") -> None:
        self.name = name
        self._rows = {s: r for lang in check.check
                      for s, r in zip([*check.check[lang], *check.fit[lang]], rows[lang], strict=True)}

    def encode(self, sentences: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return np.stack([self._rows[s] for s in sentences]).astype(np.float32)
