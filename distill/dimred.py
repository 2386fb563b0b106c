"""The dimension-reduction reference of LEALLA section 3.2: a dense layer d_teacher -> d trained
with the AMS loss on top of a frozen teacher.  Cheap (it trains on cached teacher embeddings) and
the baseline a thin-deep student must beat at the same dimension."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tinyglot.data import Pair
from tinyglot.errors import TinyglotError
from tinyglot.io import atomic_write_json
from tinyglot.models import read_model_config
from tinyglot.training import Progress, save_checkpoint, load_checkpoint, seed_everything

from .cache import teacher_embeddings
from .losses import ams_loss

KIND = "dimred"
LOADER = "tinyglot.distill.dimred:load_dimred"


class DimRedEncoder:
    """``normalize(W . teacher(x) + b)``: the teacher's embedding projected to ``dim``."""

    def __init__(self, teacher, dense: torch.nn.Linear, name: str = "dimred") -> None:
        self.teacher, self.dense, self.name = teacher, dense.eval(), name

    def encode(self, sentences, batch_size: int = 64) -> np.ndarray:
        t = np.asarray(self.teacher.encode(sentences, batch_size=batch_size), dtype=np.float32)
        with torch.inference_mode():
            out = torch.nn.functional.normalize(self.dense(torch.from_numpy(t)), dim=-1)
        return out.numpy().astype(np.float32)


def train_dimred(teacher, teacher_spec: str, pairs: list[Pair], out: str | Path, dim: int,
                 cache_dir: str | Path, steps: int = 2000, batch_size: int = 256, lr: float = 1e-3,
                 margin: float = 0.3, scale: float = 20.0, seed: int = 0, progress: bool = True) -> Path:
    """Fit the dense layer on (x, en) teacher embeddings of ``pairs``; write a loadable folder."""
    out = Path(out)
    index: dict[str, int] = {}
    xr = np.array([index.setdefault(p.x, len(index)) for p in pairs])
    er = np.array([index.setdefault(p.en, len(index)) for p in pairs])
    emb = teacher_embeddings(teacher, list(index), cache_dir, identity=teacher.identity(), progress=progress)
    d_t = emb.shape[1]
    if dim >= d_t:
        raise TinyglotError(f"--dim {dim} is not smaller than the teacher's dimension {d_t}",
                            "dimension reduction needs a smaller target dimension")
    seed_everything(seed)
    dense = torch.nn.Linear(d_t, dim)
    opt = torch.optim.AdamW(dense.parameters(), lr=lr)
    rng = np.random.default_rng(seed)
    bar = Progress(steps, f"dimred {d_t}->{dim}", progress)
    with bar.run():
        for step in range(steps):
            rows = rng.choice(len(pairs), size=min(batch_size, len(pairs)), replace=False)
            x = torch.from_numpy(np.asarray(emb[xr[rows]], dtype=np.float32))
            y = torch.from_numpy(np.asarray(emb[er[rows]], dtype=np.float32))
            loss = ams_loss(dense(x), dense(y), margin, scale)
            opt.zero_grad()
            loss.backward()
            opt.step()
            bar.update(step + 1, f"ams {loss.item():.3f}")
    save_checkpoint(out / "dense.pt", {"meta": {"kind": KIND, "dim": dim, "teacher_dim": d_t},
                                       "model": dense.state_dict()})
    atomic_write_json(out / "config.json", {"loader": LOADER, "kind": KIND, "teacher": teacher_spec,
                                            "teacher_identity": teacher.identity(), "dim": dim,
                                            "teacher_dim": d_t, "steps": steps, "normalize": True})
    return out


def load_dimred(path: str | Path, device: str = "cpu", teacher: str | None = None) -> DimRedEncoder:
    """The dimension-reduction encoder of ``path`` over the teacher its config names (``teacher``:
    the spec to use instead, e.g. a ``python:`` teacher, which a folder may not name itself)."""
    from tinyglot.encoders import load_teacher as load_teacher_encoder

    path = Path(path)
    cfg = read_model_config(path)
    spec = teacher if teacher is not None else cfg.get("teacher")
    if not isinstance(spec, str) or not spec.strip():
        raise TinyglotError(f"{path}/config.json names no teacher", "retrain it (tinyglot distill --recipe dimred)")
    if teacher is None and spec.strip().lower().startswith("python:"):
        raise TinyglotError(
            f"{path}/config.json names the teacher {spec!r}, python code to import and call; a model folder "
            "may not choose code to run, so it was not loaded",
            f"if you trust that code, pass it yourself: load_dimred({str(path)!r}, teacher={spec!r})")
    teacher_enc = load_teacher_encoder(spec, device=device)
    if teacher_enc.identity() != cfg["teacher_identity"]:
        raise TinyglotError(f"the teacher at {spec} changed since {path} was trained",
                            "retrain the dimension-reduction layer (tinyglot distill --recipe dimred)")
    ck = load_checkpoint(path / "dense.pt", expect={"kind": KIND, "dim": cfg["dim"]})
    dense = torch.nn.Linear(cfg["teacher_dim"], cfg["dim"])
    dense.load_state_dict(ck["model"])
    return DimRedEncoder(teacher_enc, dense, name=f"dimred-{cfg['dim']}")
