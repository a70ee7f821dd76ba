"""GPU probe command: ``python -m servelab.hardware.gpu_probe`` prints probe JSON.

Needs torch with CUDA. Measures device-to-device copy bandwidth (bytes read + written)
and dense matmul rate in bf16 (and fp8 when ``torch._scaled_mm`` is available), several
repetitions each, timed with CUDA events; and the host's kernel launch rate: a one-element
in-place add launched :data:`LAUNCHES` times back to back from Python, timed by the wall
clock from the first launch to the end of the last kernel (each kernel takes a few
microseconds on the GPU, so the host's launching is what is timed).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any


def _seconds(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes on the current CUDA stream (CUDA events)."""
    import torch

    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)) / 1000


#: Kernels per launch-rate repetition.
LAUNCHES = 5000


def launch_rate(reps: int) -> list[float]:
    """Tiny kernels launched per second from Python, ``reps`` repetitions."""
    import torch

    x = torch.zeros(1, device="cuda")
    for _ in range(200):  # warm up the op's dispatch path
        x.add_(1.0)
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(LAUNCHES):
            x.add_(1.0)
        torch.cuda.synchronize()
        out.append(LAUNCHES / (time.perf_counter() - t0))
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the probe and print JSON on stdout."""
    import torch

    if not torch.cuda.is_available():
        print("CUDA is not available", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    reps = 10
    n_bytes = 2 << 30
    src = torch.empty(n_bytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    dst.copy_(src)
    bw: list[float] = []
    for _ in range(reps):
        bw.append(2 * n_bytes / _seconds(lambda: dst.copy_(src)))
    src = dst = torch.empty(0, device=dev)  # free the copy buffers
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    mm: dict[str, list[float]] = {"bf16": []}
    torch.matmul(a, b)
    for _ in range(reps):
        mm["bf16"].append(2 * n**3 / _seconds(lambda: torch.matmul(a, b)))
    if hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn"):
        try:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
            one = torch.tensor(1.0, device=dev)
            torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            mm["fp8"] = []
            for _ in range(reps):
                dt = _seconds(
                    lambda: torch._scaled_mm(
                        a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16
                    )
                )
                mm["fp8"].append(2 * n**3 / dt)
        except RuntimeError:
            mm.pop("fp8", None)
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(dev),
        "copy_bandwidth_bytes_per_s": bw,
        "matmul_flops_per_s": mm,
        "kernel_launches_per_s": launch_rate(reps),
        "params": {
            "copy_bytes": n_bytes,
            "matmul_n": n,
            "reps": reps,
            "launches": LAUNCHES,
            "torch": torch.__version__,
        },
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
