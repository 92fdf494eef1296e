"""Distilling a small causal scorer from a larger one."""

from __future__ import annotations

import pytest
import torch

from ctxsim.models.contextual.generator import (
    DIRECTIONS,
    CausalPrefixScorer,
    TinyConfig,
    eq3_example,
    tiny_causal,
    train_wordpiece_tokenizer,
)
from ctxsim.models.contextual.generator.distill import (
    distill_loss,
    student_like,
    teacher_agreement,
    teacher_embedding_projection,
)
from ctxsim.models.contextual.generator_training import TrainConfig, train_generator
from tests.conftest import run_spine

WORDS = [f"w{i}" for i in range(12)]


def _windows():
    def w(k: int) -> str:
        return f"w{k % 12}"

    return [
        tuple(" ".join(w(k + 2 * part + i) for i in range(2)) for part in range(3))
        for k in range(12)
    ]


def _examples(sc, directions=DIRECTIONS):
    cache: dict = {}
    return [
        (d, *sc.example_ids(d, *eq3_example(d, *win), cache))
        for win in _windows()
        for d in directions
    ]


@pytest.fixture(scope="module")
def teacher():
    """A tiny causal LM that has learnt the 'w0 w1 | w2 w3 | w4 w5' progression."""
    tok = train_wordpiece_tokenizer([], vocab=WORDS)
    sc = CausalPrefixScorer(tiny_causal(tok, TinyConfig(32, 1, 2, 64), seed=0), tok)
    cfg = TrainConfig(steps=40, batch_size=12, lr=1e-2, warmup_steps=4)
    train_generator(sc, _examples(sc), cfg)
    return sc


def _mean_kl(student, teacher, ex) -> float:
    with torch.inference_mode():
        src, tgt = [e[1] for e in ex], [e[2] for e in ex]
        s, _, _ = student.target_logits(src, tgt)
        t, _, _ = teacher.target_logits(src, tgt)
        kl = torch.nn.functional.kl_div(
            s.log_softmax(-1), t.log_softmax(-1), log_target=True, reduction="batchmean"
        )
    return float(kl)


def test_projection_keeps_inner_products():
    torch.manual_seed(0)
    low_rank = torch.randn(50, 4) @ torch.randn(4, 16)  # rank 4 in 16 dimensions
    proj = teacher_embedding_projection(low_rank, 4)
    assert proj.shape == (50, 4)
    gram, gram_p = low_rank @ low_rank.T, proj @ proj.T
    scale = float((gram * gram_p).sum() / (gram_p * gram_p).sum())  # the rescaling only
    torch.testing.assert_close(gram_p * scale, gram, rtol=1e-3, atol=1e-3)


def test_distill_loss_is_zero_at_the_teacher_and_mixes_in_the_ce():
    torch.manual_seed(0)
    logits, labels = torch.randn(5, 7), torch.randint(0, 7, (5,))
    kl, nll = distill_loss(logits, logits.clone(), labels, temperature=2.0, alpha=1.0)
    assert float(kl) == pytest.approx(0.0, abs=1e-5)
    ce = torch.nn.functional.cross_entropy(logits, labels, reduction="sum")
    assert float(nll) == pytest.approx(float(ce), rel=1e-6)
    mixed, _ = distill_loss(logits, logits.clone(), labels, alpha=0.25)
    assert float(mixed) == pytest.approx(0.75 * float(ce), rel=1e-5)
    with pytest.raises(ValueError, match="share a vocabulary"):
        distill_loss(logits, torch.randn(5, 8), labels)


def test_student_learns_the_teachers_slots_from_its_distributions_alone(teacher):
    """alpha 1: no cross-entropy on the text, only the teacher's distributions; the student
    still ends up preferring each window's own right slot, ranks windows as the teacher does,
    and two seeded runs give the same weights."""
    ex = _examples(teacher, ["right"])
    cfg = TrainConfig(steps=60, batch_size=12, lr=1e-2, warmup_steps=4, distill_alpha=1.0)
    students = []
    for _ in range(2):
        st = student_like(teacher, TinyConfig(16, 1, 2, 32), seed=3)
        assert st.tokenizer is teacher.tokenizer and st.templates == teacher.templates
        before = _mean_kl(st, teacher, ex)
        train_generator(st, ex, cfg, teacher=teacher)
        students.append(st)
    after = _mean_kl(students[0], teacher, ex)
    assert after < 0.25 * before, (before, after)
    srcs, good, bad = [], [], []
    for win in _windows():
        src, tgt = eq3_example("right", *win)
        srcs.append(src)
        good.append(tgt)
        bad.append(win[0])
    st = students[0]
    assert (st.log_prob("right", srcs, good) > st.log_prob("right", srcs, bad)).mean() >= 0.9
    # windows with their own right slot and with a wrong one: the teacher tells them apart
    cache: dict = {}
    mixed = [
        ("right", *st.example_ids("right", src, t, cache))
        for src, g, b in zip(srcs, good, bad, strict=True)
        for t in (g, b)
    ]
    assert teacher_agreement(st, teacher, mixed) > 0.5
    for p1, p2 in zip(students[0].parameters(), students[1].parameters(), strict=True):
        torch.testing.assert_close(p1, p2)


def test_distillation_needs_the_teachers_vocabulary(teacher):
    other = train_wordpiece_tokenizer([], vocab=WORDS[:6])
    student = CausalPrefixScorer(tiny_causal(other, TinyConfig(16, 1, 2, 32)), other)
    with pytest.raises(ValueError, match="teacher's tokenizer"):
        train_generator(student, _examples(student), TrainConfig(steps=1), teacher=teacher)


def test_distill_params_name_their_key(tmp_path):
    from pydantic import ValidationError

    from ctxsim.tasks.generator import GeneratorParams

    with pytest.raises(ValidationError, match="distill_from needs backend: causal"):
        GeneratorParams(backend="causal", backbone="smollm2-135m", distill_from="smollm2-135m")
    with pytest.raises(ValidationError, match="distill_from"):
        GeneratorParams(backend="causal", distill_from=str(tmp_path / "no-such-teacher"))


def test_generator_stage_distils_and_reports_agreement(teacher, tmp_path):
    from ctxsim.scores.loading import load_scorer

    path = tmp_path / "teacher"
    teacher.model.save_pretrained(path)
    teacher.tokenizer.save_pretrained(path)
    arts = run_spine(
        tmp_path / "root",
        {
            "generator.backend": "causal",
            "generator.backbone": "tiny-random",
            "generator.distill_from": f"'{path}'",
            "generator.train_directions": "[right]",
            "generator.tiny_hidden": 16,
            "generator.tiny_layers": 1,
            "generator.train_steps": 3,
            "generator.max_val_windows": 20,
            "generator.n_eval": 0,
        },
        until="generator",
    )
    stats = arts["generator"].stats
    assert stats["teacher"] == str(path) and stats["teacher_n_params"] > stats["n_params"]
    assert -1.0 <= stats["teacher_spearman_right"] <= 1.0
    assert "teacher_spearman_fwd" not in stats  # only the trained direction
    student, meta = load_scorer(arts["generator"].files_dir)
    assert meta["distilled_from"] == str(path) and meta["weights"] == "artefact"
    assert student.vocab_size == teacher.vocab_size
