"""A real writer process for the crash and concurrency tests (run as a script).

python writer.py URL crash         commit one small run, then start a huge one and print
                                   "MID" from inside its transaction (the parent kills -9)
python writer.py URL many N TAG    commit N runs labelled TAG, one transaction each
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.store.records import make_run

from servelab.store import open_store


def main() -> None:
    url, mode = sys.argv[1], sys.argv[2]
    store = open_store(url)
    if mode == "crash":
        store.add_run(make_run(run_id="committed-before-crash", n=5))
        print("COMMITTED", flush=True)

        def announce(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if statement.lstrip().upper().startswith("INSERT INTO SAMPLES"):
                print("MID", flush=True)

        event.listen(store.engine, "before_cursor_execute", announce)
        store.add_run(make_run(run_id="killed-mid-write", n=200_000, seed=7))
        print("DONE", flush=True)
    elif mode == "many":
        count, tag = int(sys.argv[3]), sys.argv[4]
        for i in range(count):
            store.add_run(make_run(seed=i, n=30, labels=(tag,), run_id=f"{tag}-{i:04d}"))
        print("DONE", flush=True)
    store.close()


if __name__ == "__main__":
    main()
