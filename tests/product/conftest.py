"""Shared fixtures of the product tests: a tiny real run through `label`."""

from __future__ import annotations

import pytest

from tests.product.planted_sts import sts_dir


@pytest.fixture(scope="package")
def tiny_run(tmp_path_factory):
    """The quickstart on the sample corpus, shrunk, through `label` (run id ``tiny``), with
    the planted STS sets as its contamination check's: (store, run record, STS folder). Built
    once for the package (export and explain tests read it)."""
    from ctxsim.flows.config import load_config
    from ctxsim.flows.pipeline import execute
    from ctxsim.store.artefacts import ArtefactStore
    from tests.conftest import REPO, SMALL_QUICKSTART

    root = tmp_path_factory.mktemp("product-run")
    sts = sts_dir(root)
    sets = [
        *SMALL_QUICKSTART,
        "label.split_ratios=[60, 20, 20]",
        f"label.contamination.sts_dir='{sts}'",
        "run.license=cc-by-4.0",
        "run.quiet=true",
    ]
    cfg = load_config(REPO / "configs" / "quickstart.yaml", sets, str(root / "artefacts"))
    record = execute(cfg, until="label", run_id="tiny", use_prefect=False)
    return ArtefactStore(root / "artefacts"), record, sts
