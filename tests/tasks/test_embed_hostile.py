"""The `embed` stage under hostile input: shard files changed after their shard
finished, a length setting beyond the model, a full disk while the adapted encoder is written,
and a concurrent run that builds the same adapted encoder."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ctxsim.models.contextual.encoder_origin import ScatterStats
from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.stage import (
    RunParams,
    compute_shard,
    publish_stage,
    resolve_stage,
    run_stage_locally,
)
from ctxsim.tasks.embed import (
    ADAPTED_DIR,
    FILE_SUMS,
    SCATTER_FILE,
    EmbedParams,
    EmbedStage,
    read_embeddings,
    shard_files,
)
from tests.tasks.tiny_encoder import build_tiny_encoder

#: a full disk as safetensors reports it: its own error class, the OS's words in the message
ENOSPC_TEXT = (
    'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left '
    'on device" })'
)


@pytest.fixture(scope="module")
def encoder(spine, tmp_path_factory):
    texts = spine["shard"].read_table(["text"]).column("text").to_pylist()[:400]
    return build_tiny_encoder(texts, tmp_path_factory.mktemp("enc-hostile") / "tiny-st")


def _plan(spine, root: Path, encoder: Path, **params):
    params = {"model": str(encoder), "n_shards": 2, "max_seq_length": 16, **params}
    up = {"shard": spine["shard"], "contexts": spine["contexts"]}
    return resolve_stage(
        EmbedStage(), EmbedParams(**params), RunParams(device="cpu"), ArtefactStore(root), up
    )


@pytest.fixture(scope="module")
def clean(spine, encoder, tmp_path_factory):
    """The embeddings and scatter an untouched run publishes."""
    art = run_stage_locally(_plan(spine, tmp_path_factory.mktemp("clean"), encoder))[0]
    return read_embeddings(art), ScatterStats.load(art.files_dir / SCATTER_FILE)


def _swap_in_another_corpus_scatter(spine, encoder, plan, tmp_path, monkeypatch) -> str:
    other = _plan(spine, tmp_path / "other", encoder, unit="window")  # other units
    compute_shard(other, 1)
    theirs = shard_files(other.context().files_dir, 1)[1]
    ours = shard_files(plan.context().files_dir, 1)[1]
    assert ScatterStats.load(theirs).n != ScatterStats.load(ours).n  # valid, and another's
    shutil.copy(theirs, ours)
    return "scatter-00001.npz does not match the sha256"


def _flip_a_byte_of_the_embeddings(spine, encoder, plan, tmp_path, monkeypatch) -> str:
    emb = shard_files(plan.context().files_dir, 1)[0]
    data = bytearray(emb.read_bytes())
    data[-3] ^= 0x10  # in the last float: a finite, wrong value
    emb.write_bytes(bytes(data))
    return "emb-00001.npy does not match the sha256"


def _a_record_without_checksums(spine, encoder, plan, tmp_path, monkeypatch) -> str:
    marker = plan.store.partial_dir("embed", plan.fingerprint) / "_shard-00001.json"
    info = json.loads(marker.read_text())
    del info["stats"][FILE_SUMS]
    marker.write_text(json.dumps(info))
    return "no checksum in the shard's record"


@pytest.mark.parametrize(
    "tamper",
    [_swap_in_another_corpus_scatter, _flip_a_byte_of_the_embeddings, _a_record_without_checksums],
    ids=["swapped-scatter", "flipped-embedding-byte", "record-without-checksums"],
)
def test_a_finished_shards_changed_file_is_moved_aside_and_recomputed(
    spine, encoder, clean, tmp_path, monkeypatch, caplog, tamper
):
    """A valid scatter of another corpus in the partial folder was published
    under this corpus's fingerprint, a flipped byte in the embeddings published as is."""
    plan = _plan(spine, tmp_path / "root", encoder)
    infos = [compute_shard(plan, s) for s in range(2)]
    assert all(FILE_SUMS in i["stats"] for i in infos)
    why = tamper(spine, encoder, plan, tmp_path, monkeypatch)
    with caplog.at_level(logging.WARNING):
        art = run_stage_locally(plan)[0]
    emb, scatter = clean
    np.testing.assert_array_equal(read_embeddings(art), emb)
    got = ScatterStats.load(art.files_dir / SCATTER_FILE)
    assert got.n == scatter.n and np.array_equal(got.outer, scatter.outer)
    aside = list((tmp_path / "root" / "embed").glob(f".corrupt-{plan.fingerprint}-shard-00001-*"))
    assert len(aside) == 1 and why in (aside[0] / "_WHY").read_text()
    assert any(
        "shard 1" in r.getMessage() and "recomputing" in r.getMessage() for r in caplog.records
    )
    assert not any(".corrupt" in f["file"] for f in art.manifest["files"])


def test_a_nan_shard_is_recomputed_on_the_next_run_instead_of_failing_every_time(
    spine, encoder, clean, tmp_path, monkeypatch
):
    """A shard whose encoder gave NaN once: refused (after one more try), and the next run
    recomputes it instead of failing the same way on every rerun."""
    import ctxsim.tasks.embed as embed

    real = embed.encode

    def poisoned(*a, **kw):
        out = real(*a, **kw)
        out[0, 0] = np.nan
        return out

    plan = _plan(spine, tmp_path / "root", encoder)
    monkeypatch.setattr(embed, "encode", poisoned)
    with pytest.raises(embed.EncoderInputError, match="not finite"):
        run_stage_locally(plan)
    monkeypatch.setattr(embed, "encode", real)
    art = run_stage_locally(plan)[0]
    np.testing.assert_array_equal(read_embeddings(art), clean[0])
    assert list((tmp_path / "root" / "embed").glob(f".corrupt-{plan.fingerprint}-shard-*"))


def test_max_seq_length_beyond_the_model_is_one_line_before_anything_runs(encoder, tmp_path):
    """Embed.max_seq_length=4096 on MiniLM was a 779-line RuntimeError at
    embed; the CLI now refuses the config at load, naming the key, and creates nothing."""
    from ctxsim.flows.cli import app

    root = tmp_path / "root"
    config = tmp_path / "c.yaml"
    config.write_text(f"embed:\n  model: {encoder}\n  max_seq_length: 4096\n")
    res = CliRunner().invoke(app, ["run", "--config", str(config), "--root", str(root)])
    lines = res.output.strip().splitlines()
    assert res.exit_code != 0 and len(lines) == 1, res.output
    assert "embed.max_seq_length=4096 is more than the 64 token positions" in lines[0]
    assert not root.exists()


def _full_disk_on_safetensors(monkeypatch) -> None:
    """Every safetensors write of transformers and sentence-transformers fails as on ENOSPC."""
    import sentence_transformers.base.modules.module as st_module
    import transformers.modeling_utils as mu
    from safetensors import SafetensorError

    def full(*a, **kw):
        raise SafetensorError(ENOSPC_TEXT)

    monkeypatch.setattr(mu, "safe_save_file", full)
    monkeypatch.setattr(st_module, "save_safetensors_model", full)


def test_a_full_disk_while_the_adapted_encoder_is_written_is_one_line(
    spine, encoder, tmp_path, monkeypatch
):
    """Safetensors' SafetensorError on a full disk gave 248 lines: the
    disk-full check knew only OSError. Now the CLI's one line, and no partial folder left."""
    from safetensors import SafetensorError

    from ctxsim.flows.cli_errors import disk_full

    plan = _plan(spine, tmp_path / "root", encoder)
    _full_disk_on_safetensors(monkeypatch)
    with pytest.raises(SafetensorError) as err:
        run_stage_locally(plan)
    line = disk_full(err.value, tmp_path / "root")
    assert line is not None and "\n" not in line
    assert line.startswith("no space left on the file system at /")
    assert line.endswith("free space there and rerun to resume")
    assert not list((tmp_path / "root" / "embed").rglob("*.partial"))
    assert disk_full(SafetensorError("Error while serializing: invalid header"), tmp_path) is None


def test_a_second_build_of_the_same_adapted_encoder_is_reused(
    spine, encoder, clean, tmp_path, caplog
):
    """A second build rebuilt the 88 MB model; now it is reused, said so,
    and nothing is left beside it."""
    from ctxsim.product.adapted import build_adapted_encoder

    m = clean[1].matrix(centred=True)
    out = tmp_path / "adapted"
    with caplog.at_level(logging.INFO):
        build_adapted_encoder(encoder, m, out, card_text="# card\n", meta={"k": 1})
        first = (out / "modules.json").stat().st_mtime_ns
        caplog.clear()
        build_adapted_encoder(encoder, m, out, card_text="# card\n", meta={"k": 1})
    assert any("reused" in r.getMessage() for r in caplog.records)
    assert (out / "modules.json").stat().st_mtime_ns == first  # not written again
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapted"]


def test_a_losing_concurrent_build_removes_its_partial_folder_and_reuses_the_winner(
    spine, encoder, clean, tmp_path, caplog, monkeypatch
):
    import ctxsim.product.adapted as adapted

    m = clean[1].matrix(centred=True)
    out = tmp_path / "adapted"
    adapted.build_adapted_encoder(encoder, m, out, meta={"k": 1})  # the winner
    first = (out / "modules.json").stat().st_mtime_ns
    real, calls = adapted.adapted_problem, []

    def not_there_yet(*a, **kw):  # the loser looked before the winner's rename
        calls.append(1)
        return "absent" if len(calls) == 1 else real(*a, **kw)

    monkeypatch.setattr(adapted, "adapted_problem", not_there_yet)
    with caplog.at_level(logging.INFO):
        adapted.build_adapted_encoder(encoder, m, out, meta={"k": 1})
    assert len(calls) == 2 and (out / "modules.json").stat().st_mtime_ns == first
    assert any("reused" in r.getMessage() for r in caplog.records)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapted"]


def test_a_run_that_finishes_after_a_concurrent_publish_builds_nothing(
    spine, encoder, tmp_path, caplog
):
    """The second of two concurrent embed runs built the adapted encoder again into a new
    partial folder (88 MB left behind): it now finds the artefact published and writes nothing."""
    plan = _plan(spine, tmp_path / "root", encoder)
    infos = [compute_shard(plan, s) for s in range(2)]
    won = run_stage_locally(plan)[0]  # the other run publishes first
    with caplog.at_level(logging.INFO):
        art = publish_stage(plan, 2, infos)  # this run, done with its shards, publishes
    assert art.path == won.path
    assert art.by_other and not won.by_other  # the pipeline's line: "reused (computed by ...)"
    plan.store.remove_empty_partial("embed", plan.fingerprint)  # what the pipeline does next
    leftovers = [p.name for p in (tmp_path / "root" / "embed").iterdir() if p != won.path]
    assert leftovers == []
    assert any("reused" in r.getMessage() for r in caplog.records)
    assert (won.files_dir / ADAPTED_DIR / "modules.json").exists()
