"""Caches checked at read: a checkpoint, a tokenizer folder, explain's input
file carry a sha256 beside them; a mismatch is moved aside with a warning and computed again."""

from __future__ import annotations

import logging
import os

import torch

from ctxsim.store.checked import seal, sidecar, verified, write_checked

LOG = logging.getLogger("ctxsim.test.checked")


def _flip(path, at: int = -16) -> None:
    """Flip bytes in place and put the mtime back (what a bit rot or a stray write leaves)."""
    st = path.stat()
    raw = bytearray(path.read_bytes())
    raw[at:] = bytes(b ^ 0xFF for b in raw[at:]) if at < 0 else raw[at:]
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_checked_file_round_trips_and_a_flipped_one_is_moved_aside(tmp_path, caplog) -> None:
    ckpt = tmp_path / "checkpoint.pt"
    assert not verified(ckpt, "checkpoint", LOG)  # nothing cached yet: silently False
    write_checked(ckpt, lambda tmp: torch.save({"step": 3, "w": torch.arange(64.0)}, tmp))
    assert sidecar(ckpt).is_file() and verified(ckpt, "checkpoint", LOG)
    _flip(ckpt)
    with caplog.at_level("WARNING"):
        assert not verified(ckpt, "checkpoint", LOG)
    assert not ckpt.exists() and not sidecar(ckpt).exists()
    (aside,) = [p for p in tmp_path.glob("checkpoint.pt.corrupt-*") if p.suffix != ".sha256"]
    assert any(
        f"checkpoint {ckpt}: sha256 mismatch; moved to {aside}" in r.getMessage()
        for r in caplog.records
    )
    # a file without its checksum (written before the checks) is not trusted either
    torch.save({"step": 1}, ckpt)
    assert not verified(ckpt, "checkpoint", LOG) and not ckpt.exists()


def test_a_sealed_folder_is_checked_file_by_file(tmp_path) -> None:
    tok = tmp_path / "tokenizer"
    tok.mkdir()
    (tok / "vocab.txt").write_text("[PAD]\n[UNK]\nhello\n")
    (tok / "config.json").write_text("{}")
    seal(tok)
    assert verified(tok, "tokenizer", LOG)
    (tok / "vocab.txt").write_text("[PAD]\n[UNK]\nhellp\n")  # same size, one byte
    assert not verified(tok, "tokenizer", LOG) and not tok.exists()
    assert len([p for p in tmp_path.glob("tokenizer.corrupt-*") if p.is_dir()]) == 1


def test_the_discriminator_does_not_resume_from_a_corrupt_checkpoint(spine, tmp_path, caplog):
    """A checkpoint whose bytes changed is moved aside and training starts over (before, it was
    loaded as it was, or failed the stage)."""
    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks import load_stage
    from tests.models.contextual.tiny_scoring import TINY_DISCRIMINATOR as TINY

    stage = load_stage("discriminator")
    store = ArtefactStore(tmp_path)
    plan = resolve_stage(
        stage,
        stage.Params(**TINY),
        RunParams(root=str(tmp_path), device="cpu"),
        store,
        {i: spine[i] for i in stage.inputs},
    )
    ckpt = plan.context().cache_dir / "checkpoint.pt"
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    write_checked(ckpt, lambda tmp: torch.save({"epoch": 5, "junk": torch.zeros(8)}, tmp))
    _flip(ckpt)
    with caplog.at_level("WARNING"):
        art, _ = run_stage_locally(plan)
    assert 0.0 <= art.stats["val_auc"] <= 1.0
    assert any("discriminator checkpoint" in r.getMessage() for r in caplog.records)
    assert list(ckpt.parent.glob("checkpoint.pt.corrupt-*"))


def test_the_generator_checks_its_tokenizer_and_checkpoint_before_resuming(spine, tmp_path, caplog):
    """The generator's resume caches (the tiny backbone's tokenizer, the training checkpoint)
    are written with checksums; corrupted, both are moved aside and rebuilt, and the stage
    publishes the same rows as a clean run (training is seeded)."""
    import shutil

    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
    from ctxsim.tasks.generator import GeneratorStage
    from tests.scores.score_stage_helpers import tiny_generator_params

    params = tiny_generator_params()
    up = {k: spine[k] for k in ("shard", "contexts")}
    store = ArtefactStore(tmp_path)
    plan = resolve_stage(GeneratorStage(), params, RunParams(root=str(tmp_path)), store, up)
    art, _ = run_stage_locally(plan)
    clean = art.read_table()
    cache = plan.context().cache_dir
    assert verified(cache / "tokenizer", "tokenizer", LOG)
    assert verified(cache / "checkpoint.pt", "checkpoint", LOG)
    shutil.rmtree(art.path)  # as if the run had died before publishing: resume from the cache
    vocab = next(p for p in (cache / "tokenizer").iterdir() if p.suffix in (".json", ".txt"))
    _flip(vocab, -4)
    _flip(cache / "checkpoint.pt")
    with caplog.at_level("WARNING"):
        again, reused = run_stage_locally(plan)
    assert not reused
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert f"tokenizer {cache / 'tokenizer'}: sha256 mismatch" in warned
    assert f"generator checkpoint {cache / 'checkpoint.pt'}: sha256 mismatch" in warned
    assert again.read_table().equals(clean)


def test_a_torch_checkpoint_resumes_only_when_its_seal_matches(tmp_path, caplog) -> None:
    """torch_checkpoint: absent -> None; saved -> the same state back; a changed file -> moved
    aside with a warning and None (the loop starts over instead of loading a torn state)."""
    import logging

    import torch

    from ctxsim.store.checked import torch_checkpoint

    log = logging.getLogger("t")
    path = tmp_path / "checkpoint.pt"
    state, save = torch_checkpoint(path, "test checkpoint", log)
    assert state is None
    save({"step": 3, "w": torch.ones(2)})
    state, _ = torch_checkpoint(path, "test checkpoint", log)
    assert state is not None and state["step"] == 3 and torch.equal(state["w"], torch.ones(2))
    path.write_bytes(path.read_bytes()[:-1] + b"x")
    with caplog.at_level(logging.WARNING):
        state, _ = torch_checkpoint(path, "test checkpoint", log)
    assert state is None and not path.exists() and "sha256 mismatch" in caplog.text
