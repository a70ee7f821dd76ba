"""Prose generated from facts: headline, key facts, troubleshooting entries."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from servelab.site import prose
from servelab.site.model import Measured, MeasuredRow, RecipePage, Site, Text


def _plain(text: Text) -> str:
    return "".join(s if isinstance(s, str) else f"<{s.value}>" for s in text)


def _numbers(text: Text) -> list[float]:
    return [s.value for s in text if not isinstance(s, str)]


def _page(site_factory: Callable[..., Site]) -> RecipePage:
    return site_factory().recipes[0]


def test_headline_is_built_from_the_facts(site_factory: Callable[..., Site]) -> None:
    page = _page(site_factory)
    text = prose.headline(page)
    plain = _plain(text)
    assert plain.startswith("FP8 of Tiny-MoE 1B serves a 262,144-token context on one DGX Spark")
    # latest verified version (0.32.0) at the 2,048 reference prompt, against the sibling build
    assert ("It decodes <38.7> at a 2,048-token prompt on vLLM 0.32.0, against <42.57> for NVFP4"
            in plain)
    assert "Prefill measured <5122.0> / <6081.0> at 2,048 / 8,192-token prompts" in plain
    assert "no MTP tensors" in plain
    assert 35.28 in _numbers(text)


def test_headline_without_optional_facts(site_factory: Callable[..., Site]) -> None:
    page = dataclasses.replace(_page(site_factory), siblings=(), prefill=(), engine=(),
                               mtp_declared_layers=None)
    plain = _plain(prose.headline(page))
    assert "against" not in plain and "Prefill" not in plain and "MTP" not in plain
    assert "It decodes <38.7>" in plain


def test_troubleshooting_from_findings(site_factory: Callable[..., Site]) -> None:
    page = _page(site_factory)
    entries = {e.kind: e for e in prose.troubleshooting(page)}
    assert set(entries) == {"missing-mtp", "kernel-fallback", "profiling-skipped",
                            "version-drift", "regression", "failed-run", "which-build"}
    assert entries["failed-run"].evidence == ("engine exited",)
    which = entries["which-build"]
    assert "NVFP4" in _plain(which.answer) and 42.57 in _numbers(which.answer)
    assert entries["kernel-fallback"].evidence == (page.engine[0].fallback_line,)
    assert "MARLIN" in entries["kernel-fallback"].question
    assert entries["profiling-skipped"].evidence == (page.engine[1].profiling_skipped_line,)
    assert 308955 in _numbers(entries["profiling-skipped"].answer)
    assert 62546 in _numbers(entries["missing-mtp"].answer)
    # 0.31.0 -> 0.32.0 within 3 %: no version to pin
    assert "no version to pin" in _plain(entries["version-drift"].answer)
    regression = entries["regression"]
    assert _numbers(regression.answer)[:2] == [51.9, 38.27]
    change = _numbers(regression.answer)[2]
    assert abs(change - (38.27 / 51.9 - 1) * 100) < 1e-9


def test_no_findings_no_entries(site_factory: Callable[..., Site]) -> None:
    base = _page(site_factory)
    page = dataclasses.replace(base, engine=(), history=(), mtp_tensors=19, siblings=(),
                               verifications=base.verifications[:2],
                               decode=tuple(r for r in base.decode
                                            if r.engine_version == "0.32.0"))
    assert prose.troubleshooting(page) == ()


def test_a_recipe_that_never_succeeded(site_factory: Callable[..., Site]) -> None:
    base = _page(site_factory)
    page = dataclasses.replace(base, decode=(), prefill=(), engine=(), history=(), siblings=(),
                               memory=None, mtp_declared_layers=None,
                               verifications=base.verifications[2:])
    plain = _plain(prose.headline(page))
    assert plain == ("FP8 of Tiny-MoE 1B has no successful run yet: the latest attempt, on "
                     "2026-07-30 on spark-1 (run r3), failed: engine exited.")
    assert [e.kind for e in prose.troubleshooting(page)] == ["failed-run"]
    assert prose.key_facts(page) == (("1 × DGX Spark (spark-1)",),)


def test_version_drift_beyond_tolerance_says_which_to_pin(
    site_factory: Callable[..., Site]
) -> None:
    page = _page(site_factory)
    faster = tuple(
        dataclasses.replace(
            r, measured=Measured(r.measured.value * 1.2, "tok/s", r.measured.run_id))
        if r.engine_version == "0.32.0" else r for r in page.decode)
    page = dataclasses.replace(page, decode=faster)
    entry = next(e for e in prose.troubleshooting(page) if e.kind == "version-drift")
    assert "pin 0.32.0" in _plain(entry.answer)
    old = {r.prompt_tokens: r.measured.value for r in page.decode if r.engine_version == "0.31.0"}
    new = {r.prompt_tokens: r.measured.value for r in page.decode if r.engine_version == "0.32.0"}
    worst = max(((new[n] / old[n] - 1) * 100 for n in old), key=abs)
    assert abs(_numbers(entry.answer)[0] - worst) < 1e-9


def test_far_below_prediction(site_factory: Callable[..., Site]) -> None:
    page = _page(site_factory)
    rows = tuple(
        MeasuredRow(r.engine_version, r.prompt_tokens, r.measured,
                    dataclasses.replace(page.decode[1].predicted or page.decode[0].predicted,
                                        value=r.measured.value * 3) if r.prompt_tokens == 2048
                    else None)  # type: ignore[arg-type]
        for r in page.decode)
    page = dataclasses.replace(page, decode=rows)
    kinds = [e.kind for e in prose.troubleshooting(page)]
    assert "below-prediction" in kinds


def test_key_facts_and_software(site_factory: Callable[..., Site]) -> None:
    page = _page(site_factory)
    facts = [_plain(b) for b in prose.key_facts(page)]
    expected = "Measured single-stream decode <40.5> / <38.7> / <37.76>"
    assert any(f.startswith(expected) for f in facts)
    assert any("TRITON MoE backend and the FLASH_ATTN attention backend" in f for f in facts)
    assert any(f.startswith("Verified 2026-07-29 on spark-1") for f in facts)
    software = [_plain(b) for b in prose.software_requirements(page)]
    assert "vLLM 0.31.0 or 0.32.0 with torch 2.11.0+cu130" in software
    assert "1 × DGX Spark, driver 580.1" in software
    bare = dataclasses.replace(page, software=dataclasses.replace(page.software, driver=None))
    assert "1 × DGX Spark, driver not recorded" in [
        _plain(b) for b in prose.software_requirements(bare)]


def test_version_ordering() -> None:
    assert sorted(["0.10.0", "0.9.1", "0.24.0"], key=prose.version_key) == [
        "0.9.1", "0.10.0", "0.24.0"]
