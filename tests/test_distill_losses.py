"""LEALLA losses against hand-computed values (lealla.md eq. 1-4)."""

from __future__ import annotations

import math

import pytest
import torch

from tinyglot.distill.losses import ams_loss, feature_distillation, logit_distillation, softmax_logit_distillation

I2 = torch.eye(2)


def test_ams_hand_value_both_directions():
    # cos = I; positive logit 1 - 0.3 = 0.7, negative 0: -log(e^.7 / (e^.7 + 1)) = log(1 + e^-.7) per
    # row and direction; mean over rows, sum of the two directions
    expected = 2 * math.log(1 + math.exp(-0.7))
    assert ams_loss(I2, I2, margin=0.3, scale=1.0).item() == pytest.approx(expected, abs=1e-6)
    # the margin makes the loss larger than plain softmax
    assert ams_loss(I2, I2, margin=0.3).item() > ams_loss(I2, I2, margin=0.0).item()
    # scale multiplies the logits: scale 2, margin 0 -> 2 * log(1 + e^-2)
    assert ams_loss(I2, I2, margin=0.0, scale=2.0).item() == pytest.approx(2 * math.log(1 + math.exp(-2)), abs=1e-6)


def test_ams_is_bidirectional():
    x = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    y = torch.tensor([[0.8, 0.6], [1.0, 0.0], [0.0, 1.0]])
    assert ams_loss(x, y).item() == pytest.approx(ams_loss(y, x).item(), abs=1e-6)


def test_feature_distillation_hand_value():
    xt = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    fx = torch.tensor([[0.0, 0.0], [0.0, 1.0]])  # squared errors 1 and 0 -> mean 0.5
    yt = torch.tensor([[0.0, 2.0], [1.0, 1.0]])
    fy = torch.tensor([[0.0, 0.0], [1.0, 1.0]])  # squared errors 4 and 0 -> mean 2
    assert feature_distillation(xt, yt, fx, fy).item() == pytest.approx(2.5)


def test_logit_distillation_hand_value_and_temperature():
    xs = ys = torch.tensor([[1.0, 0.0], [1.0, 0.0]])  # student cos = all ones; teacher cos = I
    # differences [[0, -1], [-1, 0]] -> squares mean 0.5, divided by T^2
    assert logit_distillation(I2, I2, xs, ys, temperature=1.0).item() == pytest.approx(0.5)
    assert logit_distillation(I2, I2, xs, ys, temperature=100.0).item() == pytest.approx(0.5e-4)
    assert logit_distillation(I2, I2, I2, I2).item() == pytest.approx(0.0)


def test_softmax_logit_distillation_hand_value():
    # teacher cos = I at scale 1: each row's softmax is (e, 1) / (e + 1); the student's cos is all ones,
    # so its softmax is uniform: KL = sum p log(2p) per row, 2 rows -> mean 1 row's, two directions
    xs = ys = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    p = torch.tensor([math.e, 1.0]) / (math.e + 1)
    kl = float((p * torch.log(2 * p)).sum())
    got = softmax_logit_distillation(I2, I2, xs, ys, teacher_scale=1.0, student_scale=20.0)
    assert got.item() == pytest.approx(2 * kl, abs=1e-6)
    # the student matching the teacher at the same scale: nothing to learn
    assert softmax_logit_distillation(I2, I2, I2, I2, 7.0, 7.0).item() == pytest.approx(0.0, abs=1e-6)
    # the teacher's ranking of the negatives counts, not only the positive: a student that puts the
    # teacher's nearest negative second loses less than one that puts it last
    t = torch.tensor([[1.0, 0.0, 0.0], [0.9, 0.436, 0.0], [0.0, 0.0, 1.0]])
    near = torch.tensor([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.6, 0.8]])
    far = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8], [0.8, 0.6, 0.0]])
    loss = lambda s: softmax_logit_distillation(t, t, s, s, 10.0, 10.0).item()  # noqa: E731
    assert loss(near) < loss(far)


def test_softmax_logit_distillation_shares_add_up_to_the_whole_batch():
    # two processes' shares (each its own rows against every column, as with a gather) sum to the loss of
    # one process over the whole batch
    g = torch.Generator().manual_seed(0)
    xt, yt, xs, ys = (torch.randn(6, 4, generator=g) for _ in range(4))
    whole = softmax_logit_distillation(xt, yt, xs, ys, 5.0, 3.0)
    full = {id(t): t for t in (xt, yt, xs, ys)}

    def shares(lo: int, hi: int) -> torch.Tensor:
        def gather(part: torch.Tensor) -> tuple[torch.Tensor, int]:
            return next(t for t in full.values() if torch.equal(t[lo:hi], part)), lo
        return softmax_logit_distillation(xt[lo:hi], yt[lo:hi], xs[lo:hi], ys[lo:hi], 5.0, 3.0, gather, 6)

    assert (shares(0, 3) + shares(3, 6)).item() == pytest.approx(whole.item(), rel=1e-5)
