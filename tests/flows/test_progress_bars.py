"""`--no-progress` hides every progress bar, also those of a tqdm imported before it was read
(`ctxsim adapt`'s plan imports the libraries before its runs start)."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import io
from tqdm.auto import tqdm as auto_bar
from tqdm import tqdm as std_bar
before = auto_bar(range(2), file=io.StringIO()).disable
from ctxsim.flows.console import hide_progress_bars
hide_progress_bars()
hide_progress_bars()  # twice: wrapped once
out = io.StringIO()
for bar in (auto_bar, std_bar):
    list(bar(range(3), desc="widgets", file=out))
shown = std_bar(range(1), file=io.StringIO(), disable=False).disable
print(before, repr(out.getvalue()), shown)
"""


def test_no_progress_hides_the_bars_of_a_tqdm_imported_before() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_")}
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    # bars were on before the call; after it none writes; a bar asked for by name still shows
    assert res.stdout.split() == ["False", "''", "False"], res.stdout
