"""The adapted model's card names the encoder it started from as the hub knows it: a registry
short name becomes its model's hub id (title, dev table, ``base_model`` metadata), a hub id
stays itself, a local folder is named by its folder and claims no hub base."""

from __future__ import annotations

import yaml

from ctxsim.product.adapt_card import base_model_names, render_card

RESULTS = {
    "domain": {
        "retrieval": {
            "econ_qa": {
                "backbone": {"ndcg_at_10": 88.5},
                "surrogate": {"ndcg_at_10": 91.5},
                "tfidf": {"ndcg_at_10": 78.5},
            }
        },
        "bootstrap": {
            "retrieval.econ_qa.ndcg_at_10.surrogate-vs-backbone": {
                "delta": 3.0,
                "ci_low": 1.5,
                "ci_high": 4.7,
            }
        },
    }
}


def _card(model: str, results: dict | None = RESULTS) -> tuple[dict, str]:
    text = render_card(
        model, ["sizes: 10 queries"], "ctxsim adapt x", "r1", "c.yaml", {}, results, {}
    )
    _, front, body = text.split("---", 2)
    return yaml.safe_load(front), body


def test_a_registry_name_is_carded_by_its_hub_id() -> None:
    meta, body = _card("mpnet")
    assert meta["base_model"] == "sentence-transformers/all-mpnet-base-v2"
    assert "# all-mpnet-base-v2, adapted by ctxsim" in body
    assert "| dev task | metric | all-mpnet-base-v2 as downloaded |" in body
    assert "| econ_qa | nDCG@10 | 88.50 | 91.50 | +3.00 [+1.50, +4.70] | 78.50 |" in body
    assert "`mpnet`" not in body


def test_a_hub_id_stays_and_a_local_folder_claims_no_hub_base(tmp_path) -> None:
    assert base_model_names("BAAI/bge-small-en-v1.5") == (
        "bge-small-en-v1.5",
        "BAAI/bge-small-en-v1.5",
    )
    assert base_model_names("/models/not-here") == ("not-here", None)  # a path, not a hub id
    folder = tmp_path / "my-encoder"
    folder.mkdir()
    meta, body = _card(str(folder), results=None)
    assert "base_model" not in meta
    assert "# my-encoder, adapted by ctxsim" in body
    assert "than `my-encoder` as downloaded" in body
