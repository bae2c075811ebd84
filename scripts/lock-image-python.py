"""Write the hashed lock of what `85-gpuforge.sh` pip-installs on an image, or check it is current.

The image installs gpuforge's runtime dependencies with `pip install --require-hashes` from
`images/scripts/gpuforge-requirements.txt`, then gpuforge itself from its source copy with
`--no-deps --no-index`, so nothing pip installs on a node floats. This script resolves
`[project.dependencies]` and `[build-system.requires]` of pyproject.toml (and pip) with pip's own resolver (`pip install --dry-run
--report`) for each Python an image may run (Ubuntu 22.04's python3.11, 24.04's python3.12),
wheels only, for manylinux platforms up to glibc 2.28 (both releases have newer glibc), and
records every wheel's sha256 as the package index reports it. Each Python must resolve the same
versions, so one lock serves both.

    .venv/bin/python -P scripts/lock-image-python.py          # rewrite the lock
    .venv/bin/python -P scripts/lock-image-python.py --check  # exit 1 when it is out of date
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from the checkout, before gpuforge is installed

from gpuforge.atomic import write_text_atomic  # noqa: E402

LOCK = ROOT / "images" / "scripts" / "gpuforge-requirements.txt"
PYTHONS = ("3.11", "3.12")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")


def _resolve(requirements: Path, python: str, work: Path) -> dict[str, tuple[str, str]]:
    """name -> (version, sha256 of the wheel pip chose) for one target Python."""
    report = work / f"report-{python}.json"
    abi = "cp" + python.replace(".", "")
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed"]
    command += ["--only-binary=:all:", "--python-version", python, "--implementation", "cp", "--abi", abi]
    command += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command += ["--target", str(work / f"target-{python}"), "--report", str(report), "-r", str(requirements)]
    subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
    found: dict[str, tuple[str, str]] = {}
    for item in json.loads(report.read_text(encoding="utf-8"))["install"]:
        name = item["metadata"]["name"].lower().replace("_", "-")
        found[name] = (item["metadata"]["version"], item["download_info"]["archive_info"]["hashes"]["sha256"])
    return found


def render() -> str:
    """The lock's text: one `name==version` per package, with the hash of each Python's wheel."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    # The build backend too: gpuforge is then built from source with --no-build-isolation --no-index.
    dependencies = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        requirements = work / "requirements.in"
        requirements.write_text("\n".join([*dependencies, "pip"]) + "\n", encoding="utf-8")
        resolved = [_resolve(requirements, python, work) for python in PYTHONS]
    names = sorted(set().union(*resolved))
    lines = [
        "# gpuforge's runtime dependencies as the image installs them (images/scripts/85-gpuforge.sh:",
        "# pip install --require-hashes --no-deps --only-binary=:all:). Generated from pyproject.toml by",
        "# scripts/lock-image-python.py, for CPython "
        + " and ".join(PYTHONS)
        + " on manylinux x86_64; do not edit.",
        "# Each hash is the sha256 the package index lists for that wheel.",
    ]
    for name in names:
        versions = {found[name][0] for found in resolved if name in found}
        if len(versions) != 1 or not all(name in found for found in resolved):
            raise SystemExit(
                f"{name}: Pythons {', '.join(PYTHONS)} resolve different versions ({versions}); pin it in pyproject.toml"
            )
        hashes = sorted({found[name][1] for found in resolved})
        lines.append(f"{name}=={versions.pop()} \\")
        lines.extend(
            f"    --hash=sha256:{digest}" + (" \\" if i < len(hashes) - 1 else "")
            for i, digest in enumerate(hashes)
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the lock differs from a fresh resolution"
    )
    args = parser.parse_args()
    text = render()
    if args.check:
        current = LOCK.read_text(encoding="utf-8") if LOCK.exists() else ""
        if current != text:
            print(f"{LOCK}: out of date; run scripts/lock-image-python.py to rewrite it", file=sys.stderr)
            return 1
        print(f"{LOCK}: current")
        return 0
    write_text_atomic(LOCK, text)
    print(f"wrote {LOCK}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
