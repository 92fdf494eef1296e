"""A tiny `train` stage on eight labelled pairs, for the objective tests: the pairs, a stand-in
`label` stage, one training run and the cosines of what it trained."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.stage import RunParams, Stage, StageParams, resolve_stage, run_stage_locally

# a handful of pairs: the first is labelled highest (and shares every word), the last lowest
PAIRS = [
    ("a man plays the guitar .", "a man plays the guitar .", 0.999999),
    ("the dog runs in the park .", "a dog runs in a park .", 0.999995),
    ("a woman eats red food .", "the woman eats food .", 0.99999),
    ("a big cat sleeps .", "the small cat sleeps .", 0.999985),
    ("a man plays the ball .", "the woman eats food .", 0.99998),
    ("red street at night .", "a big cat sleeps .", 0.999975),
    ("the dog runs in the park .", "red street at night .", 0.99997),
    ("a woman eats red food .", "a man plays the guitar .", 0.999965),
]


class FakeLabel(Stage):
    """Stands in for the `label` stage: Eq. 4-like labels crowded into a band of 3.5e-5."""

    name = "label"
    Params = StageParams

    def run_shard(self, ctx, shard):
        s1, s2, lab = zip(*PAIRS, strict=True)
        ids = {t: i for i, t in enumerate(sorted({*s1, *s2}))}  # a query id per distinct text
        table = pa.table(
            {
                "s1": s1,
                "s2": s2,
                "s1_id": [ids[t] for t in s1],
                "s2_id": [ids[t] for t in s2],
                "label": pa.array(lab, pa.float64()),
                "split": ["train"] * 8,
            }
        )
        return table, {"n": table.num_rows}


def train_on_pairs(root, **overrides):
    """The `train` stage on the pairs (12 steps of a tiny backbone unless ``overrides`` say)."""
    from ctxsim.tasks.train import TrainParams, TrainStage

    store = ArtefactStore(root)
    run = RunParams(device="cpu", seed=0)
    label, _ = run_stage_locally(resolve_stage(FakeLabel(), StageParams(), run, store, {}))
    kw = {
        "max_steps": 12,
        "batch_size": 8,
        "lr": 1e-3,
        "tiny_vocab_size": 120,
        "max_seq_length": 16,
        "save_total_limit": 1,
        "eval_steps": 100,
        **overrides,
    }
    art, _ = run_stage_locally(
        resolve_stage(TrainStage(), TrainParams(**kw), run, store, {"label": label})
    )
    return art


def cosines(path, texts_a, texts_b):
    """Cosine of each (a, b) pair of texts under the sentence encoder saved at ``path``."""
    from ctxsim.tasks.evaluate import encode_sentences, load_st

    model = load_st(path, "cpu", 16)
    a, b = encode_sentences(model, texts_a), encode_sentences(model, texts_b)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def label_margin(path) -> float:
    """cos(highest-labelled pair) - cos(lowest-labelled pair)."""
    cos = cosines(path, [PAIRS[0][0], PAIRS[-1][0]], [PAIRS[0][1], PAIRS[-1][1]])
    return float(cos[0] - cos[1])
