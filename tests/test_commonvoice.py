"""Common Voice's sentence text (tinyglot.data.commonvoice, ``tinyglot data general --commonvoice``), its held-out
teacher-retrieval check (tinyglot.evaluation.teacher_check) and the licence tiers of shipped models."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import tinyglot.data.commonvoice as cv
from tinyglot.app.cli import main
from tinyglot.data.pairs import licence_tier, tier_allows
from tinyglot.errors import TinyglotError
from tinyglot.evaluation.teacher_check import (KnownRows, MonoCheck, evaluate_teacher_retrieval, fit_linear_map,
                                               is_mono_check, read_mono_check, teacher_embeddings)

from .test_build_general import cache, run, train_rows  # noqa: F401  (the fixture of a small offline build)

SENTENCES = {  # a few everyday sentences per Common Voice locale
    "de": ["Wo ist der Bahnhof?", "Sie lachte laut.", "Das Wetter ist heute schön.", "Kurz", "Sie lachte laut."],
    "sv-SE": ["Jag heter Anna och bor i Lund.", "Det regnar igen."],
    "rm-sursilv": ["Il tgaun dorma en iert."],
    "rm-vallader": ["Il chan dorma in üert."],
    "vot": ["Mennä kotto."],
}


def write_files_layout(folder: Path, sentences: dict[str, list[str]] = SENTENCES) -> Path:
    """LOCALE.txt.gz files (German plain .txt), as in shared/data/commonvoice."""
    folder.mkdir(parents=True)
    for locale, lines in sentences.items():
        text = "\n".join(lines) + "\n"
        if locale == "de":
            (folder / f"{locale}.txt").write_text(text, encoding="utf-8")
        else:
            (folder / f"{locale}.txt.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    (folder / "counts.json").write_text("{}", encoding="utf-8")  # other files are ignored
    return folder


def write_repository_layout(root: Path) -> Path:
    """The Common Voice repository: server/data/LOCALE/*.txt, several files a locale."""
    for locale, lines in SENTENCES.items():
        folder = root / "server" / "data" / locale
        folder.mkdir(parents=True)
        (folder / "a.txt").write_text("\n".join(lines[:1]) + "\n", encoding="utf-8")
        (folder / "b.txt").write_text("\n".join(lines[1:] or lines) + "\n\n", encoding="utf-8")
    return root


# ------------------------------------------------------------------------------------------ the reader


@pytest.mark.parametrize("layout", ["files", "repository", "repository-data"])
def test_both_layouts_read_the_same_sentences_under_tinyglots_codes(tmp_path, layout):
    if layout == "files":
        folder = write_files_layout(tmp_path / "cv")
    else:
        folder = write_repository_layout(tmp_path / "voice-web")
        folder = folder / "server" / "data" if layout == "repository-data" else folder
    text = cv.read_commonvoice(folder)
    assert text.layout == ("files" if layout == "files" else "repository")
    assert text.sentences == {
        "de": ["Wo ist der Bahnhof?", "Sie lachte laut.", "Das Wetter ist heute schön.", "Kurz"],  # once each
        "rm": ["Il tgaun dorma en iert.", "Il chan dorma in üert."],  # both Romansh idioms
        "sv": ["Jag heter Anna och bor i Lund.", "Det regnar igen."]}
    assert text.locales == {"de": "de", "rm-sursilv": "rm", "rm-vallader": "rm", "sv-SE": "sv"}
    assert text.unmapped == {"vot": 1}  # Votic: no tinyglot code, left out and named
    assert len(text.files) == (5 if layout == "files" else 10) and all(len(h) == 64 for h in text.files.values())
    assert cv.read_commonvoice(folder, languages={"de"}).counts() == {"de": 4}


def test_locale_codes_map_to_tinyglots():
    for locale, code in (("sv-SE", "sv"), ("zh-CN", "zh"), ("zh-TW", "zh"), ("fy-NL", "fy"), ("ga-IE", "ga"),
                         ("nb-NO", "nb"), ("pa-IN", "pa"), ("ne-NP", "ne"), ("rm-sursilv", "rm"), ("kab", "kab"),
                         ("de", "de")):
        assert cv.commonvoice_lang(locale) == code, locale
    for locale in ("bas", "cnh", "vot"):
        assert cv.commonvoice_lang(locale) is None


def test_e5_smalls_languages_keep_kurmanji_and_leave_sorani_out(tmp_path):
    """`tinyglot data general`'s default --languages e5-small: CC-100's Kurdish is Kurmanji (kmr)."""
    from tinyglot.languages import language_list

    folder = tmp_path / "cv"
    folder.mkdir()
    for locale, line in (("kmr", "Ez ji Kurdistanê me."), ("ckb", "من خەڵکی کوردستانم."), ("de", "Gut.")):
        (folder / f"{locale}.txt").write_text(line + "\n", encoding="utf-8")
    assert cv.read_commonvoice(folder, set(language_list("e5-small"))).counts() == {"de": 1, "kmr": 1}


@pytest.mark.parametrize("damage,problem", [
    (lambda f: (f / "de.txt").write_text("\n \n", encoding="utf-8"), "de.txt: holds no sentence"),
    (lambda f: (f / "de.txt").write_bytes(b"Gut.\n\xff\xfe kaputt\n"), "de.txt: line 2 is not UTF-8"),
    (lambda f: (f / "sv-SE.txt.gz").write_bytes(b"\x1f\x8b\x08\x00broken"), "sv-SE.txt.gz: not a readable gzip"),
    (lambda f: (f / "de.txt").write_bytes(b"a\x00b\n"), "de.txt: holds NUL bytes"),
])
def test_a_malformed_or_empty_file_is_a_clear_error(tmp_path, damage, problem):
    folder = write_files_layout(tmp_path / "cv")
    damage(folder)
    with pytest.raises(TinyglotError, match=problem) as err:
        cv.read_commonvoice(folder)
    assert err.value.fix


def test_a_missing_or_empty_folder_is_a_clear_error(tmp_path):
    with pytest.raises(TinyglotError, match="no such folder"):
        cv.read_commonvoice(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "README.md").write_text("hi", encoding="utf-8")
    with pytest.raises(TinyglotError, match="no Common Voice sentence files") as err:
        cv.read_commonvoice(tmp_path / "empty")
    assert "server/data/LOCALE/*.txt" in err.value.fix


# ------------------------------------------------------------------------------- in the general build


def many_sentences(lang: str, n: int) -> list[str]:
    words = {"de": ("Der", "Hund", "läuft", "heute", "nach", "Hause"), "sv-SE": ("Den", "katten", "sover", "nu")}[lang]
    return [f"{' '.join(words)} {i} Mal." if lang == "de" else f"{' '.join(words)} {i} gånger." for i in range(n)]


def test_the_build_adds_rows_a_check_and_their_record(tmp_path, cache, monkeypatch):  # noqa: F811
    monkeypatch.setattr(cv, "CHECK_MIN", 30)
    monkeypatch.setattr(cv, "CHECK_SENTENCES", 10)
    monkeypatch.setattr(cv, "FIT_SENTENCES", 5)
    held = "Der Hund läuft heute nach Hause 7 Mal."
    folder = write_files_layout(tmp_path / "cv", {"de": [*many_sentences("de", 40), "Sie lachte laut."],
                                                  "sv-SE": many_sentences("sv-SE", 12), "vot": ["Mennä kotto."]})
    holdout = tmp_path / "holdout" / "de.tsv"
    holdout.parent.mkdir()
    holdout.write_text(f"The dog goes home 7 times.\t{held}\n", encoding="utf-8")
    out = tmp_path / "out"
    record = run(out, cache, commonvoice=folder, commonvoice_max_per_lang=20, holdout=[holdout.parent])
    rows = [r for r in train_rows(out) if r["src"] == "commonvoice"]
    assert all(r["en"] == r["x"] and r["license"] == "CC0-1.0" for r in rows)
    by_lang = {lang: [r["x"] for r in rows if r["lang"] == lang] for lang in ("de", "sv")}
    check = (out / "commonvoice-test" / "de.txt").read_text(encoding="utf-8").splitlines()
    fit = (out / "commonvoice-test" / "fit" / "de.txt").read_text(encoding="utf-8").splitlines()
    assert len(check) == 10 and len(fit) == 5 and len(by_lang["de"]) == 20  # 40 kept - 15 held out, capped at 20
    assert not set(check) & set(fit) and not (set(check) | set(fit)) & set(by_lang["de"])
    assert held not in check + fit + by_lang["de"]  # a sentence of a held-out test never trains nor checks
    assert len(by_lang["sv"]) == 12 and not (out / "commonvoice-test" / "sv.txt").exists()  # too few to check
    entry = next(s for s in record["sources"] if s["name"] == "commonvoice")  # type: ignore[attr-defined]
    assert entry["license"] == "CC0-1.0" and entry["tier"] == "permissive" and entry["permissive"]
    assert entry["unmapped_locales"] == {"vot": 1} and entry["locales"] == {"de": "de", "sv-SE": "sv"}
    assert entry["per_language"]["de"] == {"read": 41, "kept": 40, "train": 20, "check": 10, "fit": 5}
    assert entry["rows_per_language"] == {"de": 20, "sv": 12}
    assert json.loads((out / "SOURCES.json").read_text())["command"]["commonvoice"] == str(folder)
    # a permissive build keeps it (CC0); a build without it removes the check it wrote before
    run(out, cache, commonvoice=folder, tier="permissive", commonvoice_max_per_lang=20)
    assert any(r["src"] == "commonvoice" for r in train_rows(out))
    run(out, cache)
    assert not (out / "commonvoice-test").exists()
    assert not any(r["src"] == "commonvoice" for r in train_rows(out))


def test_a_bad_commonvoice_folder_fails_before_any_download(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TINYGLOT_HOME", str(tmp_path / "home"))
    folder = write_files_layout(tmp_path / "cv")
    (folder / "de.txt").write_text("", encoding="utf-8")
    assert main(["data", "general", "--out", str(tmp_path / "o"), "--commonvoice", str(folder)]) == 2
    printed = " ".join(capsys.readouterr().err.split())
    assert "de.txt: holds no sentence" in printed and "fix:" in printed and "Traceback" not in printed
    assert not (tmp_path / "o").exists() and not (tmp_path / "home").exists()


# ----------------------------------------------------------------------------------------- the check


class Linear:
    """An encoder whose embeddings are a fixed linear image of a base space (plus noise)."""

    def __init__(self, base: dict[str, np.ndarray], matrix: np.ndarray, noise: float = 0.0, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.rows = {s: v @ matrix + noise * rng.standard_normal(matrix.shape[1]) for s, v in base.items()}
        self.name = "linear"

    def encode(self, sentences, batch_size=64):
        return np.stack([self.rows[s] for s in sentences]).astype(np.float32)


def _check(langs=("de", "fr"), n=40, fit=60) -> MonoCheck:
    return MonoCheck({lang: [f"{lang} check {i}" for i in range(n)] for lang in langs},
                     {lang: [f"{lang} fit {i}" for i in range(fit)] for lang in langs})


def test_a_linear_image_of_the_teacher_scores_100_and_noise_lowers_it():
    check = _check()
    rng = np.random.default_rng(1)
    base = {s: rng.standard_normal(16) for s in check.sentences()}
    teacher = Linear(base, np.eye(16))
    rows = teacher_embeddings(teacher, check)
    image = Linear(base, rng.standard_normal((16, 3)) @ rng.standard_normal((3, 24)))  # rank 3 of 16
    full_rank = Linear(base, rng.standard_normal((16, 24)))
    assert evaluate_teacher_retrieval(full_rank, check, rows).primary_metric == 1.0
    squeezed = evaluate_teacher_retrieval(image, check, rows).primary_metric
    noisy = evaluate_teacher_retrieval(Linear(base, np.eye(16), noise=1.0), check, rows).primary_metric
    unrelated = evaluate_teacher_retrieval(Linear({s: rng.standard_normal(16) for s in base}, np.eye(16)),
                                           check, rows).primary_metric
    assert unrelated < 0.15 < noisy < 1.0 and squeezed < 1.0
    result = evaluate_teacher_retrieval(KnownRows(check, rows), check, rows, model_name="teacher")
    assert result.primary_metric == 1.0 and [r.lang for r in result.rows] == ["de", "fr"]
    assert result.rows[0].n == 40


def test_a_map_with_fewer_fit_sentences_than_dimensions_is_refused_by_name():
    check = _check(n=10, fit=8)  # 16 fit sentences for 16-d rows and a bias: 17 unknowns
    rng = np.random.default_rng(1)
    rows = teacher_embeddings(Linear({s: rng.standard_normal(16) for s in check.sentences()}, np.eye(16)), check)
    with pytest.raises(TinyglotError, match="16 fit sentences in all, too few .* 16-d") as err:
        evaluate_teacher_retrieval(KnownRows(check, rows), check, rows, testset_name="cv")
    assert "more than 16 sentences" in err.value.fix


def test_the_map_is_least_squares_with_a_bias():
    rng = np.random.default_rng(0)
    src = rng.standard_normal((200, 5))
    w, b = rng.standard_normal((5, 3)), rng.standard_normal(3)
    got = fit_linear_map(src, src @ w + b, ridge=0.0)
    assert np.allclose(got[:-1], w) and np.allclose(got[-1], b)


def test_check_folders_are_read_and_bad_ones_named(tmp_path):
    folder = tmp_path / "commonvoice-test"
    (folder / "fit").mkdir(parents=True)
    (folder / "de.txt").write_text("a\nb\nc\n", encoding="utf-8")
    (folder / "fit" / "de.txt").write_text("d\n", encoding="utf-8")
    assert is_mono_check(folder) and not is_mono_check(tmp_path)
    assert read_mono_check(folder, max_per_lang=2) == MonoCheck({"de": ["a", "b"]}, {"de": ["d"]})
    (folder / "fr.txt").write_text("x\n", encoding="utf-8")
    with pytest.raises(TinyglotError, match="fr has no fit file"):
        read_mono_check(folder)
    (folder / "fit" / "fr.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(TinyglotError, match="fr has an empty file"):
        read_mono_check(folder)
    with pytest.raises(TinyglotError, match="is not a monolingual check"):
        read_mono_check(tmp_path)


# ------------------------------------------------------------------------------------------ the tiers


def test_licence_tiers_take_the_better_of_or_and_the_stricter_of_and():
    assert licence_tier("CC0-1.0") == licence_tier("MIT") == licence_tier("Unicode-DFS-2016") == "permissive"
    assert licence_tier("CC-BY-SA-3.0") == licence_tier("CC-BY-SA-3.0+") == "share-alike"
    assert licence_tier("GPL-2.0+ OR CC-BY-SA-3.0") == "share-alike"  # supertux, under its CC-BY-SA option
    assert licence_tier("GPL-2.0+ OR MIT") == "permissive"
    assert licence_tier("GPL-3.0+ AND AGPL-3.0") == licence_tier("GPL-2.0+") == licence_tier("") == "copyleft"
    assert licence_tier("MIT AND CC-BY-SA-4.0") == "share-alike"
    assert tier_allows("share-alike", "CC-BY-SA-4.0") and tier_allows("share-alike", "CC0-1.0")
    assert not tier_allows("permissive", "CC-BY-SA-4.0") and not tier_allows("share-alike", "GPL-3.0+")
    assert tier_allows("", "GPL-3.0+")  # no tier: a model you keep learns from anything
