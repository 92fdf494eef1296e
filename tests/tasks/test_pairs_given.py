"""pairs.mode 'given': a file that is not Parquet, or lacks a column, is the user's error (one
line naming the file), not a bug's traceback."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctxsim.store.errors import InputError
from ctxsim.tasks.pairs import PairsStage


@pytest.mark.parametrize("content", [b"pair_id,gold\n1,0.5\n", b"PAR1\x00\x01"], ids=["csv", "cut"])
def test_a_given_file_that_is_not_parquet_is_named(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "pairs.parquet"
    path.write_bytes(content)
    with pytest.raises(InputError, match="not a readable Parquet file") as e:
        PairsStage()._given(path)
    assert str(e.value).startswith(f"{path}: ")


def test_a_given_file_without_a_column_is_named(tmp_path: Path) -> None:
    path = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"pair_id": [1], "gold": [0.5]}), path)
    with pytest.raises(InputError, match=r"missing columns \['dataset', 's1_query_id'"):
        PairsStage()._given(path)
