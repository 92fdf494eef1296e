"""A BERT-style WordPiece vocabulary learnt from texts, the same on every run.

Tiny from-scratch models (tests, the quickstart generator and surrogate) learn their vocabulary
from the corpus. tokenizers' ``WordPieceTrainer`` numbers the continuing-subword pieces (``##e``)
in hash-map order, and those ids break ties between equally frequent merges, so two trainings on
the same texts gave different vocabularies and different models from one seed
(huggingface/tokenizers#1794). Registering every ``##<char>`` the texts need before training
fixes their ids, and with them every tie-break; the pieces are then ordinary vocabulary entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

PREFIX = "##"
UNK = "[UNK]"
#: BERT's special tokens, in BERT's order (ids 0-4 in a learnt vocabulary)
BERT_SPECIALS: tuple[str, ...] = ("[PAD]", UNK, "[CLS]", "[SEP]", "[MASK]")


def bert_style(model: models.Model) -> Tokenizer:
    """``model`` with BERT's lower-casing normaliser, pre-tokeniser and WordPiece decoder."""
    tok = Tokenizer(model)
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix=PREFIX)
    return tok


def continuing_pieces(tok: Tokenizer, texts: Iterable[str]) -> list[str]:
    """``##c`` for every character of the normalised texts that can follow another inside a
    pre-tokenised word (not white space, not split off as punctuation), sorted.

    A superset of the pieces the trainer would create (a character seen only at word starts
    still gets one). BERT's normaliser maps character by character, so each distinct raw
    character is normalised alone and the texts are read once, in C.
    """
    assert tok.normalizer is not None and tok.pre_tokenizer is not None
    raw: set[str] = set()
    for text in texts:
        raw.update(text)
    chars = {n for c in raw for n in tok.normalizer.normalize_str(c)}
    inner = [c for c in chars if len(tok.pre_tokenizer.pre_tokenize_str(f"a{c}a")) == 1]
    return [PREFIX + c for c in sorted(inner)]


def learn_wordpiece(
    texts: Iterable[str], vocab_size: int, special_tokens: Sequence[str]
) -> Tokenizer:
    """A WordPiece tokenizer of ``vocab_size`` entries (specials first, in the order given)
    learnt from ``texts``; byte-identical on every run for the same texts and arguments."""
    texts = list(texts)
    probe = bert_style(models.WordPiece(unk_token=UNK))
    pieces = continuing_pieces(probe, texts)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=[*special_tokens, *pieces],
        continuing_subword_prefix=PREFIX,
    )
    probe.train_from_iterator(texts, trainer=trainer)
    # rebuilt from the learnt vocabulary so that the ##c pieces are plain entries, not added
    # special tokens (which would match literally in the input and be skipped when decoding)
    vocab = probe.get_vocab(with_added_tokens=False)
    tok = bert_style(models.WordPiece(vocab, unk_token=UNK, continuing_subword_prefix=PREFIX))
    tok.add_special_tokens(list(special_tokens))
    return tok
