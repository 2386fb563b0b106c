"""LEALLA student shapes, loss weights and training settings, with the paper's presets."""

from __future__ import annotations

from dataclasses import dataclass, field

from tinyglot.config import named_preset, validate_positive
from tinyglot.trainloop import TrainSettings
from tinyglot.errors import TinyglotError


@dataclass
class StudentConfig:
    """A thin-deep BertModel student (an AlbertModel when its token table is factorised); its embedding
    dimension is ``hidden_size`` (or ``output_dim``)."""

    hidden_size: int = 128
    num_layers: int = 24
    num_heads: int = 8
    ffn_size: int = 512
    max_len: int = 120
    dropout: float = 0.1
    vocab_size: int = 0  # set from the tokenizer
    # Dimension of the sentence embedding: 0 = hidden_size (LEALLA); else a linear map from the pooled
    # hidden states (a wide, shallow encoder with a small embedding).
    output_dim: int = 0
    # Width of the token and position tables: 0 = hidden_size (a BertModel); else a factorised table
    # (ALBERT's: vocabulary -> embedding_size -> a linear map to hidden_size, each layer its own weights,
    # an AlbertModel), so that a bundle of a given size holds more pieces.
    embedding_size: int = 0
    # Input embeddings (distill/teacher_init.py): "teacher" starts them from the teacher: its own
    # token/position embeddings projected on their top hidden_size principal directions when it is a
    # tinyglot teacher with the student's vocabulary, else its embeddings of every vocabulary piece,
    # projected the same way (model2vec's recipe); "teacher-layers" starts the whole student as
    # multilingual-e5-small's first num_layers layers (its width, e5-small's pieces as the vocabulary; the
    # fast-e5 presets); "random" is the paper's initialisation.  Older
    # configs: "teacher-pca" = the teacher's tables only (an error for other teachers), "auto" = the
    # teacher's tables when it has them, else random (the lealla presets' default).
    init: str = "auto"

    # the choices of --init, then older configs' values
    INIT_CHOICES = ("teacher", "random", "teacher-layers")
    INITS = (*INIT_CHOICES, "auto", "teacher-pca")

    @property
    def embedding_dim(self) -> int:
        return self.output_dim or self.hidden_size

    @property
    def table_dim(self) -> int:
        """The width of the token table: ``embedding_size`` when factorised, else ``hidden_size``."""
        return self.embedding_size or self.hidden_size

    def validate(self) -> None:
        validate_positive(self, ("hidden_size", "num_layers", "num_heads", "ffn_size", "max_len"), "student")
        if self.init not in self.INITS:
            raise TinyglotError(f"unknown student.init {self.init!r}",
                                "choose teacher or random (auto and teacher-pca are read in older configs)")
        if self.output_dim < 0:
            raise TinyglotError(f"student output_dim must be >= 0, got {self.output_dim}",
                                "use 0 for the hidden size, or the embedding dimension you want")
        if self.embedding_size < 0 or self.embedding_size > self.hidden_size:
            raise TinyglotError(f"student embedding_size must be from 0 to hidden_size ({self.hidden_size}), got "
                                f"{self.embedding_size}", "use 0 for a table as wide as the hidden size, or a "
                                "smaller width for a factorised table")
        if self.embedding_size and self.init == "teacher-layers":
            raise TinyglotError("student.init=teacher-layers copies e5-small's full-width token table; it cannot "
                                f"start a factorised one (embedding_size {self.embedding_size})",
                                "set student.embedding_size=0, or student.init=teacher")
        if self.hidden_size % self.num_heads:
            raise TinyglotError(f"student hidden_size {self.hidden_size} is not divisible by num_heads "
                                f"{self.num_heads}", "pick a head count that divides the hidden size")


@dataclass
class LossConfig:
    """L = alpha * L_ams + beta * L_fd + gamma * L_ld (LEALLA, arXiv:2302.08387, eq. 5), each switchable."""

    ams: bool = True
    fd: bool = True
    ld: bool = True
    alpha: float = 1.0
    beta: float = 1e3
    gamma: float = 1e-2
    margin: float = 0.3  # additive margin of the AMS loss (LaBSE)
    scale: float = 20.0  # AMS logits are scale * cos (cosines alone give a too-flat softmax)
    ld_temperature: float = 100.0
    # L_ld is eq. 4; f (student -> teacher dim, used by L_fd) starts at the least-squares fit to the
    # teacher's embeddings of the first pairs (the paper's random f made L_fd ~500x L_ams at the start:
    # docs/results.md, the ablation table)
    # What L_fd and L_ld compare the student with: "pair" = the teacher's embedding of each side (the
    # paper's); "english" = the teacher's embedding of the English side for both sides, so the teacher
    # pass covers only the distinct English sentences (a fraction of a multilingual corpus: the same
    # English is translated into many languages) and every translation is pulled to the same point.
    fd_target: str = "pair"

    FD_TARGETS = ("pair", "english")

    def validate(self) -> None:
        if self.fd_target not in self.FD_TARGETS:
            raise TinyglotError(f"unknown loss.fd_target {self.fd_target!r}",
                                f"choose one of: {', '.join(self.FD_TARGETS)}")


@dataclass
class DistillTrainConfig(TrainSettings):
    """LEALLA settings; lr 5e-4 is the LEALLA paper's (App. B) for hidden sizes <= 256."""

    teacher_batch_size: int = 64
    # Gradient checkpointing (recompute activations in the backward pass; the same results, less
    # memory): "auto" decides per batch: on CUDA by memory (the batch's estimated activations against
    # the free GPU memory, and from the first out-of-memory step on), elsewhere by
    # checkpoint_above_tokens; "always"; "never".
    checkpointing: str = "auto"
    # CPU rule of "auto": checkpoint batches with more than this many tokens (sentences x padded
    # length, both sides); 0 = never. The longest batches (128 sentences x 120 tokens) otherwise need
    # ~8 GB for lealla-small's 24 layers. Not used on CUDA.
    checkpoint_above_tokens: int = 6144
    # The token table's gradient as the batch's rows only (tinyglot.trainloop.LazyAdamW): a step costs
    # the batch's rows at any vocabulary size, where a dense table costs every step in proportion to its
    # rows; the other rows catch up to AdamW's weights (their momentum moves and weight decay, summed in
    # closed form) before a batch reads them and at every evaluation and checkpoint, so the run is AdamW's.
    # The e5 profile's 288k table: the same P@1 at 4,000 steps (dev 90.78 both), 38 % less time a step
    # (docs/results.md, "AdamW's token table at the cost of the batch's rows").  Off by default: the
    # default pipeline's 8k tables gain nothing.  Ignored (dense) under torchrun and with train.compile.
    sparse_embeddings: bool = False
    # A new vocabulary's SentencePiece sample: this many sentences (both sides of a language-balanced
    # sample of pairs), of which, in a language with both, this share from its general-domain rows
    # (Pair.general; 0 = its rows uniformly, so general text in proportion to its number).
    vocab_sentences: int = 200_000
    vocab_general_share: float = 0.0
    # Word lists added to that sample (a folder of LANG.tsv, WORD<TAB>BUCKET, as `tinyglot data general`
    # writes into OUT/words; "auto" = $TINYGLOT_HOME/general/words, or in `tinyglot run` the words folder beside
    # data.general's file; "" = none): for each language of the
    # corpus with a list, vocab_word_sentences lines of 12 words drawn by their frequency, so that the
    # vocabulary holds the language's common words whole (and each starts from the teacher's embedding of
    # it) where the corpus has too little text to make them pieces (docs/results.md, "Word lists").
    vocab_words: str = ""
    vocab_word_sentences: int = 3500

    POSITIVE = (*TrainSettings.POSITIVE, "teacher_batch_size", "vocab_sentences")

    def validate(self) -> None:
        super().validate()
        from tinyglot.training import CHECKPOINTING

        if self.checkpointing not in CHECKPOINTING:
            raise TinyglotError(f"unknown train.checkpointing {self.checkpointing!r}",
                                f"choose one of: {', '.join(CHECKPOINTING)}")
        if not 0.0 <= self.vocab_general_share <= 1.0:
            raise TinyglotError(f"train.vocab_general_share must be in [0, 1], got {self.vocab_general_share}",
                                "0 samples a language's rows uniformly; 0.4 takes 40 % of its sample from its "
                                "general-domain rows")
        if self.vocab_word_sentences < 0:
            raise TinyglotError(f"train.vocab_word_sentences must be >= 0, got {self.vocab_word_sentences}",
                                "3500 lines of 12 words per language with a word list; 0 adds none")
        if self.checkpoint_above_tokens < 0:
            raise TinyglotError(f"train.checkpoint_above_tokens must be >= 0, got {self.checkpoint_above_tokens}",
                                "use 0 to never checkpoint")


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


def _fast(layers: int, hidden: int, heads: int, ffn: int, max_steps: int = 2000) -> DistillPreset:
    # Shallow and wide rather than thin and deep: on CPUs every layer is a sequential step, so for the
    # same compute fewer, wider layers run faster (measured: benchmarks/shapes.py, docs/results.md "Student
    # shapes").  beta 10 and English targets (loss.fd_target) suit strong, slow teachers.
    # init "teacher" (the teacher's embeddings of the vocabulary when it has its own): fast-small from
    # e5-small reaches random init's dev P@1 at step 500 (79.1) by step 200, and 83.2 at 500
    # (benchmarks/distill_speed.py; docs/results.md, "Teacher-derived initialisation").
    return DistillPreset(StudentConfig(hidden_size=hidden, num_layers=layers, num_heads=heads, ffn_size=ffn,
                                       max_len=128, init="teacher"),
                         LossConfig(beta=10.0, fd_target="english"),
                         # 2-4 layers: activations stay small, so no checkpointing on CPU (on CUDA by memory)
                         DistillTrainConfig(batch_size=128, lr=1e-3, max_steps=max_steps,
                                            warmup_steps=max_steps // 20, eval_every=500, save_every=250,
                                            checkpoint_above_tokens=0))


def _fast_e5(layers: int) -> DistillPreset:
    # multilingual-e5-small's own first layers (student.init=teacher-layers: its width, 12 heads, its
    # feed-forward size, a vocabulary of its pieces), distilled further from e5-small: a student that starts
    # with e5-small's knowledge of ordinary prose instead of learning it from the training text.  A lower
    # learning rate than the fast presets' (the weights start trained).  Measured on the e5 profile's mix:
    # fast-e5-3 at 2,000 steps 71.5 on the narrative test against 67.7 at 1,000 (docs/results.md,
    # "e5-small's own first layers").
    return DistillPreset(StudentConfig(hidden_size=384, num_layers=layers, num_heads=12, ffn_size=1536,
                                       max_len=128, init="teacher-layers"),
                         LossConfig(beta=10.0, fd_target="english"),
                         DistillTrainConfig(batch_size=128, lr=2e-4, max_steps=2000, warmup_steps=100,
                                            eval_every=250, save_every=250, checkpoint_above_tokens=0))


def _fast_tiny() -> DistillPreset:
    preset = _tiny()
    preset.student = StudentConfig(hidden_size=48, num_layers=1, num_heads=2, ffn_size=96, max_len=48, output_dim=32,
                                   init="teacher")
    preset.loss = LossConfig(beta=10.0, fd_target="english")
    preset.train.checkpoint_above_tokens = 0
    return preset


# the LEALLA paper, Table 2 / App. B: 24 layers; small 128/8/512, base 192/12/768, large 256/8/1024;
# beta 1e3 for small and base, 1e4 for large; alpha 1, gamma 1e-2, T 100.
PRESETS = {
    "lealla-small": lambda: _lealla(128, 8, 512, 1e3),
    "lealla-base": lambda: _lealla(192, 12, 768, 1e3),
    "lealla-large": lambda: _lealla(256, 8, 1024, 1e4),
    "lealla-tiny": _tiny,
    "fast-mini": lambda: _fast(2, 128, 4, 512),
    "fast-small": lambda: _fast(2, 256, 4, 1024),
    "fast-base": lambda: _fast(4, 256, 4, 1024),
    "fast-e5-3": lambda: _fast_e5(3),
    "fast-e5-4": lambda: _fast_e5(4),
    "fast-tiny": _fast_tiny,
}


def get_preset(name: str, overrides: dict | None = None) -> DistillPreset:
    preset = named_preset(PRESETS, name, overrides, "student")
    preset.student.validate()
    preset.loss.validate()
    preset.train.validate()
    return preset
