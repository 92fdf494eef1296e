"""Stage `shard`: corpus files -> one row per sentence, in document/section/paragraph order.

Sentence order is what later stages turn into left/right contexts (Sun et al. 2022, Sec. 3.2:
c<i and c>i), so the reader keeps reading order and never lets a context cross a section: a
section is a contiguous run of paragraphs (a chapter, or a JSON Lines record of the books corpus).

Documents are spread over shards by ``doc_id % n_shards``; every shard enumerates the same
documents in the same order, so ids are stable however many shards run, and in what order.
``sent_id = doc_id * 2**24 + (index of the kept sentence in its document)``: globally unique,
increasing in reading order, consecutive within a section.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from ctxsim.models.corpus.sentences import count_tokens, split_paragraph
from ctxsim.readers.corpus import CorpusInputError, expand_paths, iter_sections
from ctxsim.store.artefacts import content_digest
from ctxsim.store.cost_model import CorpusBytes
from ctxsim.store.stage import Stage, StageContext, StageParams
from ctxsim.store.tables import ColumnBuffer

SENTS_PER_DOC_BITS = 24
# Kept sentences go to Arrow every this many rows: a shard's Python objects stay one batch, not
# its piece of the corpus (Python lists of a quarter of 126 M words peaked at 1.7 GB)
FLUSH_ROWS = 65_536


class ShardParams(StageParams):
    paths: list[str] = Field(
        default_factory=lambda: ["data/sample/*.jsonl"],
        description=(
            "Corpus files, folders or glob patterns (relative to the working directory). Every "
            "match is read; the file contents (sizes and hashes) are part of the fingerprint."
        ),
    )
    format: Literal["auto", "text", "jsonl", "parquet", "hf"] = Field(
        "auto",
        description=(
            "How the files are read: auto picks by file name (a folder written by Hugging Face "
            "`save_to_disk` is read as a dataset); text, jsonl, parquet or hf force one reader."
        ),
    )
    text_field: str = Field(
        "text",
        description="JSON Lines: the field that holds a record's text (records with one text).",
    )
    paragraphs_field: str = Field(
        "paragraphs",
        description=(
            "JSON Lines: the field that holds a record's list of paragraphs (the books corpus); a "
            "record has this or text_field."
        ),
    )
    doc_field: str | None = Field(
        "book",
        description=(
            "JSON Lines: consecutive records with the same value of this field form one document "
            "(None: each record is a document). Documents decide the shard a sentence lands in and "
            "its sent_id."
        ),
    )
    lead_fields: list[str] = Field(
        default_factory=list,
        description=(
            "JSON Lines: string fields put before a record's paragraphs, one paragraph each "
            "(MedQuAD: the question before its answer, so the question has the answer as right "
            "context)."
        ),
    )
    section_field: str | None = Field(
        "section",
        description=(
            "JSON Lines: the field naming a record's section; contexts never cross a section (None:"
            " each record is its own section)."
        ),
    )
    text_mode: Literal["file", "blank_lines", "lines"] = Field(
        "file",
        description=(
            "Plain text: one document per file, paragraphs separated by blank lines (file); "
            "documents separated by blank lines (blank_lines); or one sentence or short "
            "paragraph per line, each line a paragraph and a blank line ending a document "
            "(lines)."
        ),
    )
    parquet_text_column: str = Field(
        "text",
        description=(
            "Parquet and Hugging Face datasets (readers/corpus.py): the text column; paragraphs "
            "inside a cell are separated by blank lines."
        ),
    )
    parquet_doc_column: str | None = Field(
        None,
        description=(
            "Parquet and Hugging Face datasets: consecutive rows with the same value form one "
            "document (None: every row is one)."
        ),
    )
    parquet_section_column: str | None = Field(
        None,
        description=(
            "Parquet and Hugging Face datasets: consecutive rows with the same value form one "
            "section (None: every row is a section of its own)."
        ),
    )
    empty_files: Literal["skip", "error"] = Field(
        "skip",
        description=(
            "A corpus file with no text: skip counts it in the stats as empty_files; error fails "
            "the stage naming it."
        ),
    )
    null_cells: Literal["skip", "error"] = Field(
        "skip",
        exclude=True,
        description=(
            "A null text cell (Parquet / HF): skip drops its row, counted (null_text_cells) and "
            "warned about; error fails the stage naming the files. A check, not an input of the "
            "output: out of the fingerprint (checked in summarize, where the full settings are)."
        ),
    )
    encoding_errors: Literal["strict", "replace"] = Field(
        "strict",
        description=(
            "Bytes that are not UTF-8: strict fails naming the file and offset; replace substitutes"
            " U+FFFD and goes on."
        ),
    )
    splitter: str = Field(
        "blingfire",
        description=(
            "Sentence splitter (models/corpus/sentences.py: blingfire, syntok, pysbd or regex). "
            "blingfire "
            "had the best boundary F1 (0.977) and speed on the books corpus "
            "(bench/results/shard.md); the others stay selectable to rerun the comparison."
        ),
    )
    min_tokens: int = Field(
        3,
        ge=1,
        description=(
            "Sentences with fewer word tokens (runs of word characters and single punctuation "
            "marks) are dropped: fragments make poor queries and contexts."
        ),
    )
    max_tokens: int = Field(
        80,
        ge=1,
        description=(
            "Sentences with more word tokens are dropped (usually a splitter failure, a table or a "
            "list run together)."
        ),
    )
    max_paragraph_chars: int = Field(
        50_000,
        ge=100,
        description=(
            "Longer paragraphs (e.g. a plain-text book with single newlines and no blank lines, "
            "read as one block) are split at line ends that close a sentence, then at sentence "
            "boundaries, so that a slow splitter stays linear; the longest paragraph of the books "
            "corpus has 19,624 characters."
        ),
    )
    min_kept_share: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        exclude=True,
        description=(
            "Fail when a corpus file keeps less than this share of its text (non-space characters) "
            "after the length filters: a wrong format or splitter loses most of a file (0 turns the"
            " check off). A check, not an input of the output: kept out of the fingerprint, so "
            "changing it recomputes nothing."
        ),
    )
    n_shards: int = Field(
        2,
        ge=1,
        le=4096,
        description=(
            "Output shards (documents spread by doc_id % n_shards); sentence ids do not depend on "
            "it. More shards: more parallel work and finer resumption after a crash."
        ),
    )

    added_defaults: ClassVar[dict[str, Any]] = {"lead_fields": []}


SHARD_SCHEMA = pa.schema(
    [
        ("sent_id", pa.int64()),
        ("doc_id", pa.int64()),
        ("doc_name", pa.string()),
        ("section_id", pa.int64()),
        ("para_idx", pa.int32()),
        ("sent_idx", pa.int32()),
        ("text", pa.string()),
        ("n_tokens", pa.int32()),
        ("shard", pa.int32()),
    ]
)


def _nonspace(text: str) -> int:
    return len(text) - sum(text.count(c) for c in " \n\t\r")


def _file_index(doc_key: str, files: list[str], start: int) -> int:
    """Index in ``files`` of the corpus file a section comes from: readers start its doc_key with
    the file's path, and sections come file by file in ``files`` order. -1 when none matches."""
    for i in range(max(start, 0), len(files)):
        if doc_key == files[i] or doc_key.startswith(files[i] + ":"):
            return i
    return -1


def _null_cells(total: dict[str, Any], p: ShardParams, log: Any) -> None:
    """Null text cells (table corpora): their rows hold no text, so the kept-text shares cannot
    see them. A warning naming the files, or with ``null_cells: error`` an error."""
    per_file = {
        k.split(":", 1)[1]: int(v)
        for k, v in total.items()
        if k.startswith("null_text_cells:") and v
    }
    if not per_file:
        return
    where = ", ".join(f"{name} ({n})" for name, n in sorted(per_file.items())[:5])
    more = f" and {len(per_file) - 5} more files" if len(per_file) > 5 else ""
    n = sum(per_file.values())
    col = p.parquet_text_column
    if p.null_cells == "error":
        raise CorpusInputError(
            f"{where}{more}: {n} null cell(s) in text column {col!r} (shard.null_cells: error; "
            "skip drops their rows and counts them)"
        )
    log.warning(
        "shard: dropped %d rows whose text column %r is null (not counted in the kept-text "
        "shares; shard.null_cells: error fails on them) in: %s%s",
        n,
        col,
        where,
        more,
    )


def _shard_stats(
    table: pa.Table,
    per_file: dict[str, list[int]],
    counts: Counter,
    shard: int,
) -> dict[str, Any]:
    """A shard's stats: its sentences, documents, tokens and characters, ``per_file`` (checked
    and reported by ``summarize``) and the counters (corpus-wide ones from shard 0 only)."""
    return {
        "sentences": table.num_rows,
        "documents": pc.count_distinct(table.column("doc_id")).as_py(),
        "tokens": int(pc.sum(table.column("n_tokens")).as_py() or 0),
        "input_chars": sum(f[0] for f in per_file.values()),
        "kept_chars": sum(f[1] for f in per_file.values()),
        "files": per_file,  # not summed (a dict): checked and reported by summarize
        # Corpus-wide counts are seen by every shard: report them once, from shard 0.
        **{
            k: v
            for k, v in counts.items()
            if shard == 0 or not k.startswith(("empty_", "null_text_cells"))
        },
    }


class ShardStage(Stage):
    name = "shard"
    version = "2"  # 2: over-long paragraphs are split instead of dropped
    Params = ShardParams
    inputs = ()
    run_fields = ()
    #: the corpus read and split; the pilots read a seeded sample of its files, as one shard
    cost = CorpusBytes(sample="paths", shards="n_shards")
    corpus_memory = True

    def fingerprint_extra(self, params: ShardParams) -> dict[str, Any]:
        """Input files by content (sha256) and name below their common folder: an edited
        corpus gets a new fingerprint even under the same ``paths``. ``paths`` as written is a
        param too, so the same files named by another pattern get another fingerprint (kept so:
        dropping it would give every existing shard artefact a new one)."""
        files = [f.resolve() for f in expand_paths(params.paths)]
        base = Path(os.path.commonpath([str(f.parent) for f in files]))
        rows = [[str(f.relative_to(base)), f.stat().st_size, content_digest(f)] for f in files]
        return {"files": rows}

    def num_shards(self, ctx: StageContext) -> int:
        return ctx.params.n_shards

    def run_shard(self, ctx: StageContext, shard: int) -> tuple[pa.Table, dict[str, Any]]:
        p: ShardParams = ctx.params
        counts: Counter = Counter()
        rows = ColumnBuffer(SHARD_SCHEMA, FLUSH_ROWS)
        cols = rows.cols
        doc_id, section_id, last_doc = -1, -1, None
        files, file_i = [str(f) for f in expand_paths(p.paths)], 0
        # per corpus file: [input chars, kept chars, kept, too short, too long, split paragraphs]
        per_file: dict[str, list[int]] = {}
        for sec in iter_sections(p, counts):
            if sec.doc_key != last_doc:
                doc_id, last_doc, kept_in_doc = doc_id + 1, sec.doc_key, 0
                file_i = _file_index(sec.doc_key, files, file_i)
            section_id += 1
            if doc_id % p.n_shards != shard:
                continue
            fstats = per_file.setdefault(
                files[file_i] if file_i >= 0 else sec.doc_key, [0, 0, 0, 0, 0, 0]
            )
            counts["sections"] += 1
            sent_idx, extra_paras = 0, 0
            for para_idx, para in enumerate(sec.paragraphs):
                counts["paragraphs"] += 1
                fstats[0] += _nonspace(para)
                groups = split_paragraph(para, p.max_paragraph_chars, p.splitter)
                if len(para) > p.max_paragraph_chars:
                    counts["split_paragraphs"] += 1
                    fstats[5] += 1
                # (paragraph index, sentence): a split paragraph becomes consecutive paragraphs
                numbered = [
                    (para_idx + extra_paras + i, sent)
                    for i, sents in enumerate(groups)
                    for sent in sents
                ]
                for para_no, sent in numbered:
                    n_tok = count_tokens(sent)
                    reason = (
                        "too_short"
                        if n_tok < p.min_tokens
                        else "too_long"
                        if n_tok > p.max_tokens
                        else None
                    )
                    if reason:
                        counts[f"dropped_{reason}"] += 1
                        fstats[3 if reason == "too_short" else 4] += 1
                    else:
                        if kept_in_doc >= 1 << SENTS_PER_DOC_BITS:
                            raise CorpusInputError(
                                f"document {sec.doc_key} has over 2**24 sentences"
                            )
                        cols["sent_id"].append((doc_id << SENTS_PER_DOC_BITS) + kept_in_doc)
                        cols["doc_id"].append(doc_id)
                        cols["doc_name"].append(sec.doc_key.rsplit("/", 1)[-1])
                        cols["section_id"].append(section_id)
                        cols["para_idx"].append(para_no)
                        cols["sent_idx"].append(sent_idx)
                        cols["text"].append(sent)
                        cols["n_tokens"].append(n_tok)
                        cols["shard"].append(shard)
                        kept_in_doc += 1
                        fstats[1] += _nonspace(sent)
                        fstats[2] += 1
                    sent_idx += 1
                extra_paras += max(len(groups) - 1, 0)
                rows.maybe_flush()  # per paragraph: a book may be one section
        if doc_id < 0:
            raise CorpusInputError(f"corpus {p.paths} holds no non-empty document")
        table = rows.table()
        return table, _shard_stats(table, per_file, counts, shard)

    def summarize(self, ctx: StageContext, shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
        """Totals, a warning naming the files that lost sentences to the length filters, and an
        error when a file kept less than ``min_kept_share`` of its text."""
        total = super().summarize(ctx, shard_stats)
        p: ShardParams = ctx.params
        files: dict[str, list[int]] = {}
        for stats in shard_stats:
            for name, f in stats.get("files", {}).items():
                acc = files.setdefault(name, [0] * len(f))
                acc[:] = [a + b for a, b in zip(acc, f, strict=True)]
        if total.get("input_chars"):
            total["kept_text_share"] = round(total["kept_chars"] / total["input_chars"], 6)
        log = ctx.logger

        def share(f: list[int]) -> float:
            return f[1] / f[0] if f[0] else 1.0

        def detail(name: str, f: list[int]) -> str:
            return (
                f"{name} kept {share(f):.1%} of its text ({f[1]} of {f[0]} non-space characters, "
                f"{f[2]} sentences; dropped {f[4]} over "
                f"max_tokens={p.max_tokens}, {f[3]} under min_tokens={p.min_tokens})"
            )

        split = {n: f[5] for n, f in files.items() if f[5]}
        if split:
            log.info(
                "shard: split %d paragraphs longer than max_paragraph_chars=%d (at line ends and "
                "sentence boundaries, no text dropped): %s",
                sum(split.values()),
                p.max_paragraph_chars,
                ", ".join(f"{n} ({k})" for n, k in sorted(split.items())),
            )
        lossy = sorted((n for n, f in files.items() if f[3] + f[4]), key=lambda n: share(files[n]))
        if lossy:
            shown = "; ".join(detail(n, files[n]) for n in lossy[:5])
            more = f"; and {len(lossy) - 5} more files" if len(lossy) > 5 else ""
            log.warning(
                "shard: dropped %d sentences outside min_tokens=%d..max_tokens=%d (%.1f%% of the "
                "input text) in %d files, most in: %s%s",
                sum(files[n][3] + files[n][4] for n in lossy),
                p.min_tokens,
                p.max_tokens,
                100 * (1 - total.get("kept_text_share", 1.0)),
                len(lossy),
                shown,
                more,
            )
        _null_cells(total, p, log)
        low = sorted(
            (n for n in files if share(files[n]) < p.min_kept_share), key=lambda n: share(files[n])
        )
        if low:
            raise CorpusInputError(
                f"shard kept less than shard.min_kept_share={p.min_kept_share} of the text of "
                f"{len(low)} file(s): "
                + "; ".join(detail(n, files[n]) for n in low[:10])
                + (f"; and {len(low) - 10} more" if len(low) > 10 else "")
                + ". Check their format and shard.max_tokens / shard.min_tokens / "
                "shard.splitter, or lower shard.min_kept_share (0 turns the check off)"
            )
        return total
