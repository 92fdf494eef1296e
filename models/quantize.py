"""Dynamic int8 quantisation of a causal scorer's linear layers, for CPU inference.

Why: on CPU the scorer's matrix work is the whole cost of a label (bench/results/pipeline_books.md:
`score` is 92% of the marginal CPU time). torch's dynamic quantisation stores every ``nn.Linear``
weight as int8 (per-tensor scale) and quantises activations per batch at run time, so the
matmuls run in int8 (fbgemm/x86 kernels); embeddings, norms and attention's softmax stay float32.
No hand-written kernels. Scores move slightly: bench/bench_int8.py measures how far (Spearman of
S against float32) and how much CPU time it saves.
"""

from __future__ import annotations

import warnings

import torch

from ctxsim.models.generator import CausalPrefixScorer, GenerativeScorer


def quantize_int8(scorer: GenerativeScorer) -> GenerativeScorer:
    """The scorer with its model's linear layers (the vocabulary head included) quantised to
    int8 in place. CPU only; the causal backend only (the seq2seq models are small and trained
    here: quantise them after training if needed)."""
    if not isinstance(scorer, CausalPrefixScorer):
        raise ValueError(
            f"int8 quantisation supports the causal backend, not {type(scorer).__name__}"
        )
    if scorer.device.type != "cpu":
        raise ValueError(
            f"int8 quantisation is for CPU inference, the scorer is on {scorer.device}"
        )
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():  # torch flags its quantised tensor API for a future move
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        scorer.model = quantize_dynamic(scorer.model.eval(), {torch.nn.Linear}, dtype=torch.qint8)
    return scorer
