"""Multi-stage distillation settings (Ding et al., "Multi-stage Distillation Framework for Cross-Lingual
Semantic Similarity Matching", section 3) with named presets.

The paper (section 4.2): AdamW, lr 2e-5, 10 % warm-up, batch 64, max 128 tokens, 20 epochs for
each of stages 1-3 and 60 for stage 4, on millions of pairs (TED2020, WikiMatrix, Europarl,
NewsCommentary), from pre-trained XLM-R / MiniLM; student B = 128, |RU| = 3 of 12 layers (4 passes).

2e-5 is a fine-tuning rate for a pre-trained model seeing millions of pairs.  ``ms-small`` gives each
stage a few hundred steps on one CPU thread, and part of what it trains starts from scratch (the
bottleneck embedding of stage 2), so it uses larger rates: 1e-4 to fine-tune the (already trained)
assistant in stage 1 (measured on the embedded corpus: 1.5e-3 drops the assistant's dev P@1 from 99.8
to 90 within 60 steps, 1e-4 keeps it), 2e-3 for the new embedding and bottleneck of stage 2 (an MSE
regression of half a million parameters), 5e-4 for the whole student in stage 3 (the rate LEALLA uses
for students of this width) and 2e-4 in stage 4, which refines a student that already matches the
assistant.  The warm-up keeps the paper's 10 %.  A new projection to the teacher's space starts at the
least-squares fit (``train.head_fit_pairs``), so fine-tuning never starts from a random map.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tinyglot.config import named_preset, validate_positive
from tinyglot.errors import TinyglotError
from tinyglot.trainloop import TrainSettings

STAGE4_OBJECTIVES = ("mcl", "hard", "ce", "none")
STAGE_NAMES = {1: "assistant learns the teacher's space", 2: "student bottleneck aligns with the assistant's "
               "embedding layer", 3: "student mimics the assistant", 4: "contrastive + KD from the teacher"}


@dataclass
class MSStudentConfig:
    """An ALBERT student: vocabulary -> ``embedding_size`` (bottleneck B) -> ``hidden_size`` (H), then
    a recurrent unit of ``unit_layers`` (M) transformer layers applied ``passes`` (L/M) times.

    Zero means "the assistant's value" (hidden size, heads, FFN, max length): the unit can only be
    initialised from the assistant's first M layers when the shapes match.  ``recurrent=false`` gives
    every pass its own copy of the unit (the paper's "w/o Rec." ablation: ``passes`` times the
    encoder parameters, the same function at initialisation); ``passes=1`` is the other reading of
    that ablation (the unit applied once, the same parameter count).
    """

    embedding_size: int = 128  # B (paper: 128)
    unit_layers: int = 3  # M = |RU| (paper: 3)
    passes: int = 4  # L / M (paper: 12 / 3)
    hidden_size: int = 0  # H; 0 = the assistant's
    num_heads: int = 0
    ffn_size: int = 0
    max_len: int = 0
    dropout: float = 0.1
    recurrent: bool = True
    init_from_assistant: bool = True
    hidden_act: str = "gelu"  # set from the assistant
    vocab_size: int = 0  # set from the tokenizer

    def validate(self) -> None:
        validate_positive(self, ("embedding_size", "unit_layers", "passes"), "student")
        for name in ("hidden_size", "num_heads", "ffn_size", "max_len"):
            if getattr(self, name) < 0:
                raise TinyglotError(f"student.{name} must be >= 0 (0 = the assistant's), got {getattr(self, name)}")
        if self.hidden_size and self.num_heads and self.hidden_size % self.num_heads:
            raise TinyglotError(f"student hidden_size {self.hidden_size} is not divisible by num_heads "
                                f"{self.num_heads}", "pick a head count that divides the hidden size")
        if self.recurrent and self.passes < self.unit_layers:
            # transformers' AlbertTransformer slices its head mask by num_hidden_layers (= passes), so a
            # shared group of more layers than passes fails with an IndexError
            raise TinyglotError(f"student.passes ({self.passes}) is smaller than student.unit_layers "
                                f"({self.unit_layers}): transformers' ALBERT cannot run that",
                                "use at least as many passes as unit layers (e.g. unit_layers=3, passes=4)")

    def resolved(self, hidden: int, heads: int, ffn: int, max_len: int, act: str, vocab: int) -> MSStudentConfig:
        """A copy with every 0 replaced by the assistant's value."""
        pick = lambda own, theirs: own or theirs  # noqa: E731
        cfg = dataclasses.replace(self, hidden_size=pick(self.hidden_size, hidden),
                                  num_heads=pick(self.num_heads, heads), ffn_size=pick(self.ffn_size, ffn),
                                  max_len=pick(self.max_len, max_len), hidden_act=act, vocab_size=vocab)
        cfg.validate()
        if cfg.max_len > max_len:
            raise TinyglotError(f"student.max_len {cfg.max_len} exceeds the assistant's {max_len}",
                                "the student reads the assistant's token positions: use at most that")
        return cfg


@dataclass
class MSLossConfig:
    """Stage 4: ``mcl`` = L_MCL + L_KD (eq. 5-7); ``hard`` = eq. 8 (squared error to the identity
    matrix, the paper's "Bool"); ``ce`` = cross-entropy of softmax(cos_S / tau) against the soft
    targets softmax(cos_T / tau) (eq. 9 with normalised targets; tau 0.05 as in the paper); ``none`` =
    L_KD alone (the paper's "w/o CL").  The weights multiply the two terms (paper: 1 and 1)."""

    stage4: str = "mcl"
    temperature: float = 0.05
    contrastive_weight: float = 1.0
    kd_weight: float = 1.0

    def validate(self) -> None:
        if self.stage4 not in STAGE4_OBJECTIVES:
            raise TinyglotError(f"unknown stage-4 objective loss.stage4={self.stage4!r}",
                                f"choose one of: {', '.join(STAGE4_OBJECTIVES)}")
        validate_positive(self, ("temperature",), "loss")
        if self.contrastive_weight < 0 or self.kd_weight < 0:
            raise TinyglotError("loss.contrastive_weight and loss.kd_weight must be >= 0")


@dataclass
class MSTrainConfig(TrainSettings):
    """Settings every stage shares; ``stageN`` sections override max_steps / lr / warmup_steps."""

    batch_size: int = 64  # paper
    teacher_batch_size: int = 64
    # a new projection to the teacher's space starts at the least-squares fit on this many pairs (0: random)
    head_fit_pairs: int = 2048

    POSITIVE = (*TrainSettings.POSITIVE, "teacher_batch_size")

    def validate(self) -> None:
        super().validate()
        if self.head_fit_pairs < 0:
            raise TinyglotError(f"train.head_fit_pairs must be >= 0, got {self.head_fit_pairs}")


@dataclass
class StageConfig:
    """Per-stage overrides of the shared ``train`` settings (None: the shared value)."""

    max_steps: int | None = None
    lr: float | None = None
    warmup_steps: int | None = None


@dataclass
class MSPreset:
    student: MSStudentConfig = field(default_factory=MSStudentConfig)
    loss: MSLossConfig = field(default_factory=MSLossConfig)
    train: MSTrainConfig = field(default_factory=MSTrainConfig)
    stage1: StageConfig = field(default_factory=StageConfig)
    stage2: StageConfig = field(default_factory=StageConfig)
    stage3: StageConfig = field(default_factory=StageConfig)
    stage4: StageConfig = field(default_factory=StageConfig)

    def stage_settings(self, stage: int) -> MSTrainConfig:
        """The shared ``train`` settings with stage ``stage``'s overrides applied."""
        own = getattr(self, f"stage{stage}")
        changes = {k: v for k, v in dataclasses.asdict(own).items() if v is not None}
        settings = dataclasses.replace(self.train, **changes)
        settings.validate()
        return settings


def _small() -> MSPreset:
    # Sized for one CPU thread with the ems-small assistant (3 layers, 192 hidden, 8k vocabulary):
    # H = 192 (so the unit starts as the assistant's first layer), B = 64, M = 1 applied 4 times.
    # 300 steps of 64 pairs per stage (stage 2, which only runs the embedding layers, 400); the
    # `train` values are shared, so --set train.max_steps=N changes stages 1, 3 and 4 together.
    return MSPreset(
        MSStudentConfig(embedding_size=64, unit_layers=1, passes=4),
        MSLossConfig(),
        MSTrainConfig(batch_size=64, max_steps=300, lr=5e-4, warmup_steps=30, eval_every=100, save_every=50,
                      dev_pairs_per_lang=100),
        stage1=StageConfig(lr=1e-4), stage2=StageConfig(max_steps=400, lr=2e-3, warmup_steps=40),
        stage4=StageConfig(lr=2e-4),
    )


def _paper() -> MSPreset:
    # the multi-stage paper: B = 128, |RU| = 3 applied 4 times, lr 2e-5, batch 64; steps per
    # stage are the user's to set (20 epochs of their corpus; 60 in stage 4).  For GPUs.
    return MSPreset(
        MSStudentConfig(embedding_size=128, unit_layers=3, passes=4),  # max_len: the assistant's (paper: 128)
        MSLossConfig(),
        MSTrainConfig(batch_size=64, lr=2e-5, max_steps=20000, warmup_steps=2000, eval_every=2000,
                      save_every=1000),
        stage4=StageConfig(max_steps=60000, warmup_steps=6000),
    )


def _tiny() -> MSPreset:
    # For tests and smoke runs: seconds per stage.
    return MSPreset(
        MSStudentConfig(embedding_size=16, unit_layers=1, passes=2, dropout=0.0),
        MSLossConfig(),
        MSTrainConfig(batch_size=16, max_steps=10, lr=1e-3, warmup_steps=2, eval_every=10, save_every=5, log_every=1,
                      dev_fraction=0.1, dev_pairs_per_lang=30, head_fit_pairs=64),
    )


PRESETS = {"ms-small": _small, "ms-paper": _paper, "ms-tiny": _tiny}


def get_preset(name: str, overrides: dict | None = None) -> MSPreset:
    preset = named_preset(PRESETS, name, overrides, "multi-stage student")
    preset.student.validate()
    preset.loss.validate()
    for stage in (1, 2, 3, 4):
        preset.stage_settings(stage)
    return preset
