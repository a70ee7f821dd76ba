"""The options of ``servelab bench``, declared once: the workload's come from the one workload
schema (:mod:`servelab.cli.workload_options`), the client's, the output's and the record's are
here, with :class:`BenchArgs`, the command's parsed options as one value."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from servelab.cli.failures import FIRST_BYTE_S, MAX_FAILED, STALL_S, TOTAL_S

__all__ = ["BenchArgs"]

UrlArg = Annotated[str, typer.Argument(
    help="Base URL of the server, e.g. http://127.0.0.1:8000")]
ModelOpt = Annotated[str | None, typer.Option(
    "--model", help="Served model name (default: the first one /v1/models lists).")]
EndpointOpt = Annotated[str, typer.Option(
    "--endpoint", help="API to drive: completions or chat.")]
ChatTemplateKwargsOpt = Annotated[str | None, typer.Option(
    "--chat-template-kwargs", help='JSON object, e.g. \'{"enable_thinking": false}\'.')]
TokenizerOpt = Annotated[Path | None, typer.Option(
    "--tokenizer", help="Model tokenizer directory, used when the server has no /tokenize.")]
TemperatureOpt = Annotated[float, typer.Option("--temperature", help="Sampling temperature.")]
NoIgnoreEosOpt = Annotated[bool, typer.Option(
    "--no-ignore-eos", help="Do not send ignore_eos (servers that reject it).")]
NoContinuousUsageOpt = Annotated[bool, typer.Option(
    "--no-continuous-usage",
    help="Do not ask for usage on every chunk (then per-token ITL is unknown).")]
FirstByteTimeoutOpt = Annotated[float, typer.Option(
    "--first-byte-timeout",
    help="Seconds to wait for a response to start (raise it for very long prompts on slow "
    "hardware).")]
StallTimeoutOpt = Annotated[float, typer.Option(
    "--stall-timeout", help="Longest silence mid-stream, seconds.")]
RequestTimeoutOpt = Annotated[float, typer.Option(
    "--request-timeout", help="Longest single request, seconds.")]
MaxFailedOpt = Annotated[float, typer.Option(
    "--max-failed",
    help="Exit non-zero when more than this fraction of the measured requests failed (the "
    "result is still written and shown).")]
ApiKeyOpt = Annotated[str | None, typer.Option(
    "--api-key", envvar="OPENAI_API_KEY", help="Bearer token (never written to results).")]
BenchSloOpt = Annotated[str | None, typer.Option(
    "--slo",
    help="Evaluate an SLO per point, e.g. ttft_p99=500,tpot_p50=40 (ms): verdict and goodput.")]
OutOpt = Annotated[Path | None, typer.Option(
    "--out",
    help="Write the JSON/CSV/Markdown here instead of stdout (the full JSON when no format is "
    "given).")]
NoRecordOpt = Annotated[bool, typer.Option(
    "--no-record",
    help="Do not record the run in the results database (recorded by default; a partial run "
    "never is).")]
ExportVllmOpt = Annotated[Path | None, typer.Option(
    "--export-vllm",
    help="Also write each point as a vllm bench serve result JSON into this directory.")]


@dataclass(frozen=True)
class BenchArgs:
    """``servelab bench``'s parsed options, by parameter name."""

    url: str
    model: str | None = None
    endpoint: str = "completions"
    prompt_lens: str = ""
    output_len: int = 0
    concurrency: str = ""
    request_rate: str | None = None
    requests: int | None = None
    duration: float | None = None
    warmup: int | None = None
    ci_target: float = 0.0
    max_repeats: int = 0
    subtract_min_latency: bool = False
    chat_template_kwargs: str | None = None
    tokenizer: Path | None = None
    temperature: float = 0.0
    no_ignore_eos: bool = False
    no_continuous_usage: bool = False
    first_byte_timeout: float = FIRST_BYTE_S
    stall_timeout: float = STALL_S
    request_timeout: float = TOTAL_S
    max_failed: float = MAX_FAILED
    api_key: str | None = None
    seed: int = 0
    profile: str = ""
    burstiness: float = 1.0
    ramp_end_rate: float | None = None
    trace: Path | None = None
    shared_prefix: int = 0
    prefix_groups: int = 1
    depths: str = "0"
    turns: int = 1
    dataset: Path | None = None
    dataset_lengths: str = "exact"
    dataset_output: str = "fixed"
    slo: str | None = None
    as_json: bool = False
    as_csv: bool = False
    as_markdown: bool = False
    out: Path | None = None
    no_record: bool = False
    db: str | None = None
    export_vllm: Path | None = None

    @property
    def formatted(self) -> bool:
        """Whether a format (JSON, CSV, Markdown) was asked for."""
        return self.as_json or self.as_csv or self.as_markdown
