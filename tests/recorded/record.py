"""Record the outputs of :data:`tests.recorded.cases.CASES` (see that module)::

    .venv/bin/python -m tests.recorded.record [NAME ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.recorded.cases import CASES, OUTPUTS, inside, make_inputs, output_path, run_case


def main(names: list[str]) -> None:
    """Record every case (or those named) into :data:`~tests.recorded.cases.OUTPUTS`."""
    OUTPUTS.mkdir(exist_ok=True)
    chosen = [c for c in CASES if not names or c.name in names]
    with tempfile.TemporaryDirectory(prefix="servelab-recorded-") as tmp:
        root = Path(tmp)
        make_inputs(root)
        with inside(root):
            for case in chosen:
                output_path(case).write_text(run_case(case), encoding="utf-8")
                print(case.name, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
