"""Stage `train`: the Siamese surrogate of Sun et al. (2022), Sec. 3.4.

A transformers backbone with mean pooling over its last layer; predicted similarity = cosine of
the two sentence vectors; the objective is the L2 distance to the generated labels
(sentence-transformers' ``CosineSimilarityLoss``), optimised with Adam (lr 1e-4, betas 0.9/0.999,
Sec. 4.1 "Implementation Details"; AdamW with weight decay 0 is Adam). Optionally the CLRCMD
contrastive loss over RCMD similarities (Lee et al. 2022, Sec. 3.3) instead, or the rank-aware
``CoSENTLoss`` / ``AnglELoss``. ``objective`` swaps the labels for a peer on the same sentences,
steps, batch size and seed (models/objectives.py): TF-IDF cosine labels, unsupervised SimCSE,
TSDAE, each sentence's real right context as its positive (``context``: reads `queries` and
`shard`), a larger encoder's cosine (``teacher``), or no training at all; ``train_cpu_seconds``
in the metrics is what each cost.

sentence-transformers' trainer brings evaluation on STSb dev every ``eval_steps`` (or the label
dev split when no STSb dev is found), keeping the best checkpoint, and mid-epoch resume from the
checkpoints in ``ctx.cache_dir`` (a checkpoint whose save was cut short is dropped; each complete
one is sealed with a sha256 of its files (store/checked.py) and checked before a resume loads it:
a mismatch is moved aside with a warning and the resume takes the latest good one, or starts
over; all of them are deleted once the model is saved). Output: ``files/model`` (a
sentence-transformers directory with a model card), ``files/metrics.json``, and a table with the
evaluation history.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, field_validator

from ctxsim.models.objectives import (
    LossName,
    Objective,
    build_loss,
    dropout_config,
    has_dropout,
    right_contexts,
    sample_with_context,
    steps_for,
    teacher_cosine,
    tfidf_cosine,
    training_columns,
)
from ctxsim.models.origin import rescale_labels
from ctxsim.models.registry import check_model_name
from ctxsim.store.checked import seal, sidecar, verified
from ctxsim.store.stage import Stage, StageContext, StageParams

TINY = "tiny-random"

HISTORY_SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("epoch", pa.float64()),
        ("train_loss", pa.float64()),
        ("dev_spearman", pa.float64()),
        ("dev_pearson", pa.float64()),
    ]
)


class TrainParams(StageParams):
    """The `train` config section."""

    backbone: str = TINY  # registry name (minilm, gemma-270m, ...), a local path, or tiny-random
    # ctxsim = Eq. 4 labels; tfidf / simcse / tsdae / context / teacher / none = the peers on
    # the same sentences (issues 18, 30; models/objectives.py)
    objective: Objective = "ctxsim"
    teacher: str = "mpnet"  # objective teacher: the encoder whose cosine labels the pairs
    context_width: int = Field(1, ge=1, le=8)  # objective context: sentences after the centre
    # objective context: also this many corpus sentences (seeded sample) with their contexts;
    # they cost no labels, so the data can grow past the labelled pairs' few hundred sentences
    context_corpus_sentences: int = Field(0, ge=0)
    loss: LossName = "cosine"  # cosine = the paper's L2; cosent / angle use only label order
    label_column: str = "label"  # or label_disc / label_fwd / ... for the Eq. 3 ablations
    # Eq. 4 cosines crowd into ~[0.93, 1]: rank maps them to [0, 1] (models.origin.rescale_labels)
    label_scale: Literal["none", "rank", "minmax"] = "rank"
    train_splits: list[str] = Field(default_factory=lambda: ["train"])
    max_train_pairs: int | None = None
    max_seq_length: int = 64
    batch_size: int = 16
    epochs: float = 1.0
    max_steps: int = 30  # > 0 overrides epochs
    lr: float = 1e-4
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    weight_decay: float = 0.0
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)  # share of the steps spent warming up
    lr_scheduler: str = "constant"
    eval_steps: int = 10  # evaluate (and checkpoint) every N steps; best dev Spearman is kept
    save_total_limit: int = 2
    logging_steps: int = 5
    sts_dir: str | None = None  # where to find STSb dev for model selection
    dev_set: str = "STSb.dev"
    max_dev_pairs: int | None = None
    freeze_embeddings: bool = False
    # every dropout probability of the backbone (None keeps its own): SimCSE's noise, and
    # Gemma-3 ships with dropout 0 (models.objectives.dropout_config)
    dropout: float | None = Field(None, ge=0.0, lt=1.0)
    bf16: bool = True  # used on CUDA only
    # CLRCMD (loss = clrcmd)
    clrcmd_temperature: float = 0.05
    clrcmd_positive_threshold: float = 0.5
    clrcmd_sparse: bool = True
    clrcmd_chunk_size: int = 8
    # tiny-random backbone (tests and quickstart): a WordPiece vocabulary learned from the texts
    tiny_vocab_size: int = 2000
    tiny_hidden_size: int = 32
    tiny_layers: int = 2
    tiny_heads: int = 2

    @field_validator("backbone")
    @classmethod
    def _known_backbone(cls, value: str) -> str:
        return check_model_name(value, TINY)

    @field_validator("teacher")
    @classmethod
    def _known_teacher(cls, value: str) -> str:
        return check_model_name(value)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """Keys added after version 2 enter the dump, and so the fingerprint, only when set away
        from their default: existing configs keep their train artefacts."""
        out = super().model_dump(**kwargs)
        for key, default in _ADDED_KEYS.items():
            if key in out and out[key] == default:
                del out[key]
        return out


#: keys added after the stage's version 2, with the default that reproduces version 2's output
_ADDED_KEYS: dict[str, Any] = {
    "objective": "ctxsim",
    "dropout": None,
    "teacher": "mpnet",
    "context_width": 1,
    "context_corpus_sentences": 0,
}


def build_tiny_backbone(texts: list[str], out_dir: Path, p: TrainParams, seed: int) -> Path:
    """A randomly initialised small BERT with a WordPiece vocabulary learned from ``texts``
    (the same on every run: models/wordpiece.py)."""
    import torch
    from tokenizers import processors
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from ctxsim.models.wordpiece import BERT_SPECIALS, learn_wordpiece

    tok = learn_wordpiece(texts, p.tiny_vocab_size, BERT_SPECIALS)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    fast = BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=p.max_seq_length,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    cfg = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=p.tiny_hidden_size,
        num_hidden_layers=p.tiny_layers,
        num_attention_heads=p.tiny_heads,
        intermediate_size=4 * p.tiny_hidden_size,
        max_position_embeddings=max(64, p.max_seq_length + 2),
    )
    torch.manual_seed(seed)
    BertModel(cfg).save_pretrained(out_dir)
    return out_dir


def resolve_backbone(name: str) -> str:
    """A loadable directory or hub id for a backbone name (the registry when it knows it)."""
    from ctxsim.models.registry import resolve_model

    return str(resolve_model(name))


def build_model(backbone_path: str, max_seq_length: int, device: str, dropout: float | None = None):
    """SentenceTransformer = Transformer(backbone) + mean Pooling (Sec. 3.4); ST dirs load as is.
    ``dropout`` overrides every dropout probability of the backbone's config (None keeps them)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st_models

    st_dir = (Path(backbone_path) / "modules.json").exists()
    config_kwargs = None
    if dropout is not None:
        from transformers import AutoConfig

        cfg_dir = _transformer_dir(Path(backbone_path)) if st_dir else backbone_path
        config_kwargs = dropout_config(AutoConfig.from_pretrained(cfg_dir).to_dict(), dropout)
    if st_dir:
        model = SentenceTransformer(backbone_path, device=device, config_kwargs=config_kwargs)
        model.max_seq_length = max_seq_length
        return model
    tr = st_models.Transformer(
        backbone_path, max_seq_length=max_seq_length, config_kwargs=config_kwargs
    )
    tok = tr.tokenizer
    if tok.pad_token is None:  # decoder-only backbones (Gemma, SmolLM) ship without one
        tok.pad_token = tok.eos_token or tok.unk_token
    # renamed in sentence-transformers 5.x; the old name still works but warns
    dim = getattr(tr, "get_embedding_dimension", None) or tr.get_word_embedding_dimension
    pool = st_models.Pooling(dim(), pooling_mode="mean")
    return SentenceTransformer(modules=[tr, pool], device=device)


def _transformer_dir(st_dir: Path) -> str:
    """The folder of a sentence-transformers directory's Transformer module (its config.json)."""
    for module in json.loads((st_dir / "modules.json").read_text()):
        if module.get("type", "").endswith("Transformer"):
            return str(st_dir / module.get("path", ""))
    return str(st_dir)


def _history_rows(log_history: list[dict[str, Any]], metric: str | None) -> pa.Table:
    rows: dict[int, dict[str, Any]] = {}
    for e in log_history:
        step = int(e.get("step", 0))
        r = rows.setdefault(
            step,
            {
                "step": step,
                "epoch": e.get("epoch"),
                "train_loss": None,
                "dev_spearman": None,
                "dev_pearson": None,
            },
        )
        if "loss" in e:
            r["train_loss"] = float(e["loss"])
        if metric and metric in e:
            r["dev_spearman"] = float(e[metric]) * 100
            pkey = metric.replace("spearman", "pearson")
            if pkey in e:
                r["dev_pearson"] = float(e[pkey]) * 100
    ordered = [rows[k] for k in sorted(rows)]
    return pa.Table.from_pylist(ordered, schema=HISTORY_SCHEMA)


def _model_card(info: dict[str, Any]) -> str:
    lines = [
        "---",
        "library_name: sentence-transformers",
        "tags: [sentence-similarity, ctxsim]",
        "---",
        "",
        "# ctxsim surrogate",
        "",
        "Siamese encoder trained on sentence-pair similarities generated from contexts",
        "(Sun et al., TACL 2022, Sec. 3.4): mean pooling over the last layer, cosine similarity,",
        f"loss `{info['loss']}`.",
        "",
        "| field | value |",
        "| --- | --- |",
    ]
    for k in (
        "backbone",
        "backbone_path",
        "label_run",
        "label_column",
        "n_train_pairs",
        "n_dev_pairs",
        "dev_set",
        "steps",
        "backbone_dev_spearman",
        "best_dev_spearman",
        "final_dev_spearman",
        "seconds",
    ):
        lines.append(f"| {k} | {info.get(k)} |")
    lines += [
        "",
        "Load: `SentenceTransformer(path)`; evaluate: `ctxsim evaluate PATH --sts-dir DIR`.",
        "",
    ]
    return "\n".join(lines)


class TrainStage(Stage):
    name = "train"
    version = "2"  # 2: max_dev_pairs samples the dev set (was its first rows)
    Params = TrainParams
    inputs = ("label",)
    #: objective context finds each sentence in the corpus: its query's sent_id, then the shard
    optional_inputs = ("queries", "shard")
    run_fields = ("seed", "device")
    cost_basis = "fit"
    model_artefact = True

    def optional_inputs_for(self, params: TrainParams) -> tuple[str, ...]:
        """Only ``context`` reads the corpus; the other objectives keep their fingerprints."""
        return self.optional_inputs if params.objective == "context" else ()

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        import torch
        from datasets import Dataset, DatasetDict
        from sentence_transformers import (
            SentenceTransformerTrainer,
            SentenceTransformerTrainingArguments,
        )
        from sentence_transformers.evaluation import EmbeddingSimilarityEvaluator

        p: TrainParams = ctx.params
        log = ctx.logger
        t0 = time.perf_counter()
        label_art = ctx.input("label")
        table = label_art.read_table()
        for col in ("s1", "s2", p.label_column, "split"):
            if col not in table.column_names:
                raise ValueError(f"label artefact {label_art.path} has no column {col!r}")
        split = np.asarray(table.column("split").to_pylist(), dtype=object)
        s1 = table.column("s1").to_pylist()
        s2 = table.column("s2").to_pylist()
        lab = np.asarray(table.column(p.label_column).to_pylist(), dtype=np.float64)
        ok = np.isin(split, p.train_splits) & np.isfinite(lab)
        ok &= np.array(
            [a is not None and b is not None for a, b in zip(s1, s2, strict=True)], dtype=bool
        )
        idx = np.flatnonzero(ok)
        if p.max_train_pairs is not None:
            idx = idx[: p.max_train_pairs]
        if len(idx) == 0:
            raise ValueError(
                f"no labelled pairs with split in {p.train_splits} in {label_art.path}"
            )
        t1, t2 = [s1[i] for i in idx], [s2[i] for i in idx]
        cpu0 = time.process_time()
        contexts = None
        if p.objective == "tfidf":
            raw = tfidf_cosine(t1, t2)
        elif p.objective == "teacher":
            teacher = build_model(resolve_backbone(p.teacher), p.max_seq_length, ctx.device)
            raw = teacher_cosine(t1, t2, teacher)
            del teacher
        else:
            raw = lab[idx]
        if p.objective == "context":
            c1, c2, sampled = self._right_contexts(ctx, table, idx, p)
            # a sampled corpus sentence joins as a pair with itself (context_pairs keeps it once)
            t1, t2 = t1 + sampled, t2 + sampled
            contexts = c1, c2
        targets = rescale_labels(raw, p.label_scale)
        label_cpu = time.process_time() - cpu0 if p.objective in ("tfidf", "teacher") else 0.0
        if p.objective == "joint":  # ctxsim's pairs and SimCSE's positives, one training
            train_ds = DatasetDict(
                {
                    "ctxsim": Dataset.from_dict(training_columns("ctxsim", t1, t2, targets)),
                    "simcse": Dataset.from_dict(training_columns("simcse", t1, t2, targets)),
                }
            )
        else:
            columns = (
                {}
                if p.objective == "none"
                else training_columns(p.objective, t1, t2, targets, contexts)
            )
            train_ds = Dataset.from_dict(columns)
            if p.objective == "context":
                if len(train_ds) == 0:
                    raise ValueError(
                        f"objective context: none of the {len(idx)} pairs' sentences in "
                        f"{label_art.path} has a right context in the corpus (sentences from "
                        "an STS file, or each the last of its section)"
                    )
                log.info(
                    "train: %d sentences with their right context (of %d pairs)",
                    len(train_ds),
                    len(idx),
                )
        max_steps = p.max_steps
        if p.objective in ("simcse", "tsdae", "joint", "context") and max_steps <= 0:
            max_steps = steps_for(len(idx), p.batch_size, p.epochs)  # the pair objectives' steps

        dev = self._dev_set(ctx, p, s1, s2, split, lab)
        device = ctx.device
        seed = ctx.run.seed
        torch.manual_seed(seed)
        if p.backbone == TINY:
            texts = t1 + t2  # the same vocabulary and weights for every objective
            if dev is not None:
                texts += dev[0] + dev[1]
            backbone_path = str(build_tiny_backbone(texts, ctx.files_dir / "backbone", p, seed))
        else:
            backbone_path = resolve_backbone(p.backbone)
        model = build_model(backbone_path, p.max_seq_length, device, p.dropout)
        # the card's Hub widget examples cost a pass over the data and print their own bar
        model.model_card_data.generate_widget_examples = False
        if p.freeze_embeddings:
            emb = model[0].auto_model.get_input_embeddings()
            emb.weight.requires_grad_(False)

        clrcmd = {
            "temperature": p.clrcmd_temperature,
            "positive_threshold": p.clrcmd_positive_threshold,
            "sparse": p.clrcmd_sparse,
            "chunk_size": p.clrcmd_chunk_size,
        }
        if p.objective == "joint":
            loss = {
                "ctxsim": build_loss("ctxsim", p.loss, model, clrcmd),
                "simcse": build_loss("simcse", p.loss, model, clrcmd),
            }
        elif p.objective == "none":
            loss = None
        else:
            loss = build_loss(p.objective, p.loss, model, clrcmd, backbone_path)
        if p.objective in ("simcse", "joint") and not has_dropout(model):
            log.warning(
                "train: %s has no dropout: SimCSE's positives are identical (set train.dropout)",
                p.backbone,
            )

        evaluator, metric = None, None
        if dev is not None:
            evaluator = EmbeddingSimilarityEvaluator(
                dev[0],
                dev[1],
                dev[2],
                batch_size=max(p.batch_size, 32),
                name="dev",
                similarity_fn_names=["cosine"],
                write_csv=False,
            )
            metric = "eval_dev_spearman_cosine"
        ckpt_dir = ctx.cache_dir / "checkpoints"
        use_bf16 = bool(p.bf16 and device.startswith("cuda") and torch.cuda.is_bf16_supported())
        args = SentenceTransformerTrainingArguments(
            output_dir=str(ckpt_dir),
            num_train_epochs=p.epochs,
            max_steps=max_steps if max_steps > 0 else -1,
            per_device_train_batch_size=p.batch_size,
            per_device_eval_batch_size=max(p.batch_size, 32),
            learning_rate=p.lr,
            adam_beta1=p.adam_beta1,
            adam_beta2=p.adam_beta2,
            weight_decay=p.weight_decay,
            warmup_steps=p.warmup_ratio,  # a float in [0, 1) is a ratio (transformers >= 5)
            lr_scheduler_type=p.lr_scheduler,
            optim="adamw_torch",
            bf16=use_bf16,
            eval_strategy="steps" if evaluator is not None else "no",
            eval_steps=p.eval_steps,
            save_strategy="steps",
            save_steps=p.eval_steps,
            save_total_limit=p.save_total_limit,
            load_best_model_at_end=evaluator is not None,
            metric_for_best_model=metric,
            greater_is_better=True,
            logging_steps=p.logging_steps,
            seed=seed,
            data_seed=seed,
            report_to=[],
            disable_tqdm=True,
            dataloader_num_workers=0,
            use_cpu=not device.startswith("cuda"),
        )
        trainer = None
        if p.objective != "none":
            trainer = SentenceTransformerTrainer(
                model=model,
                args=args,
                train_dataset=train_ds,
                loss=loss,
                evaluator=evaluator,
                callbacks=[_seal_checkpoints(), *_callbacks()],
            )
            _log_through(trainer, log)
        good = complete_checkpoints(ckpt_dir, log)
        resume = bool(good)
        # the backbone's own dev score: the bar the labels must clear (model card, stats)
        before = evaluator(model) if evaluator is not None and not resume else {}
        if resume:
            log.info("train: resuming from %s", good[-1])
        cpu0 = time.process_time()  # every thread of this process; dev evaluations included
        if trainer is not None:
            trainer.train(resume_from_checkpoint=str(good[-1]) if resume else None)
        train_cpu = time.process_time() - cpu0

        final = before if trainer is None else evaluator(model) if evaluator is not None else {}
        out_dir = ctx.files_dir / "model"
        model.save(str(out_dir))
        # the model is saved: checkpoints only served a resume, and weigh GBs per backbone
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        best = trainer.state.best_metric if trainer is not None else None
        if trainer is None and before:
            best = before["dev_spearman_cosine"]
        info = {
            "backbone": p.backbone,
            "backbone_path": "files/backbone" if p.backbone == TINY else backbone_path,
            "loss": "none" if p.objective == "none" else p.loss,
            "objective": p.objective,
            "label_scale": p.label_scale,
            "label_run": label_art.fingerprint,
            "label_column": p.label_column,
            "n_train_pairs": int(len(idx)),
            "n_train_examples": (
                sum(len(d) for d in train_ds.values())
                if isinstance(train_ds, DatasetDict)
                else len(train_ds)
            ),
            "n_dev_pairs": int(len(dev[2])) if dev is not None else 0,
            "dev_set": dev[3] if dev is not None else None,
            "steps": int(trainer.state.global_step) if trainer is not None else 0,
            "best_dev_spearman": float(best) * 100 if best is not None else None,
            "final_dev_spearman": float(final["dev_spearman_cosine"]) * 100 if final else None,
            "backbone_dev_spearman": (
                float(before["dev_spearman_cosine"]) * 100 if before else None
            ),
            "resumed": bool(resume),
            "bf16": use_bf16,
            "device": device,
            "seconds": round(time.perf_counter() - t0, 2),
            "label_cpu_seconds": round(label_cpu, 3),
            "train_cpu_seconds": round(train_cpu, 3),
        }
        before_dev, best_dev = info["backbone_dev_spearman"], info["best_dev_spearman"]
        info["beats_backbone"] = (
            None
            if before_dev is None or best_dev is None or p.objective == "none"
            else bool(best_dev > before_dev)
        )
        if info["beats_backbone"] is False:
            ctx.logger.warning(
                "train: the surrogate's best %s Spearman %.2f is below its untrained backbone's "
                "%.2f: the labels (or the learning rate) hurt this backbone",
                info["dev_set"],
                best_dev,
                before_dev,
            )
        (out_dir / "README.md").write_text(_model_card(info))
        (ctx.files_dir / "metrics.json").write_text(json.dumps(info, indent=2))
        history = _history_rows(trainer.state.log_history if trainer else [], metric)
        stats = {k: v for k, v in info.items() if v is not None}
        return history, stats

    @staticmethod
    def _right_contexts(
        ctx: StageContext, table: pa.Table, idx: np.ndarray, p: TrainParams
    ) -> tuple[list[str | None], list[str | None], list[str]]:
        """Each pair's two sentences' right contexts (label ``s1_id``/``s2_id`` are query ids; a
        query's ``sent_id`` places it in the shard; None: not a corpus sentence), then those of
        ``context_corpus_sentences`` sampled corpus sentences appended to both lists, whose texts
        come third."""
        for col in ("s1_id", "s2_id"):
            if col not in table.column_names:
                raise ValueError(
                    f"objective context: label artefact {ctx.input('label').path} has no "
                    f"column {col!r}"
                )
        q = ctx.input("queries").read_table(["query_id", "sent_id"])
        qid, sid = q.column("query_id").to_pylist(), q.column("sent_id").to_pylist()
        sent_of = dict(zip(qid, sid, strict=True))
        sh = ctx.input("shard").read_table(["sent_id", "section_id", "text"])
        sent_ids = sh.column("sent_id").to_numpy()
        sections = sh.column("section_id").to_numpy()
        texts = sh.column("text").to_pylist()
        sampled = sample_with_context(sent_ids, sections, p.context_corpus_sentences, ctx.run.seed)
        extra_ctx = right_contexts(sent_ids, sections, texts, list(sampled), p.context_width)
        row_of = {s: i for i, s in enumerate(sent_ids.tolist())}
        extra_text = [texts[row_of[s]] for s in sampled.tolist()]
        out = []
        for col in ("s1_id", "s2_id"):
            qids = table.column(col).to_pylist()
            wanted = [sent_of.get(qids[i]) for i in idx]
            out.append(
                right_contexts(sent_ids, sections, texts, wanted, p.context_width) + extra_ctx
            )
        return out[0], out[1], extra_text

    @staticmethod
    def _dev_set(
        ctx: StageContext, p: TrainParams, s1: list, s2: list, split: np.ndarray, lab: np.ndarray
    ) -> tuple[list[str], list[str], list[float], str] | None:
        """STSb dev from ``sts_dir`` when present, else the label artefact's dev split."""
        if p.sts_dir:
            from ctxsim.readers.sts import discover, sample_pairs

            root = Path(p.sts_dir).expanduser()
            if root.is_dir():
                for s in discover(root):
                    if s.name == p.dev_set:
                        s = sample_pairs(s, p.max_dev_pairs, ctx.run.seed)
                        return s.s1, s.s2, s.gold, s.name
                ctx.logger.warning("train: %s not found under %s", p.dev_set, root)
            else:
                ctx.logger.warning("train: sts_dir %s does not exist", root)
        dev_idx = np.flatnonzero((split == "dev") & np.isfinite(lab))
        if p.max_dev_pairs is not None:
            dev_idx = dev_idx[: p.max_dev_pairs]
        if len(dev_idx) < 3:
            ctx.logger.warning("train: no dev set; training without model selection")
            return None
        return (
            [s1[i] for i in dev_idx],
            [s2[i] for i in dev_idx],
            lab[dev_idx].tolist(),
            "label.dev",
        )


def complete_checkpoints(ckpt_dir: Path, log: Any) -> list[Path]:
    """The checkpoints a resume can load, oldest first (by step). The trainer writes
    ``trainer_state.json`` last, so a save cut short (a full disk, a kill) leaves a folder
    without it, which the trainer would still pick as the latest and fail to load: such folders
    are removed, and named in the log. A complete one must match the sha256 sealed beside it
    when it was saved (``_seal_checkpoints``): one that does not, or has no seal (cut short
    between the save and the seal), is moved aside to ``checkpoint-N.corrupt-<id>`` with a
    warning (store/checked.py), and the resume takes an earlier good one, or starts over."""
    if not ckpt_dir.exists():
        return []
    dirs = [d for d in ckpt_dir.glob("checkpoint-*") if d.is_dir() and d.name[11:].isdigit()]
    good = []
    for d in sorted(dirs, key=lambda d: int(d.name[11:])):
        try:
            json.loads((d / "trainer_state.json").read_text())
        except (OSError, ValueError):
            log.warning("train: removing the incomplete checkpoint %s (its save was cut short)", d)
            shutil.rmtree(d, ignore_errors=True)
            sidecar(d).unlink(missing_ok=True)
            continue
        if verified(d, "train: checkpoint", log):
            good.append(d)
    for s in ckpt_dir.glob("checkpoint-*.sha256"):  # seals of checkpoints the trainer rotated out
        if not s.with_name(s.name[: -len(".sha256")]).exists():
            s.unlink(missing_ok=True)
    return good


def _seal_checkpoints() -> Any:
    """A trainer callback that seals each checkpoint once it is saved (``on_save`` follows the
    whole save and the rotation of older ones): the sha256 of its files beside it."""
    from transformers import TrainerCallback

    class SealCheckpoints(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            d = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if d.is_dir():
                seal(d)

    return SealCheckpoints()


def _log_through(trainer: Any, log: Any) -> None:
    """The trainer's log dicts as stage log lines (its PrinterCallback prints raw dicts)."""
    from transformers import PrinterCallback, TrainerCallback

    class _StageLog(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs:
                items = ", ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in logs.items()
                )
                log.info("train: step %d: %s", state.global_step, items)

    trainer.remove_callback(PrinterCallback)
    trainer.add_callback(_StageLog())


def _callbacks() -> list:
    """Extra trainer callbacks (a hook for tests that interrupt training to test resume)."""
    return []
