"""``tinyglot run``: the whole job in one command, teacher -> distill -> export -> eval -> bench -> report.

    tinyglot run                                   # embedded defaults, into runs/pipeline
    tinyglot run --profile tiny --out /tmp/p       # the small profile the tests use
    tinyglot run --config my.toml --set distill.max_steps=300 --set export.formats=onnx-avx512-vnni

Settings come from a named profile (``default``, ``tiny``), then a TOML file (same sections as
:class:`PipelineConfig`; a top-level ``profile = "tiny"`` picks the base), then ``--set``.

Every stage writes ``OUT/stages/<stage>.json`` when it is done (see :mod:`tinyglot.stagecache`): a
rerun skips a stage whose inputs (its settings and the outputs of the stages it reads) are unchanged
and whose output files still hash the same, and reruns it and everything downstream otherwise.
Training stages interrupted mid-way resume from their own ``last.pt``.

Layout of ``OUT``::

    config.toml            the effective settings of the last run
    teacher.json           the teacher used (spec, kind, dimension, parameters); teacher/ if trained here
    distill/               the distillation run (last.pt, metrics.jsonl, summary.json) and student/
    bundles/FMT-QUANT/     exported bundles (tinyglot.load opens each), with parity.json and README.md
    eval/results.json      P@1 per language of TF-IDF, teacher, student and every bundle
    bench/results.sqlite   latency / throughput measurements, and bench/report/ (tinyglot bench report)
    report.md, report.html the report; figures/*.png
    stages/*.json          stage markers

Modules: :mod:`.settings` (the sections, profiles, loading and TOML), :mod:`.context` (what the stages
share), :mod:`.stages` (one adapter per stage, in order), :mod:`.display` (progress), :mod:`.runner`
(running and reusing stages), :mod:`.report` and :mod:`.report_html` (the report); the command is
:mod:`tinyglot.app.commands.run`.
"""

from __future__ import annotations

from .context import RunContext, StageOutput
from .runner import DEFAULT_OUT, RunSummary, run_pipeline, run_stage
from .settings import PROFILES, PipelineConfig, apply_overrides, load_config, to_toml
from .stages import STAGE_NAMES, STAGES, StageSpec

__all__ = ["DEFAULT_OUT", "PROFILES", "STAGES", "STAGE_NAMES", "PipelineConfig", "RunContext", "RunSummary",
           "StageOutput", "StageSpec", "apply_overrides", "load_config", "run_pipeline", "run_stage", "to_toml"]
