"""The train stage's checkpoints are checked caches: each one is sealed with a
sha256 of its files when the trainer saves it; a resume checks it first, and one whose bytes
changed is moved aside with a warning, the resume taking an earlier good one, or starting over.
"""

from __future__ import annotations

import json

import pytest
from transformers import TrainerCallback

import ctxsim.tasks.train as T
import ctxsim.tasks.train.trainer as trainer
from ctxsim.store.stage import resolve_stage, run_stage_locally
from tests.tasks.test_train_evaluate import train_setup


class _Boom(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        if state.global_step == 5:
            raise RuntimeError("simulated crash")


def _setup(root):
    store, run, label, _, params = train_setup(root, eval_steps=2)
    return store, run, label, params


def _train(store, run, label, params):
    art, _ = run_stage_locally(resolve_stage(T.TrainStage(), params, run, store, {"label": label}))
    return art, json.loads((art.files_dir / "metrics.json").read_text())


def _crash(store, run, label, params, monkeypatch):
    """Train until a crash after step 5: checkpoints 2 and 4 are saved and sealed."""
    monkeypatch.setattr(trainer, "extra_callbacks", lambda: [_Boom()])
    with pytest.raises(RuntimeError, match="simulated crash"):
        _train(store, run, label, params)
    monkeypatch.setattr(trainer, "extra_callbacks", lambda: [])
    (ckpt_dir,) = store.root.glob("_cache/train/*/checkpoints")
    ckpts = {d.name: d for d in ckpt_dir.glob("checkpoint-*") if d.is_dir()}
    assert set(ckpts) == {"checkpoint-2", "checkpoint-4"}
    assert all((ckpt_dir / f"{name}.sha256").is_file() for name in ckpts)  # sealed
    return ckpt_dir


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_latest_checkpoint_is_moved_aside_and_training_resumes_from_an_earlier_one(
    tmp_path, monkeypatch, caplog
):
    store, run, label, params = _setup(tmp_path / "killed")
    ckpt_dir = _crash(store, run, label, params, monkeypatch)
    _flip(ckpt_dir / "checkpoint-4" / "model.safetensors")  # same size, bytes changed
    with caplog.at_level("INFO"):
        art, info = _train(store, run, label, params)
    assert "checkpoint-4: sha256 mismatch; moved to" in caplog.text
    assert f"train: resuming from {ckpt_dir / 'checkpoint-2'}" in caplog.text
    assert info["resumed"] is True and info["steps"] == 6
    # resuming from checkpoint 2 gives what a clean run gives
    clean = _setup(tmp_path / "clean")
    clean_art, clean_info = _train(*clean)
    assert info["best_dev_spearman"] == clean_info["best_dev_spearman"]
    assert (art.files_dir / "model" / "model.safetensors").read_bytes() == (
        clean_art.files_dir / "model" / "model.safetensors"
    ).read_bytes()


def test_all_checkpoints_corrupt_or_unsealed_restart_training(tmp_path, monkeypatch, caplog):
    store, run, label, params = _setup(tmp_path)
    ckpt_dir = _crash(store, run, label, params, monkeypatch)
    _flip(ckpt_dir / "checkpoint-4" / "optimizer.pt")
    (ckpt_dir / "checkpoint-2.sha256").unlink()  # killed between the save and its seal
    with caplog.at_level("INFO"):
        _, info = _train(store, run, label, params)
    assert "checkpoint-4: sha256 mismatch" in caplog.text
    assert "checkpoint-2: no checksum beside it" in caplog.text
    assert info["resumed"] is False and info["steps"] == 6
    assert not ckpt_dir.exists()  # checkpoints, moved-aside ones too, go once the model is saved


@pytest.mark.parametrize("logging_steps", [5])  # 3 passes too (a log at 3, then at 6)
def test_a_resumed_run_logs_the_losses_an_uninterrupted_one_logs(
    tmp_path, monkeypatch, logging_steps
):
    """Checkpoints every 2 steps, losses logged every 5: resumed from
    checkpoint 4, between two logs, the history (the train part) is byte-identical to an
    uninterrupted run's. Before, the loss logged after the resume was the mean of the steps
    since the resume alone (3.51 against 1.68 at step 5); the model was already identical."""
    store, run, label, params = _setup(tmp_path / "killed")
    params = params.model_copy(update={"logging_steps": logging_steps})
    _crash(store, run, label, params, monkeypatch)
    art, info = _train(store, run, label, params)
    assert info["resumed"] is True
    c_store, c_run, c_label, c_params = _setup(tmp_path / "clean")
    clean, _ = _train(c_store, c_run, c_label, c_params.model_copy(update=params.model_dump()))
    got, want = art.read_table().to_pylist(), clean.read_table().to_pylist()
    assert [r["train_loss"] is not None for r in want].count(True) >= 1
    assert got == want
    assert [p.read_bytes() for p in art.parts] == [p.read_bytes() for p in clean.parts]


def test_training_shows_a_step_bar_from_its_checkpoint_and_none_when_asked(
    tmp_path, monkeypatch, capsys
):
    """`train` shows steps done of max_steps with an ETA (a resume starts at its checkpoint's
    step); run.no_progress hides it."""
    store, run, label, params = _setup(tmp_path)
    _crash(store, run, label, params, monkeypatch)
    capsys.readouterr()
    _train(store, run, label, params)
    err = capsys.readouterr().err
    assert "train:" in err and "step" in err, err
    assert f"4/{params.max_steps}" in err, err  # resumed from checkpoint-4
    quiet_store, quiet_run, quiet_label, quiet_params = _setup(tmp_path / "quiet")
    quiet_run = quiet_run.model_copy(update={"no_progress": True})
    capsys.readouterr()
    _train(quiet_store, quiet_run, quiet_label, quiet_params)
    assert "train:" not in capsys.readouterr().err


def test_bf16_on_cpu_only_when_asked_and_the_cpu_has_it(monkeypatch):
    """train.bf16_cpu: bf16 autocast on a CPU with bf16 units; off by default and left out of
    the fingerprint there (existing train artefacts keep theirs)."""
    p = T.TrainParams()
    assert "bf16_cpu" not in p.model_dump()
    assert trainer.use_bf16(p, "cpu") is False
    on = T.TrainParams(bf16_cpu=True)
    monkeypatch.setattr(trainer, "cpu_has_bf16", lambda: True)
    assert trainer.use_bf16(on, "cpu") is True
    monkeypatch.setattr(trainer, "cpu_has_bf16", lambda: False)
    assert trainer.use_bf16(on, "cpu") is False  # a CPU without the units: float32
