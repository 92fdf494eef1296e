"""The `evaluate` stage's cache of its baselines' encodings: the model a run starts from scores
the same dev texts the same way on every run, so its embeddings are kept and read back.

Why: `ctxsim adapt` compares the adapted model with the download it started from on every dev
task; the download's half of that (on MedQuAD's dev tasks about 40 CPU-s of the stage's 90) is
identical run after run. The surrogate is never cached (a new model each run).

Layout: ``ROOT/_cache/evaluate/<key>.npy`` (``ArtefactStore.cache_dir("evaluate")``), one file
per (model, texts) with a sha256 beside it (store/checked.py: a file that fails the check is
moved aside and encoded again). The key is everything the vectors depend on: the model's files
by content, the texts, batch size, token limit, device, autocast dtype, torch's thread count and
CPU kernel level, and the library versions; so a stage whose baselines come from the cache
writes the same bytes as one that encoded them. Delete the folder to drop the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ctxsim.store.checked import move_aside, sidecar, verified, write_checked
from ctxsim.tasks.evaluate.domain import EncoderSimilarity

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


class CachedEncoderSimilarity(EncoderSimilarity):
    """An :class:`EncoderSimilarity` whose unit vectors are kept in ``folder`` per text list;
    ``model_id`` names the weights by content (models/encoders.py ``model_digest``)."""

    def __init__(
        self, model: Any, batch_size: int, folder: Path, model_id: str, logger: Any = None
    ) -> None:
        super().__init__(model, batch_size)
        self.folder, self.model_id = Path(folder), model_id
        self.logger = logger or logging.getLogger("ctxsim.evaluate")
        self.hits = self.misses = 0

    def key(self, texts: Sequence[str]) -> str:
        parts = {
            "version": CACHE_VERSION,
            "model": self.model_id,
            "texts": texts_digest(texts),
            "batch_size": self.batch_size,
            **runtime_identity(self.model),
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        path = self.folder / f"{self.key(texts)}.npy"
        if verified(path, "evaluation encoding cache file", self.logger):
            got = self._read(path, len(texts))
            if got is not None:
                self.hits += 1
                return got
        emb = super()._encode(texts)
        self.misses += 1

        def save(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.save(f, emb, allow_pickle=False)

        try:  # best effort: a cache that cannot be written only costs the next run the encoding
            self.folder.mkdir(parents=True, exist_ok=True)
            write_checked(path, save)
        except OSError as e:
            self.logger.warning("evaluate: encodings not cached in %s (%s)", self.folder, e)
        return emb

    def _read(self, path: Path, n: int) -> np.ndarray | None:
        """The vectors of a checked file; one that does not load as ``n`` rows (written by
        other code under the same name) is moved aside with its checksum, and None."""
        try:
            got = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            problem = f"does not load ({e})"
        else:
            if got.ndim == 2 and got.shape[0] == n:
                return got
            problem = f"holds {got.shape} vectors for {n} texts"
        dest = move_aside(path)
        if dest is not None and sidecar(path).exists():
            os.replace(sidecar(path), sidecar(dest))
        self.logger.warning("evaluate: cache file %s %s; moved to %s", path, problem, dest)
        return None


def cached_baselines(
    systems: dict[str, Any],
    paths: dict[str, str | None],
    batch_size: int,
    folder: Path,
    logger: Any = None,
) -> dict[str, Any]:
    """``systems`` (name -> loaded model or None) with every model but the surrogate scored
    through the cache; ``paths`` names each system's model directory."""
    from ctxsim.models.encoders import model_digest

    out: dict[str, Any] = {}
    for name, model in systems.items():
        path = paths.get(name)
        if name == "surrogate" or model is None or path is None or not Path(path).is_dir():
            out[name] = model
        else:
            out[name] = CachedEncoderSimilarity(
                model, batch_size, folder, model_digest(path), logger
            )
    return out
