"""Discriminative coherence model (Sun et al. 2022, Sec. 3.2.1, Eq. 1) and its training.

A single-layer bidirectional LSTM encodes a sentence as the concatenation of the last states of
both directions; for a context width w > 1, c< (and c>) is encoded as the concatenation of its w
sentences. The probability that [c<, s, c>] is an original (coherent) sequence is

    p(y=1 | c<, s, c>) = sigmoid(h · [h<, h_s, h>])                                  (Eq. 1)

**The head.** Read literally, Eq. 1 is linear in the concatenation, so its logit splits into
``f(c<, c>) + g(s)``: for a fixed sentence s every context is ranked the same way whatever s is,
and a replaced centre drawn at random from the corpus has the same distribution as the real one,
so the literal model cannot learn to separate them (AUC 0.5 on random negatives in expectation).
We therefore read ``h`` as the paper's "last neural layer" with one hidden tanh layer:

    logit = v · tanh(W_l h< + W_s h_s + W_r h> + b) + b0

(``head_hidden = 0`` gives the literal linear form). The split keeps the paper's speed-up
(Sec. 3.3: "cache sentence representations ... compute model scores in the last neural layer"):
``W_l h< + W_r h> + b`` is computed once per corpus context and ``W_s h_s`` once per query, so
scoring one (query, context) pair costs one tanh and one dot product of size ``head_hidden``
(:meth:`CoherenceDiscriminator.context_part`, :meth:`~CoherenceDiscriminator.centre_part`,
:meth:`~CoherenceDiscriminator.combine`).

Training data (Sec. 3.2.1): positives are real windows; each has one negative whose centre is
replaced, half of them by another sentence of the same document, half by a random corpus sentence.
Pure torch/numpy: no file I/O (the task layer saves checkpoints).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

PAD, UNK = 0, 1
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)

NEG_SAME_DOC, NEG_RANDOM = 1, 2  # negative types; 0 = positive


# ---- tokeniser ------------------------------------------------------------------------------
class ScratchTokenizer:
    """Lower-cased word/punctuation tokens, vocabulary built from the corpus (0=pad, 1=unk)."""

    def __init__(self, itos: list[str]):
        if itos[:2] != ["<pad>", "<unk>"]:
            raise ValueError("vocabulary must start with '<pad>', '<unk>'")
        self.itos = list(itos)
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @staticmethod
    def split(text: str) -> list[str]:
        return _TOKEN.findall(text.lower())

    @classmethod
    def build(
        cls, texts: Iterable[str], max_size: int = 50_000, min_freq: int = 2
    ) -> ScratchTokenizer:
        counts = Counter(t for s in texts for t in cls.split(s))
        common = [
            t for t, c in sorted(counts.items(), key=lambda x: (-x[1], x[0])) if c >= min_freq
        ]
        return cls(["<pad>", "<unk>"] + common[: max(0, max_size - 2)])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str, max_len: int) -> np.ndarray:
        ids = [self.stoi.get(t, UNK) for t in self.split(text)[:max_len]]
        return np.asarray(ids or [UNK], dtype=np.int64)


def encode_texts(
    encode: Callable[[str, int], np.ndarray], texts: Sequence[str], max_len: int
) -> list[np.ndarray]:
    """Token ids of each text (never empty: an empty text becomes one unknown token)."""
    out = []
    for t in texts:
        ids = encode(t, max_len)
        out.append(ids if len(ids) else np.asarray([UNK], dtype=np.int64))
    return out


# ---- model ----------------------------------------------------------------------------------
@dataclass
class DiscriminatorConfig:
    vocab_size: int
    emb_dim: int = 64
    hidden: int = 64  # per direction; the paper uses 300
    head_hidden: int = 64  # 0 = the literal linear Eq. 1
    interaction: bool = True  # low-rank bilinear terms between s and c<, c> (cacheable)
    dropout: float = 0.1
    pad_id: int = PAD

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class BiLSTMEncoder(nn.Module):
    """Single-layer BiLSTM; a sentence is [last forward state; last backward state] (2*hidden)."""

    def __init__(self, cfg: DiscriminatorConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.emb_dim, padding_idx=cfg.pad_id)
        self.lstm = nn.LSTM(
            cfg.emb_dim, cfg.hidden, num_layers=1, batch_first=True, bidirectional=True
        )
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        emb = self.dropout(self.embed(ids))
        packed = pack_padded_sequence(emb, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, (h_n, _) = self.lstm(packed)  # h_n: (2, B, H), in the batch's original order
        return torch.cat([h_n[0], h_n[1]], dim=-1)


class CoherenceDiscriminator(nn.Module):
    """Eq. 1 with a cache-friendly last layer (see the module docstring)."""

    def __init__(self, cfg: DiscriminatorConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = BiLSTMEncoder(cfg)
        d = 2 * cfg.hidden
        self.hidden_dim = cfg.head_hidden if cfg.head_hidden > 0 else 1
        self.bilinear = cfg.head_hidden > 0 and cfg.interaction
        k = self.hidden_dim * (3 if self.bilinear else 1)
        self.left = nn.Linear(d, k, bias=True)
        self.centre = nn.Linear(d, k, bias=False)
        self.right = nn.Linear(d, k, bias=False)
        self.out = nn.Linear(cfg.head_hidden, 1) if cfg.head_hidden > 0 else None
        self.dropout = nn.Dropout(cfg.dropout)

    @property
    def rep_dim(self) -> int:
        return 2 * self.cfg.hidden

    def encode(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.encoder(ids, lengths)

    def context_part(self, left_reps: torch.Tensor, right_reps: torch.Tensor) -> torch.Tensor:
        """Everything of the last layer that depends on c< and c> only: cached per context.

        Columns: [W_l h< + W_r h> + b, A h<, C h>] (the last two only with ``interaction``).
        """
        lp, rp = self.left(left_reps), self.right(right_reps)
        if not self.bilinear:
            return lp + rp
        d = self.hidden_dim
        return torch.cat([lp[..., :d] + rp[..., :d], lp[..., d : 2 * d], rp[..., 2 * d :]], -1)

    def centre_part(self, centre_reps: torch.Tensor) -> torch.Tensor:
        """Everything that depends on s only: [W_s h_s, B h_s, D h_s], once per query."""
        return self.centre(centre_reps)

    def combine(self, ctx_part: torch.Tensor, centre_part: torch.Tensor) -> torch.Tensor:
        """Logit of Eq. 1 from the two parts (broadcasting (N, K) with (N, K) or (1, K)).

        z = W_l h< + W_s h_s + W_r h> + b [+ (A h<)*(B h_s) + (C h>)*(D h_s)];
        logit = v . tanh(z) + b0. Cost per pair: O(head_hidden).
        """
        if self.out is None:
            return (ctx_part + centre_part).squeeze(-1)
        d = self.hidden_dim
        z = ctx_part[..., :d] + centre_part[..., :d]
        if self.bilinear:
            z = z + ctx_part[..., d : 2 * d] * centre_part[..., d : 2 * d]
            z = z + ctx_part[..., 2 * d :] * centre_part[..., 2 * d :]
        return self.out(self.dropout(torch.tanh(z))).squeeze(-1)

    def score_cached(
        self, left_reps: torch.Tensor, centre_reps: torch.Tensor, right_reps: torch.Tensor
    ) -> torch.Tensor:
        """Logits from cached sentence representations: the final layer only (Sec. 3.3)."""
        return self.combine(self.context_part(left_reps, right_reps), self.centre_part(centre_reps))

    def forward(self, left: Batch, centre: Batch, right: Batch) -> torch.Tensor:
        """Logits of p(y=1 | c<, s, c>) for padded batches of token ids (Eq. 1)."""
        return self.score_cached(self.encode(*left), self.encode(*centre), self.encode(*right))


Batch = tuple[torch.Tensor, torch.Tensor]


def pad_batch(seqs: Sequence[np.ndarray], device: str | torch.device = "cpu") -> Batch:
    """(ids (B, T) long, lengths (B,)) from token-id arrays."""
    tens = [torch.as_tensor(s, dtype=torch.long) for s in seqs]
    lengths = torch.as_tensor([len(s) for s in seqs], dtype=torch.long)
    return pad_sequence(tens, batch_first=True, padding_value=PAD).to(device), lengths


@torch.no_grad()
def encode_sequences(
    model: CoherenceDiscriminator,
    seqs: Sequence[np.ndarray],
    batch_size: int = 512,
    device: str = "cpu",
) -> np.ndarray:
    """float32 (N, 2H) representations, batching sequences of similar length together."""
    model.eval()
    out = np.zeros((len(seqs), model.rep_dim), dtype=np.float32)
    order = np.argsort([len(s) for s in seqs], kind="stable")
    for lo in range(0, len(order), batch_size):
        idx = order[lo : lo + batch_size]
        ids, lens = pad_batch([seqs[i] for i in idx], device)
        out[idx] = model.encode(ids, lens).float().cpu().numpy()
    return out


# ---- training data --------------------------------------------------------------------------
@dataclass
class WindowData:
    """Windows over tokenised sentences; all indices are rows of ``tokens``."""

    tokens: list[np.ndarray]  # token ids per sentence row
    doc: np.ndarray  # (n_sents,) document of each sentence row
    left: np.ndarray  # (n, w) rows of c<
    centre: np.ndarray  # (n,) row of the real centre
    right: np.ndarray  # (n, w) rows of c>
    pool: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # negative candidates

    def __post_init__(self) -> None:
        self.left = np.asarray(self.left, np.int64).reshape(len(self.centre), -1)
        self.right = np.asarray(self.right, np.int64).reshape(len(self.centre), -1)
        self.centre = np.asarray(self.centre, np.int64)
        self.pool = np.unique(self.pool if len(self.pool) else self.centre).astype(np.int64)
        if len(self.pool) < 2:
            raise ValueError("discriminator: need at least 2 candidate sentences for negatives")

    def __len__(self) -> int:
        return len(self.centre)

    def context_seq(self, rows: np.ndarray) -> np.ndarray:
        """Token ids of a multi-sentence context (w > 1): the sentences concatenated."""
        if len(rows) == 1:
            return self.tokens[int(rows[0])]
        return np.concatenate([self.tokens[int(r)] for r in rows])


def sample_negatives(data: WindowData, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One negative centre per window: (replacement rows, types), half same-doc, half random.

    A same-document replacement is drawn from the pool sentences of the window's document other
    than the real centre; if the document has no other, a random one is used instead.
    """
    n = len(data)
    types = np.where(rng.permutation(n) < n // 2, NEG_SAME_DOC, NEG_RANDOM).astype(np.int8)
    repl = data.pool[rng.integers(0, len(data.pool), n)]
    # Same document: pool sorted by document, draw inside the document's slice.
    pool_doc = data.doc[data.pool]
    order = np.argsort(pool_doc, kind="stable")
    spool, sdoc = data.pool[order], pool_doc[order]
    cdoc = data.doc[data.centre]
    lo = np.searchsorted(sdoc, cdoc, "left")
    hi = np.searchsorted(sdoc, cdoc, "right")
    same = types == NEG_SAME_DOC
    size = hi - lo
    ok = same & (size >= 2)
    pick = lo + (rng.random(n) * np.maximum(size, 1)).astype(np.int64)
    pick = np.minimum(pick, np.maximum(hi - 1, lo))
    cand = spool[np.minimum(pick, len(spool) - 1)]
    # If we drew the centre itself, take the next sentence of the same document (cyclically).
    clash = ok & (cand == data.centre)
    nxt = lo + (pick - lo + 1) % np.maximum(size, 1)
    cand[clash] = spool[nxt[clash]]
    repl[ok] = cand[ok]
    types[same & ~ok] = NEG_RANDOM
    # A random replacement that hits the centre itself is moved to another pool sentence.
    hit = repl == data.centre
    if hit.any():
        pos = np.searchsorted(data.pool, repl[hit])
        repl[hit] = data.pool[(pos + 1) % len(data.pool)]
    return repl, types


def make_examples(
    data: WindowData, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(window index, centre row, label, type) for every positive and its negative."""
    repl, types = sample_negatives(data, rng)
    n = len(data)
    win = np.concatenate([np.arange(n), np.arange(n)])
    centre = np.concatenate([data.centre, repl])
    label = np.concatenate([np.ones(n, np.float32), np.zeros(n, np.float32)])
    typ = np.concatenate([np.zeros(n, np.int8), types])
    return win, centre, label, typ


def _batch_tensors(
    data: WindowData, win: np.ndarray, centre: np.ndarray, device: str
) -> tuple[Batch, Batch, Batch]:
    left = pad_batch([data.context_seq(data.left[w]) for w in win], device)
    mid = pad_batch([data.tokens[int(c)] for c in centre], device)
    right = pad_batch([data.context_seq(data.right[w]) for w in win], device)
    return left, mid, right


@torch.no_grad()
def predict_logits(
    model: CoherenceDiscriminator,
    data: WindowData,
    win: np.ndarray,
    centre: np.ndarray,
    batch_size: int = 256,
    device: str = "cpu",
) -> np.ndarray:
    """Logits of the full model (encoder + head) for windows with the given centres."""
    model.eval()
    out = []
    for lo in range(0, len(win), batch_size):
        sl = slice(lo, lo + batch_size)
        out.append(model(*_batch_tensors(data, win[sl], centre[sl], device)).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def _auc(label: np.ndarray, score: np.ndarray) -> float:
    if len(np.unique(label)) < 2:
        return float("nan")
    from sklearn.metrics import roc_auc_score  # here: scikit-learn costs a CLI process ~1 s

    return float(roc_auc_score(label, score))


def evaluate(
    model: CoherenceDiscriminator,
    data: WindowData,
    seed: int,
    batch_size: int = 256,
    device: str = "cpu",
) -> dict[str, Any]:
    """Accuracy (logit > 0) and ROC-AUC overall and per negative type, with fixed negatives."""
    win, centre, label, typ = make_examples(data, np.random.default_rng([seed, 7_777_777]))
    logits = predict_logits(model, data, win, centre, batch_size, device)
    pos = typ == 0
    res: dict[str, Any] = {
        "accuracy": float(((logits > 0) == (label > 0.5)).mean()),
        "auc": _auc(label, logits),
        "n_pos": int(pos.sum()),
        "n_neg": int((~pos).sum()),
        "loss": float(
            nn.functional.binary_cross_entropy_with_logits(
                torch.as_tensor(logits), torch.as_tensor(label)
            )
        ),
    }
    for name, t in (("same_doc", NEG_SAME_DOC), ("random", NEG_RANDOM)):
        m = pos | (typ == t)
        res[f"auc_{name}"] = _auc(label[m], logits[m])
        neg = typ == t
        res[f"accuracy_{name}"] = float((logits[neg] <= 0).mean()) if neg.any() else float("nan")
        res[f"n_{name}"] = int(neg.sum())
    return res


@dataclass
class TrainConfig:
    epochs: int = 2
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.01
    max_windows_per_epoch: int = 0  # 0 = all training windows every epoch
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "cpu"
    eval_batch_size: int = 256


def train_discriminator(
    model: CoherenceDiscriminator,
    train: WindowData,
    val: WindowData,
    cfg: TrainConfig,
    checkpoint: dict[str, Any] | None = None,
    on_epoch_end: Callable[[dict[str, Any]], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train with AdamW + BCE; returns (final validation metrics, checkpoint dict).

    Resumable: pass the last checkpoint (``model``/``optim`` state dicts, ``epoch``,
    ``history``) and training continues at the next epoch; negatives and batch order of epoch e
    come from ``rng([seed, e])``, so a resumed run equals an uninterrupted one.
    """
    model.to(cfg.device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start, history = 0, []
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["optim"])
        start, history = int(checkpoint["epoch"]), list(checkpoint.get("history", []))
    ckpt: dict[str, Any] = checkpoint or {}
    loss_fn = nn.BCEWithLogitsLoss()
    for epoch in range(start, cfg.epochs):
        torch.manual_seed(cfg.seed * 1000 + epoch)
        rng = np.random.default_rng([cfg.seed, epoch])
        n = len(train)
        if cfg.max_windows_per_epoch and cfg.max_windows_per_epoch < n:
            sub = np.sort(rng.choice(n, cfg.max_windows_per_epoch, replace=False))
        else:
            sub = np.arange(n)
        win, centre, label, _ = make_examples(train, rng)
        keep = np.isin(win, sub)
        win, centre, label = win[keep], centre[keep], label[keep]
        perm = rng.permutation(len(win))
        model.train()
        total, count = 0.0, 0
        for lo in range(0, len(perm), cfg.batch_size):
            b = perm[lo : lo + cfg.batch_size]
            logits = model(*_batch_tensors(train, win[b], centre[b], cfg.device))
            loss = loss_fn(logits, torch.as_tensor(label[b], device=cfg.device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            total += float(loss.detach()) * len(b)
            count += len(b)
        metrics = evaluate(model, val, cfg.seed, cfg.eval_batch_size, cfg.device)
        metrics["train_loss"] = total / max(count, 1)
        metrics["epoch"] = epoch + 1
        history.append(metrics)
        if log is not None:
            log(
                f"epoch {epoch + 1}/{cfg.epochs}: train_loss {metrics['train_loss']:.4f} "
                f"val_acc {metrics['accuracy']:.4f} val_auc {metrics['auc']:.4f}"
            )
        ckpt = {
            "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
            "optim": opt.state_dict(),
            "epoch": epoch + 1,
            "history": history,
        }
        if on_epoch_end is not None:
            on_epoch_end(ckpt)
    if not history:  # nothing left to train (resumed after the last epoch)
        history.append(evaluate(model, val, cfg.seed, cfg.eval_batch_size, cfg.device))
    final = dict(history[-1])
    final["history"] = history
    return final, ckpt


def safe_float(x: float) -> float | None:
    """NaN -> None so that stats stay valid JSON."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)
