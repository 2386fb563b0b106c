"""EMS teacher configuration: model shape, training settings and named presets."""

from __future__ import annotations

from dataclasses import dataclass, field

from tinyglot.config import named_preset, validate_positive
from tinyglot.trainloop import TrainSettings
from tinyglot.errors import TinyglotError


@dataclass
class EMSModelConfig:
    """Shape of the EMS dual encoder and switches for the paper's ablations (EMS, arXiv:2205.15744, Table 13)."""

    vocab_size: int = 8000
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    ffn_size: int = 1024
    max_len: int = 120
    dropout: float = 0.1
    # Dropout on the attention probabilities.  Off (unlike BERT's 0.1), torch runs its fused attention
    # kernel in training, which keeps no (heads x length x length) tensors for the backward pass: 200
    # ems-small steps peaked at 1.88 GB instead of 2.32 GB, at the same speed and the same dev P@1 (33.9
    # against 34.0 after 100 steps; docs/results.md, "Training memory on the CPU").
    attention_dropout: float = 0.0
    d_la: int = 128  # language-token embedding of the XTR head
    d_cntrs: int = 128  # output of the contrastive MLP
    temperature: float = 0.1  # contrastive softmax temperature
    xtr: bool = True  # cross-lingual token-level reconstruction loss
    contrastive: bool = True  # sentence-level contrastive loss
    contrastive_mlp: bool = True  # the d -> d -> ReLU -> d_cntrs head (off: cosine on u directly)
    lang_token: bool = True  # target-language embedding in the XTR head

    def validate(self) -> None:
        validate_positive(self, ("vocab_size", "hidden_size", "num_layers", "num_heads", "ffn_size", "max_len",
                                 "d_la", "d_cntrs", "temperature"), "model")
        for name in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise TinyglotError(f"model.{name} is {getattr(self, name)}, not in [0, 1)",
                                    f"set model.{name} to a probability such as 0.1")
        if not (self.xtr or self.contrastive):
            raise TinyglotError("both losses are switched off", "keep model.xtr or model.contrastive on")
        if self.hidden_size % self.num_heads:
            raise TinyglotError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}",
                "pick a head count that divides the hidden size",
            )
        if self.max_len < 2:
            raise TinyglotError(f"max_len must be at least 2, got {self.max_len}")


@dataclass
class EMSTrainConfig(TrainSettings):
    """Optimisation, data and logging settings of a teacher run (EMS defaults)."""

    batch_size: int = 128
    weight_decay: float = 1e-5  # the EMS paper's value
    warmup_steps: int = 200
    max_steps: int = 3000
    # vocabulary (used when no tokenizer is given)
    vocab_model_type: str = "unigram"
    lowercase: bool = True
    vocab_sentences: int = 200_000

    POSITIVE = (*TrainSettings.POSITIVE, "vocab_sentences")


@dataclass
class EMSPreset:
    model: EMSModelConfig = field(default_factory=EMSModelConfig)
    train: EMSTrainConfig = field(default_factory=EMSTrainConfig)


def _paper() -> EMSPreset:
    # the EMS paper (arXiv:2205.15744), section 4: 6 layers, hidden 1024, 16 heads, FFN 4096, 60k vocabulary,
    # max 120 tokens, Adam lr 3e-4 with 10k warm-up steps, weight decay 1e-5, dropout 0.1, 152 pairs per batch.
    return EMSPreset(
        EMSModelConfig(vocab_size=60000, hidden_size=1024, num_layers=6, num_heads=16, ffn_size=4096,
                       attention_dropout=0.1),
        EMSTrainConfig(batch_size=152, lr=3e-4, warmup_steps=10000, max_steps=300000,
                       eval_every=5000, save_every=5000, dev_pairs_per_lang=1000,
                       vocab_sentences=2_000_000),
    )


def _small() -> EMSPreset:
    # The default pipeline's teacher, sized for a first run of minutes on 2 CPU cores: 64 tokens cover
    # the embedded corpus's short strings, and without dropout 1,000 steps at lr 1e-3 make a student within
    # a point of 1,500 steps at 7e-4 with dropout, in less than half the time (docs/results.md#teacher).
    return EMSPreset(
        EMSModelConfig(vocab_size=8000, hidden_size=192, num_layers=3, num_heads=4, ffn_size=768, max_len=64,
                       dropout=0.0),
        EMSTrainConfig(batch_size=128, lr=1e-3, warmup_steps=100, max_steps=1000,
                       eval_every=250, save_every=250),
    )


def _tiny() -> EMSPreset:
    # For tests and smoke runs: trains in well under a minute on CPU.
    return EMSPreset(
        EMSModelConfig(vocab_size=2000, hidden_size=64, num_layers=2, num_heads=2, ffn_size=128,
                       max_len=48, d_la=16, d_cntrs=32),
        EMSTrainConfig(batch_size=32, lr=1e-3, warmup_steps=10, max_steps=60, eval_every=30,
                       save_every=30, dev_pairs_per_lang=50, vocab_sentences=20000),
    )


PRESETS = {"ems-paper": _paper, "ems-small": _small, "ems-tiny": _tiny}


def get_preset(name: str, overrides: dict | None = None) -> EMSPreset:
    """A named preset with optional ``{"model": {...}, "train": {...}}`` overrides."""
    preset = named_preset(PRESETS, name, overrides, "teacher")
    preset.model.validate()
    preset.train.validate()
    return preset
