"""CLRCMD contrastive loss (Lee et al. 2022, Sec. 3.3) as a sentence-transformers loss.

For the i-th positive pair (s_i, s_i+) of a batch, with RCMD similarity s(., .) and temperature tau:
``-log exp(s(s_i, s_i+)/tau) / sum_j exp(s(s_i, s_j+)/tau)`` (plus hard negatives s_j- in the
denominator when a third column is given). The other pairs' second sentences are the in-batch
negatives (Gao et al. 2021). Our labels are graded (Sun et al. Eq. 4), so only pairs whose label is
above ``positive_threshold`` act as anchors; every second sentence of the batch is a candidate.

The memory-saving RCMD form (alignments found without gradient, only aligned token pairs
recomputed) keeps training memory O(B^2 L) rather than O(B^2 L^2) (CLRCMD Table 3).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ctxsim.models.evaluation.similarity import rcmd_pairwise


class CLRCMDLoss(nn.Module):
    """Contrastive loss over pairwise RCMD similarities with in-batch negatives."""

    def __init__(
        self,
        model: nn.Module,
        temperature: float = 0.05,
        positive_threshold: float = 0.5,
        sparse: bool = True,
        chunk_size: int = 8,
    ) -> None:
        super().__init__()
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.model = model
        self.temperature = temperature
        self.positive_threshold = positive_threshold
        self.sparse = sparse
        self.chunk_size = chunk_size

    def _tokens(self, features: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        out = self.model(features)
        return out["token_embeddings"].float(), out["attention_mask"].bool()

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        cols = [self._tokens(f) for f in sentence_features]
        if len(cols) < 2:
            raise ValueError("CLRCMDLoss needs (sentence1, sentence2[, negative]) columns")
        (xa, ma), rest = cols[0], cols[1:]
        sims = [
            rcmd_pairwise(xa, ma, xb, mb, sparse=self.sparse, chunk=self.chunk_size)
            for xb, mb in rest
        ]
        logits = torch.cat(sims, dim=1) / self.temperature  # (B, B * (n_cols - 1))
        anchors = labels.view(-1) > self.positive_threshold
        if not bool(anchors.any()):
            return logits.sum() * 0.0  # no positive in this batch: no signal, keep the graph
        target = torch.arange(logits.shape[0], device=logits.device)
        return F.cross_entropy(logits[anchors], target[anchors])

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "temperature": self.temperature,
            "positive_threshold": self.positive_threshold,
            "sparse": self.sparse,
            "chunk_size": self.chunk_size,
        }

    @property
    def citation(self) -> str:
        return (
            "@inproceedings{lee-etal-2022-toward, title={Toward Interpretable Semantic Textual "
            "Similarity via Optimal Transport-based Contrastive Sentence Learning}, "
            "author={Lee, Seonghyeon and Lee, Dongha and Jang, Seongbo and Yu, Hwanjo}, "
            "booktitle={ACL}, year={2022}}"
        )
