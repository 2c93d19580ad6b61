"""Independent check of sinkscope's Parquet tables: loads every table under a run's tables/ (or a
notebooks-data folder) with pyarrow, prints row counts and column types, checks the types against
the documented schema, and runs one duckdb query per folder as a reader would.

    python scripts/check_parquet.py reports/demo/tables notebooks-data/stories260k

Needs `pip install pyarrow duckdb` (a venv outside the repository).
"""
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

# The documented logical types (README "Tables"): u32 → uint32, f64 → double, str → string, bool.
EXPECTED = {
    "uint32": (pa.uint32(),),
    "double": (pa.float64(),),
    "string": (pa.string(), pa.large_string(), pa.string_view()),
    "bool": (pa.bool_(),),
}
META = {"model": "string", "model_sha256": "string", "sinkscope_version": "string"}


def check(folder: Path) -> int:
    bad = 0
    files = sorted(folder.glob("*.parquet"))
    if not files:
        print(f"{folder}: no .parquet files")
        return 1
    for f in files:
        t = pq.read_table(f)
        types = ", ".join(f"{n}:{t.schema.field(n).type}" for n in t.column_names)
        print(f"{f}: {t.num_rows} rows, {t.num_columns} columns")
        print(f"    {types}")
        for name, kind in META.items():
            if name not in t.column_names or t.schema.field(name).type not in EXPECTED[kind]:
                print(f"    ERROR: metadata column {name} missing or not {kind}")
                bad += 1
    con = duckdb.connect()
    hs = folder / "head_sinks.parquet"
    if hs.exists():
        q = f"""select probe, layer, head, round(alpha, 3) as alpha_0, head_class
                from '{hs}' where key_pos = 0 order by alpha desc limit 3"""
        print(f"duckdb, strongest sinks in {hs}:")
        for row in con.execute(q).fetchall():
            print("   ", row)
    return bad


if __name__ == "__main__":
    failures = sum(check(Path(a)) for a in sys.argv[1:])
    sys.exit(1 if failures else 0)
