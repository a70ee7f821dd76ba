"""The results database: runs, samples, metrics and experiments (SQLite or PostgreSQL).

Public API::

    from servelab.store import open_store, RunRecord, Sample, Metric, RunFilter

    with open_store(None) as store:          # default SQLite file, or $SERVELAB_DB / URL
        run_id = store.add_run(RunRecord(started_at=..., recipe_name=..., samples=(...)))
        run = store.get_run(run_id)           # id or unique prefix
        rows = store.list_runs(RunFilter(recipe_name="qwen3-tiny"))
"""

from servelab.redact import REDACTED, redact, redact_args, redact_text
from servelab.store.connect import data_dir, display_url, resolve_url
from servelab.store.db import Store, new_id, open_store
from servelab.store.exchange import (
    ImportResult,
    export_doc,
    fields_from_engine_facts,
    import_runs,
    point_name,
    read_import_file,
    run_from_bench,
    run_from_bench_json,
    run_from_dict,
    run_from_vllm_bench,
    run_to_dict,
)
from servelab.store.model import (
    EXPORT_SCHEMA,
    STATUS_FAILED,
    STATUS_OK,
    ExperimentRecord,
    Metric,
    RunFilter,
    RunRecord,
    Sample,
)

__all__ = [
    "EXPORT_SCHEMA",
    "REDACTED",
    "STATUS_FAILED",
    "STATUS_OK",
    "ExperimentRecord",
    "ImportResult",
    "Metric",
    "RunFilter",
    "RunRecord",
    "Sample",
    "Store",
    "data_dir",
    "display_url",
    "export_doc",
    "fields_from_engine_facts",
    "import_runs",
    "new_id",
    "open_store",
    "point_name",
    "read_import_file",
    "redact",
    "redact_args",
    "redact_text",
    "resolve_url",
    "run_from_bench",
    "run_from_bench_json",
    "run_from_dict",
    "run_from_vllm_bench",
    "run_to_dict",
]
