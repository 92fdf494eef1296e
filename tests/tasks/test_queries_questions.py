"""``queries.question_share``: the corpus's own questions (sentences ending in a question mark,
closing quotes aside) drawn first, all of them when fewer than asked; the rest from the
sentences not drawn; the key stays out of the fingerprint at its default."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ctxsim.models.corpus.sentences import QUESTION_END
from ctxsim.store.artefacts import ArtefactStore
from ctxsim.store.chunks import SentenceTexts
from ctxsim.store.stage import RunParams, resolve_stage, run_stage_locally
from ctxsim.tasks.contexts import ContextsParams, ContextsStage
from ctxsim.tasks.queries import QueriesParams, QueriesStage
from ctxsim.tasks.shard import ShardParams, ShardStage


def test_a_question_ends_in_a_question_mark_closing_quotes_aside():
    texts = ["Why is it so?", "He asked, “why?”", "No.", "Is it? No, it is not.", "(Really?) "]
    want = [True, True, False, False, True]
    assert [re.search(QUESTION_END, t) is not None for t in texts] == want
    arrow = pc.match_substring_regex(pa.array(texts), QUESTION_END).to_pylist()
    assert arrow == want  # the same pattern read by Arrow's RE2


def _stages(tmp_path: Path):
    """Six sections of three paragraphs: a body question in each section's second paragraph
    (six questions among 36 sentences)."""
    recs = [
        {
            "doc": f"d{i}",
            "section": f"s{i}",
            "paragraphs": [
                f"Topic {i} opens with a plain statement about prices. It goes on for a while.",
                f"Why do prices of good {i} rise in winter? Supply falls when the farms freeze.",
                f"Demand for good {i} stays the same. So the price goes up until they meet.",
            ],
        }
        for i in range(6)
    ]
    path = tmp_path / "econ.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    store, run = ArtefactStore(tmp_path / "root"), RunParams()
    shard_params = ShardParams(
        paths=[str(path)], doc_field="doc", section_field="section", n_shards=1
    )
    shard, _ = run_stage_locally(resolve_stage(ShardStage(), shard_params, run, store, {}))
    ctx, _ = run_stage_locally(
        resolve_stage(ContextsStage(), ContextsParams(), run, store, {"shard": shard})
    )
    return store, run, {"shard": shard, "contexts": ctx}


def test_questions_are_drawn_first_and_all_of_them_when_fewer(tmp_path: Path):
    store, run, ups = _stages(tmp_path)
    texts = SentenceTexts(ups["shard"])
    assert int(texts.questions().sum()) == 6

    def asked(n: int, **kw) -> list[str]:
        params = QueriesParams(n_corpus=n, only_context_centres=False, min_tokens=3, **kw)
        art, _ = run_stage_locally(resolve_stage(QueriesStage(), params, run, store, ups))
        table = art.read_table()
        assert table.num_rows == n and len(set(table.column("sent_id").to_pylist())) == n
        return [t for t in table.column("text").to_pylist() if t.endswith("?")]

    # two drawn first; the other six from the 34 sentences left, four of them questions
    assert 2 <= len(asked(8, question_share=0.25)) <= 6
    assert len(asked(20, question_share=0.5)) == 6  # ten asked, six in the corpus: all of them
    assert len(asked(20, question_share=0.5, lead_share=0.5)) == 6
    assert len(asked(30, question_share=1.0)) == 6
    assert "question_share" not in QueriesParams().model_dump()
    assert QueriesParams(question_share=0.25).model_dump()["question_share"] == 0.25
