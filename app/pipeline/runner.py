"""Running ``tinyglot run``'s stages in order, reusing each one whose marker is still valid."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tinyglot.io import atomic_write_text
from tinyglot.config import tinyglot_home
from tinyglot.stagecache import STAGE_CACHE, HomeStageCache, Marker, StageStore, hash_json

from .context import RunContext, Say
from .display import RunDisplay, progress_enabled
from .settings import PipelineConfig, to_toml
from .stages import STAGES, StageSpec, stage_inputs

DEFAULT_OUT = Path("runs/pipeline")
# stages whose results are kept in $TINYGLOT_HOME/stage-cache and reused by a run in another folder with the
# same inputs and code, by the folder each one writes (a student trained once is not trained again)
HOME_CACHED = {"distill": "distill"}


@dataclass
class RunSummary:
    out: Path
    seconds: float
    ran: dict[str, bool]
    markers: dict[str, Marker]

    @property
    def report(self) -> Path:
        return self.out / "report.md"


def run_pipeline(cfg: PipelineConfig, out: str | Path = DEFAULT_OUT, progress: bool = True,
                 say: Say | None = None) -> RunSummary:
    """Run every stage in order, reusing the ones whose markers are valid."""
    started = time.time()
    cfg.data.require_built()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.toml", to_toml(cfg))
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    enabled = progress_enabled(progress)
    with RunDisplay(len(STAGES), enabled) as display:
        ctx = RunContext(cfg, out, say or display.say, enabled, StageStore(out))
        for name, path, _ in cfg.data.left_out():
            ctx.say(f"data.tests: {name}=auto left out: the general-domain text was built without it (no {path}; "
                    "tinyglot data general --commonvoice DIR writes it)")
        for index, spec in enumerate(STAGES, 1):
            display.stage(index, spec.name)
            run_stage(ctx, spec, index)
            display.done(index)
    return RunSummary(out, time.time() - started, dict(ctx.ran), dict(ctx.markers))


def peak_rss_mb() -> float | None:
    """Peak resident memory of this process so far, in MB (the benchmark runner's measure; child
    processes are left out: the benchmark reports its own)."""
    from tinyglot.devices.runner import peak_rss_bytes

    peak = peak_rss_bytes()
    return None if peak is None else round(peak / 2**20, 1)


def cpu_seconds() -> float:
    """User and system CPU time of this process and of its finished children (the bench's processes)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_stage(ctx: RunContext, spec: StageSpec, index: int) -> Marker:
    label = f"stage {index}/{len(STAGES)} {spec.name}"
    inputs = stage_inputs(spec, ctx)
    input_hash = hash_json(inputs)
    marker, why = ctx.store.check(spec.name, input_hash)
    if marker is not None:
        ctx.say(f"{label}: reused (done {marker.finished} in {marker.seconds:.1f} s; inputs and outputs unchanged)")
        ctx.ran[spec.name] = False
    elif (marker := restore_from_home(ctx, spec, input_hash, inputs)) is not None:
        ctx.say(f"{label}: reused from {marker.info['from_cache']} (made by an earlier run with the same "
                f"settings, data, upstream stages and code)")
        ctx.ran[spec.name] = False
    else:
        ctx.say(f"{label}: running ({why})")
        ctx.resume = ctx.store.start(spec.name, input_hash)
        t0, cpu0 = time.time(), cpu_seconds()
        output = spec.run(ctx)
        info = {**output.info, "peak_rss_mb": peak_rss_mb(), "cpu_seconds": round(cpu_seconds() - cpu0, 1)}
        marker = ctx.store.finish(spec.name, input_hash, output.files, time.time() - t0, inputs, info)
        ctx.ran[spec.name] = True
        ctx.say(f"{label}: done in {marker.seconds:.1f} s")
        if spec.name in HOME_CACHED:
            cache = home_cache()
            try:
                cache.store(spec.name, input_hash, marker, ctx.out)
            except OSError as exc:  # a full or read-only home: the run's own result stands
                ctx.say(f"{label}: not kept in {cache.root} ({exc}); a run in another folder trains it again")
    ctx.markers[spec.name] = marker
    return marker


def home_cache() -> HomeStageCache:
    return HomeStageCache(tinyglot_home() / STAGE_CACHE)


def restore_from_home(ctx: RunContext, spec: StageSpec, input_hash: str, inputs: dict) -> Marker | None:
    """The stage's marker after its outputs were copied from the home's stage cache into the run folder
    (its old folder there replaced); None when the cache has no intact entry for these inputs."""
    if spec.name not in HOME_CACHED:
        return None
    cache = home_cache()
    if cache.entry(spec.name, input_hash) is None:
        return None
    t0 = time.time()
    ctx.store.start(spec.name, input_hash)
    shutil.rmtree(ctx.out / HOME_CACHED[spec.name], ignore_errors=True)
    files = cache.restore(spec.name, input_hash, ctx.out)
    if files is None:
        return None
    info = {"from_cache": str(cache.folder(spec.name, input_hash))}
    return ctx.store.finish(spec.name, input_hash, files, time.time() - t0, inputs, info)
