"""LEALLA losses against hand-computed values (lealla.md eq. 1-4)."""

from __future__ import annotations

import math

import pytest
import torch

from tinyglot.distill.losses import ams_loss, feature_distillation, logit_distillation

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
