"""The EMS dual encoder: a randomly initialised ``transformers`` BertModel with mean pooling,
an XTR head and a contrastive head (the EMS paper, arXiv:2205.15744, Fig. 1)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertModel

from tinyglot.models import bert_config, mean_pool

from .config import EMSModelConfig
from .losses import bag_of_tokens, bidirectional_info_nce, info_nce, xtr_kl


class EMSModel(nn.Module):
    """Shared-weight dual encoder trained with XTR + contrastive losses.

    ``embed(ids, mask)`` is the inference path (the red box of the paper's Fig. 1): the mean of the
    encoder's last hidden states.  ``forward`` computes the training loss of a batch of pairs.
    """

    def __init__(self, cfg: EMSModelConfig) -> None:
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.encoder = BertModel(bert_config(cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads,
                                             cfg.ffn_size, cfg.max_len, cfg.dropout, cfg.attention_dropout),
                                 add_pooling_layer=False)
        d = cfg.hidden_size
        if cfg.xtr:
            d_in = d + (cfg.d_la if cfg.lang_token else 0)
            # L_la: W_la in R^{d_la x d_vcb}, applied to the one-hot target-language token.
            self.lang_embedding = nn.Embedding(cfg.vocab_size, cfg.d_la) if cfg.lang_token else None
            self.xtr_fc = nn.Linear(d_in, d_in)  # W_fc, followed by swish
            self.xtr_out = nn.Linear(d_in, cfg.vocab_size)  # W_emb: NOT tied to the input embeddings
        if cfg.contrastive:
            # h = W1 . ReLU(W2 . u), d -> d -> ReLU -> d_cntrs
            self.cntrs_head: nn.Module = (
                nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, cfg.d_cntrs))
                if cfg.contrastive_mlp
                else nn.Identity()
            )

    # ----------------------------------------------------------------- inference
    def embed(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return mean_pool(hidden, mask)

    # ----------------------------------------------------------------- training
    def xtr_logits(self, u: torch.Tensor, target_lang_ids: torch.Tensor) -> torch.Tensor:
        """Logits of q = softmax(W_emb . swish(W_fc . [u_la ; u])) over the vocabulary."""
        z = u if self.lang_embedding is None else torch.cat([self.lang_embedding(target_lang_ids), u], -1)
        return self.xtr_out(F.silu(self.xtr_fc(z)))

    def forward(
        self,
        x_ids: torch.Tensor,
        x_mask: torch.Tensor,
        y_ids: torch.Tensor,
        y_mask: torch.Tensor,
        x_lang: torch.Tensor,
        y_lang: torch.Tensor,
        gather: Callable[[torch.Tensor], tuple[torch.Tensor, int]] | None = None,
        global_batch: int | None = None,
    ) -> dict[str, torch.Tensor]:
        """Loss of N pairs (x_i, y_i); ``x_lang``/``y_lang`` hold the ids of ``<2xx>`` tokens.

        ``gather`` (data-parallel runs) returns all processes' rows and this process's offset, so
        contrastive negatives come from the global batch; ``global_batch`` is then the N that
        divides the summed loss.
        """
        n = global_batch or x_ids.shape[0]
        u = self.embed(x_ids, x_mask)
        v = self.embed(y_ids, y_mask)
        zero = u.new_zeros(())
        xtr = zero
        if self.cfg.xtr:
            vocab = self.cfg.vocab_size
            # x reconstructs the tokens of its translation y (target language = y's) and back.
            xtr = xtr_kl(self.xtr_logits(u, y_lang), bag_of_tokens(y_ids, y_mask, vocab)) + xtr_kl(
                self.xtr_logits(v, x_lang), bag_of_tokens(x_ids, x_mask, vocab)
            )
        cntrs = zero
        if self.cfg.contrastive:
            hx, hy = self.cntrs_head(u), self.cntrs_head(v)
            t = self.cfg.temperature
            if gather is None:
                cntrs = bidirectional_info_nce(hx, hy, t)
            else:
                all_hy, offset = gather(hy)
                all_hx, _ = gather(hx)
                cntrs = info_nce(hx, all_hy, t, offset) + info_nce(hy, all_hx, t, offset)
        return {"loss": (xtr + cntrs) / n, "xtr": xtr.detach() / n, "cntrs": cntrs.detach() / n}
