"""EMS objectives against hand-computed values (METHOD.md section 1)."""

from __future__ import annotations

import math

import pytest
import torch

from tinyglot.teacher.config import EMSModelConfig
from tinyglot.teacher.losses import bag_of_tokens, bidirectional_info_nce, info_nce, xtr_kl
from tinyglot.teacher.model import EMSModel


def test_bag_of_tokens_counts_repeats_and_ignores_padding():
    ids = torch.tensor([[2, 2, 1, 0], [3, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    bag = bag_of_tokens(ids, mask, vocab_size=4)
    assert torch.allclose(bag[0], torch.tensor([0.0, 1 / 3, 2 / 3, 0.0]))
    assert torch.allclose(bag[1], torch.tensor([0.0, 0.0, 0.0, 1.0]))


def test_xtr_kl_with_repeated_tokens_against_hand_value():
    # p = [0, 1/3, 2/3] (token 2 twice), q uniform over 3:
    # KL = 1/3 log(1/3 / 1/3) + 2/3 log(2/3 / 1/3) = 2/3 log 2
    p = torch.tensor([[0.0, 1 / 3, 2 / 3]])
    kl = xtr_kl(torch.zeros(1, 3), p)
    assert kl.item() == pytest.approx(2 / 3 * math.log(2), abs=1e-6)
    # q concentrated on the right tokens lowers the loss; p == q gives 0
    assert xtr_kl(torch.log(p + 1e-30), p).item() == pytest.approx(0.0, abs=1e-5)


def test_info_nce_hand_value_and_symmetry():
    hx = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # cos matrix = I, T = 1: each row's loss is log(1 + e^-1)
    assert info_nce(hx, hx, 1.0).item() == pytest.approx(2 * math.log(1 + math.exp(-1)), abs=1e-6)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 8, generator=g), torch.randn(5, 8, generator=g)
    assert bidirectional_info_nce(a, b, 0.1).item() == pytest.approx(bidirectional_info_nce(b, a, 0.1).item())
    # one direction alone is not symmetric in general
    assert info_nce(a, b, 0.1).item() != pytest.approx(info_nce(b, a, 0.1).item())


def test_info_nce_with_gathered_keys_uses_offset():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    full = info_nce(q, k, 0.1)
    # queries 2..3 of a "second process" against all keys with offset 2 = rows 2..3 of the full loss
    logits = torch.nn.functional.normalize(q, dim=-1) @ torch.nn.functional.normalize(k, dim=-1).T / 0.1
    rows = torch.nn.functional.cross_entropy(logits, torch.arange(4), reduction="none")
    assert info_nce(q[2:], k, 0.1, offset=2).item() == pytest.approx(rows[2:].sum().item(), rel=1e-5)
    assert full.item() == pytest.approx(rows.sum().item(), rel=1e-5)


def _tiny(**kw) -> EMSModel:
    torch.manual_seed(0)
    cfg = EMSModelConfig(vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, ffn_size=32,
                         max_len=8, dropout=0.0, d_la=4, d_cntrs=8, **kw)
    return EMSModel(cfg).eval()


def _batch():
    x = torch.tensor([[5, 6, 6, 0], [7, 8, 9, 10], [11, 12, 0, 0]])
    y = torch.tensor([[13, 14, 0, 0], [15, 16, 17, 0], [18, 19, 20, 21]])
    return x, (x != 0).long(), y, (y != 0).long(), torch.tensor([3, 3, 4]), torch.tensor([2, 2, 2])


def test_total_loss_is_sum_of_parts_over_n():
    model = _tiny()
    x, xm, y, ym, xl, yl = _batch()
    out = model(x, xm, y, ym, xl, yl)
    u, v = model.embed(x, xm), model.embed(y, ym)
    xtr = xtr_kl(model.xtr_logits(u, yl), bag_of_tokens(y, ym, 50)) + xtr_kl(
        model.xtr_logits(v, xl), bag_of_tokens(x, xm, 50))
    cn = bidirectional_info_nce(model.cntrs_head(u), model.cntrs_head(v), 0.1)
    assert out["loss"].item() == pytest.approx(((xtr + cn) / 3).item(), rel=1e-5)
    assert out["xtr"].item() == pytest.approx((xtr / 3).item(), rel=1e-5)


def test_xtr_output_is_not_tied_and_uses_language_token():
    model = _tiny()
    assert model.xtr_out.weight.data_ptr() != model.encoder.embeddings.word_embeddings.weight.data_ptr()
    assert model.xtr_fc.in_features == 16 + 4
    u = torch.randn(1, 16)
    # a different target-language token changes the reconstruction distribution
    assert not torch.allclose(model.xtr_logits(u, torch.tensor([2])), model.xtr_logits(u, torch.tensor([3])))


@pytest.mark.parametrize("flag, zero", [("xtr", "xtr"), ("contrastive", "cntrs")])
def test_ablation_switches(flag, zero):
    model = _tiny(**{flag: False})
    out = model(*_batch())
    assert out[zero].item() == 0.0
    assert out["loss"].item() > 0


def test_no_language_token_and_no_mlp_shapes():
    model = _tiny(lang_token=False, contrastive_mlp=False)
    assert model.lang_embedding is None and model.xtr_fc.in_features == 16
    assert isinstance(model.cntrs_head, torch.nn.Identity)
    assert torch.isfinite(model(*_batch())["loss"])
