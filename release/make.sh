#!/usr/bin/env bash
# Rebuilds a released student from a fresh clone, as it was made: the general-domain text, the training
# run, the release into tinyglot/released/NAME (replacing the shipped one; commit it to ship it).
#   release/make.sh tinyglot-small        # 2 x 256, 40k vocabulary, 8,000 steps, onnx-text only, 4-bit
#                                         # token table (33-46 min on 2 cores)
#   release/make.sh tinyglot-mini         # 2 x 128, 26k vocabulary, 16,000 steps, both bundles, 4-bit ONNX
#                                         # token table (about 28 min)
# Needs ../shared/data (the shared corpus and tests) and the network to Debian and PyPI for the first
# `tinyglot data general`; the e5 pass over the sentences adds about 10 min to the first run.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: release/make.sh tinyglot-small|tinyglot-mini}
case $name in
    # 8,000 steps: +1.6 on pretix, +1.4 on docs, +0.9 on narrative text against 4,000 (docs/results.md); 16,000
    # steps without CLDR's names (the mini's text): +0.4 on docs, +1.1 on pretix, -2.1 on narrative text (not taken)
    tinyglot-small) out=runs/rel-small; student=(--set distill.vocab_size=40000 --set distill.max_steps=8000); formats=onnx-text
                    quantize=dynamic-int4-embeddings; text=general-permissive; skip=(--skip mimesis) ;;
    # without CLDR's names: with them this student lost 1.0 on pretix and 0.9 on docs (docs/results.md);
    # and without the corpus's rare characters (vocab_char_share=0): at 20k pieces they cost it 1.3 on pretix,
    # 1.2 on docs and 1.6 on general (docs/results.md)
    # 16,000 steps: +4.2 on pretix, +3.3 on docs, +2.2 on narrative text against 4,000; 26k pieces, the ONNX token
    # table in 4-bit blocks (the MediaPipe file's stays int8): +0.5 on pretix, +1.2 on docs against 20k in int8,
    # within 10 MB with both bundles (docs/results.md)
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
# the training text: permissive sources only (mimesis left out: its sentences look copied, data/README.md)
[ -f "$general/SOURCES.json" ] || tinyglot data general --out "$general" --permissive-only "${skip[@]}" \
    --holdout ../shared/data/test
# dropout 0.1 and a vocabulary from 200,000 sentences drawn uniformly: the released students were made so
# (the e5 profile trains without dropout and samples 400,000 sentences, 40 % general, since 2026-11-29, and
# 600,000 for its 288k pieces: docs/results.md "No dropout in the e5 profile's student", "192k pieces, sampled
# like the batches", "288k pieces in a 4-bit table"); no word lists in the sample (the profile's are
# CC-BY-SA-4.0, and --permissive-only builds none: "Word lists in the vocabulary's sample"); the languages
# chosen by their software strings alone (data.general_counts: since 2026-11-29 the profile counts a
# language's general-domain rows too, "Languages kept by their general-domain text"); feature distillation
# at the fast presets' beta 10 (the profile's is 50 since 2026-11-30: "The teacher's weight in the loss");
# fp32 steps (the profile times bf16 against fp32 since 2026-11-30 and may take bf16: "bf16 on the CPU")
tinyglot run --profile e5 --out "$out" "${student[@]}" \
    --set data.train=../shared/data/train.jsonl.gz --set data.permissive_only=true \
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
    --quantize "$quantize"
