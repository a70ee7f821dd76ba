"""The parallel layout of one vLLM deployment: tensor, pipeline, data and expert parallel.

One frozen value carries the layout from the recipe (``[engine.flags]``) to the plan
(per-GPU weights, per-rank KV pool, communication) and to the engine's argument list, so
the three can never disagree. Semantics are vLLM's:

* **TP** shards attention heads and MLP columns over ``tensor`` GPUs; KV heads are
  replicated when ``tensor`` exceeds the model's KV head count (each rank holds
  ``max(1, kv_heads // tensor)``).
* **PP** splits the decoder layers over ``pipeline`` stages; each stage holds the KV of its
  own layers and the engine sizes the pool by the smallest stage.
* **DP** runs ``data`` replicas of the attention part, each with its own KV pool.
* **EP** (``expert``): routed experts are split over the ``tensor x data`` ranks instead of
  tensor-sharding each expert. Without EP, vLLM still shards MoE layers over
  ``tensor x data`` ranks (as one flattened tensor-parallel group).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from servelab.errors import UsageError

Backend = Literal["mp", "ray"]
BACKENDS: tuple[str, ...] = ("mp", "ray")


@dataclass(frozen=True)
class ParallelLayout:
    """How many GPUs do what (vLLM's ``--tensor/pipeline/data-parallel-size`` and EP)."""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    expert: bool = False
    backend: Backend | None = None

    def __post_init__(self) -> None:
        for name in ("tensor", "pipeline", "data"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"{name} parallel size must be a positive integer, got {value!r}")
        if self.backend is not None and self.backend not in BACKENDS:
            raise UsageError(
                f"distributed executor backend {self.backend!r} is not one of "
                + ", ".join(BACKENDS)
            )

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one engine replica spans (TP x PP)."""
        return self.tensor * self.pipeline

    @property
    def world_size(self) -> int:
        """All GPUs of the deployment (TP x PP x DP)."""
        return self.tensor * self.pipeline * self.data

    @property
    def moe_group(self) -> int:
        """Ranks a MoE layer's routed experts are split over (TP x DP), EP or not."""
        return self.tensor * self.data

    @property
    def is_single(self) -> bool:
        """One GPU, no parallelism."""
        return self.world_size == 1 and not self.expert

    def label(self) -> str:
        """``TP4 x PP2 x DP1 + EP`` (short, for tables and pages)."""
        base = f"TP{self.tensor} x PP{self.pipeline} x DP{self.data}"
        return base + (" + EP" if self.expert else "")

    def argv(self) -> list[str]:
        """vLLM's flags for this layout; sizes of 1 are left at the engine's default."""
        out: list[str] = []
        for flag, value in (
            ("--tensor-parallel-size", self.tensor),
            ("--pipeline-parallel-size", self.pipeline),
            ("--data-parallel-size", self.data),
        ):
            if value != 1:
                out += [flag, str(value)]
        if self.expert:
            out.append("--enable-expert-parallel")
        if self.backend is not None:
            out += ["--distributed-executor-backend", self.backend]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form, with the derived GPU counts."""
        return {
            **asdict(self),
            "world_size": self.world_size,
            "gpus_per_replica": self.gpus_per_replica,
            "moe_group": self.moe_group,
        }


def split_layers(num_layers: int, stages: int) -> tuple[tuple[int, int], ...]:
    """``[start, end)`` of each pipeline stage, as vLLM's ``get_pp_indices`` splits them.

    Layers are divided evenly; the remainder goes to the stages before the last (vLLM
    keeps the last stage lighter because it also holds the LM head).
    """
    if stages < 1:
        raise UsageError("pipeline parallel size must be positive")
    if num_layers < stages:
        raise UsageError(f"pipeline parallel size {stages} exceeds the model's {num_layers} layers")
    per = [num_layers // stages] * stages
    remaining = num_layers % stages
    for i in range(2, remaining + 2):
        per[-i] += 1
    out: list[tuple[int, int]] = []
    start = 0
    for n in per:
        out.append((start, start + n))
        start += n
    return tuple(out)


_SIZE_FLAGS = {
    "--tensor-parallel-size": "tensor",
    "-tp": "tensor",
    "--pipeline-parallel-size": "pipeline",
    "-pp": "pipeline",
    "--data-parallel-size": "data",
    "-dp": "data",
}


def layout_from_argv(argv: Sequence[str]) -> ParallelLayout:
    """The layout a vLLM command line asks for (``--flag N`` or ``--flag=N``)."""
    sizes: dict[str, int] = {}
    expert = False
    backend: str | None = None
    it = iter(enumerate(argv))
    for i, arg in it:
        name, eq, value = arg.partition("=")
        if name == "--enable-expert-parallel":
            expert = True
            continue
        if name not in _SIZE_FLAGS and name != "--distributed-executor-backend":
            continue
        if not eq:
            if i + 1 >= len(argv):
                raise UsageError(f"{name} needs a value")
            value = argv[i + 1]
            next(it, None)
        if name == "--distributed-executor-backend":
            backend = value
            continue
        try:
            sizes[_SIZE_FLAGS[name]] = int(value)
        except ValueError:
            raise UsageError(f"{name} {value!r} is not an integer") from None
    if backend is not None and backend not in BACKENDS:
        raise UsageError(f"--distributed-executor-backend {backend!r} is not one of mp, ray")
    return ParallelLayout(
        tensor=sizes.get("tensor", 1),
        pipeline=sizes.get("pipeline", 1),
        data=sizes.get("data", 1),
        expert=expert,
        backend="ray" if backend == "ray" else ("mp" if backend == "mp" else None),
    )
