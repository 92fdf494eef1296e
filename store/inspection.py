"""Human- and script-readable summary of a published artefact (`ctxsim inspect`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ctxsim.store.artefacts import Artefact, StoreError, sha256_file


def corrupt_parts(art: Artefact) -> dict[str, str]:
    """Parts whose bytes no longer match the manifest, with the reason. Checked without moving
    anything: inspecting is read-only, the next run that needs the artefact quarantines it."""
    bad: dict[str, str] = {}
    for p in art.manifest.get("parts", []):
        f = art.path / p["file"]
        if not f.exists():
            bad[p["file"]] = "missing"
        elif f.stat().st_size != p["bytes"]:
            bad[p["file"]] = f"{f.stat().st_size} bytes instead of {p['bytes']}"
        elif sha256_file(f) != p["sha256"]:
            bad[p["file"]] = "sha256 mismatch"
    return bad


def _column_summary(col: pa.ChunkedArray) -> dict[str, Any]:
    out: dict[str, Any] = {"nulls": col.null_count}
    t = col.type
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        if len(col) - col.null_count > 0:
            arr = col.to_numpy(zero_copy_only=False).astype(np.float64)
            arr = arr[~np.isnan(arr)]
            if len(arr):
                out |= {
                    "min": float(arr.min()),
                    "max": float(arr.max()),
                    "mean": round(float(arr.mean()), 6),
                    "median": float(np.median(arr)),
                }
    elif pa.types.is_boolean(t):
        out["true"] = int(pc.sum(col).as_py() or 0)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        lengths = pc.utf8_length(col)
        out["mean_chars"] = round(float(pc.mean(lengths).as_py() or 0), 2)
        out["distinct"] = int(pc.count_distinct(col).as_py())
    elif pa.types.is_list(t):
        out["mean_len"] = round(float(pc.mean(pc.list_value_length(col)).as_py() or 0), 3)
    return out


def describe(art: Artefact, limit: int = 5) -> dict[str, Any]:
    """The summary; a StoreError naming the parts when any part is corrupt or missing."""
    bad = corrupt_parts(art)
    if bad:
        parts = ", ".join(f"{name} ({why})" for name, why in bad.items())
        raise StoreError(
            f"artefact {art.stage}/{art.fingerprint} at {art.path} is corrupt: {parts}; "
            "the next run that needs it moves it aside and recomputes it"
        )
    table = art.read_table()
    sample = table.slice(0, max(limit, 0)).to_pylist()
    return {
        "stage": art.stage,
        "fingerprint": art.fingerprint,
        "path": str(art.path),
        "num_rows": table.num_rows,
        "num_parts": len(art.parts),
        "bytes": int(sum(p["bytes"] for p in art.manifest.get("parts", []))),
        "schema": [{"name": f.name, "type": str(f.type)} for f in table.schema],
        "columns": {f.name: _column_summary(table.column(f.name)) for f in table.schema},
        "stats": art.stats,
        "files": [f["file"] for f in art.manifest.get("files", [])],
        "params": art.manifest.get("params", {}),
        "sample": sample,
    }
