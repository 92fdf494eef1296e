"""Linked folders are read like real ones: a dev folder or corpus made of symlinks into a shared
store is found, a link cycle ends, and names match case-sensitively as ``rglob``'s did."""

from __future__ import annotations

from pathlib import Path

from ctxsim.readers.corpus import expand_paths
from ctxsim.readers.evaluators import discover_eval_dir
from ctxsim.readers.sts import discover
from ctxsim.readers.tree import files_under
from tests.readers.test_evaluators import _folder


def test_files_under_enters_linked_folders_once_and_ends_a_cycle(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "a").mkdir(parents=True)
    (store / "a" / "x.tsv").write_text("x")
    (store / "a" / "X.TSV").write_text("x")
    (store / "a" / "loop").symlink_to(store)  # a cycle back to the top
    (store / "a" / "gone.tsv").symlink_to(store / "missing.tsv")  # a broken link: no file
    view = tmp_path / "view"
    view.mkdir()
    (view / "linked").symlink_to(store / "a")
    (view / "b.tsv").write_text("b")
    assert files_under(view, "*.tsv") == [view / "b.tsv", view / "linked" / "x.tsv"]
    assert files_under(store, "*.tsv") == [store / "a" / "x.tsv"]


def test_an_eval_dir_of_linked_folders_finds_every_task(tmp_path: Path) -> None:
    real = _folder(tmp_path / "shared")
    linked = tmp_path / "dev"
    linked.mkdir()
    (linked / "rqe").symlink_to(real / "rqe")
    (linked / "med_qa.jsonl").symlink_to(real / "med_qa.jsonl")
    assert [e.name for e in discover_eval_dir(linked)] == ["rqe/RQE.dev", "med_qa"]
    (linked / "sts").symlink_to(real)
    assert [s.name for s in discover(linked)] == ["STSb.dev"]


def test_a_linked_corpus_folder_gives_its_files(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "a.jsonl").write_text("{}\n")
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "part").symlink_to(tmp_path / "store")
    assert expand_paths([str(tmp_path / "corpus")]) == [tmp_path / "corpus" / "part" / "a.jsonl"]
