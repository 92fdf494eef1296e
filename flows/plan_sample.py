"""`ctxsim plan`'s corpus sample: a seeded share of the user's corpus for the pilots, and the
messages of a pilot naming the user's files rather than the sample's copies of them."""

from __future__ import annotations

import contextlib
import gzip
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.flows.config import ConfigError
from ctxsim.store.atomic import write_bytes_atomic


def _is_jsonl(path: Path) -> bool:
    name = path.name.lower()
    return name.endswith((".jsonl", ".jsonl.gz", ".json.gz", ".json"))


def sample_corpus(
    paths: list[str],
    fraction: float,
    seed: int,
    out_dir: Path,
    sources: dict[str, str] | None = None,
) -> tuple[list[str], int, int]:
    """Write a seeded sample of the corpus under ``out_dir``; return (paths, sample bytes, full
    bytes). JSON Lines records are kept whole with probability ``fraction`` (at least one per
    file); other formats are sampled by whole files. ``sources`` (if given) receives each
    sample file's user file, to name it in messages. A sample file that already holds the same
    bytes is left as it is (a kept sample keeps its fingerprint)."""
    from ctxsim.readers.corpus import expand_paths

    if not 0 < fraction <= 1:
        raise ConfigError(f"--sample-fraction {fraction}: must be in (0, 1]")
    files = expand_paths(paths)
    rng = np.random.default_rng(seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    kept: list[str] = []
    sample_bytes = full_bytes = 0
    others: list[Path] = []
    for i, f in enumerate(files):
        if not _is_jsonl(f):
            others.append(f)
            continue
        opener = gzip.open if f.name.endswith(".gz") else open
        with opener(f, "rb") as fh:
            lines = [ln for ln in fh if ln.strip()]
        if not lines:
            continue
        take = rng.random(len(lines)) < fraction
        if not take.any():
            take[int(rng.integers(len(lines)))] = True
        full_bytes += sum(len(ln) for ln in lines)
        chosen = [ln for ln, t in zip(lines, take, strict=True) if t]
        sample_bytes += sum(len(ln) for ln in chosen)
        dest = out_dir / f"{i:05d}.jsonl"
        data = b"".join(ln if ln.endswith(b"\n") else ln + b"\n" for ln in chosen)
        if not dest.is_file() or dest.read_bytes() != data:
            write_bytes_atomic(dest, data)
        kept.append(str(dest))
        if sources is not None:
            sources[str(dest)] = str(f)
    if others:
        sizes = np.array([f.stat().st_size for f in others], dtype=float)
        take = rng.random(len(others)) < fraction
        if not take.any():
            take[int(rng.integers(len(others)))] = True
        full_bytes += int(sizes.sum())
        sample_bytes += int(sizes[take].sum())
        kept += [str(f) for f, t in zip(others, take, strict=True) if t]
    return kept, sample_bytes, full_bytes


def sample_for_pilot(
    corpus_paths: list[str],
    fraction: float,
    seed: int,
    key: str,
    base: Path,
    read_only: Path | None,
    sources: dict[str, str],
) -> tuple[list[str], int, int]:
    """:func:`sample_corpus` under ``base``; with a read-only cache, its own sample where it
    already holds these bytes (nothing to write), else a new one under ``base``."""
    if read_only is not None and (read_only / "pilot" / "corpus" / key).is_dir():
        try:
            return sample_corpus(
                corpus_paths, fraction, seed, read_only / "pilot" / "corpus" / key, sources
            )
        except OSError:  # the corpus changed since: the sample is written anew, elsewhere
            sources.clear()
    return sample_corpus(corpus_paths, fraction, seed, base / "corpus" / key, sources)


@contextlib.contextmanager
def user_paths_in_messages(sources: dict[str, str]) -> Iterator[None]:
    """While the pilot runs, log records (any logger) and the errors it raises name the user's
    corpus files instead of the sample's copies of them."""
    pairs = sorted(sources.items(), key=lambda kv: -len(kv[0]))

    def fix(text: str) -> str:
        for tmp, user in pairs:
            if tmp in text:
                text = text.replace(tmp, user)
        return text

    old = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        rec = old(*args, **kwargs)
        with contextlib.suppress(Exception):
            msg = rec.getMessage()
            fixed = fix(msg)
            if fixed != msg:
                rec.msg, rec.args = fixed, ()
        return rec

    logging.setLogRecordFactory(factory)
    try:
        yield
    except Exception as e:
        e.args = tuple(fix(a) if isinstance(a, str) else a for a in e.args)
        raise
    finally:
        logging.setLogRecordFactory(old)
