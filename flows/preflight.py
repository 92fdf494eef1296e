"""Checks made before Prefect starts, so that a user's mistake costs one line, not a minute.

Inside the flow the same mistakes surface only after the ephemeral API has booted (~20 s on a
small machine) and Prefect has logged the traceback; an unwritable root even made SQLite retry
for minutes. What can be known from the config alone is checked here: the artefact root can be
written, the corpus paths match files and every ``.gz`` among them starts like a gzip file, the
STS folders the config names hold readable sets, and registered models have their packages.
Model names themselves are checked when the config is validated (the stages' Params).
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
from pathlib import Path

from ctxsim.flows.config import PipelineConfig
from ctxsim.store.errors import CorruptInputError, InputError, UnwritableRootError
from ctxsim.store.inputs import gzip_header_problem


def check_root_writable(root: str | Path, prefect_home: bool | None = None) -> Path:
    """Create the artefact root if needed and prove that a file can be written in it (and in
    Prefect's state folder under it when the run uses the ephemeral API). Writing is the test:
    ``os.access`` answers yes to root even on a read-only mount."""
    path = Path(root).expanduser()
    if prefect_home is None:
        prefect_home = not os.environ.get("PREFECT_API_URL")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UnwritableRootError(
            f"artefact root {path} cannot be created ({e.strerror or e}); set run.root or "
            "--root to a writable folder"
        ) from None
    dirs = [path]
    state = Path(os.environ.get("PREFECT_HOME") or path / "_prefect").expanduser()
    if prefect_home:
        dirs.append(state)
    for d in dirs:
        try:
            d.mkdir(parents=True, exist_ok=True)
            fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=d)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise UnwritableRootError(
                f"artefact root {path} is not writable ({d}: {e.strerror or e}); set run.root "
                "or --root to a writable folder"
            ) from None
    db = state / "prefect.db"
    if prefect_home and db.exists() and not os.access(db, os.W_OK):
        raise UnwritableRootError(f"artefact root {path}: Prefect's database {db} is read-only")
    return path


def _probe_write(d: Path) -> None:
    fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=d)
    os.close(fd)
    os.unlink(probe)


def check_output_dir(path: str | Path, flag: str) -> Path:
    """Create ``path`` (a command's output folder) and prove a file can be written in it, before
    the command spends minutes on work whose report would then be lost."""
    out = Path(path).expanduser()
    try:
        out.mkdir(parents=True, exist_ok=True)
        _probe_write(out)
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    return out


def check_output_file(path: str | Path, flag: str) -> Path:
    """A file a command will write at the end: its folder exists and takes a new file, and it
    is not a folder itself."""
    out = Path(path).expanduser()
    if out.is_dir():
        raise InputError(f"{flag} {path}: is a directory; give a file name")
    if not out.parent.is_dir():
        raise InputError(f"{flag} {path}: its folder {out.parent} does not exist")
    try:
        _probe_write(out.parent)
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    if out.exists() and not os.access(out, os.W_OK):
        raise InputError(f"{flag} {path}: the file is read-only")
    return out


def check_corpus(cfg: PipelineConfig) -> None:
    """The shard stage's paths match files, and every ``*.gz`` has a gzip header (a truncated
    stream is only found by reading it all: the shard stage reports that one, naming the file)."""
    if "shard" not in cfg.stages:
        return
    from ctxsim.readers.corpus import CorpusInputError, expand_paths, lead_fields_problem

    shard = cfg.stages["shard"]
    for f in expand_paths(shard.paths):  # type: ignore[attr-defined]
        if f.name.endswith(".gz"):
            problem = gzip_header_problem(f)
            if problem:
                raise CorruptInputError(f"{f}: {problem} (shard.paths)")
    problem = lead_fields_problem(shard.paths, shard.format, shard.lead_fields)  # type: ignore[attr-defined]
    if problem:
        raise CorpusInputError(problem)


def check_sts(cfg: PipelineConfig) -> None:
    """STS folders named by the config: required ones must exist and hold a matching set;
    optional ones (train, evaluate: skipped with a warning when absent) must parse if present."""
    from ctxsim.readers.sts import discover

    q = cfg.stages.get("queries")
    if q is not None and q.source == "sts":  # type: ignore[attr-defined]
        where = q.sts_dir  # type: ignore[attr-defined]
        if not where:
            raise InputError("queries.sts_dir: must be set when queries.source is 'sts'")
        if not Path(where).expanduser().is_dir():
            raise InputError(f"queries.sts_dir: {where} is not a directory")
        from ctxsim.readers.domain import pair_sets_as_sts

        found = discover(Path(where).expanduser()) + pair_sets_as_sts(where)
        names = [f"{s.dataset}.{s.subset}" for s in found]
        pats = q.sts_sets  # type: ignore[attr-defined]
        if not any(fnmatch.fnmatch(n, p) for n in names for p in pats):
            raise InputError(
                f"queries.sts_sets: no STS set under {where} matches {pats} "
                f"(found: {', '.join(names) or 'none'})"
            )
    for section in ("train", "evaluate"):
        params = cfg.stages.get(section)
        where = getattr(params, "sts_dir", None)  # evaluate: eval_dir, under its old name
        if where and Path(where).expanduser().is_dir():
            from ctxsim.readers.evaluators import StsEvaluator, discover_eval_dir

            StsEvaluator.discover(where)  # StsFormatError names the file and line
            if section == "evaluate":
                discover_eval_dir(where)  # so does every other format's reader


def check_eval_dirs(sts_dir: str | Path | None, ists_dir: str | Path | None) -> None:
    """``ctxsim evaluate``'s folders exist and hold data: an empty result must not look like a
    finished evaluation."""
    from ctxsim.readers.evaluators import StsEvaluator, discover_eval_dir
    from ctxsim.readers.ists import discover_ists

    def any_eval_set(path: Path) -> bool:  # a set of any task format (malformed: raise)
        return bool(StsEvaluator.discover(path)) or bool(discover_eval_dir(path))

    for flag, where, find, what in (
        (
            "--eval-dir",
            sts_dir,
            any_eval_set,
            "evaluation sets (STS <DATASET>.<subset>.tsv or originals, *.pairs.tsv, *_qa.jsonl)",
        ),
        ("--ists-dir", ists_dir, discover_ists, "iSTS domains (*.wa with chunk files)"),
    ):
        if where is None:
            continue
        path = Path(where).expanduser()
        if not path.is_dir():
            raise InputError(f"{flag} {where}: not a directory")
        if not find(path):
            raise InputError(f"{flag} {where}: no {what} found in this directory")


def check_model_packages(cfg: PipelineConfig) -> None:
    """Registered backbones have their weight packages installed (the error names the pip
    command); checked from package metadata, without assembling anything."""
    from ctxsim.models.registry import check_installed

    for section in ("generator", "train"):
        name = getattr(cfg.stages.get(section), "backbone", None)
        if name:
            check_installed(name)


def preflight(cfg: PipelineConfig) -> None:
    """Every check above, cheapest first; raises the first problem found."""
    check_root_writable(cfg.run.root)
    check_corpus(cfg)
    check_sts(cfg)
    check_model_packages(cfg)
