"""Stage `evaluate`: the trained surrogate against its baselines, through ``evaluate_model``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from ctxsim.readers.evaluators import eval_dir_formats
from ctxsim.store.artefacts import content_digest
from ctxsim.store.cost_model import Constant
from ctxsim.store.errors import InputError
from ctxsim.store.stage import Stage, StageContext
from ctxsim.tasks.evaluate.domain import domain_report
from ctxsim.tasks.evaluate.evaluate_model import DATA_HINT, evaluate_model
from ctxsim.tasks.evaluate.params import EvaluateParams

ROW_SCHEMA = pa.schema(
    [
        ("dataset", pa.string()),
        ("subset", pa.string()),
        ("similarity", pa.string()),
        ("system", pa.string()),
        ("spearman_all", pa.float64()),
        ("spearman_mean", pa.float64()),
        ("pearson", pa.float64()),
        ("n_pairs", pa.int64()),
    ]
)


def model_card_section(res: dict[str, Any]) -> str:
    """The card's evaluation section: STS Spearman per dataset and every domain table."""
    lines = ["# Evaluation (ctxsim `evaluate` stage)", ""]
    if res.get("datasets"):
        lines += ["| STS set | Spearman x100 (all) | pairs |", "|---|---|---|"]
        for key, v in res["datasets"].items():
            rho = v.get("spearman_all")
            shown = "n/a" if rho is None else f"{rho:.2f}"
            lines.append(f"| {key} | {shown} | {v.get('n_pairs')} |")
        lines.append("")
    if res.get("domain"):
        lines.append(domain_report(res["domain"]).replace("## ", "### "))
    if len(lines) == 2:
        # the key's old name: the published card stays byte-identical (sts_dir is read too)
        lines.append("No evaluation set was found (evaluate.sts_dir).")
    return "\n".join(lines) + "\n"


def publish_model(src: Path, dst: Path, card_section: str) -> None:
    """The trained model as ``dst`` with its card extended by the evaluation: weight files are
    hard links to the train artefact's (no copy of GBs; a copy where links cannot be made), the
    card a new file, so the train artefact is never written to."""
    import os
    import shutil

    def link_or_copy(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dst, copy_function=link_or_copy)
    card = dst / "README.md"
    text = card.read_text(encoding="utf-8") if card.exists() else ""
    card.unlink(missing_ok=True)  # a link to the train artefact's card: replace, never write
    card.write_text(text.rstrip("\n") + "\n\n" + card_section, encoding="utf-8")


class EvaluateStage(Stage):
    name = "evaluate"
    # 2: files/model, the trained model whose card lists this evaluation; 3: a report without
    # STS sets names no plots
    version = "3"
    Params = EvaluateParams
    inputs = ("train",)
    run_fields = ("seed", "device")
    cost = Constant()  # its evaluation sets do not grow with the corpus or the queries

    def fingerprint_extra(self, params: Any) -> dict[str, Any]:
        """The data folders' and extra models' files (by content) decide the output too."""
        # eval_dir under its old key: the rename moved no artefact
        dirs = {"sts_dir": params.eval_dir, "ists_dir": params.ists_dir}
        dirs.update({f"extra_models.{n}": d for n, d in sorted(params.extra_models.items())})
        extra: dict[str, Any] = {}
        for key, d in dirs.items():
            if d and Path(d).expanduser().is_dir():
                root = Path(d).expanduser()
                extra[key] = sorted(
                    (str(f.relative_to(root)), f.stat().st_size, content_digest(f))
                    for f in root.rglob("*")
                    if f.is_file()
                )
        return extra

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: EvaluateParams = ctx.params
        train = ctx.input("train")
        model_dir = train.files_dir / "model"
        if not (model_dir / "modules.json").exists():
            raise FileNotFoundError(f"train artefact {train.path} has no files/model")
        info = json.loads((train.files_dir / "metrics.json").read_text())
        baselines = _baselines(ctx, p, train.files_dir, info)
        if p.eval_dir is None or not Path(p.eval_dir).expanduser().is_dir():
            ctx.logger.warning(DATA_HINT.format(where=p.eval_dir))
        res = evaluate_model(
            model_dir,
            p.eval_dir,
            p.ists_dir,
            baselines=baselines,
            similarities=p.similarities,
            device=ctx.device,
            batch_size=p.batch_size,
            max_seq_length=p.max_seq_length,
            max_pairs_per_subset=p.max_pairs_per_subset,
            bootstrap_resamples=p.bootstrap_resamples,
            confidence=p.confidence,
            hard_quantile=p.hard_quantile,
            hard_high_gold=tuple(p.hard_high_gold),
            hard_low_gold=tuple(p.hard_low_gold),
            ists_remove_oppo=p.ists_remove_oppo,
            out_dir=ctx.files_dir if p.plots else None,
            seed=ctx.run.seed,
            logger=ctx.logger,
            paths_relative_to=ctx.store.root,
            bf16_cpu=p.bf16_cpu,
            encoding_cache=ctx.store.cache_dir("evaluate", create=False) if p.cache else None,
        )
        rows = res.pop("rows")
        if not p.plots:
            (ctx.files_dir / "results.json").write_text(json.dumps(res, indent=2))
        publish_model(model_dir, ctx.files_dir / "model", model_card_section(res))
        table = pa.Table.from_pylist(rows, schema=ROW_SCHEMA)
        stats = _flat_stats(res, len(rows))
        return table, stats


def _baselines(
    ctx: StageContext, p: EvaluateParams, train_files: Path, info: dict[str, Any]
) -> dict[str, str | None]:
    """The systems compared with the surrogate (``evaluate.baselines`` and ``extra_models``):
    name -> model path, or the word vectors of DynaMax, or None (TF-IDF); a baseline that is
    not installed is skipped with a warning, an extra model that is not a model folder fails."""
    baselines: dict[str, str | None] = {}
    backbone = info.get("backbone_path")
    if backbone == "files/backbone":
        backbone = str(train_files / "backbone")
    if "backbone" in p.baselines and backbone:
        baselines["backbone"] = backbone
    if "minilm" in p.baselines:
        try:
            from ctxsim.models.registry import ModelNotAvailableError, resolve_model

            try:
                baselines["minilm"] = str(resolve_model("minilm"))
            except ModelNotAvailableError as e:
                ctx.logger.warning("evaluate: all-MiniLM-L6-v2 baseline skipped: %s", e)
        except ImportError:
            pass
    if "dynamax" in p.baselines:
        if p.dynamax_vectors == "backbone":
            baselines["dynamax"] = backbone
        elif p.dynamax_vectors == "wordllama":
            baselines["dynamax"] = "wordllama"
        else:
            try:
                import wordllama  # noqa: F401

                baselines["dynamax"] = "wordllama"
            except ImportError:
                baselines["dynamax"] = backbone
    if "tfidf" in p.baselines:
        baselines["tfidf"] = None
    for name, path in p.extra_models.items():
        d = Path(path).expanduser()
        if not ((d / "modules.json").exists() or (d / "config.json").exists()):
            raise InputError(
                f"evaluate.extra_models.{name}: {path} is not a model directory "
                "(no modules.json or config.json)"
            )
        baselines[name] = str(d)
    return baselines


def _flat_stats(res: dict[str, Any], n_rows: int) -> dict[str, Any]:
    """The figures of ``evaluate_model``'s result as the stage's flat stats (None left out)."""
    stats: dict[str, Any] = {"n_sets": res.get("n_sets", 0), "n_rows": n_rows}
    for key, v in res.get("datasets", {}).items():
        stats[f"spearman_all.{key}"] = v.get("spearman_all")
    for key, v in res.get("rcmd", {}).items():
        stats[f"rcmd.spearman_all.{key}"] = v.get("spearman_all")
    avg = res.get("avg7", {}).get("cosine", {})
    if avg:
        stats["avg7.spearman_all"] = avg["spearman_all"]
        stats["avg7.n_sets"] = avg["n_sets"]
    for dom, e in res.get("ists", {}).items():
        for sim, v in e.items():
            stats[f"ists.{dom}.{sim}.f1_ali_equi"] = v["f1_ali_equi"]
    for split, v in res.get("hard", {}).items():
        stats[f"hard.{split}.spearman"] = v["spearman"]
    domain = res.get("domain", {})
    for cls in {c.section: c for c in eval_dir_formats()}.values():
        for name, by_sys in domain.get(cls.section, {}).items():
            for metric in cls.columns:
                stats[f"{cls.section}.{name}.{metric}"] = by_sys.get("surrogate", {}).get(metric)
    return {k: v for k, v in stats.items() if v is not None}
