"""The newer commands under hostile input: each case gives one clear line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ctxsim.flows.cli import app
from tests.tasks.test_label import _fake_world, _run_label


def _one_line(res) -> str:
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    return lines[0]


def test_explain_names_the_argument_that_is_not_utf8(tmp_path):
    # bytes that are not UTF-8 reach Python's argv as lone surrogates (surrogateescape)
    bad = b"caf\xe9 au lait".decode("utf-8", "surrogateescape")
    root = ["--root", str(tmp_path)]
    res = CliRunner().invoke(app, ["explain", "A fine sentence.", bad, *root])
    assert res.exit_code == 2
    assert _one_line(res) == (
        "error: S2 (the second sentence) is not valid UTF-8 text (byte 0xe9 at character 3); "
        "pass UTF-8"
    )
    res = CliRunner().invoke(app, ["explain", bad, "fine", *root])
    assert res.exit_code == 2 and "S1 (the first sentence)" in res.output


def test_explain_refuses_a_top_below_one(tmp_path):
    from ctxsim.flows.explain import explain_pair
    from ctxsim.store.artefacts import ArtefactStore

    res = CliRunner().invoke(app, ["explain", "a b c", "d e f", "--top", "-1"])
    assert res.exit_code == 2 and "Invalid value for '--top'" in res.output
    assert "greater than or equal to 1" in res.output
    with pytest.raises(ValueError, match="top=0"):
        explain_pair(ArtefactStore(tmp_path), "any", "a", "b", top=0)


def test_export_says_not_checked_and_why_on_the_console_and_the_card(tmp_path, monkeypatch):
    """The run's STS folder is relative: from another working directory it is not found, and
    the console said `contaminated sentences: None` while the card said "Not checked"."""
    store, arts, _ = _fake_world(tmp_path / "w", given=False)
    arts["label"] = _run_label(store, arts)
    stages = {k: {"fingerprint": a.fingerprint} for k, a in arts.items()}
    config = {"run": {}, "label": {"contamination": {"sts_dir": "data/sts"}}}
    store.write_run("r", {"run_id": "r", "config": config, "stages": stages})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["export", "r", "--out", str(out), "--root", str(store.root)])
    assert res.exit_code == 0, res.output
    why = f"no STS directory ('data/sts', read relative to the working directory {elsewhere})"
    line = _one_line(res)
    assert line.endswith(f"; contamination: not checked ({why}; pass --sts-dir)")
    assert "None" not in line
    assert f"Not checked: {why}; pass --sts-dir." in (out / "README.md").read_text()
    assert json.loads((out / "contamination.json").read_text())["skipped"].startswith(why)


def test_trust_warnings_need_separated_modes_and_reference_agreement():
    """Random pairs on top of mined ones (0.752 vs 0.787 with wide spreads) and a Spearman
    with TF-IDF of 14.2 gave no warning at all."""
    import numpy as np

    from ctxsim.product.diagnostics import trust_warnings

    rng = np.random.default_rng(0)
    mined, rand = rng.normal(0.787, 0.2, 300), rng.normal(0.752, 0.2, 300)
    src = np.array(["knn"] * 150 + ["shared"] * 150 + ["random"] * 300, dtype=object)
    (w,) = trust_warnings(np.r_[mined, rand], src, reference_spearman=55.0)
    assert w.startswith("mined pairs (knn/shared, n=300, mean ") and "95% CI [" in w
    assert trust_warnings(np.r_[mined + 0.3, rand], src, 55.0) == []  # separated: no warning
    (w,) = trust_warnings(np.r_[mined + 0.3, rand], src, 14.2)
    assert w == (
        "the labels barely agree with the reference encoder (Spearman x100 14.2, |rho| below 30)"
    )
    assert trust_warnings(np.r_[mined, rand], np.array(["given"] * 600), None) == []


def test_the_card_shows_the_warnings_and_no_local_paths(tmp_path):
    """The card showed no warning (diag_warnings empty), `license: other` without a
    `license_name`, and the run's local artefact root."""
    import yaml

    from ctxsim.product.export import export_run, parse_card

    store, arts, _ = _fake_world(tmp_path / "w", given=False, mined_across_topics=True)
    arts["label"] = _run_label(store, arts)
    stages = {k: {"fingerprint": a.fingerprint} for k, a in arts.items()}
    config = {"run": {"root": "/home/someone/ctxsim-artefacts", "license": "other"}}
    store.write_run("r", {"run_id": "r", "config": config, "stages": stages})
    out = tmp_path / "out"
    export_run(store, "r", out, "parquet")
    text = (out / "README.md").read_text()
    meta, body = parse_card(text)
    assert meta["license"] == "other" and meta["license_name"] == "source-corpus-licence"
    assert "/home/someone" not in text and "root" not in meta["ctxsim"]["config"]["run"]
    assert "## Warnings" in body
    (w,) = [x for x in meta["ctxsim"]["warnings"] if x.startswith("mined pairs")]
    assert f"- {w}" in body
    assert yaml.safe_load(text.split("---")[1])["ctxsim"]["warnings"] == meta["ctxsim"]["warnings"]


# ---- the card and the summary describe the route that ran ----------------------
def _route_run(tmp_path, route: str):
    """A fake run through `label`: the LM route as the label tests make it, or the same labels
    recorded as an encoder-route run (``encoder`` or ``encoder-FORM``: no select or score
    stage; an embed artefact with its scorer's identity and 123 corpus units)."""
    store, arts, _ = _fake_world(tmp_path / "w", given=False)
    arts["label"] = _run_label(store, arts)
    config: dict = {"run": {}}
    if route.startswith("encoder"):
        form = route.partition("-")[2] or "closed"
        for name in ("select", "score"):
            arts.pop(name)
        payload = {"extra": {"scorer": {"name": "minilm", "digest": "d1e2" * 16}}}
        extra = {"stats": {"contexts": 123}, "fingerprint_payload": payload}
        store.open_partial("embed", "e" * 16)
        arts["embed"] = store.publish("embed", "e" * 16, 0, extra)
        config["label"] = {"contextual": "encoder", "encoder": {"form": form, "tau": 0.05}}
    stages = {k: {"fingerprint": a.fingerprint} for k, a in arts.items()}
    store.write_run("r", {"run_id": "r", "config": config, "stages": stages})
    return store


ENCODER_CARD = [
    "the encoder route (label.contextual: encoder): every corpus context unit (123 units)",
    "the cosine of the scorer `minilm` (content digest `d1e2d1e2d1e2d1e2`, embed artefact "
    "`eeeeeeeeeeeeeeee`)",
    "`n_ctx1`, `n_ctx2`: the corpus context units",
]


@pytest.mark.parametrize(
    ("route", "present", "absent"),
    [
        (
            "lm",
            ["retrieved and selected for the pair (Eq. 3)", "`n_ctx1`, `n_ctx2`: |Cs|", "explain"],
            ["encoder route"],
        ),
        (
            "encoder",
            [*ENCODER_CARD, "computed in closed form", "(label.encoder.form: closed)", "explain"],
            ["retrieved and selected for the pair", "|Cs|"],
        ),
        (
            "encoder-softmax",
            [*ENCODER_CARD, "softmax of the cosines / tau (tau = 0.05)", "form: softmax)"],
            ["retrieved and selected for the pair", "|Cs|", "ctxsim explain"],
        ),
    ],
)
def test_the_card_describes_the_route_that_made_the_labels(tmp_path, route, present, absent):
    """An encoder-route card said its contexts were "retrieved and selected for the pair (Eq.
    3)", n_ctx was |Cs|, and it promised `ctxsim explain`, which fails on such a run."""
    import re

    from ctxsim.product.export import export_run, parse_card

    store = _route_run(tmp_path, route)
    export_run(store, "r", tmp_path / "out", "parquet")
    meta, body = parse_card((tmp_path / "out" / "README.md").read_text())
    body = re.sub(r"\s+", " ", body)
    for text in present:
        assert text in body, text
    for text in absent:
        assert text not in body, text
    assert meta["ctxsim"]["route"]["contextual"] == route.partition("-")[0]


@pytest.mark.parametrize("route", ["lm", "encoder", "encoder-softmax"])
def test_the_run_summary_suggests_explain_only_for_a_run_it_can_explain(tmp_path, route):
    """`ctxsim run --config configs/medquad.yaml` suggested `ctxsim explain`,
    which failed with "run has no 'select' stage"; explain now decomposes the encoder route's
    closed form (a sum over contexts), and no other form."""
    from ctxsim.flows.run_summary import summary_lines

    store = _route_run(tmp_path, route)
    record = store.read_run("r")
    record["status"] = "completed"
    for name, st in record["stages"].items():
        art = store.require(name, st["fingerprint"])
        st |= {"path": str(art.path), "rows": art.num_rows}
    text = "\n".join(summary_lines(record))
    assert "ctxsim export r" in text
    assert ("ctxsim explain" in text) == (route in ("lm", "encoder"))


@pytest.mark.parametrize(
    ("sets", "tables"),
    [(["MedSTS.dev", "BIOSSES.test"], 0), (["STSb.test", "MedSTS.dev"], 2)],
    ids=["domain-sets-only", "with-stsb"],
)
def test_an_evaluation_report_prints_no_empty_table(sets, tables):
    """An encoder-route (domain) run's report printed both STS tables, every cell empty."""
    from ctxsim.tasks.evaluate.report import render_report

    per = {s: {"spearman_all": 80.0, "spearman_mean": 80.0} for s in sets}
    text = render_report({"model": "m"}, {("surrogate", "cosine"): per}, {})
    assert text.count("## STS, Spearman") == tables
    assert "## Other sets" in text and "80.00" in text
