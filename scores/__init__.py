"""S(s, c) of Eq. (3) and its cache: the one computation `select`, `score` and Origin share."""

from ctxsim.scores.eq3 import (
    SCORE_SCHEMA,
    ScoreParams,
    query_texts,
    score_rows,
    score_with_artefacts,
)

__all__ = ["SCORE_SCHEMA", "ScoreParams", "query_texts", "score_rows", "score_with_artefacts"]
