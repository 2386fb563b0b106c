#!/usr/bin/env bash
# Rebuilds a released student from a fresh clone, as it was made: the general-domain text, the training
# run, the release into tinyglot/released/NAME (replacing the shipped one; commit it to ship it).
#   release/make.sh tinyglot-small   # 2 x 256, 40k pieces, 8,000 steps, onnx-text, 4-bit token table
#   release/make.sh tinyglot-mini    # 2 x 128, 26k pieces, 16,000 steps, both bundles, 4-bit ONNX token table
# Needs ../shared/data (the shared corpus and tests) and, for the first `tinyglot data general`, the network
# to Debian and PyPI. Each run prints its expected times once it has timed itself.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: release/make.sh tinyglot-small|tinyglot-mini}
case $name in
    # 8,000 steps (docs/results.md#steps)
    tinyglot-small) out=runs/rel-small; student=(--set distill.vocab_size=40000 --set distill.max_steps=8000); formats=onnx-text
                    quantize=dynamic-int4-embeddings; text=general-permissive; skip=(--skip mimesis) ;;
    # 26k pieces, no CLDR names and no rare-character share: each measured worse for a 2 x 128 student
    # (docs/results.md#ablations); 16,000 steps, as 2 x 128 steps cost a third of 2 x 256's
    tinyglot-mini) out=runs/rel-mini; student=(--set distill.student=fast-mini --set distill.vocab_size=26000
                   --set distill.overrides.train.vocab_char_share=0 --set distill.max_steps=16000)
                   formats=onnx-text,tflite-mediapipe; quantize=dynamic-int4-embeddings; text=general-permissive-no-cldr
                   skip=(--skip mimesis --skip cldr-annotations) ;;
    *) echo "release/make.sh: no recipe for $name (tinyglot-small, tinyglot-mini)" >&2; exit 2 ;;
esac
home=${TINYGLOT_HOME:-$HOME/.cache/tinyglot}
general=$home/$text
# the held-out tests (general-test: Wesnoth narrative; docs-test: The Debian Administrator's Handbook)
[ -f "$home/general/SOURCES.json" ] || tinyglot data general --holdout ../shared/data/test
# the training text: the permissive tier's sources (mimesis left out: its sentences look copied, data/README.md)
[ -f "$general/SOURCES.json" ] || tinyglot data general --out "$general" --tier permissive "${skip[@]}" \
    --holdout ../shared/data/test
# the e5 profile with the settings these students were trained with: dropout 0.1, loss.beta 10, fp32 steps,
# a vocabulary from 200,000 sentences drawn uniformly and no word lists (wordfreq's are CC-BY-SA), the
# languages chosen by their software strings alone, 20 % general-domain draws
tinyglot run --profile e5 --out "$out" "${student[@]}" \
    --set data.train=../shared/data/train.jsonl.gz --set data.tier=permissive \
    --set data.general="$general/general-train.jsonl.gz" --set data.general_counts=false \
    --set data.test=../shared/data/test/libreoffice --set data.test_pairs_per_lang=300 \
    --set data.tests=pretix=../shared/data/test/pretix,general=auto,docs=auto \
    --set distill.overrides.train.general_share=0.2 \
    --set distill.overrides.student.dropout=0.1 --set distill.overrides.loss.beta=10 \
    --set distill.overrides.train.cpu_bf16=off \
    --set distill.overrides.train.vocab_sentences=200000 --set distill.overrides.train.vocab_general_share=0 \
    --set distill.overrides.train.vocab_words= \
    --set export.formats=onnx-dynamic,onnx-text-"$quantize"   # the run evaluates the bundle the release ships
tinyglot release --model "$out/distill/student" --name "$name" --card-data "release/$name.json" --formats "$formats" \
    --quantize "$quantize" --tier permissive
