"""The context slots and sentence texts that `select` and S(s, c) see: the corpus's, plus the
slots and sentences the `gencontexts` stage generated when it is upstream."""

from __future__ import annotations

import pyarrow as pa

from ctxsim.store.stage import StageContext

#: the columns of a context slot, shared by `contexts` and `gencontexts`
CONTEXT_COLUMNS = [
    "context_id",
    "chunk_id",
    "section_id",
    "centre_sent_id",
    "left_sent_ids",
    "right_sent_ids",
]


def contexts_with_generated(ctx: StageContext) -> pa.Table:
    """The `contexts` table, plus the generated slots when the stage has `gencontexts` upstream."""
    table = ctx.input("contexts").read_table(CONTEXT_COLUMNS)
    if "gencontexts" not in ctx.upstream:
        return table
    gen = ctx.input("gencontexts").read_table(CONTEXT_COLUMNS).cast(table.schema)
    return pa.concat_tables([table, gen])


def sentences_with_generated(ctx: StageContext) -> pa.Table:
    """(sent_id, text) of the corpus, plus the generated sentences."""
    table = ctx.input("shard").read_table(["sent_id", "text"])
    if "gencontexts" not in ctx.upstream:
        return table
    gen = ctx.input("gencontexts").read_table(["sent_id", "text"]).cast(table.schema)
    return pa.concat_tables([table, gen])
