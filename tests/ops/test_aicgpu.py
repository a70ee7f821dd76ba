"""servelab's composition over AIConfigurator's tables on GPUs servelab has not measured:
unusable FP8-block rows, the kernels read per architecture, refusals where the tables lack
an operator, and the H200-calibrated step prediction. Tables from the optional extra where
installed (else its refusal is what is checked: both branches are real)."""

from __future__ import annotations

import pytest

from servelab.errors import UsageError
from servelab.ops import aic
from servelab.ops.aicgpu import costs_for, predict, transfer, usable
from servelab.ops.costs import Costs, KernelChoice
from servelab.ops.model import step_model
from servelab.ops.step import StepShape
from servelab.ops.tables import Provenance, Table, TableSet
from servelab.synth.replica import LINEARS, QuantLayout

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
            "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
TRANSFER = {"isolation_frac": 0.0, "isolation_cap_ms": 0.0,
            "overhead_ms": {"decode": 0.5, "prefill": 10.0}, "host_floor_ms": 2.0,
            "half_width_log": {"decode": 0.1, "prefill": 0.3}, "source": "test"}


def _gemm_rows() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for m in (1, 64, 4096):
        base = {"m": m, "n": 1024, "k": 1024}
        rows.append({**base, "gemm_dtype": "bfloat16",
                     "kernel_source": "torch.nn.functional.linear", "latency": 0.01 * (1 + m / 64)})
        rows.append({**base, "gemm_dtype": "fp8", "kernel_source": "CutlassFP8ScaledMMLinearKernel",
                     "latency": 0.006 * (1 + m / 128)})
        # the collector's launch floor below m = 4096: slower than BF16
        rows.append({**base, "gemm_dtype": "fp8_block",
                     "kernel_source": "DeepGemmFp8BlockScaledMMKernel",
                     "latency": 0.08 if m < 4096 else 0.3})
    return rows


def _set() -> TableSet:
    return TableSet("aic-x", Provenance("aiconfigurator", "G", "vllm", "0.24.0", "d"),
                    {"gemm": Table("gemm", tuple(_gemm_rows()))})


def test_fp8_block_rows_at_the_collector_floor_are_dropped_or_substituted() -> None:
    kept, counts = usable(_set(), "b200")
    assert counts == {"fp8_block_rows_at_floor": 2, "fp8_block_rows_substituted": 0}
    strict = KernelChoice(gemm={"fp8-block": ("fp8_block", ("DeepGemmFp8BlockScaledMMKernel",))},
                          strict=True)
    with pytest.raises(UsageError, match="at 1 tokens"):
        Costs([kept], strict).gemm(1, 1024, 1024, "fp8-block")
    assert Costs([kept], strict).gemm(4096, 1024, 1024, "fp8-block").ms == pytest.approx(0.3)
    sub, counts = usable(_set(), "h100")  # Hopper: the same shape's FP8 CUTLASS row
    assert counts["fp8_block_rows_substituted"] == 2
    assert Costs([sub], strict).gemm(1, 1024, 1024, "fp8-block").ms == \
        pytest.approx(0.006 * (1 + 1 / 128))


def test_a_shape_inside_a_measured_grid_is_interpolated() -> None:
    rows = [{"gemm_dtype": "bfloat16", "kernel_source": "torch.nn.functional.linear",
             "m": 1, "n": n, "k": k, "latency": n * k * 1e-8} for n in (1024, 4096)
            for k in (1024, 4096)]
    ts = TableSet("g", Provenance("aiconfigurator", "G", "vllm", "0", "d"),
                  {"gemm": Table("gemm", tuple(rows))})
    lk = Costs([ts]).gemm(1, 2048, 2048, "bf16")
    assert lk.how == "interpolated" and lk.ms == pytest.approx(2048 * 2048 * 1e-8)
    big = Costs([ts]).gemm(1, 8192, 2048, "bf16")  # beyond the largest n: scaled by n
    assert big.how == "extrapolated" and big.ms == pytest.approx(8192 * 2048 * 1e-8)


@pytest.mark.skipif(not aic.available(), reason="needs servelab[aiconfigurator]")
def test_an_h100_decode_step_reads_aiconfigurators_kernels() -> None:
    costs = costs_for("h100")
    model = step_model(LLAMA_8B)
    p = predict(model, "h100", StepShape.decode(1, 1024), costs, transfer(TRANSFER))
    kernels = {i.op: i.lookup.kernel for i in p.step.items}
    assert kernels["attention (decode)"] == "vllm_flash_attn_fa3"
    assert kernels["gemm mlp.gate_up_proj"] == "torch.nn.functional.linear"
    assert p.step.items[0].lookup.table.startswith("roofline/h100_sxm")  # rms_norm
    assert p.ms == pytest.approx(p.step.total_ms + 0.5)
    assert p.low_ms < p.ms < p.high_ms
    # ~16 GB of weights at 3.35 TB/s: between the roofline and twice it
    assert 16e9 / 3.35e12 * 1e3 < p.step.device_ms < 2 * 16e9 / 3.35e12 * 1e3


@pytest.mark.skipif(not aic.available(), reason="needs servelab[aiconfigurator]")
def test_what_the_tables_lack_is_refused_by_name() -> None:
    fp8 = step_model(LLAMA_8B, QuantLayout("fp8-block", LINEARS))
    with pytest.raises(UsageError, match="DeepGemmFp8BlockScaledMMKernel"):
        predict(fp8, "b200", StepShape.decode(1, 1024), costs_for("b200"),
                transfer(TRANSFER))
    with pytest.raises(UsageError, match="no AIConfigurator-table composition"):
        costs_for("dgx-spark")


def test_without_the_extra_the_tables_are_refused_clearly() -> None:
    if aic.available():
        assert costs_for("h100").sets[0].provenance.source == "aiconfigurator"
        return
    with pytest.raises(UsageError, match=r"servelab\[aiconfigurator\]"):
        costs_for("h100")
