"""A CPU's features: read from /proc/cpuinfo text, carried by probes, profiles and runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servelab.errors import HardwareProfileError
from servelab.hardware.cpu_isa import CpuIsa, parse_cpuinfo_flags, this_cpu
from servelab.hardware.probe import load_probe, probe_host
from servelab.hardware.profiles import (
    BUILTIN,
    load_profiles_toml,
    profile_from_dict,
    with_probe,
)

SAPPHIRE = (
    "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse avx avx2 "
    "avx512f avx512dq avx512bw avx512vl avx512_bf16 amx_bf16 amx_tile amx_int8 avx512_fp16\n"
    "processor\t: 1\nflags\t\t: fpu\n"
)
ZEN4 = "flags\t: fpu avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512_vnni\n"
HASWELL = "flags\t: fpu sse4_2 avx avx2 fma f16c\n"


def test_the_groups_the_engines_test() -> None:
    spr = CpuIsa.of("x86_64", parse_cpuinfo_flags(SAPPHIRE), "t")
    assert (spr.amx_tile, spr.avx512, spr.avx512_bf16, spr.avx2) == (True, True, True, True)
    assert spr.summary() == "x86_64: AVX2, AVX-512, AVX512-BF16, AMX"
    zen = CpuIsa.of("x86_64", parse_cpuinfo_flags(ZEN4), "t")
    assert (zen.amx_tile, zen.avx512, zen.avx512_bf16) == (False, True, True)
    old = CpuIsa.of("x86_64", parse_cpuinfo_flags(HASWELL), "t")
    assert (old.amx_tile, old.avx512, old.avx512_bf16, old.avx2) == (False, False, False, True)
    # AVX-512 as PyTorch tests it: F alone is not enough
    assert not CpuIsa.of("x86_64", ["avx512f"], "t").avx512
    # the first flags line counts (every processor has one); unrelated flags are dropped
    assert "fpu" not in spr.flags and "amx_tile" in spr.flags
    # an Arm CPU never has the x86 groups, whatever its names
    arm = CpuIsa.of("aarch64", ["asimd", "sve", "amx_tile"], "t")
    assert not arm.amx_tile and not arm.avx512 and arm.summary().startswith("aarch64: ")


def test_round_trip_and_malformed() -> None:
    isa = CpuIsa.of("x86_64", ["avx2", "amx_tile"], "here")
    assert CpuIsa.from_dict(isa.to_dict()) == isa
    with pytest.raises(ValueError, match="flags"):
        CpuIsa.from_dict({"arch": "x86_64", "flags": "avx2"})


def test_this_machine_is_read() -> None:
    me = this_cpu()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        assert me.flags == parse_cpuinfo_flags(cpuinfo.read_text()) & me.flags
        assert me.source == "/proc/cpuinfo of this machine"


def test_a_host_probe_carries_its_cpu_and_a_profile_takes_it(tmp_path: Path) -> None:
    probe = probe_host(copy_bytes=1 << 20, copy_reps=1, matmul_n=16, matmul_reps=1)
    assert probe.cpu_isa == this_cpu()
    doc = probe.to_dict()
    doc["cpu_isa"] = CpuIsa.of("x86_64", ["avx2", "amx_tile"], "x").to_dict()
    loaded = load_probe(json.loads(json.dumps(doc)))
    assert loaded.cpu_isa is not None and loaded.cpu_isa.amx_tile
    assert "probe of" in loaded.cpu_isa.source
    cpu_profile = load_profiles_toml(_write(tmp_path, 'platform = "cpu"\n'))["box"]
    probed = with_probe(cpu_profile, bandwidth=1e10, compute={"fp32": 1e11},
                        cpu_isa=loaded.cpu_isa)
    assert probed.cpu_isa == loaded.cpu_isa
    # a GPU profile's host CPU runs no attention: a probe's CPU is not the GPU's
    gpu = with_probe(BUILTIN["h200"], bandwidth=4e12, compute={}, cpu_isa=loaded.cpu_isa)
    assert gpu.cpu_isa is None
    # stored with a run and read back
    assert profile_from_dict(probed.to_dict()).cpu_isa == loaded.cpu_isa
    assert "cpu_isa" not in BUILTIN["h200"].to_dict()


def _write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "hw.toml"
    path.write_text('[profile.box]\nmemory_gib = 64\nbandwidth_gbs = 100\narch = "x86_64"\n'
                    + extra + '[profile.box.sources]\nmemory = "x"\n')
    return path


def test_profile_files_name_the_flags(tmp_path: Path) -> None:
    prof = load_profiles_toml(_write(
        tmp_path, 'platform = "cpu"\ncpu_flags = ["avx2", "avx512f", "avx512vl", '
        '"avx512bw", "avx512dq", "amx_tile"]\n'))["box"]
    assert prof.cpu_isa is not None and prof.cpu_isa.amx_tile and prof.cpu_isa.avx512
    assert "cpu_flags" in prof.cpu_isa.source
    with pytest.raises(HardwareProfileError, match="cpu_flags must be a list"):
        load_profiles_toml(_write(tmp_path, 'platform = "cpu"\ncpu_flags = "avx2"\n'))


def test_the_host_can_be_pinned_to_a_probe_file(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """$SERVELAB_HOST_PROBE: this machine at a saved probe's figures (no live probe), for
    commands that take no --probe (a calibration report); a bad file is one clear error."""
    from servelab.hardware.lookup import HOST_PROBE_VAR, get_profile

    probe = probe_host(copy_bytes=1 << 20, copy_reps=1, matmul_n=16, matmul_reps=1).to_dict()
    probe["copy_bandwidth_bytes_per_s"]["samples"] = [1.25e10]
    probe["matmul_flops_per_s"]["fp32"]["samples"] = [3e11]
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(probe))
    monkeypatch.setenv(HOST_PROBE_VAR, str(path))
    host = get_profile("host")
    assert (host.bandwidth, host.compute["bf16"]) == (1.25e10, 3e11)
    assert "probe file probe.json" in host.sources["bandwidth"]
    assert host.cpu_isa is not None and host.cpu_isa.flags == this_cpu().flags  # the probe's
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    monkeypatch.setenv(HOST_PROBE_VAR, str(bad))
    with pytest.raises(HardwareProfileError, match="not a readable probe file"):
        get_profile("host")
