"""Download the wheels the device image lacks for vLLM (and servelab), one version of each.

pip's own resolver does the work (``pip install --dry-run --report`` for CPython 3.12 on
manylinux x86_64), with the image's packages of KNOWN version (``image-packages.txt``: torch
2.11.0, transformers 5.17.0, numpy 2.5.2, ...) stood in by empty local wheels of exactly that
version (``X.Y.Z+image``), so the resolution is made against what the image really has and
torch's own CUDA wheels are never fetched. Every resolved distribution whose name is on the image
is then left out; the rest are downloaded with ``pip download --no-deps``.

The root requirements are the engine wheel's ``Requires-Dist`` (minus ``--drop`` names: e.g.
``numba``, whose pinned 0.65.0 needs numpy<2.5 while the image has numpy 2.5.2 and its own numba)
plus any extra requirements given (servelab's runtime dependencies).

    python resolve_wheels.py --dest DIR --image image-packages.txt --engine-wheel W [REQ...]

Writes DIR/*.whl, DIR/../manifest.tsv (name, version, file, bytes) and
DIR/../image-requirements.txt (what was asked of each image package, to check there).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PLATFORMS = [
    "manylinux_2_39_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]
TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
for _plat in PLATFORMS:
    TARGET += ["--platform", _plat]


def read_image(path: Path) -> dict[str, str | None]:
    """Parse image-packages.txt: ``name [version]`` per line, '#' comments."""
    out: dict[str, str | None] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            parts = line.split()
            out[str(canonicalize_name(parts[0]))] = parts[1] if len(parts) > 1 else None
    return out


def wheel_requires(wheel: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = Parser().parsestr(zf.read(meta).decode())
    return list(msg.get_all("Requires-Dist") or [])


def write_standin(folder: Path, name: str, version: str) -> None:
    """An empty wheel ``name==version+image`` with no requirements (the image's copy)."""
    dist = name.replace("-", "_")
    ver = f"{version}+image"
    info = f"{dist}-{ver}.dist-info"
    with zipfile.ZipFile(folder / f"{dist}-{ver}-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n")
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: servelab\nRoot-Is-Purelib: true\n"
        )
        zf.writestr(f"{info}/RECORD", "")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--dest", type=Path, required=True, help="folder for the carried wheels")
    ap.add_argument("--image", type=Path, required=True, help="image-packages.txt")
    ap.add_argument("--engine-wheel", type=Path, required=True, help="the vLLM wheel")
    ap.add_argument("--drop", action="append", default=[], help="engine requirement to leave out")
    ap.add_argument("reqs", nargs="*", help="further root requirements (servelab's)")
    args = ap.parse_args()
    image = read_image(args.image)
    dest: Path = args.dest
    dest.mkdir(parents=True, exist_ok=True)
    drop = {str(canonicalize_name(d)) for d in args.drop}

    roots: list[str] = []
    for line in wheel_requires(args.engine_wheel):
        req = Requirement(line)
        if req.marker is not None and "extra" in str(req.marker):
            continue
        if str(canonicalize_name(req.name)) in drop:
            print(f"dropped engine requirement: {line}")
            continue
        roots.append(line)
    roots += args.reqs

    with tempfile.TemporaryDirectory() as tmp:
        standins = Path(tmp) / "standins"
        standins.mkdir()
        for name, version in image.items():
            if version is not None:
                write_standin(standins, name, version)
        req_file = Path(tmp) / "roots.txt"
        req_file.write_text("\n".join(roots) + "\n")
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed"]
        cmd += ["--report", str(report), "--target", str(Path(tmp) / "t"), *TARGET]
        cmd += ["--find-links", str(standins), "-r", str(req_file)]
        subprocess.run(cmd, check=True)
        items = json.loads(report.read_text())["install"]

    carry: list[tuple[str, str]] = []
    met: list[tuple[str, str]] = []
    for item in items:
        name = str(canonicalize_name(item["metadata"]["name"]))
        version = str(item["metadata"]["version"])
        (met if name in image else carry).append((name, version))
    carry.append((str(canonicalize_name("vllm")), args.engine_wheel.name.split("-")[1]))

    manifest = []
    for name, version in sorted(carry):
        if name == "vllm":
            wheel = args.engine_wheel
            if wheel.parent.resolve() != dest.resolve():
                (dest / wheel.name).write_bytes(wheel.read_bytes())
            wheel = dest / wheel.name
        else:
            before = set(dest.glob("*.whl"))
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    *TARGET,
                    "-d",
                    str(dest),
                    f"{name}=={version}",
                ],
                check=True,
            )
            new = set(dest.glob("*.whl")) - before
            wheel = (
                new.pop()
                if new
                else next(
                    w
                    for w in dest.glob("*.whl")
                    if str(canonicalize_name(w.name.split("-")[0])) == name
                    and w.name.split("-")[1] == version
                )
            )
        manifest.append(f"{name}\t{version}\t{wheel.name}\t{wheel.stat().st_size}")
        print(f"  carry {name}=={version}  {wheel.stat().st_size / 2**20:7.1f} MiB", flush=True)
    keep = {line.split("\t")[2] for line in manifest}
    for stale in dest.glob("*.whl"):
        if stale.name not in keep:
            stale.unlink()
    (dest.parent / "manifest.tsv").write_text("\n".join(manifest) + "\n")
    (dest.parent / "image-requirements.txt").write_text(
        "".join(f"{n}\t{v}\n" for n, v in sorted(met))
    )
    total = sum(int(line.split("\t")[3]) for line in manifest)
    print(f"{len(manifest)} wheels to carry, {total / 2**20:.1f} MiB; {len(met)} met by the image")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
