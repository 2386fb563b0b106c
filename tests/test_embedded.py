"""The embedded corpus and test set: licences, disjointness, and reproducible rebuilds."""

from __future__ import annotations

import hashlib

import pytest

from tinyglot.data.embedded import (EMBEDDED_LANGS, PERMISSIVE, build_embedded, default_corpus_path,
                                    default_testset_path, load_pairs, load_testset)

from .conftest import SHARED_DATA


def _norm(s):
    import re

    return re.sub(r"[\W_]+", " ", s.casefold()).strip()


def test_embedded_corpus_is_permissive_and_disjoint_from_test():
    pairs = load_pairs(None)
    test = load_testset(None)
    assert sorted(test) == sorted(EMBEDDED_LANGS)
    assert {p.lang for p in pairs} == set(EMBEDDED_LANGS)
    assert all(p.license in PERMISSIVE for p in pairs)
    assert not {_norm(p.en) for p in pairs} & {_norm(p.en) for ps in test.values() for p in ps}
    assert all(len(ps) == 500 for ps in test.values())


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "train.jsonl.gz").exists(), reason="shared data folder not present")
def test_embedded_files_rebuild_bit_for_bit(tmp_path):
    hashes = build_embedded(SHARED_DATA, tmp_path)
    assert hashes["train.jsonl.gz"] == hashlib.sha256(default_corpus_path().read_bytes()).hexdigest()
    assert hashes["test.tsv.gz"] == hashlib.sha256(default_testset_path().read_bytes()).hexdigest()
