"""The `evaluate` stage's cache of its baselines' encodings: the model a run starts from scores
the same dev texts the same way on every run, so its embeddings (domain tasks) and its pair
scores (STS sets: cosine, RCMD) are kept and read back.

Why: `ctxsim adapt` compares the adapted model with the download it started from on every dev
task; the download's half of that (on MedQuAD's dev tasks about 40 CPU-s of the stage's 90) is
identical run after run. The surrogate is never cached (a new model each run).

Layout: ``ROOT/_cache/evaluate/<key>.npy`` (``ArtefactStore.cache_dir("evaluate")``), one file
per (model, texts) or (model, STS set, similarities), a sha256 beside each (store/checked.py: a
file that fails the check is moved aside and computed again). The key is everything the arrays
depend on: the model's files by content, the texts, batch size, token limit, device, autocast
dtype, torch's thread count and CPU kernel level, and the library versions; so a stage whose
baselines come from the cache writes the same bytes as one that encoded them. Delete the folder
to drop the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.store.checked import set_aside, verified, write_checked
from ctxsim.tasks.evaluate.domain import EncoderSimilarity

#: how the cache's files are named in warnings
WHAT = "evaluation encoding cache file"
#: bump when the encoding pass itself changes (models/encoders.py ``encode_sorted``, ``_unit``)
CACHE_VERSION = "1"


def texts_digest(texts: Sequence[str]) -> str:
    """sha256 of the texts in order (each length-prefixed, so no two lists collide)."""
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def runtime_identity(model: Any) -> dict[str, Any]:
    """What an encoder pass's floats depend on besides the weights and the texts."""
    import sentence_transformers
    import torch
    import transformers

    kind = str(model.device).split(":")[0]
    autocast = torch.is_autocast_enabled(kind)
    return {
        "device": str(model.device),
        "autocast": str(torch.get_autocast_dtype(kind)) if autocast else None,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "max_seq_length": model.max_seq_length,
    }


class VectorCache:
    """Arrays kept in ``folder`` by key, each with a sha256 beside it: one that fails the check,
    does not load or has the wrong shape is moved aside (a warning) and computed again; one that
    cannot be written only warns."""

    def __init__(self, folder: Path, logger: Any = None) -> None:
        self.folder = Path(folder)
        self.logger = logger or logging.getLogger("ctxsim.evaluate")
        self.hits = self.misses = 0
        self._ids: dict[str, str] = {}

    def get(
        self, key: str, fits: Callable[[np.ndarray], bool], compute: Callable[[], np.ndarray]
    ) -> np.ndarray:
        """The array under ``key`` when one that ``fits`` is kept, else ``compute()`` kept."""
        path = self.folder / f"{key}.npy"
        if verified(path, WHAT, self.logger):
            got = self._read(path, fits)
            if got is not None:
                self.hits += 1
                return got
        out = compute()
        self.misses += 1

        def save(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.save(f, out, allow_pickle=False)

        try:  # best effort: a cache that cannot be written only costs the next run the encoding
            self.folder.mkdir(parents=True, exist_ok=True)
            write_checked(path, save)
        except OSError as e:
            self.logger.warning("evaluate: encodings not cached in %s (%s)", self.folder, e)
        return out

    def model_id(self, system: str, path: str | None) -> str | None:
        """The content digest of a baseline's model directory, once per cache (an evaluation
        asks for it on the STS sets and again on the domain tasks); None for the surrogate (a
        new model every run: never cached) and for a system that is no model folder."""
        from ctxsim.models.encoders import model_digest

        if system == "surrogate" or path is None or not Path(path).is_dir():
            return None
        if path not in self._ids:
            self._ids[path] = model_digest(path)
        return self._ids[path]

    def _read(self, path: Path, fits: Callable[[np.ndarray], bool]) -> np.ndarray | None:
        try:
            got = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            problem = f"does not load ({e})"
        else:
            if fits(got):
                return got
            problem = f"holds an array of shape {got.shape}, not the one expected"
        set_aside(path, WHAT, problem, self.logger)
        return None


def cache_key(model_id: str, model: Any, batch_size: int, **what: Any) -> str:
    """The key of an array computed by ``model`` (its weights named by ``model_id``) in
    batches of ``batch_size`` from ``what`` (texts by digest, settings)."""
    parts = {
        "version": CACHE_VERSION,
        "model": model_id,
        "batch_size": batch_size,
        **runtime_identity(model),
        **what,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class CachedEncoderSimilarity(EncoderSimilarity):
    """An :class:`EncoderSimilarity` whose unit vectors are kept in a :class:`VectorCache` per
    text list; ``model_id`` names the weights by content (models/encoders.py ``model_digest``)."""

    def __init__(self, model: Any, batch_size: int, cache: VectorCache, model_id: str) -> None:
        super().__init__(model, batch_size)
        self.cache, self.model_id = cache, model_id

    def key(self, texts: Sequence[str]) -> str:
        return cache_key(self.model_id, self.model, self.batch_size, texts=texts_digest(texts))

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        def fits(a: np.ndarray) -> bool:
            return a.ndim == 2 and a.shape[0] == len(texts)

        encode = super()._encode
        return self.cache.get(self.key(texts), fits, lambda: encode(texts))


def cached_pair_similarities(
    model: Any,
    model_id: str,
    pairs: tuple[Sequence[str], Sequence[str]],
    batch_size: int,
    similarities: Sequence[str],
    cache: VectorCache,
) -> dict[str, np.ndarray]:
    """``pair_similarities`` (encoders.py) of an STS set's ``pairs`` = (s1, s2) through the
    cache: one array of a row per similarity."""
    from ctxsim.tasks.evaluate.encoders import pair_similarities

    s1, s2 = pairs
    sims = list(similarities)
    key = cache_key(
        model_id,
        model,
        batch_size,
        pairs=[texts_digest(s1), texts_digest(s2)],
        similarities=sims,
    )

    def compute() -> np.ndarray:
        got = pair_similarities(model, s1, s2, batch_size, sims)
        return np.stack([got[k] for k in sims]) if sims else np.zeros((0, len(s1)))

    arr = cache.get(key, lambda a: a.shape == (len(sims), len(s1)), compute)
    return {k: arr[i] for i, k in enumerate(sims)}


def cached_baselines(
    systems: dict[str, Any], paths: dict[str, str | None], batch_size: int, cache: VectorCache
) -> dict[str, Any]:
    """``systems`` (name -> loaded model or None) with every model but the surrogate scored
    through ``cache``; ``paths`` names each system's model directory."""
    out: dict[str, Any] = {}
    for name, model in systems.items():
        model_id = cache.model_id(name, paths.get(name)) if model is not None else None
        out[name] = (
            model
            if model_id is None
            else CachedEncoderSimilarity(model, batch_size, cache, model_id)
        )
    return out
