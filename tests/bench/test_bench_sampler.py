"""bench_sampler on a tiny causal LM: every variant runs, float32 samples do not depend on the
batch, bf16 weights and transformers' generate are other computations."""

from __future__ import annotations

import json

import torch

from bench.bench_sampler import main
from ctxsim.models.contextual.generator import tiny_causal, train_wordpiece_tokenizer
from tests.models.contextual.tiny_scoring import TINY, WORDS


def test_sampler_bench_rows(tmp_path) -> None:
    tok = train_wordpiece_tokenizer([], vocab=WORDS)
    torch.manual_seed(0)
    model_dir = tmp_path / "tiny"
    tiny_causal(tok, TINY).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    args = ["--model", str(model_dir), "--queries", "4", "--k", "2", "--batches", "2", "8"]
    args += ["--repeat", "1", "--naive-prompts", "3", "--name", "t", "--out-dir", str(tmp_path)]
    args += ["--kept"]
    main(args)
    rows = {r["variant"]: r for r in json.loads((tmp_path / "t.json").read_text())["rows"]}
    assert set(rows) == {
        "ctxsim float32 batch 2",
        "ctxsim float32 batch 8",
        "ctxsim float32 batch 8, rows kept, cache grown (before)",
        "ctxsim float32 one at a time (naive)",
        "ctxsim bfloat16 batch 2",
        "ctxsim bfloat16 batch 8",
        "ctxsim bfloat16 batch 8, rows kept, cache grown (before)",
        "ctxsim bfloat16 one at a time (naive)",
        "transformers generate float32 batch 2",
    }
    # float32: a sample depends on its seed only, whatever the batch
    assert rows["ctxsim float32 batch 8"]["same_as_reference"] == "8/8"
    assert rows["ctxsim float32 one at a time (naive)"]["same_as_reference"] == "3/3"
    before = rows["ctxsim float32 batch 8, rows kept, cache grown (before)"]
    assert before["same_as_reference"] == "8/8"
    assert all(r["cpu_s"] >= 0 and r["samples"] in (3, 8) for r in rows.values())
    assert (tmp_path / "t.md").read_text().count("| ctxsim") == 8
