"""Upstream artefacts for the `generator` and `score` stage tests: a stand-in stage that
publishes a given table, the tiny generator's params, and a score stage's inputs."""

from __future__ import annotations


def publish_table(root, name: str, table, files=None):
    """Publish ``table`` as stage ``name``'s artefact under ``root``: a stand-in upstream
    stage (select, pairs, screen, discriminator); ``files(files_dir)`` adds its files."""
    import hashlib

    from ctxsim.store.artefacts import ArtefactStore
    from ctxsim.store.stage import (
        RunParams,
        Stage,
        StageParams,
        resolve_stage,
        run_stage_locally,
    )

    digest = hashlib.sha256(str(table.to_pydict()).encode()).hexdigest()

    class Fixed(Stage):
        def fingerprint_extra(self, params):
            return {"table": digest}

        def run_shard(self, ctx, shard):
            if files is not None:
                files(ctx.files_dir)
            return table, {}

    Fixed.name = name
    plan = resolve_stage(Fixed(), StageParams(), RunParams(root=str(root)), ArtefactStore(root), {})
    return run_stage_locally(plan)[0]


def tiny_generator_params():
    """A generator that trains 3 steps of a tiny backbone (a checkpoint every 2)."""
    from ctxsim.tasks.generator import GeneratorParams

    return GeneratorParams(
        train_steps=3,
        n_eval=12,
        max_train_windows=60,
        max_val_windows=30,
        tokenizer_vocab=300,
        tiny_hidden=32,
        tiny_intermediate=64,
        checkpoint_every=2,
    )


def score_inputs(spine, generator_art, root, cs: dict[int, list[int]], qids) -> dict:
    """Upstream artefacts of a score stage: the spine, the generator, context sets ``cs`` (query
    -> context ids in rank order) and the labelled pairs (q0, q1), (q2, q3)."""
    import pyarrow as pa

    select = pa.table(
        {
            "query_id": pa.array([a for a in cs for _ in cs[a]], pa.int64()),
            "context_id": pa.array([c for a in cs for c in cs[a]], pa.int64()),
            "position": pa.array([i for a in cs for i in range(len(cs[a]))], pa.int32()),
        }
    )
    pairs = pa.table(
        {
            "pair_id": pa.array([0, 1], pa.int64()),
            "s1_query_id": pa.array([int(qids[0]), int(qids[2])], pa.int64()),
            "s2_query_id": pa.array([int(qids[1]), int(qids[3])], pa.int64()),
        }
    )
    up = {k: spine[k] for k in ("queries", "contexts", "shard")}
    up["generator"] = generator_art[0]
    up["select"] = publish_table(root, "select", select)
    up["pairs"] = publish_table(root, "pairs", pairs)
    return up
