"""The model card `ctxsim adapt` writes beside the adapted encoder: what it was made from and
how, per dev task the encoder as downloaded, the adapted one and TF-IDF with paired intervals
(from the `evaluate` stage's results), and the label diagnostics (from the `label` stage's
stats), which are all a user can check when no dev task was given."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: the evaluate results' domain sections and the metric each card row reports
PRIMARY = {"pairs": ("ap", "AP"), "retrieval": ("ndcg_at_10", "nDCG@10")}


def dev_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per dev task of an evaluate results.json: the download (``backbone``), the
    adapted model (``surrogate``), TF-IDF, and the paired interval adapted minus download."""
    rows = []
    domain = results.get("domain", {})
    boot = domain.get("bootstrap", {})  # the dev tasks' intervals (the top level's are STS's)
    for section, (metric, label) in PRIMARY.items():
        for name, systems in sorted(domain.get(section, {}).items()):
            ci = boot.get(f"{section}.{name}.{metric}.surrogate-vs-backbone")
            rows.append(
                {
                    "task": name,
                    "metric": label,
                    "download": systems.get("backbone", {}).get(metric),
                    "adapted": systems.get("surrogate", {}).get(metric),
                    "tfidf": systems.get("tfidf", {}).get(metric),
                    "ci": ci,
                }
            )
    return rows


def base_model_names(model: str) -> tuple[str, str | None]:
    """The name a card shows for the encoder it started from, and its hub id for the card's
    ``base_model`` metadata (how the hub links a fine-tune to its base; none for a local
    folder)."""
    from ctxsim.models.registry import hub_id

    hub = hub_id(model)
    if hub is not None:
        return hub.rsplit("/", 1)[-1], hub
    return Path(model).name or model, None


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ci(ci: dict[str, Any] | None) -> str:
    if not ci:
        return "-"
    return f"{ci['delta']:+.2f} [{ci['ci_low']:+.2f}, {ci['ci_high']:+.2f}]"


def dev_table(rows: list[dict[str, Any]], model: str) -> list[str]:
    out = [
        f"| dev task | metric | {model} as downloaded | adapted | adapted - downloaded "
        "[95% CI] | TF-IDF |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['task']} | {r['metric']} | {_num(r['download'])} | {_num(r['adapted'])} | "
            f"{_ci(r['ci'])} | {_num(r['tfidf'])} |"
        )
    return out


def label_lines(stats: dict[str, Any]) -> list[str]:
    """The label diagnostics a user can read without a dev task."""
    sep = stats.get("diag_separation") or {}
    out = [
        f"- {stats.get('pairs', 0):,} labelled pairs ({stats.get('pairs_knn', 0):,} nearest "
        f"neighbours, {stats.get('pairs_random', 0):,} random), Origin over "
        f"{stats.get('encoder_contexts', 0):,} corpus context units "
        f"(form {stats.get('encoder_form', '?')})",
        f"- labels: mean {stats.get('label_mean', float('nan')):.3f}, sd "
        f"{stats.get('label_std', float('nan')):.3f}, 5-95% "
        f"[{stats.get('label_p05', float('nan')):.3f}, {stats.get('label_p95', float('nan')):.3f}]",
    ]
    if sep:
        out.append(
            f"- neighbours against random pairs: mean label {sep.get('mined_mean', 0):.3f} vs "
            f"{sep.get('random_mean', 0):.3f} (difference {sep.get('difference', 0):+.3f} "
            f"[{sep.get('ci_low', 0):+.3f}, {sep.get('ci_high', 0):+.3f}], Cohen's d "
            f"{sep.get('cohens_d', 0):.2f}): labels that do not separate them teach little"
        )
    out += [f"- warning: {w}" for w in stats.get("diag_warnings", [])]
    return out


def render_card(
    model: str,
    plan_lines: list[str],
    command: str,
    run_id: str,
    config_path: str,
    label_stats: dict[str, Any],
    results: dict[str, Any] | None,
    train: dict[str, Any],
) -> str:
    """The card (README.md) of the adapted encoder."""
    name, hub = base_model_names(model)
    head = [
        "---",
        "library_name: sentence-transformers",
        "pipeline_tag: sentence-similarity",
        "tags: [sentence-transformers, sentence-similarity, ctxsim, domain-adaptation]",
        *([f"base_model: {hub}"] if hub else []),
        "---",
        "",
        f"# {name}, adapted by ctxsim",
        "",
        f"`{name}` trained on a corpus of its own field by ctxsim's recipe (`ctxsim adapt`): "
        "pairs of the corpus's sentences labelled by how alike the contexts they fit into are "
        "(Origin, Sun et al. 2022, Eq. 4, with the encoder itself as the contextual model over "
        "every paragraph of the corpus), learnt together with each sentence's real right "
        "context. Use it like any sentence-transformers model: "
        '`SentenceTransformer("THIS_FOLDER")`.',
        "",
        "## Dev tasks",
        "",
    ]
    if results is None:
        dev = [
            "No dev task was given (`--eval-dir`): nothing here shows that this model is better "
            f"than `{name}` as downloaded on your tasks. Rerun with `--eval-dir DIR` (pair "
            "classification `*.pairs.tsv`, question-answer retrieval `*_qa.jsonl`; "
            "docs/evaluation.md) to measure it; the label diagnostics below are what can be "
            "checked without one.",
        ]
    else:
        rows = dev_rows(results)
        dev = (
            ["Paired bootstrap intervals (95%), adapted minus downloaded, on the same items:", ""]
            + dev_table(rows, name)
            if rows
            else ["The dev folder held no pair or retrieval task the card reports."]
        )
    steps = train.get("steps", train.get("max_steps", "?"))
    made = [
        "",
        "## Labels",
        "",
        *label_lines(label_stats),
        "",
        "## How it was made",
        "",
        *[f"- {line}" for line in plan_lines],
        f"- training: {steps} steps",
        f"- command: `{command}`",
        f"- run `{run_id}`; the config it ran: `{config_path}` (`ctxsim run --config` on it "
        "reruns, resumes or plans the same run; `ctxsim inspect` shows every stage's data)",
        "",
    ]
    return "\n".join(head + dev + made)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())
