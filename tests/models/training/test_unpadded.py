"""models/training/unpadded.py: a BERT stack on real tokens only is the padded stack's function
with its dropout draws (train.unpad), and where it does not apply it says so."""

from __future__ import annotations

import copy

import pytest
import torch

TEXTS = ["a man plays the guitar .", "the dog runs in the park today .", "a woman eats ."]


def _bert(**extra):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        attn_implementation="eager",
        **extra,
    )
    return BertModel(cfg, add_pooling_layer=False)


def _batch():
    ids = torch.randint(1, 100, (4, 9), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(4, 9, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    return ids.masked_fill(mask == 0, 0), mask


def _run(model, ids, mask, seed):
    torch.manual_seed(seed)
    out = model(input_ids=ids, attention_mask=mask).last_hidden_state
    (out * mask[..., None]).pow(2).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return out.detach(), grads


@pytest.mark.parametrize("masks", ["torch", "bytes"])
@pytest.mark.parametrize("training", [False, True])
def test_the_unpadded_stack_is_the_padded_function_with_the_same_dropout_draws(masks, training):
    """Real tokens' vectors and every gradient as the padded stack's (training: the same dropout
    masks from the same seed, torch's and the byte masks alike); padding rows are zeros."""
    from ctxsim.models.training.dropout import use_cheap_dropout
    from ctxsim.models.training.unpadded import use_unpadded_layers

    padded = _bert()
    if masks == "bytes":
        use_cheap_dropout(padded)
    packed = copy.deepcopy(padded)
    use_unpadded_layers(packed)
    padded.train(training)
    packed.train(training)
    ids, mask = _batch()
    a, grads_a = _run(padded, ids, mask, seed=7)
    b, grads_b = _run(packed, ids, mask, seed=7)
    real = mask.bool()
    assert torch.allclose(a[real], b[real], atol=1e-5)
    assert torch.count_nonzero(b[~real]) == 0
    assert grads_a.keys() == grads_b.keys()
    for name, grad in grads_a.items():
        assert torch.allclose(grad, grads_b[name], atol=1e-4), name
    if training:  # dropout did draw: another seed gives other vectors
        c, _ = _run(packed, ids, mask, seed=8)
        assert not torch.allclose(b[real], c[real], atol=1e-3)


def test_a_batch_without_padding_runs_the_padded_stack():
    from ctxsim.models.training.unpadded import use_unpadded_layers

    padded = _bert().eval()
    packed = copy.deepcopy(padded)
    use_unpadded_layers(packed)
    ids, _ = _batch()
    full = torch.ones_like(ids)
    a = padded(input_ids=ids, attention_mask=full).last_hidden_state
    b = packed(input_ids=ids, attention_mask=full).last_hidden_state
    assert torch.equal(a, b)


def test_a_backbone_that_is_not_a_bert_encoder_is_refused_by_name():
    from ctxsim.models.training.unpadded import unpaddable, use_unpadded_layers

    decoder = _bert(is_decoder=True)
    assert unpaddable(_bert()) and not unpaddable(decoder)
    with pytest.raises(ValueError, match="train.unpad: only a BERT-shaped encoder"):
        use_unpadded_layers(decoder)
    with pytest.raises(ValueError, match="train.unpad"):
        use_unpadded_layers(torch.nn.Linear(2, 2))


@pytest.fixture(scope="module")
def backbone(tmp_path_factory):
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.train import TrainParams

    p = TrainParams(tiny_vocab_size=120, max_seq_length=16)
    return build_tiny_backbone(TEXTS * 4, tmp_path_factory.mktemp("bb") / "backbone", p, 0)


def test_train_unpad_auto_is_on_for_a_bert_on_cpu_only_and_encodes_alike(backbone, tmp_path):
    """train.unpad auto (the adapt recipe's) unpads a BERT-shaped backbone on CPU, not on a GPU;
    the student encodes as the padded one does, and the saved model is a plain one."""
    import numpy as np

    from ctxsim.models.training.sentence_encoder import build_model, build_student, training_unpad

    student = build_student(str(backbone), 16, "cpu", attention="eager", unpad="auto")
    bert = student[0].auto_model
    assert training_unpad("auto", "cpu", bert)
    assert not training_unpad("auto", "cuda:0", bert)
    assert not training_unpad(False, "cpu", bert) and training_unpad(True, "cuda:0", bert)
    assert "forward" in vars(bert.encoder)  # the instance's own, not the class's
    plain = build_student(str(backbone), 16, "cpu", attention="eager")
    assert "forward" not in vars(plain[0].auto_model.encoder)
    a = student.encode(TEXTS, convert_to_numpy=True)
    b = plain.encode(TEXTS, convert_to_numpy=True)
    assert np.allclose(a, b, atol=1e-5)
    student.save(str(tmp_path / "st"))
    again = build_model(str(tmp_path / "st"), 16, "cpu")
    assert "forward" not in vars(again[0].auto_model.encoder)
    assert np.allclose(again.encode(TEXTS, convert_to_numpy=True), a, atol=1e-5)
