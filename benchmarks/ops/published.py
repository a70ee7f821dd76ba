"""The end-to-end points the project keeps for hardware servelab has no operator tables for
(an engine on a GPU it has not timed kernels on): each as a :class:`Pub` with the build's
operator model, turned into a :class:`servelab.ops.efficiency.PointWork` for the fits.

Sources, all already in the project:

* benchmarks/prereg/builds.py ``SETS``: the published llama.cpp and vLLM points pre-registered
  in issue 30 (Apple M1 Ultra / M2 Max, RTX 4090 / 5090, RTX PRO 6000, DGX Spark), with their
  URLs and roles (``calibration`` rows are in the shipped priors; ``check`` rows never were);
* src/servelab/predict/priors.toml rows not in those sets: the seed recipe's DGX Spark vLLM
  points (Qwen3.6-35B-A3B FP8 / BF16 / NVFP4) and servelab's own llama.cpp runs on the H200
  (Llama-3-8B at five GGUF types; no llama.cpp operator table exists for the H200).

Models: a GGUF build from servelab's header replica (servelab.synth.gguf_replica, read back
with servelab's checkpoint reader: its config and each tensor's GGML type,
servelab.ops.gguf); a safetensors build from servelab's replica presets and layouts (the seed's
Qwen3.6 layouts as benchmarks/priors/features.py writes them).
"""

from __future__ import annotations

import functools
import sys
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "prereg"))

import builds as prereg  # noqa: E402  (benchmarks/prereg/builds.py)

from servelab.checkpoint.sources import load_checkpoint  # noqa: E402
from servelab.hardware.lookup import get_profile  # noqa: E402
from servelab.ops.efficiency import PointWork, point_work  # noqa: E402
from servelab.ops.gguf import gguf_step_model  # noqa: E402
from servelab.ops.model import StepModel, step_model  # noqa: E402
from servelab.ops.step import StepShape  # noqa: E402
from servelab.synth.gguf_replica import BUILDS as GGUF_BUILDS  # noqa: E402
from servelab.synth.gguf_replica import write_replica as write_gguf  # noqa: E402
from servelab.synth.replica import EXPERTS_AND_ATTENTION, QuantLayout  # noqa: E402
from servelab.synth.replica_presets import (  # noqa: E402
    QWEN3_6_35B_A3B,
    preset_config,
    preset_layout,
)

#: The seed's DGX Spark builds of Qwen3.6-35B-A3B (benchmarks/priors/features.py).
SPARK_QWEN = {
    "Qwen/Qwen3.6-35B-A3B-FP8": QuantLayout("fp8-channel", EXPERTS_AND_ATTENTION),
    "Qwen/Qwen3.6-35B-A3B": QuantLayout("bf16"),
    "nvidia/Qwen3.6-35B-A3B-NVFP4": QuantLayout("nvfp4", EXPERTS_AND_ATTENTION,
                                                fp4_activations=False),
}
#: Hardware whose points are fitted here (no operator table for the engine on it).
HARDWARE = ("dgx-spark", "rtx-4090", "rtx-5090", "rtx-pro-6000", "m1-ultra", "m2-max")
PRIORS = ROOT / "src" / "servelab" / "predict" / "priors.toml"


@dataclass(frozen=True)
class Pub:
    """One published (or servelab-run) end-to-end point."""

    ident: str
    hardware: str
    engine: str
    kind: str
    length: int
    tok_s: float
    build: str  # the build as servelab names it (a GGUF replica key or a checkpoint id)
    family: str
    role: str  # calibration: in the shipped priors; check: never was
    source: str
    model: Callable[[], StepModel]

    @property
    def measured_ms(self) -> float:
        """One step: a decode token, or the whole prompt's prefill."""
        return (1.0 if self.kind == "decode" else self.length) / self.tok_s * 1e3

    def work(self) -> PointWork:
        shape = StepShape.decode(1, self.length) if self.kind == "decode" else \
            StepShape.prefill(self.length)
        return point_work(self.ident, self.model(), shape, get_profile(self.hardware),
                          engine=self.engine, kind=self.kind, build=self.build,
                          family=self.family, measured_ms=self.measured_ms, role=self.role,
                          source=self.source)


_TMP = tempfile.TemporaryDirectory(prefix="servelab-ops-pub-")


@functools.cache
def gguf_model(build: str) -> StepModel:
    """The operator model of a GGUF build (``llama3-8b-Q4_K_M``): servelab's header replica
    read back through its checkpoint reader."""
    base = prereg.base_model(build)
    arch = GGUF_BUILDS[base][0]
    ftype = build.removeprefix(base + "-")
    path = write_gguf(arch, ftype, Path(_TMP.name) / f"{build}.gguf")
    src = load_checkpoint(path)
    assert src.config is not None
    types = {t.name: t.dtype for t in src.tensors}
    return gguf_step_model(src.config, types, name=build)


@functools.cache
def st_model(build: str) -> StepModel:
    """A safetensors build: a replica preset (gpt-oss) or the seed's Qwen3.6 layouts."""
    if build in SPARK_QWEN:
        return step_model(dict(QWEN3_6_35B_A3B), SPARK_QWEN[build], name=build)
    return step_model(dict(preset_config(build)), preset_layout(build, None, ()), name=build)


def _family(build: str) -> str:
    base = prereg.base_model(build)
    return prereg.FAMILIES.get(base, "qwen3_hybrid" if "Qwen3.6" in build else base)


def _model_fn(build: str) -> Callable[[], StepModel]:
    if prereg.base_model(build) != build:
        return functools.partial(gguf_model, build)
    return functools.partial(st_model, build)


def points() -> list[Pub]:
    """Every point (published or servelab-run) on hardware without the engine's tables."""
    out: list[Pub] = []
    seen: set[tuple[str, str, str, str, int]] = set()
    for set_name, pts in prereg.SETS.items():
        for j, p in enumerate(pts):
            seen.add((p.hardware, p.engine, p.build, p.kind, p.length))
            out.append(Pub(f"{p.hardware}/{p.engine}/{p.build}/{p.kind}/{p.length}/"
                           f"{set_name}#{j}",
                           p.hardware, p.engine, p.kind, p.length, p.measured_tok_s, p.build,
                           _family(p.build), p.role, p.source, _model_fn(p.build)))
    doc = tomllib.loads(PRIORS.read_text(encoding="utf-8"))
    for i, r in enumerate(doc["sample"]):
        hw, eng = r["hardware"], r["engine"]
        if not ((hw == "dgx-spark" and eng == "vllm") or (hw == "h200" and eng == "llamacpp")):
            continue
        if eng == "llamacpp":  # servelab's H200 llama.cpp runs: "gguf-q4_k_m dense (default)"
            ftype = r["kernel_path"].split()[0].removeprefix("gguf-").upper()
            build = f"{r['model']}-{ftype}"
        else:
            build = r["model"]
        # one row per (build, kind, length): the seed's vLLM 0.24.0 repeats of its 0.26.0
        # FP8 decode points are left out
        key = (hw, eng, build, r["kind"], int(r["length"]))
        if key in seen:
            continue
        seen.add(key)
        ident = f"{hw}/{eng}/{build}/{r['kind']}/{r['length']}/{r['engine_version']}/{i}"
        out.append(Pub(ident, hw, eng, r["kind"], int(r["length"]), float(r["tok_s"]), build,
                       r.get("family") or _family(build), "calibration", r["source"],
                       _model_fn(build)))
    return out


def works(pubs: list[Pub]) -> tuple[list[PointWork], dict[str, str]]:
    """The PointWork of each point; points whose model servelab cannot build, by reason."""
    out, refused = [], {}
    for p in pubs:
        try:
            out.append(p.work())
        except Exception as e:  # reported, never dropped silently
            refused[p.ident] = f"{type(e).__name__}: {e}"[:160]
    return out, refused


def main() -> int:
    pubs = points()
    ws, refused = works(pubs)
    by: dict[tuple[str, str], int] = {}
    for w in ws:
        by[(w.hardware, w.engine)] = by.get((w.hardware, w.engine), 0) + 1
    for k, v in sorted(by.items()):
        print(k, v)
    for k, v in refused.items():
        print("refused", k, v)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
