#!/usr/bin/env bash
# Rebuilds a released student from a fresh clone, as it was made: the permissive general-domain text, the e5
# profile's training run, the release into tinyglot/released/NAME (replacing the shipped one; commit it to ship it).
#   release/make.sh tinyglot-small   # 2 x 256 (512-wide feed-forward), 56k pieces, Common Voice's sentences, both bundles, <= 25 MB
#   release/make.sh tinyglot-mini    # 2 x 128, 36k pieces, Common Voice's sentences, both bundles, <= 10 MB
#   release/make.sh tinyglot-base    # 2 x 256 (512-wide feed-forward), 160k pieces, Common Voice's sentences, onnx-text, <= 33 MB
#   release/make.sh tinyglot-base-sa # 2 x 256 (1,024-wide), 160k pieces, share-alike tier (CC-BY-SA game text, word lists), CC-BY-SA-4.0
# Needs ../shared/data (the shared corpus, its tests and commonvoice/) and, for the first `tinyglot data
# general`, the network to Debian and PyPI. Each run prints its expected times once it has timed itself.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: release/make.sh tinyglot-small|tinyglot-mini|tinyglot-base|tinyglot-base-sa}
shared=../shared/data
home=${TINYGLOT_HOME:-$HOME/.cache/tinyglot}
# the permissive tier (the default names, Apache-2.0 weights) trains without word lists: wordfreq's are CC-BY-SA
tier=permissive
case $name in
    # 56k pieces: the most that keep both bundles, their token tables in 4-bit blocks, within 25 MB; a 512-wide
    # feed-forward block, 1.4x faster on AVX2 kernels for 1.4 points of narrative P@1 (docs/results.md#shapes-avx2)
    tinyglot-small) student=(--set distill.vocab_size=56000 --set distill.overrides.student.ffn_size=512
                    --set distill.overrides.train.vocab_words=)
                    formats=onnx-text,tflite-mediapipe; max_mb=25 ;;
    # 2 x 128 on the same text; 36k pieces within 10 MB with both bundles; 16,000 steps, as 2 x 128 steps cost a
    # third of 2 x 256's; the characters of its vocabulary's sample only (the corpus's rare characters cost a
    # 2 x 128 student 1.2-1.6 points at 20k pieces, docs/results.md#released)
    tinyglot-mini) student=(--set distill.student=fast-mini --set distill.vocab_size=36000
                   --set distill.max_steps=16000 --set distill.overrides.train.vocab_char_share=0
                   --set distill.overrides.train.vocab_words=)
                   formats=onnx-text,tflite-mediapipe; max_mb=10 ;;
    # tinyglot-small's shape (its compute per sentence) with 160k pieces: the most that keep onnx-text within USE-m's 33 MB
    # (a MediaPipe file of this table would take as much again)
    tinyglot-base) student=(--set distill.vocab_size=160000 --set distill.overrides.student.ffn_size=512
                   --set distill.overrides.train.vocab_words=)
                   formats=onnx-text; max_mb=33 ;;
    # tinyglot-base's pieces on the share-alike tier: its text plus CC-BY-SA game text (cataclysm-dda, flare, supertux)
    # and, in the vocabulary's sample, the build's word lists (vocab_words=auto: GENERAL/words); narrative P@1
    # 62.2 -> 73.7 (docs/results.md#released); the weights under CC-BY-SA-4.0. fast-small's 1,024-wide feed-forward
    # block: narrative 73.7 -> 75.0 for 0.72-0.87x the speed, 1.9x USE-m or more on AVX2 kernels (results.md#ablations)
    tinyglot-base-sa) student=(--set distill.vocab_size=160000 --set distill.overrides.student.ffn_size=1024)
                      formats=onnx-text; max_mb=33; tier=share-alike ;;
    *) echo "release/make.sh: no recipe for $name (tinyglot-small, tinyglot-mini, tinyglot-base, tinyglot-base-sa)" >&2
       exit 2 ;;
esac
general=$home/general-${tier//-/}-commonvoice
# the training text: the tier's sources (mimesis left out: its sentences look copied, data/README.md) and all of
# Common Voice's sentences (CC0) but its held-out check; the held-out tests beside it (the same in both tiers)
[ -f "$general/SOURCES.json" ] || tinyglot data general --out "$general" --tier "$tier" --skip mimesis \
    --holdout "$shared/test" --commonvoice "$shared/commonvoice" --commonvoice-max-per-lang 0
out=runs/rel-${name#tinyglot-}
# the e5 profile on the tier's text
tinyglot run --profile e5 --out "$out" "${student[@]}" \
    --set data.train="$shared/train.jsonl.gz" --set data.tier="$tier" \
    --set data.general="$general/general-train.jsonl.gz" \
    --set data.test="$shared/test/libreoffice" --set data.test_pairs_per_lang=300 \
    --set data.tests=pretix="$shared/test/pretix",general="$general/general-test",docs="$general/docs-test",commonvoice="$general/commonvoice-test" \
    --set export.formats=onnx-dynamic,onnx-text-dynamic-int4-embeddings   # the run evaluates the bundle the release ships
tinyglot release --model "$out/distill/student" --name "$name" --card-data "release/$name.json" --formats "$formats" \
    --quantize dynamic-int4-embeddings --tier "$tier" --max-mb "$max_mb"
