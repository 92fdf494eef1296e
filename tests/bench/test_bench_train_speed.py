"""bench/bench_train_speed.py: the arm trains the steps it is asked for, times each one and counts
the tokens it fed the model; length-grouped batches and a lower token cap feed fewer; its FLOPs
are torch's count."""

from __future__ import annotations

import math

import pytest

TEXTS = [
    "supply rises when prices rise .",
    "demand falls when prices rise .",
    "a market clears at the equilibrium price .",
    "taxes raise the price buyers pay .",
    "firms enter a market when profits are high .",
    "the central bank sets the interest rate .",
] * 4


def test_an_arm_trains_its_steps_and_clocks_each(tmp_path):
    from bench.bench_train_speed import ARMS, train_arm
    from ctxsim.models.training.sentence_encoder import build_model
    from ctxsim.models.training.tiny_backbone import build_tiny_bert

    bert = build_tiny_bert(
        TEXTS,
        tmp_path / "bert",
        vocab_size=160,
        hidden_size=32,
        layers=1,
        heads=2,
        max_seq_length=32,
        seed=0,
    )
    build_model(str(bert), 32, "cpu").save(str(tmp_path / "st"))
    examples = {"anchor": TEXTS[:8], "positive": TEXTS[1:9]}
    bf16, compiled, batches, *_ = ARMS["float32 eager"]
    res = train_arm(examples, str(tmp_path / "st"), bf16, compiled, batches, 3, 2, 1)
    assert len(res["per_step"]) == 3 and all(t >= 0 for t in res["per_step"])
    assert res["total"] >= sum(res["per_step"]) * 0.5
    assert res["loss"] is not None and math.isfinite(res["loss"])
    assert 0 < res["real"] < res["tokens"]  # texts of unequal length: some padding
    *_, attention, dropout, frozen, masks = ARMS["bf16, eager attention, dropout masks from bytes"]
    cheap = train_arm(
        examples,
        str(tmp_path / "st"),
        False,
        False,
        batches,
        2,
        2,
        1,
        attention,
        dropout,
        frozen,
        masks,
    )
    assert len(cheap["per_step"]) == 2 and math.isfinite(cheap["loss"])

    # one short and one long text of each length, 8 of each: grouped, a batch pads far less
    short, long_ = "prices rise .", " ".join(TEXTS[:4])
    mixed = {"anchor": [short, long_] * 8, "positive": [long_, short] * 8}
    fed = {}
    for batches in ("random", "length"):
        got = train_arm(mixed, str(tmp_path / "st"), False, False, batches, 4, 4, 1)
        fed[batches] = got["real"] / got["tokens"]
    assert fed["length"] > fed["random"]
    # the token cap (--max-seq-lengths): the long texts are cut, so a step feeds fewer tokens
    steps, batch, cap = 2, 4, 8
    capped, whole = (
        train_arm(mixed, str(tmp_path / "st"), False, False, "random", steps, batch, 1, **kw)
        for kw in ({"max_seq_length": cap}, {})
    )
    assert capped["tokens"] <= steps * 2 * batch * cap < whole["tokens"]


def test_a_steps_flops_are_what_torchs_flop_counter_counts():
    """train_flops against torch's own count of a BERT-shaped encoder's forward and backward
    (eager attention, so its two products are counted; no pooler, as sentence-transformers
    never trains it), whole and with its lowest layer fixed: the same count."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import BertConfig, BertModel

    from bench.bench_train_speed import train_flops

    cfg = BertConfig(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        attn_implementation="eager",
    )
    model = BertModel(cfg, add_pooling_layer=False)
    ids = torch.randint(0, 100, (4, 48))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids).last_hidden_state.sum().backward()
    assert train_flops(4, 48, cfg) == pytest.approx(counter.get_total_flops(), rel=0.01)
    # the embeddings and the lowest layer fixed (train.freeze_layers: 1): no backward below
    for param in [*model.embeddings.parameters(), *model.encoder.layer[0].parameters()]:
        param.requires_grad_(False)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids).last_hidden_state.sum().backward()
    assert train_flops(4, 48, cfg, 1) == pytest.approx(counter.get_total_flops(), rel=0.01)


def test_the_before_arm_makes_the_attentions_probabilities_float32_again(monkeypatch):
    """The arm that measures the attention as it was: under bf16 autocast its probabilities are
    float32 (the float32 mask promotes the scores), the recipe's are bf16."""
    import torch

    from bench.bench_train_speed import _float32_probabilities
    from ctxsim.models.training import dropout as cheap

    module = torch.nn.Module().eval()
    q = k = v = torch.randn(1, 2, 4, 8)
    mask = torch.zeros(1, 1, 4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, now = cheap.eager_attention(module, q, k, v, mask)
    monkeypatch.setattr(cheap, "_in_dtype", cheap._in_dtype)  # restored after the test
    _float32_probabilities()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, before = cheap.eager_attention(module, q, k, v, mask)
    assert before.dtype == torch.float32 and now.dtype == torch.bfloat16
