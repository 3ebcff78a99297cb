"""tables/<name>.csv: what analyses leave in the run dir for machines (DESIGN §5), written to
a temporary name and renamed."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from bertology.run.write_errors import writing


def write_table(out_dir: Path, name: str, rows: list[dict],
                columns: list[str] | None = None) -> Path:
    """tables/<name>.csv with the given columns (so a table of no rows still has its header),
    else the union of the rows' keys, in first-seen order."""
    path = out_dir / "tables" / f"{name}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    tmp = path.with_name(f".{path.name}.tmp")
    with writing(path), tmp.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
    return path
