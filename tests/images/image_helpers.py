"""Constants and matrix helpers for the image pipeline tests (a uniquely named module to import)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
MATRICES = REPO / "images" / "matrices"
SHIPPED = sorted(MATRICES.glob("*.yaml"))
FIXTURES = REPO / "tests" / "fixtures" / "images"
BASE_AMI = "ami-0c7217cdde317cfec"  # every shipped matrix's us-east-1 base image
REGION = "us-east-1"


def load_matrix_data(name: str = "p5-h100-cuda12") -> dict[str, Any]:
    data = yaml.safe_load((MATRICES / f"{name}.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def write_matrix(directory: Path, data: dict[str, Any], filename: str = "matrix.yaml") -> Path:
    path = directory / filename
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def variant(directory: Path, name: str, base: str = "p5-h100-cuda12", **changes: Any) -> Path:
    """A shipped matrix under a new name (so a new digest and AMI name), with top-level changes."""
    data = load_matrix_data(base)
    data["name"] = name
    data.update(changes)
    return write_matrix(directory, data, f"{name}.yaml")


# The base utilities the provisioning scripts may find on any build host. A script test's PATH
# holds its stand-ins and these only, so that a host tool the script probes for (cloud-init on
# common CI runners, nvidia-smi, systemctl) can never leak in and change or block the run.
BASE_UTILITIES = (
    "bash", "env", "cat", "grep", "sed", "awk", "mkdir", "rm", "rmdir", "cp", "mv", "ln", "chmod",
    "chown", "install", "sort", "uniq", "head", "tail", "tr", "cut", "printf", "echo", "test", "[",
    "true", "false", "sha256sum", "tar", "gzip", "find", "xargs", "date", "id", "basename", "dirname",
    "readlink", "realpath", "stat", "wc", "tee", "touch", "mktemp", "sleep", "ls", "dpkg", "uname",
    "getent", "seq", "diff", "cmp", "sh", "dash", "od", "comm", "join", "paste", "expr", "nproc",
)  # fmt: skip


def base_path(directory: Path) -> str:
    """A folder of links to BASE_UTILITIES (those this host has), for a script test's PATH."""
    import shutil

    directory.mkdir(parents=True, exist_ok=True)
    for name in BASE_UTILITIES:
        found = shutil.which(name, path="/usr/bin:/bin")
        if found is not None and not (directory / name).exists():
            (directory / name).symlink_to(found)
    return str(directory)


def pids_with(text: str) -> list[int]:
    """The processes whose command line holds `text` (what a test checks has not outlived it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
