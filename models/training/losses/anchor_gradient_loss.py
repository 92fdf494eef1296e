"""MultipleNegativesRankingLoss with its candidates encoded without gradient
(``train.context_gradient: sentence``): a step runs the backward pass of the anchors alone, so
the loss moves the sentences toward what the encoder makes of their right contexts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from sentence_transformers import losses
from torch import Tensor


class AnchorGradientRankingLoss(losses.MultipleNegativesRankingLoss):
    """MNRL whose candidates (every column after the first) are encoded under ``torch.no_grad``;
    the model stays in training mode for both, dropout included."""

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Any) -> Tensor:
        features = list(sentence_features)
        anchors = self.model(features[0])["sentence_embedding"]
        with torch.no_grad():
            rest = [self.model(f)["sentence_embedding"] for f in features[1:]]
        return self.compute_loss_from_embeddings([anchors, *rest], labels)
