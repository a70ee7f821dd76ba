"""AIConfigurator's own end-to-end step predictions for a list of builds (run under a Python
that has ``aiconfigurator-core``; benchmarks/peer_aiconfigurator.py calls it in a subprocess).

Reads JSON from stdin: ``{"system": "h200_sxm", "backend": "vllm", "builds": [{"name",
"config", "gemm_quant", "moe_quant", "points": [{"kind", "length"}]}]}``; writes JSON to
stdout: per build and point AIConfigurator's prefill latency (``predict_prefill_latency(1,
length)``, ms) or decode step latency (``predict_decode_latency(1, length, 2)``, ms), or the
error it raised. Each build's config is written to a temporary directory as its
``config.json`` (AIConfigurator reads a local model path as a Hugging Face one).
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any


def main() -> int:
    req = json.load(sys.stdin)
    from aiconfigurator_core.sdk.engine import EngineHandle

    out: dict[str, Any] = {"results": []}
    try:
        from importlib.metadata import version

        out["aiconfigurator_core"] = version("aiconfigurator-core")
    except Exception:
        out["aiconfigurator_core"] = "unknown"
    for b in req["builds"]:
        res: dict[str, Any] = {"name": b["name"], "points": []}
        try:
            with tempfile.TemporaryDirectory() as d:
                (Path(d) / "config.json").write_text(json.dumps(b["config"]))
                kw: dict[str, Any] = {}
                if b.get("gemm_quant"):
                    kw["gemm_quant_mode"] = b["gemm_quant"]
                if b.get("moe_quant"):
                    kw["moe_quant_mode"] = b["moe_quant"]
                h = EngineHandle.compile(d, req["system"], req["backend"], **kw)
                for p in b["points"]:
                    if p["kind"] == "prefill":
                        ms = h.predict_prefill_latency(1, int(p["length"]))
                    else:
                        ms = h.predict_decode_latency(1, int(p["length"]), 2)
                    res["points"].append({**p, "ms": ms})
        except Exception as e:
            res["error"] = f"{type(e).__name__}: {e}"[:400]
            res["trace"] = traceback.format_exc(limit=3)[-800:]
        out["results"].append(res)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
