"""``servelab choose`` shows what someone published for a build on the hardware (issue 40):
the seed's four builds, laid out as huggingface_hub's cache lays out a download, on
dgx-spark at 262,144 tokens with an empty store; ``--no-published`` leaves them out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.cli.app import main
from servelab.pipeline.choose import repo_id_of
from servelab.published.identity import MANIFEST, MANIFEST_SCHEMA, identify

pytestmark = pytest.mark.timeout(600)

REPOS = {
    "bf16": "Qwen/Qwen3.6-35B-A3B",
    "fp8": "Qwen/Qwen3.6-35B-A3B-FP8",
    "nvfp4a16": "nvidia/Qwen3.6-35B-A3B-NVFP4A16",
    "nvfp4-fast": "unsloth/Qwen3.6-35B-A3B-NVFP4-Fast",
}


@pytest.fixture(scope="module")
def hub_cache(seed_builds: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, Path]:
    """The seed builds at ``models--ORG--NAME/snapshots/REV`` (symlinked replicas)."""
    root = tmp_path_factory.mktemp("hub")
    out = {}
    for key, repo in REPOS.items():
        snap = root / f"models--{repo.replace('/', '--')}" / "snapshots" / "0123abcd"
        snap.parent.mkdir(parents=True)
        snap.symlink_to(seed_builds[key], target_is_directory=True)
        out[key] = snap
    return out


def _choose(builds: dict[str, Path], capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    try:
        main(["choose", *(str(builds[k]) for k in REPOS), "-H", "dgx-spark", "-c", "262144",
              "--no-store", *extra])
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def test_repo_id_of_a_build() -> None:
    assert repo_id_of("hf://unsloth/Qwen3.6-35B-A3B-NVFP4-Fast@main") == \
        "unsloth/Qwen3.6-35B-A3B-NVFP4-Fast"
    assert repo_id_of("Qwen/Qwen3.6-35B-A3B-FP8") == "Qwen/Qwen3.6-35B-A3B-FP8"
    assert repo_id_of("not-a-repo") is None
    assert repo_id_of(str(Path(__file__).parent)) is None  # a folder's name is not a repo


def test_choose_shows_published_figures_beside_the_prediction(
    hub_cache: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(_choose(hub_cache, capsys, "--json"))
    rows = {r["build"]: r for r in doc["builds"]}
    assert set(rows) == set(REPOS.values())  # a cached download is named by its repo id
    fast = rows["unsloth/Qwen3.6-35B-A3B-NVFP4-Fast"]
    assert doc["pick"]["build"] == fast["build"]
    published = {(p.get("spec"), p["value"]) for p in fast["published"]}
    assert published == {(None, 67.9), ("mtp k=3", 106.5)}
    for p in fast["published"]:
        assert p["source"].startswith("seed recipe page") and p["date"] == "2026-07-28"
    # shown, never fitted: the decode figure stays the prediction
    assert fast["decode"]["source"] == "predicted" and fast["decode"]["tok_s"] != 67.9
    reason = doc["pick"]["reason"]
    assert "published: 67.9 tok/s decode, vllm 0.24.0 (seed recipe page" in reason
    assert "published: 106.5 tok/s decode, MTP k=3, vllm 0.24.0 (seed recipe page" in reason
    assert {p["value"] for p in rows["nvidia/Qwen3.6-35B-A3B-NVFP4A16"]["published"]} == {42.57}
    assert len(rows["Qwen/Qwen3.6-35B-A3B-FP8"]["published"]) > 1
    text = _choose(hub_cache, capsys)
    assert ("unsloth/Qwen3.6-35B-A3B-NVFP4-Fast: published: 106.5 tok/s decode, MTP k=3, "
            "vllm 0.24.0 (seed recipe page") in " ".join(text.split())


def test_no_published_leaves_the_prediction_alone(
    hub_cache: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with_pub = json.loads(_choose(hub_cache, capsys, "--json"))
    doc = json.loads(_choose(hub_cache, capsys, "--json", "--no-published"))
    assert all(r["published"] == [] for r in doc["builds"])
    assert "published:" not in doc["pick"]["reason"]
    # the ranking and its reason are the prediction's own either way
    assert [r["build"] for r in doc["builds"]] == [r["build"] for r in with_pub["builds"]]
    assert with_pub["pick"]["reason"].startswith(doc["pick"]["reason"].rsplit("; fits", 1)[0])
    assert "published:" not in _choose(hub_cache, capsys, "--no-published")


def test_fp8_and_nvfp4a16_tie_within_the_order_and_a_published_figure_decides(
    hub_cache: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40: NVFP4A16 and FP8 are predicted 42.6 and 38.5 tok/s on the Spark, a ratio
    inside what stored pairs of one family say the order is right to; choose says they tie,
    lets the seed's published figures (42.57 against 38.27) decide, and still explains the
    predicted order the seed's way (bytes over kernels)."""
    doc = json.loads(_choose(hub_cache, capsys, "--json"))
    oe = doc["order_error"]
    assert oe["hardware"] == "pooled" and oe["pairs"] >= 9 and 5 < oe["percent"] < 60
    assert f"right to within {oe['percent']:.0f} % on {oe['pairs']} stored pairs" in \
        " ".join(r["verdict"] for r in doc["builds"])
    order = [r["build"] for r in doc["builds"]]
    assert order.index("nvidia/Qwen3.6-35B-A3B-NVFP4A16") + 1 == \
        order.index("Qwen/Qwen3.6-35B-A3B-FP8")
    fp8 = next(r for r in doc["builds"] if r["build"] == "Qwen/Qwen3.6-35B-A3B-FP8")
    verdict = fp8["verdict"]
    assert "below nvidia/Qwen3.6-35B-A3B-NVFP4A16: a tie within the uncertainty of the " \
        "order: 42.6 vs 38.5 tok/s, the order of two builds of one family is right to " \
        "within" in verdict
    assert "pooled over every hardware: dgx-spark has no pairs of its own" in verdict
    assert "a figure measured or published on this hardware decides" in verdict
    assert "published: 42.57 tok/s decode, 2,048-token prompt" in verdict
    assert "published: 38.27 tok/s decode, 2,048-token prompt" in verdict
    assert ("bytes beat kernels: Qwen/Qwen3.6-35B-A3B-FP8 has the better kernel path "
            "(TRITON W8A8) but reads 1.15x the bytes per token") in verdict
    own = json.loads(_choose(hub_cache, capsys, "--json", "--no-published"))
    fp8 = next(r for r in own["builds"] if r["build"] == "Qwen/Qwen3.6-35B-A3B-FP8")
    assert "published" not in fp8["verdict"]
    assert "memory decides: nvidia/Qwen3.6-35B-A3B-NVFP4A16 holds 17.2 requests" in \
        fp8["verdict"]
    # the pick is not a tie: even without drafts it is predicted ahead by more than the
    # order's uncertainty, and its MTP figure's interval holds the published 106.5
    fast = own["builds"][0]
    assert fast["build"] == "unsloth/Qwen3.6-35B-A3B-NVFP4-Fast"
    assert "tie" not in own["pick"]["reason"]
    assert fast["speculative"]["low"] <= 106.5 <= fast["speculative"]["high"]


def _ok(argv: list[str]) -> None:
    """Run the CLI; it exits 0."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code in (0, None)


def _copy_with_manifest(src: Path, dst: Path, doc: str) -> Path:
    """A plain local folder of ``src``'s files (symlinked) and a build manifest."""
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).symlink_to(f)
    (dst / MANIFEST).write_text(doc, encoding="utf-8")
    return dst


def test_a_local_folder_matches_only_by_its_build_manifest(
    seed_builds: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40: a plain folder (no Hub cache layout) gets its published figures when its
    servelab-build.json names the repo; the output says which identity matched. A folder
    without one matches nothing, whatever its name or shapes."""
    fast = seed_builds["nvfp4-fast"]
    named = _copy_with_manifest(fast, tmp_path / "my-copy", json.dumps(
        {"schema": MANIFEST_SCHEMA, "repo_id": "unsloth/Qwen3.6-35B-A3B-NVFP4-Fast"}))
    assert identify(str(fast)) is None  # a replica's folder name says nothing
    ident = identify(str(named))
    assert ident is not None and ident.how == f"its {MANIFEST}"
    _ok(["choose", str(named), str(fast), "-H", "dgx-spark", "-c", "262144", "--no-store",
         "--json"])
    doc = json.loads(capsys.readouterr().out)
    rows = {r["location"]: r for r in doc["builds"]}
    assert {p["value"] for p in rows[str(named)]["published"]} == {67.9, 106.5}
    assert rows[str(named)]["identity"] == \
        "unsloth/Qwen3.6-35B-A3B-NVFP4-Fast (from its servelab-build.json)"
    assert rows[str(fast)]["published"] == [] and rows[str(fast)]["identity"] is None
    _ok(["plan", str(named), "-H", "dgx-spark", "--no-store"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Published figures (shown, not fitted)" in text
    assert "published: 106.5 tok/s decode, MTP k=3, vllm 0.24.0 (seed recipe page" in text
    assert ("matched as unsloth/Qwen3.6-35B-A3B-NVFP4-Fast (from its servelab-build.json)"
            in text)
    _ok(["plan", str(fast), "-H", "dgx-spark", "--no-store", "--json"])
    assert "published" not in json.loads(capsys.readouterr().out)


def test_a_broken_build_manifest_is_one_line_naming_it(
    seed_builds: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _copy_with_manifest(seed_builds["fp8"], tmp_path / "bad", '{"repo_id": "x"}')
    with pytest.raises(SystemExit) as exc:
        main(["plan", str(bad), "-H", "dgx-spark", "--no-store"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad / MANIFEST) in err, err
    assert "not a build manifest" in err
