"""The one shape every stage has (in the spirit of datatrove's ``PipelineStep``).

A stage declares ``name``, ``version``, a pydantic ``Params`` model (its config section), the
upstream stage names it reads (``inputs``), how many shards it fans out to, and how to compute one
shard: ``run_shard(ctx, shard) -> (table, stats)``. The machinery here fingerprints it, skips it
when its artefact exists, skips finished shards after a crash, and publishes atomically.

Adding a stage: copy ``tasks/contexts.py`` (the smallest complete stage), change its class
attributes and ``run_shard``, and list it in ``tasks/__init__.py``. A stage that fans out like the
queries sets ``shard_by = "queries"`` and reads its rows with ``ctx.input_shard``; one-shard
stages return their stats as they are, sharded ones get numeric stats summed (``summarize``).
Per-process set-up (torch threads) happens here, once, before a shard is computed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator
from pydantic.fields import FieldInfo

from ctxsim.store.artefacts import Artefact, ArtefactStore, fingerprint
from ctxsim.store.cost_model import Constant, CostModel
from ctxsim.store.logs import get_logger

CTXSIM_VERSION = "0.1.0"


#: ``json_schema_extra`` marker of a performance knob (see ``knob``)
KNOB = "performance_knob"


def knob(default: Any, *, description: str, **constraints: Any) -> Any:
    """A field that changes only speed or memory (batch sizes of inference, memory bounds),
    never the output: it stays out of the fingerprint (``fingerprint_params``), so tuning it for a
    machine (docs/operations.md) recomputes nothing. Still dumped and passed to shard workers."""
    return Field(default, description=description, json_schema_extra={KNOB: True}, **constraints)


def is_knob(field: FieldInfo) -> bool:
    """Whether ``field`` was declared with ``knob``."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and extra.get(KNOB) is True


def fingerprint_params(params: BaseModel) -> dict[str, Any]:
    """The params as they enter a fingerprint: the JSON dump without performance knobs, in nested
    sections too (``select.scoring``). Only knobs are removed from nested dumps, so everything
    else hashes as it did before knobs were declared. A section whose layout changed maps the
    dump back to the layout of before (``StageParams.fingerprint_layout``), so its artefacts
    keep their fingerprints."""
    dump = _drop_knobs(params, params.model_dump(mode="json"))
    layout = getattr(params, "fingerprint_layout", None)
    return layout(dump) if layout is not None else dump


def _drop_knobs(params: BaseModel, dump: dict[str, Any]) -> dict[str, Any]:
    for name, info in type(params).model_fields.items():
        if name not in dump:
            continue
        value = getattr(params, name)
        if is_knob(info):
            del dump[name]
        elif isinstance(value, BaseModel) and isinstance(dump[name], dict):
            dump[name] = _drop_knobs(value, dump[name])
    return dump


class StageParams(BaseModel):
    """Base of every stage's config section: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    #: keys added after a stage's artefacts exist, with the default that reproduces the older
    #: output: left out of the dump (and so the fingerprint) while at that default
    added_defaults: ClassVar[dict[str, Any]] = {}

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        out = super().model_dump(**kwargs)
        for key, default in self.added_defaults.items():
            if key in out and out[key] == default:
                del out[key]
        return out

    def fingerprint_layout(self, dump: dict[str, Any]) -> dict[str, Any]:
        """The params as they enter the fingerprint, from the dump without knobs: the dump
        itself, unless a stage moved keys and maps them back to where they were hashed before
        (`label`'s sub-sections)."""
        return dump

    def link(self, sections: dict[str, StageParams]) -> None:
        """Fill settings this stage shares with another section (called once all sections of a
        config are parsed); the filled values are part of this stage's fingerprint."""


class RunParams(BaseModel):
    """The `run` config section: what is shared by every stage of a run."""

    model_config = ConfigDict(extra="forbid")

    root: str = Field(
        "data/artefacts",
        description=(
            "Folder of the artefact store: every stage writes ROOT/<stage>/<fingerprint>/. Point "
            "runs that should share (and resume) artefacts at the same root; a relative path is "
            "read from the working directory."
        ),
    )
    seed: int = Field(
        0,
        description=(
            "Seed of every sampled choice (queries, pairs, splits, training). Part of the "
            "fingerprint of the stages that draw: change it to get an independent replicate."
        ),
    )
    device: str = Field(
        "auto",
        description=(
            "Where torch runs: auto (CUDA when present), cpu, cuda or cuda:N. Part of the "
            "fingerprint only where it changes the output (train)."
        ),
    )
    task_runner: Literal["sequential", "thread", "process", "dask", "ray"] = Field(
        "sequential",
        description=(
            "How shards run: sequential (one process), thread, process, dask or ray (Prefect task "
            "runners, flows/runners.py). Changes speed, not the output."
        ),
    )
    max_workers: int = Field(
        2,
        description=(
            "Shards computed at once by the thread and process runners (and a local Dask cluster). "
            "Raise it on a machine with more cores and memory."
        ),
    )
    runner_address: str | None = Field(
        None,
        description=(
            "An existing Dask scheduler or Ray cluster to send shards to (task_runner dask or ray);"
            " None starts a local one."
        ),
    )
    gpus_per_task: float = Field(
        0.0,
        description=(
            "GPUs each shard task reserves on a Dask or Ray cluster (fractions share one GPU); 0 "
            "reserves none."
        ),
    )
    torch_threads: int = Field(
        0,
        description=(
            "torch CPU threads per process; 0 leaves torch's default. Lower it when several shards "
            "run at once on one machine so that they do not oversubscribe the cores."
        ),
    )
    no_progress: bool = Field(
        False,
        description=(
            "Hide progress bars (ctxsim run --no-progress; the old name quiet still reads)."
        ),
    )
    license: str | None = Field(
        None,
        description=(
            "The dataset card's licence for `ctxsim export` (an SPDX id or Hugging Face's `other`);"
            " not a stage input, so no stage recomputes when it changes."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        """``quiet`` (no progress bars, renamed: the default terminal output is the quiet one,
        flows/console.py) still reads, as ``no_progress``; either set hides the bars."""
        if isinstance(data, dict) and "quiet" in data:
            data = dict(data)
            quiet = TypeAdapter(bool).validate_python(data.pop("quiet"))
            data["no_progress"] = quiet or data.get("no_progress", False)
        return data


def resolve_device(device: str) -> str:
    """`auto` picks CUDA when present; an explicit request is honoured as given."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class StageContext:
    """Everything one shard computation may touch."""

    stage: str
    params: Any
    run: RunParams
    fingerprint: str
    upstream: dict[str, Artefact]
    store: ArtefactStore
    workdir: Path
    all_params: dict[str, Any] = field(default_factory=dict)

    @property
    def files_dir(self) -> Path:
        """Non-tabular outputs published with the artefact (models, vectorisers, plots)."""
        d = self.workdir / "files"
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def cache_dir(self) -> Path:
        """Scratch space that survives a crash (checkpoints), keyed by fingerprint."""
        return self.store.cache_dir(self.stage, self.fingerprint)

    @property
    def logger(self) -> logging.Logger | logging.LoggerAdapter:
        return get_logger(f"ctxsim.{self.stage}")

    @property
    def device(self) -> str:
        return resolve_device(self.run.device)

    def input(self, name: str) -> Artefact:
        try:
            return self.upstream[name]
        except KeyError:
            raise KeyError(f"stage {self.stage!r} did not declare input {name!r}") from None

    def input_shard(self, name: str, shard: int, columns: list[str]) -> pa.Table:
        """The rows of input ``name`` whose ``shard`` column is ``shard``, sorted by the first
        column (e.g. one shard's queries, by query_id)."""
        t = self.input(name).read_table(columns + ["shard"])
        t = t.filter(pc.equal(t.column("shard"), shard)).select(columns)
        return t.sort_by(columns[0])


class Stage:
    """Base class; subclasses set the class attributes and implement ``run_shard``."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    Params: ClassVar[type[StageParams]] = StageParams
    inputs: ClassVar[tuple[str, ...]] = ()
    #: Optional inputs are used when the run includes them (e.g. `screen` for `select`).
    optional_inputs: ClassVar[tuple[str, ...]] = ()
    #: Run-level fields that change this stage's output (part of the fingerprint).
    run_fields: ClassVar[tuple[str, ...]] = ("seed",)
    #: Fan out like this input (its stats' ``n_shards``), e.g. "queries"; None: one shard.
    shard_by: ClassVar[str | None] = None
    #: ctxsim modules this stage's output depends on that its imports do not reach (e.g. one
    #: loaded by name); the version guard (tests/stage_versions.py) hashes them with the
    #: stage module's transitive ctxsim imports. Not part of the fingerprint.
    sources: ClassVar[tuple[str, ...]] = ()

    # Stage facts read by `ctxsim plan`, `ctxsim explain` and the benches (no stage-name lists
    # elsewhere). None is part of the fingerprint.
    #: Its cost model (store/cost_model.py): the work unit that drives it, pilot and full, and
    #: how `ctxsim plan` scales the pilot's cost to the full config (by corpus bytes, as
    #: measured, or fixed per query shard + per unit, fit on the two pilots).
    cost: ClassVar[CostModel] = Constant()
    #: Its artefact is mostly model files: its size does not follow the work.
    model_artefact: ClassVar[bool] = False
    #: Glob patterns, under its artefact, of files whose size does not follow the work (a model
    #: written beside the data, reduced statistics): the plan scales only the rest of its disk.
    fixed_size_files: ClassVar[tuple[str, ...]] = ()
    #: Its working memory holds corpus-sized data (sentences, chunks, index, windows).
    corpus_memory: ClassVar[bool] = False
    #: Its work follows the queries to label (one unit per query or query shard): the marginal
    #: cost of labelling more sentences; `ctxsim explain` reruns those that `select` reads.
    per_query: ClassVar[bool] = False
    #: Needed only for Eq. 4 labels, not to mine the pairs (scorers, sampled contexts, scoring).
    labelling: ClassVar[bool] = False

    def cost_model(self, params: Any) -> CostModel:
        """The cost model for these params (default: ``cost``; a stage whose work unit depends
        on a setting picks here)."""
        return self.cost

    @property
    def cost_basis(self) -> str:
        """How `ctxsim plan` scales the pilot's cost: corpus, constant, fit or scaled."""
        return self.cost.kind

    @property
    def rows_cap(self) -> str | None:
        """The param that caps this stage's rows per query (`ctxsim plan` fills it on a larger
        corpus)."""
        return self.cost.rows_cap

    def inputs_for(self, params: Any) -> tuple[str, ...]:
        """The inputs these params need (default: ``inputs``; `train` with an objective that
        reads no labels needs `pairs`, not `label`)."""
        return self.inputs

    def optional_inputs_for(self, params: Any) -> tuple[str, ...]:
        """The optional inputs these params use (default: all); an unused one stays out of the
        fingerprint, so e.g. retraining the generator does not invalidate `select`."""
        return self.optional_inputs

    def fingerprint_extra(self, params: Any) -> dict[str, Any]:
        """Anything besides params that decides the output (e.g. input file sizes and mtimes)."""
        return {}

    def num_shards(self, ctx: StageContext) -> int:
        if self.shard_by is None:
            return 1
        return int(ctx.input(self.shard_by).stats.get("n_shards", 1))

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        raise NotImplementedError

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        """Stage-level stats from per-shard stats: one shard's as they are; several shards'
        numeric values summed."""
        if len(shard_stats) == 1:
            return dict(shard_stats[0])
        total: dict[str, Any] = {}
        for stats in shard_stats:
            for k, v in stats.items():
                if isinstance(v, bool) or not isinstance(v, int | float):
                    continue
                total[k] = total.get(k, 0) + v
        return total


@dataclass
class ResolvedStage:
    """A stage resolved against a config and its upstream artefacts."""

    stage: Stage
    params: Any
    run: RunParams
    fingerprint: str
    upstream: dict[str, Artefact]
    store: ArtefactStore
    fingerprint_payload: dict[str, Any]

    def context(self) -> StageContext:
        workdir = self.store.open_partial(self.stage.name, self.fingerprint)
        return StageContext(
            stage=self.stage.name,
            params=self.params,
            run=self.run,
            fingerprint=self.fingerprint,
            upstream=self.upstream,
            store=self.store,
            workdir=workdir,
        )

    def published(self) -> Artefact | None:
        return self.store.get(self.stage.name, self.fingerprint)


def resolve_stage(
    stage: Stage, params: Any, run: RunParams, store: ArtefactStore, upstream: dict[str, Artefact]
) -> ResolvedStage:
    payload = {
        "stage": stage.name,
        "version": stage.version,
        "params": fingerprint_params(params),
        "run": {k: getattr(run, k) for k in stage.run_fields},
        "upstream": {k: a.fingerprint for k, a in sorted(upstream.items())},
        "extra": stage.fingerprint_extra(params),
    }
    return ResolvedStage(stage, params, run, fingerprint(payload), upstream, store, payload)


def compute_shard(plan: ResolvedStage, shard: int) -> dict[str, Any]:
    """Compute and durably record one shard, unless it is already done (then return its record).

    A shard lease (store/lease.py) makes workers sharing one artefact root take turns: whoever
    holds it computes; a waiter re-checks after acquiring and finds the shard done.
    """
    import json

    from ctxsim.store.artefacts import MANIFEST
    from ctxsim.store.faults import maybe_fail
    from ctxsim.store.lease import shard_lease

    name, fp, store = plan.stage.name, plan.fingerprint, plan.store
    done = store.shard_done(name, fp, shard)
    if done is not None:
        return {**done, "reused": True}
    with shard_lease(store.root, name, fp, shard) as lease:
        done = store.shard_done(name, fp, shard)
        if done is not None:  # computed by the previous holder while we waited
            return {**done, "reused": True}
        manifest = store.final_dir(name, fp) / MANIFEST
        if manifest.exists():  # another worker published the whole stage while we waited
            part = json.loads(manifest.read_text())["parts"][shard]
            return {**part, "stats": {}, "seconds": 0.0, "reused": True}
        maybe_fail(name, shard, store.root)
        _process_setup(plan.run)
        ctx = plan.context()
        t0, c0 = time.perf_counter(), time.process_time()
        table, stats = plan.stage.run_shard(ctx, shard)
        # CPU seconds of this process (all its threads): exact under the sequential and process
        # runners, shared between concurrent shards under the thread runner
        stats = {**stats, "cpu_seconds": round(time.process_time() - c0, 3)}
        if lease.lost:
            get_logger().warning("%s shard %d: lease expired while computing", name, shard)
        info = store.write_shard(name, fp, shard, table, stats, time.perf_counter() - t0)
    return {**info, "reused": False}


def _process_setup(run: RunParams) -> None:
    """What every shard computation in this process needs set the same way (torch threads)."""
    if run.torch_threads > 0:
        import torch

        if torch.get_num_threads() != run.torch_threads:
            torch.set_num_threads(run.torch_threads)


def publish_stage(
    plan: ResolvedStage, n_shards: int, shard_infos: list[dict[str, Any]]
) -> Artefact:
    ctx = plan.context()
    stats = plan.stage.summarize(ctx, [i.get("stats", {}) for i in shard_infos])
    extra = {
        "ctxsim_version": CTXSIM_VERSION,
        "stage_version": plan.stage.version,
        "params": plan.params.model_dump(mode="json"),
        "upstream": {k: a.fingerprint for k, a in plan.upstream.items()},
        "fingerprint_payload": plan.fingerprint_payload,
        "stats": stats,
        "timings": {
            "shard_seconds": [i.get("seconds", 0.0) for i in shard_infos],
            "total_seconds": round(sum(i.get("seconds", 0.0) for i in shard_infos), 4),
        },
    }
    return plan.store.publish(plan.stage.name, plan.fingerprint, n_shards, extra)


def run_stage_locally(plan: ResolvedStage) -> tuple[Artefact, bool]:
    """Run every missing shard in this process and publish. Returns (artefact, reused)."""
    existing = plan.published()
    if existing is not None:
        return existing, True
    n = plan.stage.num_shards(plan.context())
    infos = [compute_shard(plan, s) for s in range(n)]
    return publish_stage(plan, n, infos), False
