"""Stage `discriminator`: train the BiLSTM coherence model of Eq. 1 (Sun et al. 2022, Sec. 3.2.1).

The class; the package's docstring (__init__.py) says what it does and which file does what.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import torch
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
from ctxsim.store.cost_models_training import TrainedWindows
from ctxsim.store.stage import Stage, StageContext
from ctxsim.tasks.discriminator.data import build_vocabulary, read_windows, split_windows
from ctxsim.tasks.discriminator.params import DiscriminatorParams


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
