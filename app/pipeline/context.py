"""What the stages of ``tinyglot run`` share: the settings, the run folder, the data (loaded once) and
the markers of the stages done so far."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinyglot.errors import TinyglotError
from tinyglot.stagecache import Marker, StageStore, hash_json

from .settings import PipelineConfig

Say = Callable[[str], None]


@dataclass
class StageOutput:
    files: list[Path]
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunContext:
    """What the stages share: settings, the run folder, markers of the stages done so far."""

    cfg: PipelineConfig
    out: Path
    say: Say
    progress: bool
    store: StageStore
    markers: dict[str, Marker] = field(default_factory=dict)
    ran: dict[str, bool] = field(default_factory=dict)  # True: ran in this invocation; False: reused
    resume: bool = False  # set per stage: an interrupted attempt with the same inputs may be resumed
    _pairs: list | None = None
    _testset: dict | None = None
    _extra: list | None = None

    # -------------------------------------------------------------- data
    def train_pairs(self) -> list:
        if self._pairs is None:
            from tinyglot.data.embedded import load_pairs

            from .settings import general_path

            d = self.cfg.data
            pairs = load_pairs(d.train or None)
            if d.tier:
                pairs = in_tier(pairs, d.tier, d.train or "the embedded corpus")
            general = general_pairs(str(general_path(d.general)), d.general_max_per_lang, d.tier) \
                if d.general else []
            if d.languages or d.min_pairs_per_lang:
                from tinyglot.batching import PIVOT
                from tinyglot.data import select_languages
                from tinyglot.languages import language_list

                wanted = language_list(d.languages)
                general = select_languages(general, wanted)[0]  # the wanted languages' rows, filtered in one place
                # a language's general-domain rows count towards min_pairs_per_lang: e5 covers af and gd,
                # whose software strings alone are too few but whose general-domain text makes up the rest
                extra = Counter(p.lang for p in general if p.lang != PIVOT) if d.general_rows_count else Counter()
                self._pairs, dropped = select_languages(pairs, wanted, d.min_pairs_per_lang,
                                                        d.max_pairs_per_lang or None, extra_counts=extra)
                keep = ({p.lang for p in self._pairs} | set(extra)) - set(dropped)
            else:
                self._pairs = cap_per_lang(pairs, d.max_pairs_per_lang)
                keep = {p.lang for p in self._pairs}
            self._pairs = self._pairs + [p for p in general if p.lang in keep]
        return self._pairs

    def train_sources(self) -> list[dict[str, Any]]:
        """Rows and languages per source and licence of the training pairs (the student's data
        attributions: ``tinyglot release`` reads them from the distill summary)."""
        from tinyglot.data.pairs import source_counts

        return source_counts((p.src, p.license, p.lang) for p in self.train_pairs())

    def testset(self) -> dict:
        if self._testset is None:
            from tinyglot.data.embedded import load_testset

            testset = load_testset(self.cfg.data.test or None)
            n = self.cfg.data.test_pairs_per_lang
            self._testset = {lang: pairs[:n] if n else pairs for lang, pairs in testset.items()}
        return self._testset

    def extra_testsets(self) -> list[tuple[str, Any]]:
        """``data.tests`` read: ``(name, {lang: pairs})`` for a bitext test, capped like the main test set, or
        ``(name, MonoCheck)`` for a monolingual check (:mod:`tinyglot.evaluation.teacher_check`: all of its
        sentences, whatever ``data.test_pairs_per_lang``, since it scores retrieval among them)."""
        if self._extra is None:
            from tinyglot.data.embedded import load_testset
            from tinyglot.evaluation.teacher_check import is_mono_check, read_mono_check

            n = self.cfg.data.test_pairs_per_lang
            self._extra = [(name, read_mono_check(path) if is_mono_check(path) else
                            {lang: ps[:n] if n else ps for lang, ps in load_testset(path).items()})
                           for name, path in self.cfg.data.extra_tests()]
        return self._extra

    def testset_name(self) -> str:
        name = self.cfg.data.test or "embedded test set"
        n = self.cfg.data.test_pairs_per_lang
        return f"{name} (first {n} pairs per language)" if n else name

    # -------------------------------------------------------------- run folder
    @property
    def student_dir(self) -> Path:
        return self.out / "distill" / "student"

    def bundle_dir(self, name: str) -> Path:
        return self.out / "bundles" / name

    def teacher_info(self) -> dict[str, Any]:
        return json.loads((self.out / "teacher.json").read_text(encoding="utf-8"))

    def teacher_spec(self) -> str:
        spec = self.teacher_info()["spec"]
        return str(self.out / spec) if not Path(spec).is_absolute() and (self.out / spec).exists() else spec

    def output_hash(self, stage: str, prefix: str = "") -> str:
        """Hash of the files ``stage`` wrote under ``prefix`` (all of them by default)."""
        outputs = self.markers[stage].outputs
        return hash_json({k: v for k, v in outputs.items() if k.startswith(prefix)})


def cap_per_lang(pairs: list, n: int) -> list:
    """The first ``n`` pairs of each language, in corpus order (``n`` = 0: all)."""
    if not n:
        return pairs
    seen: dict[str, int] = {}
    out = []
    for p in pairs:
        if seen.get(p.lang, 0) < n:
            seen[p.lang] = seen.get(p.lang, 0) + 1
            out.append(p)
    return out


def in_tier(pairs: list, tier: str, name: str) -> list:
    """The rows of ``pairs`` whose licence ``tier`` allows; a clear error when none is."""
    from tinyglot.data.pairs import PERMISSIVE, tier_allows

    kept = [p for p in pairs if tier_allows(tier, p.license)]
    if not kept:
        raise TinyglotError(f"data.tier={tier}: no row of {name} has a licence that tier allows",
                            f"rows need a `license` field such as {', '.join(PERMISSIVE[:5])}, or leave data.tier "
                            "empty")
    return kept


def general_pairs(path: str, cap: int, tier: str = "") -> list:
    """The rows of the general-domain corpus ``path``, at most ``cap`` per language drawn at random
    (seeded; 0 = all); only those ``tier`` allows when it is set.  Their ``src`` carries
    :data:`~tinyglot.data.pairs.GENERAL_SRC_PREFIX` (``train.general_share``)."""
    from dataclasses import replace

    from tinyglot.data import select_languages
    from tinyglot.data.embedded import load_pairs
    from tinyglot.data.pairs import GENERAL_SRC_PREFIX

    pairs = load_pairs(path)
    kept = select_languages(in_tier(pairs, tier, path) if tier else pairs, None, 0, cap or None)[0]
    return [p if p.general else replace(p, src=GENERAL_SRC_PREFIX + p.src) for p in kept]


def corpus_path(path: str, test: bool = False) -> Path:
    """A data setting as a path; empty = the embedded corpus (or test set)."""
    from tinyglot.data.embedded import default_corpus_path, default_testset_path

    if path:
        return Path(path)
    return default_testset_path() if test else default_corpus_path()


def data_fingerprint(root: Path) -> dict[str, Any]:
    """sha256 of a corpus's files by content, each file hashed once per version (device, inode, size,
    mtime, ctime): a corpus replaced in place with the same size and mtime is not silently reused."""
    from tinyglot.integrity import content_fingerprint

    return content_fingerprint(root)
