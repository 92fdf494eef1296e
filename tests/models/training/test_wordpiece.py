"""The tiny models' learnt WordPiece vocabulary is the same on every run
(models/training/wordpiece.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, SAMPLE

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
PROBE = "The unexpectedly luminous harbour, ##e and [MASK]."

# tokenizers' hash maps are seeded per process, so the check runs in fresh interpreters
LEARN = f"""
import json, sys
sys.path.insert(0, {str(REPO)!r})
from ctxsim.models.training.wordpiece import learn_wordpiece
texts = [p for line in open({str(SAMPLE)!r}) for p in json.loads(line)["paragraphs"]]
tok = learn_wordpiece(texts, 600, {SPECIALS!r})
print(json.dumps({{"vocab": sorted(tok.get_vocab().items()), "probe": tok.encode({PROBE!r}).ids}}))
"""


def _learn_in_fresh_process() -> dict:
    out = subprocess.run(
        [sys.executable, "-c", LEARN], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(out.stdout)


def test_learnt_vocabulary_is_identical_across_processes() -> None:
    # the plain WordPieceTrainer gave a different vocabulary in each of 6 fresh processes on
    # this corpus (huggingface/tokenizers#1794); the learnt one must not
    runs = [_learn_in_fresh_process() for _ in range(4)]
    assert len(runs[0]["vocab"]) == 600
    assert all(r == runs[0] for r in runs[1:])


def test_continuing_pieces_are_plain_entries_and_specials_stay_special() -> None:
    from ctxsim.models.training.wordpiece import learn_wordpiece

    texts = ["harbours and harbour lights", "the harbour master", "lights of pier #3"]
    tok = learn_wordpiece(texts, 80, SPECIALS)
    vocab = tok.get_vocab()
    assert [vocab[s] for s in SPECIALS] == [0, 1, 2, 3, 4]  # specials first, in order
    assert "##s" in vocab and "##r" in vocab
    enc = tok.encode("harbours ##s [MASK]")
    # a literal "##s" in the text is punctuation and a letter, not the continuing piece
    assert enc.tokens[-4:] == ["#", "#", "s", "[MASK]"]
    assert tok.decode(enc.ids) == "harbours # # s"  # [MASK] is special: skipped
    assert tok.decode(tok.encode("harbour lights").ids) == "harbour lights"


def test_every_piece_the_trainer_would_create_is_registered() -> None:
    """The ##<char> pieces the plain trainer creates while it reads the words (the ones it
    numbers in hash-map order) are all among those registered beforehand: accents stripped,
    upper case folded, punctuation and white space split off, digits inside words."""
    from tokenizers import models, trainers

    from ctxsim.models.training.wordpiece import bert_style, continuing_pieces

    texts = ["Café ÉCOLE naïve", "ΟΔΟΣ and Σοφία", "route66 a-b, x.y", "İstanbul ÆSIR"]
    plain = bert_style(models.WordPiece(unk_token="[UNK]"))
    plain.train_from_iterator(texts, trainer=trainers.WordPieceTrainer(vocab_size=60))
    created = {t for t in plain.get_vocab() if t.startswith("##") and len(t) == 3}
    registered = set(continuing_pieces(bert_style(models.WordPiece(unk_token="[UNK]")), texts))
    assert created and created <= registered
    assert {"##σ", "##e", "##6"} <= registered
    assert not {"##é", "##,", "##-", "## "} & registered
