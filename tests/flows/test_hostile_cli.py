"""The CLI under hostile input, one suite: every case ends in one line naming the file, line,
key or path it is about, no traceback without --verbose, and nothing the store owns is lost.

Round three's cases, by section: export targets under an artefact root (a forged marker);
evaluate's outputs checked before the work, figures kept when the report cannot be written; a
mistyped --root; config values checked at load (non-finite and negative numbers, model fields,
sections that are not mappings, non-UTF-8 files); evaluation and corpus files (200,000-character
fields, BOMs, Latin-1); Ctrl-C and a full disk in real processes; Prefect's tracebacks; a
read-only plan cache. Add the next round's cases to the parametrised tables here.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxsim.flows.cli import app
from ctxsim.store.errors import InputError


def _error_line(res) -> str:
    """The one ``error:`` line of a failed command (no traceback before it)."""
    assert res.exit_code not in (0, None), res.output
    assert "Traceback" not in res.output, res.output
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), repr(
        res.exception
    )
    lines = [x for x in res.output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


def _manifests(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("_MANIFEST.json"))


# ---- export: nothing at or below an artefact root is a target ----------------------------------
@pytest.fixture
def labelled_store(tmp_path):
    from tests.tasks.test_label import _fake_world, _run_label

    store, arts, _ = _fake_world(tmp_path / "root", given=False)
    arts["label"] = _run_label(store, arts)
    stages = {k: {"fingerprint": a.fingerprint} for k, a in arts.items()}
    store.write_run("r", {"run_id": "r", "config": {"run": {}}, "stages": stages})
    store.cache_dir("scores")
    return store


@pytest.mark.parametrize("target", ["label", "_cache", "label/new", "runs"])
def test_export_refuses_any_target_under_the_root_even_with_a_forged_marker(labelled_store, target):
    root = labelled_store.root
    out = root / target
    if out.is_dir():
        (out / ".ctxsim-export.json").write_text("{}")
    before = _manifests(root)
    res = CliRunner().invoke(
        app, ["export", "r", "--root", str(root), "--out", str(out), "--overwrite"]
    )
    line = _error_line(res)
    assert f"--out {out} is inside the artefact root {root}" in line
    assert _manifests(root) == before and (root / "_cache" / "scores").is_dir()
    assert (root / "runs" / "r.json").is_file()


def test_export_refuses_the_root_a_run_was_made_in(labelled_store, tmp_path):
    """A store reached through a link: the run's own root is protected too."""
    link = tmp_path / "link"
    link.symlink_to(labelled_store.root)
    rec = labelled_store.read_run("r")
    rec["config"]["run"]["root"] = str(tmp_path / "root")
    labelled_store.write_run("r", rec)
    out = tmp_path / "root" / "label"
    res = CliRunner().invoke(app, ["export", "r", "--root", str(link), "--out", str(out)])
    assert "is inside the artefact root" in _error_line(res)


# ---- export and bench packs: no artefact root is replaced, whoever's it is ----------------------
def _other_root(base: Path, markers: str) -> Path:
    """Another artefact root than the one exported from, recognised only by the markers named
    (``runs``: run records, ``cache``: ``_cache/``, ``manifest``: a published artefact)."""
    root = base / "root2"
    root.mkdir(parents=True)
    if "runs" in markers:
        (root / "runs").mkdir()
        (root / "runs" / "other.json").write_text("{}")
    if "cache" in markers:
        (root / "_cache" / "scores").mkdir(parents=True)
    if "manifest" in markers:
        art = root / "label" / "0123456789abcdef"
        art.mkdir(parents=True)
        (art / "_MANIFEST.json").write_text("{}")
        (art / "part-00000.parquet").write_bytes(b"rows")
    return root


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _write_with(command: str, out: Path, store, monkeypatch, tmp_path: Path) -> str:
    """``ctxsim export`` or ``bench_student_grid pack`` with ``--out out --overwrite``: the one
    line it fails with. The pack's pipeline and backbone are stubbed: today's code ran to its
    end (and deleted ``out``) in a second."""
    if command == "export":
        args = ["export", "r", "--root", str(store.root), "--out", str(out), "--overwrite"]
        return _error_line(CliRunner().invoke(app, args))
    from bench import bench_student_grid as grid

    spec = {"files": {}, "examples": 0}
    monkeypatch.setattr(grid, "pack_arm", lambda *a, **k: dict(spec))
    monkeypatch.setattr(grid, "trim_backbone", lambda *a, **k: {})
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    argv = ["pack", "--config", str(QUICKSTART), "--arms", "none", "--out", str(out)]
    argv += ["--eval-dir", str(empty), "--sts-dir", str(empty), "--overwrite"]
    with pytest.raises(SystemExit) as err:
        grid.main(argv)
    line = str(err.value.code)
    assert "\n" not in line and "Traceback" not in line
    return line


@pytest.mark.parametrize("command", ["export", "pack"])
@pytest.mark.parametrize(
    ("markers", "target", "expected"),
    [
        ("runs cache manifest", "ROOT2", "--out ROOT2 is the artefact root ROOT2"),
        ("runs", "ROOT2", "--out ROOT2 is the artefact root ROOT2"),
        ("cache", "ROOT2", "--out ROOT2 is the artefact root ROOT2"),
        ("manifest", "ROOT2", "--out ROOT2 is the artefact root ROOT2"),
        ("runs cache manifest", "ROOT2/label", "--out ROOT2/label is inside the artefact root"),
        ("manifest", "ROOT2/label", "--out ROOT2/label is inside the artefact root ROOT2"),
        ("runs", "ROOT2/new", "--out ROOT2/new is inside the artefact root ROOT2"),
        ("runs cache manifest", "HOLDER", "--out HOLDER contains the artefact root ROOT2"),
        ("", "USER", "--out USER is not a previous ctxsim COMMAND (no MARKER)"),
    ],
)
def test_no_export_or_pack_replaces_another_root_or_a_folder_it_did_not_write(
    labelled_store, tmp_path, monkeypatch, command, markers, target, expected
):
    """``--out`` naming another artefact root, a folder inside one, a
    folder holding one (each with a forged marker), or a user's folder: one line naming both,
    and not a file lost (today: exit 0 and 14 artefacts -> 0, or a user folder deleted)."""
    from bench.bench_student_grid import PACK_MARKER
    from ctxsim.product.export_target import EXPORT_MARKER

    marker = EXPORT_MARKER if command == "export" else PACK_MARKER
    holder = tmp_path / "holder"
    root2 = _other_root(holder, markers)
    (root2 / "label").mkdir(exist_ok=True)
    user = tmp_path / "user"
    user.mkdir()
    (user / "notes.txt").write_text("mine")
    names = {"ROOT2": root2, "HOLDER": holder, "USER": user}
    out = Path(names.get(target.split("/")[0], root2), *target.split("/")[1:])
    if out.is_dir() and out != user:
        (out / marker).write_text("{}")  # forged: the marker says nothing about a root
    before_root, before_user = _tree(holder), _tree(user)
    line = _write_with(command, out, labelled_store, monkeypatch, tmp_path)
    want = expected.replace("COMMAND", command).replace("MARKER", marker)
    for name, path in names.items():
        want = want.replace(name, str(path))
    assert want in line, line
    assert _tree(holder) == before_root and _tree(user) == before_user
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_pack_replaces_only_a_previous_pack(tmp_path, monkeypatch):
    """With --overwrite a pack replaces what a pack wrote (its marker), and nothing else."""
    from bench import bench_student_grid as grid

    monkeypatch.setattr(grid, "pack_arm", lambda *a, **k: {"files": {}, "examples": 0})
    monkeypatch.setattr(grid, "trim_backbone", lambda *a, **k: {})
    out, empty = tmp_path / "grid", tmp_path / "empty"
    empty.mkdir()
    argv = ["pack", "--config", str(QUICKSTART), "--arms", "none"]
    argv += ["--eval-dir", str(empty), "--sts-dir", str(empty), "--out", str(out)]
    grid.main(argv)
    assert (out / grid.PACK_MARKER).is_file() and (out / grid.PACK_MANIFEST).is_file()
    (out / "stale.txt").write_text("old")
    with pytest.raises(SystemExit, match="a pack is already there"):
        grid.main(argv)
    grid.main([*argv, "--overwrite"])
    assert not (out / "stale.txt").exists() and (out / grid.PACK_MANIFEST).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "grid"]


# ---- evaluate: outputs checked before the work, figures never thrown away ---------------------
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A 2-layer, 32-d sentence-transformers model (random weights, WordPiece vocabulary learnt
    from the STS sentences) and an STS folder of 8 pairs."""
    from ctxsim.models.training.sentence_encoder import build_model
    from ctxsim.models.training.tiny_backbone import build_tiny_backbone
    from ctxsim.tasks.train import TrainParams

    d = tmp_path_factory.mktemp("evaluate")
    sts = d / "sts"
    sts.mkdir()
    pairs = [(f"A cat sat on mat {i}.", f"A dog lay on rug {i % 3}.", i % 5) for i in range(8)]
    rows = "".join(f"{a}\t{b}\t{g}\n" for a, b, g in pairs)
    (sts / "STSb.dev.tsv").write_text("sentence1\tsentence2\tscore\n" + rows)
    texts = [t for a, b, _ in pairs for t in (a, b)]
    backbone = build_tiny_backbone(texts, d / "backbone", TrainParams(tiny_vocab_size=120), 0)
    model = build_model(str(backbone), 32, "cpu")
    model.save(str(d / "model"))
    return d / "model", sts


def test_evaluate_checks_its_out_dir_before_loading_anything(tiny_model, tmp_path, monkeypatch):
    em = importlib.import_module("ctxsim.tasks.evaluate.evaluate_model")

    model, sts = tiny_model
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    loaded = []

    real = em.load_st
    monkeypatch.setattr(em, "load_st", lambda *a, **k: loaded.append(a) or real(*a, **k))
    args = ["evaluate", str(model), "--sts-dir", str(sts), "--out-dir", str(blocker / "sub")]
    line = _error_line(CliRunner().invoke(app, args))
    assert f"--out-dir {blocker / 'sub'}: cannot write there" in line and not loaded
    res = CliRunner().invoke(
        app, ["evaluate", str(model), "--sts-dir", str(sts), "--json-out", str(tmp_path)]
    )
    assert f"--json-out {tmp_path}: is a directory" in _error_line(res) and not loaded


def test_evaluate_prints_the_figures_when_the_report_cannot_be_written(
    tiny_model, tmp_path, monkeypatch
):
    em = importlib.import_module("ctxsim.tasks.evaluate.evaluate_model")

    def disk_full(out, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(em, "_write_outputs", disk_full)
    model, sts = tiny_model
    out = tmp_path / "report"
    res = CliRunner().invoke(
        app, ["evaluate", str(model), "--sts-dir", str(sts), "--out-dir", str(out)]
    )
    assert res.exit_code == 1 and "Traceback" not in res.output + res.stderr
    figures = json.loads(res.stdout)
    assert figures["n_sets"] == 1 and "STSb" in json.dumps(figures["datasets"])
    assert res.stderr.strip() == (
        f"error: --out-dir {out}: report not written (No space left on device)"
    )


@pytest.mark.parametrize("flag", [[], ["--bf16"]], ids=["float32", "bf16"])
def test_evaluate_passes_bf16_on_to_the_evaluation(tiny_model, monkeypatch, flag):
    """``ctxsim evaluate --bf16`` asks the evaluation for bf16 on a CPU with the units (the
    stage's ``evaluate.bf16_cpu``); without it, float32."""
    em = importlib.import_module("ctxsim.tasks.evaluate")
    got: dict = {}
    real = em.evaluate_model

    def spy(*a, **k):
        got.update(k)
        return real(*a, **k)

    monkeypatch.setattr(em, "evaluate_model", spy)
    model, sts = tiny_model
    res = CliRunner().invoke(app, ["evaluate", str(model), "--sts-dir", str(sts), *flag])
    assert res.exit_code == 0, res.output
    assert got["bf16_cpu"] is bool(flag) and json.loads(res.stdout)["n_sets"] == 1


def test_evaluate_with_ists_alone_warns_about_no_sts_folder(tiny_model, tmp_path):
    from ctxsim.tasks.evaluate import evaluate_model

    model, _ = tiny_model
    res = evaluate_model(model, None, tmp_path / "no-ists", max_seq_length=32)
    assert "None" not in json.dumps(res.get("warnings", []))
    assert res["n_sets"] == 0


# ---- explain / export: a mistyped --root creates nothing ---------------------------------------
@pytest.mark.parametrize(
    "argv",
    [["explain", "A b.", "C d."], ["export", "r", "--out", "OUT"]],
    ids=["explain", "export"],
)
def test_a_mistyped_root_is_named_and_not_created(tmp_path, argv):
    typo = tmp_path / "artefactz"
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in argv]
    line = _error_line(CliRunner().invoke(app, [*argv, "--root", str(typo)]))
    assert line == f"error: no artefact root {typo} (check --root)"
    assert not typo.exists() and not (tmp_path / "out").exists()


# ---- config: checked at load, naming the key and where it came from ---------------------------
QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


def _not_a_model(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    (tmp_path / "empty").mkdir(exist_ok=True)
    return {"FILE": str(tmp_path / "weights.bin"), "EMPTY": str(tmp_path / "empty")}


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("label.split_ratios=[98,.nan,1]", "label.split_ratios[1]: nan is not a finite number"),
        ("train.lr=.nan", "train.lr: nan is not a finite number"),
        ("train.epochs=.inf", "train.epochs: inf is not a finite number"),
        ("train.weight_decay=-4", "train.weight_decay: -4 is negative"),
        ("score.lambda_left=.nan", "score.lambda_left: nan is not a finite number"),
        ("run.seed=-1", "run.seed: -1 is negative"),
        ("run.torch_threads=-3", "run.torch_threads: -3 is negative"),
        ("train.teacher=FILE", "train.teacher: FILE is a file, not a model directory"),
        ("train.backbone=EMPTY", "train.backbone: EMPTY holds no model"),
        ("generator.backbone=FILE", "generator.backbone: FILE is a file"),
        ("pairs.encoder=FILE", "pairs.encoder: FILE is a file"),
        ("gencontexts.model=EMPTY", "gencontexts.model: EMPTY holds no model"),
        ("evaluate.extra_models={simcse: FILE}", "evaluate.extra_models.simcse: FILE is a file"),
        # a count where 0 means nothing is refused at load, naming the key
        *(
            (f"{key}=0", f"{key}: Input should be greater than or equal to 1")
            for key in (
                "train.batch_size",
                "train.eval_steps",
                "train.logging_steps",
                "train.save_total_limit",
                "train.max_seq_length",
                "train.max_train_pairs",
                "train.clrcmd_chunk_size",
                "train.tiny_vocab_size",
                "train.tiny_heads",
                "evaluate.batch_size",
                "evaluate.max_seq_length",
                "evaluate.max_pairs_per_subset",
            )
        ),
    ],
)
def test_a_bad_value_is_refused_at_load_naming_the_key(tmp_path, override, expected):
    for name, path in _not_a_model(tmp_path).items():
        override, expected = override.replace(name, path), expected.replace(name, path)
    args = ["run", "-c", str(QUICKSTART), "--root", str(tmp_path / "root"), "--set", override]
    line = _error_line(CliRunner().invoke(app, args))
    assert line.startswith(f"error: --set {override}: ") and expected in line, line
    assert not (tmp_path / "root").exists()


def test_negative_numbers_are_allowed_where_a_key_means_one():
    from ctxsim.flows.config import load_config

    cfg = load_config(QUICKSTART, ["train.max_steps=-1"])
    assert cfg.stages["train"].max_steps == -1


def test_marked_model_fields_are_found_without_a_table_row():
    from ctxsim.flows.config import MODEL_FIELDS, model_fields
    from ctxsim.tasks.generator import GeneratorParams

    assert "generator" not in MODEL_FIELDS
    found = model_fields("generator", GeneratorParams())
    assert found == {"backbone": ("tiny-random",), "distill_from": ()}


@pytest.mark.parametrize(
    ("text", "flags", "expected"),
    [
        (b"run: 5\n", ["--no-progress"], "CONFIG: section 'run' must be a mapping of keys"),
        (b"run:\n  seed: 1\nshard: [a]\n", [], "CONFIG: section 'shard' must be a mapping"),
        (b"run:\n  seed: 1\n# caf\xe9\n", [], "CONFIG:3: not UTF-8 text (byte 0xe9"),
    ],
    ids=["run-is-5", "section-is-a-list", "latin-1"],
)
def test_a_malformed_config_file_is_named(tmp_path, text, flags, expected):
    cfg = tmp_path / "bad.yaml"
    cfg.write_bytes(text)
    args = ["run", "-c", str(cfg), "--root", str(tmp_path / "root"), *flags]
    line = _error_line(CliRunner().invoke(app, args))
    assert expected.replace("CONFIG", str(cfg)) in line and "--set" not in line


def test_a_config_with_a_bom_is_read(tmp_path):
    from ctxsim.flows.config import load_config

    cfg = tmp_path / "bom.yaml"
    cfg.write_bytes(b"\xef\xbb\xbfrun:\n  seed: 3\n")
    assert load_config(cfg).run.seed == 3


# ---- evaluation and corpus files: read, or one line naming file and line ------------------------
PAIRS = "sentence1\tsentence2\tlabel\nA cat.\tA dog.\t1\nA car.\tThe sea.\t0\n"


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        (
            "rqe.pairs.tsv",
            PAIRS + "x" * 200_000 + "\tb\t1\n",
            "rqe.pairs.tsv:4: a field of 200000 characters",
        ),
        (
            "STSb.dev.tsv",
            "sentence1\tsentence2\tscore\na\t" + "y" * 200_000 + "\t1\n",
            "STSb.dev.tsv:2: a field of 200000",
        ),
        ("rqe.pairs.tsv", PAIRS + "caf\xe9\tb\t1\n", "rqe.pairs.tsv:4: not UTF-8"),
        # an empty sentence (Origin labelled it 0.53) and gold off the scale
        (
            "STSb.dev.tsv",
            "sentence1\tsentence2\tscore\nA cat.\tA dog.\t1\n \tA dog.\t2.5\n",
            "STSb.dev.tsv:3: sentence1 is empty",
        ),
        (
            "STSb.dev.tsv",
            "sentence1\tsentence2\tscore\nA cat.\tA dog.\t7.5\n",
            "STSb.dev.tsv:2: score '7.5' is outside the gold scale 0-5",
        ),
        (
            "sts-dev.csv",
            "main-captions\tMSRvid\t2012test\t0001\t5.000\tA man.\t \n",
            "sts-dev.csv:1: sentence2 is empty",
        ),
        (
            "SICK_trial.txt",
            "pair_ID\tsentence_A\tsentence_B\trelatedness_score\n1\tA b.\tC d.\t0.5\n",
            "SICK_trial.txt:2: score '0.5' is outside the gold scale 1-5",
        ),
    ],
    ids=[
        "pairs-200k-field",
        "sts-200k-field",
        "pairs-latin-1",
        "sts-empty-sentence",
        "sts-gold-7.5",
        "stsb-csv-empty-sentence",
        "sick-gold-0.5",
    ],
)
def test_a_malformed_eval_file_names_file_and_line(tmp_path, name, content, expected):
    data = content.encode("latin-1") if "\xe9" in content else content.encode()
    (tmp_path / name).write_bytes(data)
    (tmp_path / "model").mkdir()
    res = CliRunner().invoke(app, ["evaluate", str(tmp_path / "model"), "--sts-dir", str(tmp_path)])
    line = _error_line(res)
    assert str(tmp_path) in line and expected in line, line


def test_origin_refuses_an_sts_row_with_an_empty_sentence_naming_file_and_line(tmp_path):
    """Through ``ctxsim origin``: refused before anything runs."""
    sts = tmp_path / "sts"
    sts.mkdir()
    (sts / "STSb.dev.tsv").write_text("sentence1\tsentence2\tscore\nA cat.\tA dog.\t1\n\tB.\t2\n")
    root = tmp_path / "root"
    args = ["origin", "--sts-dir", str(sts), "--root", str(root)]
    line = _error_line(CliRunner().invoke(app, args))
    assert f"{sts / 'STSb.dev.tsv'}:3: sentence1 is empty" in line
    assert not list(root.glob("*/*/_MANIFEST.json"))  # nothing ran


def test_a_set_of_its_own_name_is_warned_not_refused_off_the_sts_scale(tmp_path, caplog):
    """A domain set may use another scale: a score outside 0-5 is a warning naming file and
    line, and the set is read."""
    from ctxsim.readers.sts import discover

    (tmp_path / "MyDomain.dev.tsv").write_text("sentence1\tsentence2\tscore\nA.\tB.\t7.5\n")
    with caplog.at_level("WARNING"):
        (found,) = discover(tmp_path)
    assert found.gold == [7.5]
    assert (
        f"{tmp_path / 'MyDomain.dev.tsv'}:2: score '7.5' is outside the gold scale" in caplog.text
    )


def test_eval_and_corpus_files_with_a_bom_are_read(tmp_path):
    from collections import Counter

    from ctxsim.readers.corpus import iter_sections
    from ctxsim.readers.domain import read_pairs
    from ctxsim.readers.sts import read_tsv
    from ctxsim.tasks.shard import ShardParams

    bom = b"\xef\xbb\xbf"
    (tmp_path / "rqe.pairs.tsv").write_bytes(bom + PAIRS.encode())
    assert read_pairs(tmp_path / "rqe.pairs.tsv").labels == [1, 0]
    (tmp_path / "STSb.dev.tsv").write_bytes(bom + b"sentence1\tsentence2\tscore\na\tb\t2.5\n")
    assert read_tsv(tmp_path / "STSb.dev.tsv") == (["a"], ["b"], [2.5])
    (tmp_path / "c.jsonl").write_bytes(bom + b'{"doc_id": "d", "text": "One. Two."}\n')
    settings = ShardParams(paths=[str(tmp_path / "c.jsonl")], text_field="text")
    (section,) = list(iter_sections(settings, Counter()))
    assert "\ufeff" not in repr(section)


# ---- real processes: Ctrl-C and a full disk ----------------------------------------------------
def _ctxsim_run(root: Path, until: str, run_id: str) -> list[str]:
    from tests.conftest import SAMPLE

    return [
        *(str(Path(sys.executable).with_name("ctxsim")), "run", "-c", str(QUICKSTART)),
        *("--root", str(root), "--until", until, "--run-id", run_id, "--no-progress"),
        *("--set", f"shard.paths=['{SAMPLE}']", "--set", "shard.n_shards=1"),
    ]


def _ctxsim_origin(root: Path, run_id: str, sts_dir: Path) -> list[str]:
    from tests.conftest import SAMPLE

    sts_dir.joinpath("STSb").mkdir(parents=True)
    sts_dir.joinpath("STSb", "STSb.dev.tsv").write_text(
        "sentence1\tsentence2\tscore\na cat sat .\ta cat sits .\t4.0\n"
        "a dog ran .\tthe sea is cold .\t0.5\n"
    )
    return [
        *(str(Path(sys.executable).with_name("ctxsim")), "origin", "-c", str(QUICKSTART)),
        *("--root", str(root), "--sts-dir", str(sts_dir), "--run-id", run_id),
        *("--set", f"shard.paths=['{SAMPLE}']", "--set", "shard.n_shards=1"),
    ]


@pytest.mark.parametrize("command", ["run", "origin"])
def test_ctrl_c_is_one_line_naming_what_is_kept_and_the_resume_command(
    tmp_path, prefect_env, command
):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) in the middle of a stage:
    one line, the record says "interrupted", and the command it prints resumes the run."""
    import shlex
    import signal
    import subprocess
    import time

    root, fault = tmp_path / "root", tmp_path / "fault.json"
    fault.write_text('{"stage": "contexts", "shard": 0, "kind": "delay", "seconds": 120}')
    env = {**prefect_env, "CTXSIM_FAULT_FILE": str(fault)}
    if command == "run":
        cmd = _ctxsim_run(root, "contexts", "r1")
    else:
        cmd = _ctxsim_origin(root, "r1", tmp_path / "sts")
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    attempts = Path(f"{fault}.attempts")
    deadline = time.monotonic() + 240
    while not attempts.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err and "Crash detected" not in out + err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"interrupted: run r1 stopped; kept under {root}: the published ")
    assert f"stages shard and every finished shard; resume with: ctxsim {command} " in last
    assert json.loads((root / "runs" / "r1.json").read_text())["status"] == "interrupted"
    resume = shlex.split(last.split("resume with: ", 1)[1])  # the same command, run id given
    given = ["--config" if a == "-c" and command == "run" else a for a in cmd[2:]]
    assert resume[:2] == ["ctxsim", command] and sorted(resume[2:]) == sorted(given), resume


def test_a_full_disk_is_one_line_and_the_run_is_not_recorded_completed(tmp_path, prefect_env):
    """ENOSPC by fault injection (store/faults.py ``kind: enospc``; a real small file system
    needs mount rights a CI runner may lack): one line naming the file system and the path."""
    import subprocess

    root, fault = tmp_path / "root", tmp_path / "fault.json"
    fault.write_text('{"stage": "contexts", "shard": 0, "kind": "enospc"}')
    env = {**prefect_env, "CTXSIM_FAULT_FILE": str(fault)}
    res = subprocess.run(
        _ctxsim_run(root, "contexts", "full"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "Traceback" not in out, out
    assert res.stderr.strip().splitlines()[-1].startswith("error: no space left on the file ")
    assert f"({root}" in res.stderr.strip().splitlines()[-1]
    assert out.count("No space left") + out.count("no space left") == 1, out
    record = json.loads((root / "runs" / "full.json").read_text())
    assert record["status"] == "failed" and "No space left" in record["error"]


def test_a_run_whose_prefect_database_fills_the_disk_is_not_left_completed(tmp_path, monkeypatch):
    """The flow wrote "completed", then Prefect could not save its own state (SQLite: disk
    full): the record is rewritten "failed" and the CLI says so once."""
    import sqlite3

    import ctxsim.flows.pipeline
    from ctxsim.store.artefacts import ArtefactStore

    def completed_then_full(config, overrides, root, until, run_id):
        ArtefactStore(root).write_run(run_id, {"run_id": run_id, "status": "completed"})
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(ctxsim.flows.pipeline, "run_pipeline", completed_then_full)
    root = tmp_path / "root"
    res = CliRunner().invoke(app, ["run", "--root", str(root), "--run-id", "r"])
    line = _error_line(res)
    assert line.startswith("error: no space left on the file system at /")
    assert f"({root / '_prefect'})" in line
    record = json.loads((root / "runs" / "r.json").read_text())
    assert record["status"] == "failed" and "database or disk is full" in record["error"]


# ---- origin: options of the other route are refused, --help tells both --------------------------
MEDQUAD = Path(__file__).resolve().parents[2] / "configs" / "medquad.yaml"


@pytest.mark.parametrize(
    "flags",
    [
        ["--cs-size", "4"],
        ["--random-contexts"],
        ["--no-diversity"],
        ["--cs-size", "2", "--no-diversity"],
    ],
    ids=["cs-size", "random-contexts", "no-diversity", "two"],
)
def test_origin_refuses_lm_route_options_under_an_encoder_route_config(tmp_path, flags):
    """Under label.contextual: encoder nothing selects contexts, so these
    options changed nothing and said nothing (same labels, same Spearman): one line naming
    them, the config and the key, before anything runs."""
    sts = tmp_path / "sts"
    sts.mkdir()
    rows = "".join(f"A cat sat {i}.\tA dog lay {i}.\t{i}\n" for i in range(4))
    (sts / "STSb.dev.tsv").write_text("sentence1\tsentence2\tscore\n" + rows)
    root = tmp_path / "root"
    args = ["origin", "-c", str(MEDQUAD), "--sts-dir", str(sts), "--root", str(root), *flags]
    line = _error_line(CliRunner().invoke(app, args))
    named = [f for f in flags if f.startswith("--")]
    assert line.startswith(f"error: {', '.join(named)}: {MEDQUAD} labels with ")
    assert "label.contextual: encoder" in line and "label.contextual: lm" in line
    assert not root.exists()


def test_origin_help_describes_both_routes():
    """--help described retrieval only."""
    import re

    text = re.sub(r"\s+", " ", CliRunner().invoke(app, ["origin", "--help"]).output)
    assert "LM route" in text and "Encoder route" in text and "every corpus context unit" in text


@pytest.mark.parametrize("command", ["run", "origin"])
def test_a_prefect_server_too_slow_to_start_is_one_line_saying_what_to_do(
    tmp_path, monkeypatch, command
):
    """On a loaded machine Prefect's ephemeral API server did not start in
    time and the run ended in 164 lines (Prefect's RuntimeError holds the server's output). The
    server now gets 600 s, and a timeout still is one line naming the setting, the database's
    folder and what to do (exit 1)."""
    import ctxsim.flows.pipeline
    from ctxsim.flows.prefect_env import STARTUP_TIMED_OUT, STARTUP_TIMEOUT

    for key in (STARTUP_TIMEOUT, "PREFECT_HOME", "PREFECT_API_URL"):
        monkeypatch.delenv(key, raising=False)  # restored after the test

    def slow_server(*a, **k):
        server_output = "\n".join(f"INFO: server log line {i}" for i in range(160))
        raise RuntimeError(f"{STARTUP_TIMED_OUT}. stdout: {server_output}")

    monkeypatch.setattr(ctxsim.flows.pipeline, "run_pipeline", slow_server)
    root = tmp_path / "root"
    args = [command, "--root", str(root), "--run-id", "r"]
    if command == "origin":
        (tmp_path / "sts").mkdir()
        rows = "".join(f"A cat sat {i}.\tA dog lay {i}.\t{i}\n" for i in range(4))
        (tmp_path / "sts" / "STSb.dev.tsv").write_text("sentence1\tsentence2\tscore\n" + rows)
        args += ["--sts-dir", str(tmp_path / "sts")]
    res = CliRunner().invoke(app, args)
    line = _error_line(res)
    assert res.exit_code == 1
    assert f"{STARTUP_TIMEOUT}=600 s" in line and str(root / "_prefect") in line
    assert "PREFECT_API_URL" in line and "run the same command again" in line
    assert os.environ[STARTUP_TIMEOUT] == "600"


@pytest.mark.parametrize(
    "exc",
    [
        InputError("no labelled pairs with split in ['train'] in label/abc"),  # training_data.py
        KeyboardInterrupt(),
        OSError(28, "No space left on device", "/r/x"),
    ],
    ids=["stage-check", "ctrl-c", "disk-full"],
)
def test_prefect_prints_no_traceback_before_the_clis_line_unless_verbose(exc):
    """A stage's own clean message (train: no `train` split, objective `context` without
    context sentences) came after Prefect's ~90-line traceback."""
    import logging

    from ctxsim.flows.cli_errors import _NoInputErrorTraceback, set_verbose

    def record() -> logging.LogRecord:
        return logging.LogRecord(
            "prefect.flow_runs",
            logging.ERROR,
            __file__,
            1,
            "Encountered exception",
            None,
            (type(exc), exc, None),
        )

    set_verbose(False, reset=True)
    quiet = record()
    kept = _NoInputErrorTraceback().filter(quiet)
    assert quiet.exc_info is None or not kept  # a full disk: the CLI's line says it, once
    assert kept == (not isinstance(exc, OSError))
    set_verbose(True, reset=True)
    try:
        loud = record()
        assert _NoInputErrorTraceback().filter(loud) and loud.exc_info is not None
    finally:
        set_verbose(False, reset=True)


# ---- plan: a read-only unit-cost cache is used as it is ----------------------------------------
def test_a_read_only_plan_cache_is_used_as_it_is_and_never_written(tmp_path, monkeypatch):
    """A read-only $CTXSIM_PLAN_CACHE gave an OSError traceback, even with nothing to pilot.
    Root writes through any mode bits, so "read-only" is the writability probe's answer here;
    that nothing is written there is checked on the files themselves."""
    from ctxsim.flows import plan
    from tests.conftest import SAMPLE

    cache = tmp_path / "cache"
    sets = [f"shard.paths=['{SAMPLE}']", "run.torch_threads=1"]

    def pilot(until: str):
        return plan.run_pilot(
            QUICKSTART, sets, sample_fraction=0.3, pilot_queries=4, until=until, cache=cache
        )[1]

    pilot("shard")

    def snapshot() -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(cache)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(cache.rglob("*"))
        }

    before = snapshot()
    monkeypatch.setattr(plan, "cache_writable", lambda path: path != cache)
    said: list[str] = []
    monkeypatch.setattr(plan.log, "warning", lambda msg, *a: said.append(msg % a if a else msg))
    cached = pilot("shard")
    assert cached.piloted == [] and cached.from_cache == ["1:shard"]
    assert said == [plan.read_only_note(cache)]
    more = pilot("contexts")  # not in the cache: piloted in a temporary folder
    assert more.piloted == ["1:contexts"] and more.from_cache == ["1:shard"]
    assert snapshot() == before
