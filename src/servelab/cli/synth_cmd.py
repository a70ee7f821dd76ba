"""``servelab synth ...``: build tiny real checkpoints, quantized/MTP variants, replicas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from servelab.cli.output import stdout_console
from servelab.errors import UsageError
from servelab.families import presets
from servelab.outfile import check_new_checkpoint
from servelab.units import GIB

synth_app = typer.Typer(
    name="synth",
    help="Build test checkpoints: tiny real models, quantized and MTP variants, and "
    "full-dimension header replicas (sparse files).",
    no_args_is_help=True,
)

_console = stdout_console()

#: Which linear layers a replica quantizes (regex sets from servelab.synth.replica).
_TARGETS = ("linears", "experts-attention", "experts", "all-text", "nvfp4-fast")


@synth_app.command("tiny")
def tiny(
    arch: Annotated[
        str,
        typer.Argument(
            help="Architecture (model_type): llama, qwen3, qwen3_moe, qwen3_next, "
            "qwen3_5_moe_text, qwen2, mistral, mixtral, phi3, gemma3_text, gpt_oss, "
            "llama4_text, nemotron_h, deepseek_v2, deepseek_v3, glm4_moe or minimax_m2."
        ),
    ],
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the checkpoint to.")],
    seed: int = typer.Option(0, "--seed", help="Random seed for the weights."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing checkpoint."),
) -> None:
    """Write a tiny random-weight Hugging Face checkpoint that vLLM can serve."""
    from servelab.synth.tiny import make_tiny_model

    check_new_checkpoint(out_dir, force=force)
    make_tiny_model(arch, out_dir, seed=seed)
    _console.print(f"wrote {out_dir}")


@synth_app.command("quantize")
def quantize(
    src: Annotated[Path, typer.Argument(help="A tiny checkpoint directory (model.safetensors).")],
    out_dir: Annotated[Path, typer.Argument(help="New directory for the quantized copy.")],
    variant: str = typer.Option(
        ...,
        "--variant",
        help="fp8-channel (compressed-tensors), nvfp4 (compressed-tensors "
        "nvfp4-pack-quantized), fp8-block (fine-grained FP8) or modelopt-nvfp4.",
    ),
) -> None:
    """Quantize the routed/shared experts and attention of a tiny checkpoint."""
    from servelab.synth.quantize import quantize_checkpoint

    quantize_checkpoint(src, out_dir, variant)
    _console.print(f"wrote {out_dir}")


@synth_app.command("mtp")
def mtp(
    src: Annotated[
        Path, typer.Argument(help="A tiny qwen3_5_moe_text or qwen3_next checkpoint directory.")
    ],
    out_dir: Annotated[Path, typer.Argument(help="New directory for the variant.")],
    ship: bool = typer.Option(
        False,
        "--ship/--declare-only",
        help="Ship mtp.* tensors, or only declare mtp_num_hidden_layers in the config.",
    ),
    undeclared: bool = typer.Option(
        False, "--undeclared", help="With --ship: leave the config without an MTP declaration."
    ),
    fused: bool = typer.Option(
        False, "--fused", help="With --ship: fused 3D experts in the MTP layer."
    ),
) -> None:
    """Write an MTP variant: declared but missing, or shipped (declared or not)."""
    from servelab.synth.quantize import add_mtp_head, declare_mtp

    if not ship and (undeclared or fused):
        raise UsageError("--undeclared and --fused need --ship")
    if ship:
        add_mtp_head(src, out_dir, declare=not undeclared, fused_experts=fused)
    else:
        declare_mtp(src, out_dir)
    _console.print(f"wrote {out_dir}")


@synth_app.command("replica")
def replica(
    out_dir: Annotated[Path, typer.Argument(help="Directory for the replica (a few MB on disk).")],
    model: str = typer.Option(
        "qwen3.6-35b-a3b",
        "--model",
        help="Model preset at published dimensions: "
        + ", ".join(("qwen3.6-35b-a3b", *presets()))
        + ".",
    ),
    layout: str | None = typer.Option(
        None,
        "--layout",
        help="bf16, fp8-channel, fp8-block, nvfp4 or modelopt-nvfp4 (default: the "
        "preset's published storage; fp8-channel for qwen3.6-35b-a3b).",
    ),
    targets: str | None = typer.Option(
        None,
        "--targets",
        help="Quantized linears of a --layout: linears (the default: attention, MLPs, routed "
        "and shared experts, as an export quantizes them), experts-attention (routed+shared "
        "experts, full attention), experts (routed only), all-text (also linear attention) "
        "or nvfp4-fast (Unsloth's NVFP4-Fast: NVFP4 experts; FP8 attention, linear attention "
        "and lm_head).",
    ),
    scale_dtype: str | None = typer.Option(
        None, "--scale-dtype", help="FP8 scale dtype (default BF16 channel, F32 block)."
    ),
    mtp: str = typer.Option("none", "--mtp", help="Ship an MTP head: none, per-expert or fused."),
    max_shard_bytes: int = typer.Option(
        4_000_000_000, "--max-shard-bytes", help="Shard size limit in bytes."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing checkpoint."),
    source_repo: str | None = typer.Option(
        None, "--source-repo", help="The Hub build (ORG/NAME) this replicates, recorded in "
        "servelab-build.json so that figures published for it match the replica."),
) -> None:
    """Write a full-dimension header replica: real headers, sparse zero data."""
    from servelab.published.identity import MANIFEST, manifest_doc
    from servelab.synth import replica as rp
    from servelab.synth import replica_presets as presets

    manifest = manifest_doc(source_repo) if source_repo is not None else None

    if model not in presets.preset_names():
        raise UsageError(
            f"unknown model preset {model!r}; choose one of {', '.join(presets.preset_names())}"
        )
    if targets is not None and targets not in _TARGETS:
        raise UsageError(f"unknown targets {targets!r}; choose one of {', '.join(_TARGETS)}")
    fp8: tuple[str, ...] = ()
    if targets == "nvfp4-fast":
        if layout not in (None, "nvfp4"):
            raise UsageError(f"--targets nvfp4-fast is an nvfp4 layout, not {layout}")
        layout, fp8 = "nvfp4", rp.NVFP4_FAST_FP8
    pats = None if targets is None else {
        "linears": rp.LINEARS,
        "experts-attention": rp.EXPERTS_AND_ATTENTION,
        "experts": rp.ROUTED_EXPERTS_ONLY,
        "all-text": rp.TEXT_LINEARS,
        "nvfp4-fast": rp.NVFP4_FAST_FP4,
    }[targets]
    check_new_checkpoint(out_dir, force=force)  # before the replica is planned
    plan = rp.write_replica(
        out_dir,
        presets.preset_config(model),
        presets.preset_layout(model, layout, pats, scale_dtype, fp8=fp8),
        mtp=mtp,
        max_shard_bytes=max_shard_bytes,
    )
    if manifest is not None:
        (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    _console.print(
        f"wrote {out_dir}: {len(plan.tensors):,} tensors, {plan.total_bytes / GIB:.2f} GiB "
        "described (sparse)"
    )


def register(app: typer.Typer) -> None:
    """Attach the ``synth`` command group to the root app."""
    app.add_typer(synth_app, name="synth")
