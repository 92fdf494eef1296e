"""``train.context_swap_share``: the labels choose right contexts too. Of the labelled pairs
with the highest labels, that share has each sentence take its partner's right context as one
more positive of the context part; a missing context or a pair of one text gives none; the key
is refused where there are no right contexts beside the labels, and at 0 keeps the
fingerprint."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from tests.models.training.test_context_objective import train_on_context


def _pairs(s1, s2, labels, source=None):
    """Training pairs of these texts and labels (``source``: the label table's column)."""
    from ctxsim.models.training.objectives import TrainingPairs

    table = pa.table({"source": source}) if source is not None else pa.table({})
    return TrainingPairs(list(s1), list(s2), np.asarray(labels), np.arange(len(s1)), table, "L")


def test_the_highest_labelled_pairs_swap_their_right_contexts_both_ways():
    from ctxsim.models.training.objectives.ctxsim_context import swapped_contexts

    pairs = _pairs(["a", "b", "c", "d"], ["w", "x", "y", "d"], [0.9, 0.1, 0.7, 0.95])
    c1, c2 = ["ca", "cb", None, "cd"], ["cw", "cx", "cy", "cd"]
    # half of four pairs: rows 3 (one text twice: no swap) and 0; row 2 next is left out
    assert swapped_contexts(pairs, c1, c2, 0.5) == (["a", "w"], ["cw", "ca"])
    # all of them: row 2's first sentence has no right context to give its partner
    got = swapped_contexts(pairs, c1 + ["extra"], c2 + ["extra"], 1.0)
    assert got == (["a", "w", "b", "x", "c"], ["cw", "ca", "cx", "cb", "cy"])
    assert swapped_contexts(pairs, c1, c2, 0.0) == ([], [])


@pytest.mark.parametrize("key", ["context_swap_share", "context_hard_negative_share"])
def test_the_share_is_refused_without_right_contexts_and_kept_out_of_the_fingerprint(key):
    """The swaps' share, and the hard negatives' (tests/models/training/
    test_context_hard_negatives.py): both need labels beside right contexts."""
    from ctxsim.flows.config import ConfigError, load_config
    from ctxsim.tasks.train import TrainParams

    assert key not in TrainParams(objective="ctxsim-context").model_dump()
    p = TrainParams(objective="ctxsim-context", **{key: 0.25})
    assert p.model_dump()[key] == pytest.approx(0.25)
    for objective in ("ctxsim", "context", "joint"):
        with pytest.raises(ConfigError) as e:
            sets = [f"train.objective={objective}", f"train.{key}=0.25"]
            load_config(None, sets, stages=["train"])
        assert f"train.{key}" in str(e.value) and "ctxsim-context" in str(e.value)


def spied_training(root, monkeypatch, **overrides) -> tuple[dict, list]:
    """A ctxsim-context training of the fixture (4 steps, CoSENT): its metrics and the
    multi-dataset sampler setting each call of ``training_args`` returned."""
    from ctxsim.tasks.train import stage

    samplers = []
    training_args = stage.training_args

    def spy(*args, **kw):
        out = training_args(*args, **kw)
        samplers.append(out.multi_dataset_batch_sampler)
        return out

    monkeypatch.setattr(stage, "training_args", spy)
    kw = {"objective": "ctxsim-context", "loss": "cosent", "max_steps": 4} | overrides
    art = train_on_context(root, **kw)
    return json.loads((art.files_dir / "metrics.json").read_text()), samplers


def test_the_swapped_contexts_join_the_right_contexts_of_a_training(tmp_path, monkeypatch):
    """The fixture's four pairs (all labels equal): the two questions swap their answers, the
    section's last sentence takes the cat question's answer, the STS sentence the dog's; the
    labels keep the share of the batches they had before the swaps (4 of 4 + 2)."""
    info, samplers = spied_training(tmp_path, monkeypatch, context_swap_share=1.0)
    assert info["n_train_examples"] == 4 + 2 + 4  # labelled pairs, own contexts, swapped ones
    assert samplers[0].shares == pytest.approx((4 / 6, 2 / 6))
    spied_training(tmp_path / "plain", monkeypatch, max_steps=2)
    assert samplers[-1] == "proportional"  # no swaps: the library's draw by the parts' sizes


def test_the_objectives_share_reaches_the_trainer_unless_the_config_sets_one(tmp_path):
    from ctxsim.models.training.batches import SharedBatches
    from ctxsim.tasks.train import TrainParams
    from ctxsim.tasks.train.trainer import training_args

    p = TrainParams(objective="ctxsim-context", context_swap_share=0.25)
    args = training_args(p, tmp_path / "a", 10, "cpu", 0, False, None, 0.4)
    assert args.multi_dataset_batch_sampler == SharedBatches((0.4, 0.6))
    p = TrainParams(objective="ctxsim-context", context_swap_share=0.25, label_share=0.7)
    args = training_args(p, tmp_path / "b", 10, "cpu", 0, False, None, 0.4)
    assert args.multi_dataset_batch_sampler == SharedBatches((0.7, pytest.approx(0.3)))


def test_only_section_openers_give_their_context_when_asked(tmp_path):
    """``context_swap_partners: leads``: a partner gives its right context only when it opens
    its section (a question: its context is its answer). Query 2 placed on the cat answer's
    body sentence: with all partners it gives its context to two sentences, with leads to
    none."""
    from ctxsim.models.training.objectives.ctxsim_context import section_openers

    class Oc:
        def read_input(self, stage, columns):
            return pa.table({"sent_id": [4, 0, 1, 2, 3, 5], "section_id": [1, 0, 0, 0, 1, 1]})

    assert section_openers(Oc()) == {0, 3}
    n = _examples_by_partners(tmp_path, {0: 0, 1: 3, 2: 1, 3: None}, ("all", "leads"))
    assert n == {"all": 4 + 3 + 6, "leads": 4 + 3 + 4}


def _examples_by_partners(tmp_path, query_sent, partners_values) -> dict[str, int]:
    """Training examples of a swapping run (every pair swaps) for each partners value."""
    n = {}
    for partners in partners_values:
        art = train_on_context(
            tmp_path / partners,
            query_sent=query_sent,
            objective="ctxsim-context",
            loss="cosent",
            max_steps=2,
            context_swap_share=1.0,
            context_swap_partners=partners,
        )
        n[partners] = json.loads((art.files_dir / "metrics.json").read_text())["n_train_examples"]
    return n


def test_a_question_gives_its_context_with_the_questions_partners(tmp_path):
    """``context_swap_partners: questions``: the leads, and any partner whose text is a
    question. Query 0 ("what is a cat ?") placed on the cat section's body sentence 1 (its right
    context "cats sleep a lot ."): not a lead, so with leads it gives nothing; as a question it
    gives its context to its two partners (queries 1 and 2), as with every partner."""
    partners = ("all", "leads", "questions")
    n = _examples_by_partners(tmp_path, {0: 1, 1: 3, 2: 2, 3: None}, partners)
    own = 4 + 2  # labelled pairs, the two queries with a right context (0 and 1)
    assert n == {"all": own + 4, "leads": own + 2, "questions": own + 4}
