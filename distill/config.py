"""LEALLA student shapes, loss weights and training settings, with the paper's presets."""

from __future__ import annotations

from dataclasses import dataclass, field

from tinyglot.config import named_preset, validate_positive
from tinyglot.trainloop import TrainSettings
from tinyglot.errors import TinyglotError


@dataclass
class StudentConfig:
    """A thin-deep BertModel student; its embedding dimension is ``hidden_size``."""

    hidden_size: int = 128
    num_layers: int = 24
    num_heads: int = 8
    ffn_size: int = 512
    max_len: int = 120
    dropout: float = 0.1
    vocab_size: int = 0  # set from the tokenizer
    # Input embeddings: "teacher-pca" projects the teacher's token/position embeddings onto their top
    # hidden_size principal directions (needs a tinyglot teacher with the student's vocabulary);
    # "random" is the paper's initialisation; "auto" takes teacher-pca when it applies, else random.
    init: str = "auto"

    INITS = ("auto", "teacher-pca", "random")

    def validate(self) -> None:
        validate_positive(self, ("hidden_size", "num_layers", "num_heads", "ffn_size", "max_len"), "student")
        if self.init not in self.INITS:
            raise TinyglotError(f"unknown student.init {self.init!r}", f"choose one of: {', '.join(self.INITS)}")
        if self.hidden_size % self.num_heads:
            raise TinyglotError(f"student hidden_size {self.hidden_size} is not divisible by num_heads "
                                f"{self.num_heads}", "pick a head count that divides the hidden size")


@dataclass
class LossConfig:
    """L = alpha * L_ams + beta * L_fd + gamma * L_ld (lealla.md eq. 5), each switchable."""

    ams: bool = True
    fd: bool = True
    ld: bool = True
    alpha: float = 1.0
    beta: float = 1e3
    gamma: float = 1e-2
    margin: float = 0.3  # additive margin of the AMS loss (LaBSE)
    scale: float = 20.0  # AMS logits are scale * cos (cosines alone give a too-flat softmax)
    ld_temperature: float = 100.0


@dataclass
class DistillTrainConfig(TrainSettings):
    """LEALLA settings; lr 5e-4 is lealla.md App. B's for hidden sizes <= 256."""

    teacher_batch_size: int = 64

    POSITIVE = (*TrainSettings.POSITIVE, "teacher_batch_size")


@dataclass
class DistillPreset:
    student: StudentConfig = field(default_factory=StudentConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: DistillTrainConfig = field(default_factory=DistillTrainConfig)


def _lealla(hidden: int, heads: int, ffn: int, beta: float) -> DistillPreset:
    # The step budget fits the embedded corpus on 2 CPU cores (~20 min for lealla-small); the paper
    # trains 100k-200k steps of 8,192 sentences: raise train.max_steps / batch_size on a GPU.
    return DistillPreset(StudentConfig(hidden_size=hidden, num_layers=24, num_heads=heads, ffn_size=ffn),
                         LossConfig(beta=beta),
                         DistillTrainConfig(max_steps=600, warmup_steps=60, eval_every=200, save_every=100))


def _tiny() -> DistillPreset:
    return DistillPreset(
        StudentConfig(hidden_size=32, num_layers=2, num_heads=2, ffn_size=64, max_len=48),
        LossConfig(),
        DistillTrainConfig(batch_size=16, warmup_steps=5, max_steps=40, eval_every=20, save_every=20,
                           dev_pairs_per_lang=50, lr=1e-3),
    )


# lealla.md Table 2 / App. B: 24 layers; small 128/8/512, base 192/12/768, large 256/8/1024;
# beta 1e3 for small and base, 1e4 for large; alpha 1, gamma 1e-2, T 100.
PRESETS = {
    "lealla-small": lambda: _lealla(128, 8, 512, 1e3),
    "lealla-base": lambda: _lealla(192, 12, 768, 1e3),
    "lealla-large": lambda: _lealla(256, 8, 1024, 1e4),
    "lealla-tiny": _tiny,
}


def get_preset(name: str, overrides: dict | None = None) -> DistillPreset:
    preset = named_preset(PRESETS, name, overrides, "student")
    preset.student.validate()
    preset.train.validate()
    return preset
