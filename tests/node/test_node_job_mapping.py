"""Slurm Prolog/Epilog: dcgm-exporter's job mapping files (gpuforge.node.job_mapping).

The mapping folder is a temporary directory; the files are read back as the pinned
dcgm-exporter reads them (NVIDIA/dcgm-exporter tag 4.4.2-4.7.1,
internal/pkg/transformation/hpc.go: files whose whole name is an integer, one job per line).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.node import job_mapping
from gpuforge.node.job_mapping import (
    JobGpus,
    claim,
    jobs_of,
    read_environment,
    release,
    run_epilog,
    run_prolog,
)

GPUFORGE = Path(sys.executable).with_name("gpuforge")


def exporter_view(directory: Path) -> dict[str, list[str]]:
    """What dcgm-exporter 4.4.2-4.7.1 reads: regular files named by an integer, one job per line.

    Its readFile keeps every line (bufio.Scanner), so a blank line would be a job named "": kept here too.
    """
    view: dict[str, list[str]] = {}
    for entry in directory.iterdir():
        if entry.is_file() and entry.name.lstrip("+-").isdigit():
            view[entry.name] = entry.read_text().splitlines()
    return view


def env(job: str | None, gpus: str | None) -> dict[str, str]:
    values = {}
    if job is not None:
        values["SLURM_JOB_ID"] = job
    if gpus is not None:
        values["SLURM_JOB_GPUS"] = gpus
    return values


def test_prolog_writes_one_file_per_gpu_with_the_job_id(tmp_path: Path) -> None:
    logged: list[str] = []
    assert run_prolog(tmp_path / "map", env("4242", "0,3"), logged.append) == 0
    assert exporter_view(tmp_path / "map") == {"0": ["4242"], "3": ["4242"]}
    # nothing else in the folder: no temporary file is left behind
    assert sorted(p.name for p in (tmp_path / "map").iterdir()) == ["0", "3"]
    assert logged == [f"prolog: job 4242 mapped to GPU(s) 0,3 in {tmp_path / 'map'}"]


def test_slurm_job_gpus_is_read_not_cuda_visible_devices(tmp_path: Path) -> None:
    """Slurm 25.11+ may put UUIDs in CUDA_VISIBLE_DEVICES; the index is SLURM_JOB_GPUS'."""
    values = {**env("7", "5"), "CUDA_VISIBLE_DEVICES": "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"}
    run_prolog(tmp_path, values, lambda _: None)
    assert exporter_view(tmp_path) == {"5": ["7"]}


def test_a_stale_file_of_an_old_job_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "2").write_text("100\n")
    logged: list[str] = []
    run_prolog(tmp_path, env("200", "2"), logged.append)
    assert exporter_view(tmp_path) == {"2": ["200"]}
    assert "prolog: GPU 2 still mapped to job(s) 100; job 200 replaces it" in logged


def test_two_jobs_on_one_node_each_own_their_gpus(tmp_path: Path) -> None:
    run_prolog(tmp_path, env("11", "0,1"), lambda _: None)
    run_prolog(tmp_path, env("12", "2,3"), lambda _: None)
    assert exporter_view(tmp_path) == {"0": ["11"], "1": ["11"], "2": ["12"], "3": ["12"]}
    run_epilog(tmp_path, env("11", "0,1"), lambda _: None)
    assert exporter_view(tmp_path) == {"2": ["12"], "3": ["12"]}
    run_epilog(tmp_path, env("12", "2,3"), lambda _: None)
    assert exporter_view(tmp_path) == {}


def test_epilog_removes_only_files_holding_its_own_job(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("11\n")
    (tmp_path / "1").write_text("12\n")  # a later job took GPU 1 over a stale file of job 11
    (tmp_path / "2").write_text("11\n12\n")  # not written by gpuforge: never guessed at
    (tmp_path / "notes").write_text("11\n")  # not a mapping file
    # the epilog's SLURM_JOB_GPUS is missing: the folder is still cleaned of job 11
    assert run_epilog(tmp_path, env("11", None), lambda _: None) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1", "2", "notes"]


@pytest.mark.parametrize(
    ("gpus", "expected", "problem"),
    [
        (None, {}, None),
        ("", {}, None),
        ("   ", {}, None),
        ("0,x,2", {"0": ["9"], "2": ["9"]}, "'x' is not a GPU index"),
        ("1,1,01", {"1": ["9"]}, None),
        ("2.0", {}, "'2.0' is not a GPU index"),  # MIG names: no MIG in gpuforge's gres.conf
        ("0,,1", {"0": ["9"], "1": ["9"]}, "'' is not a GPU index"),
        ("GPU-604ac76c", {}, "'GPU-604ac76c' is not a GPU index"),
    ],
)
def test_missing_empty_or_garbled_gpus(
    tmp_path: Path, gpus: str | None, expected: dict[str, list[str]], problem: str | None
) -> None:
    logged: list[str] = []
    assert run_prolog(tmp_path, env("9", gpus), logged.append) == 0
    assert exporter_view(tmp_path) == expected
    problems = [line for line in logged if "is not a GPU index" in line]
    assert (problem is None) == (not problems)
    if problem is not None:
        assert problem in problems[0] and "those GPUs get no job label" in problems[0]


@pytest.mark.parametrize("job", [None, "", "12a", "-3"])
def test_missing_or_garbled_job_id_writes_and_removes_nothing(tmp_path: Path, job: str | None) -> None:
    (tmp_path / "0").write_text("5\n")
    logged: list[str] = []
    assert run_prolog(tmp_path, env(job, "1"), logged.append) == 0
    assert run_epilog(tmp_path, env(job, "0"), logged.append) == 0
    assert exporter_view(tmp_path) == {"0": ["5"]}
    assert any("SLURM_JOB_ID" in line for line in logged)


def test_an_unwritable_mapping_folder_never_fails_the_job(tmp_path: Path) -> None:
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("")
    logged: list[str] = []
    assert run_prolog(blocker / "map", env("3", "0"), logged.append) == 0
    assert len(logged) == 1 and "prolog: job 3:" in logged[0] and "cannot write the file" in logged[0]
    assert run_epilog(blocker / "map", env("3", "0"), logged.append) == 0


def test_an_unexpected_error_is_logged_and_exit_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> list[str]:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(job_mapping, "claim", broken)
    monkeypatch.setattr(job_mapping, "release", broken)
    logged: list[str] = []
    assert run_prolog(tmp_path, env("3", "0"), logged.append) == 0
    assert run_epilog(tmp_path, env("3", "0"), logged.append) == 0
    assert logged == [
        "prolog: job mapping failed (RuntimeError: disk on fire); the job runs without the label",
        "epilog: removing the job mapping failed (RuntimeError: disk on fire)",
    ]


def test_read_environment_and_jobs_of(tmp_path: Path) -> None:
    assert read_environment(env("77", " 3 , 1 ")) == JobGpus("77", ("3", "1"), ())
    claim(tmp_path, JobGpus("77", ("0", "1"), ()))
    claim(tmp_path, JobGpus("8", ("2",), ()))
    (tmp_path / "3").write_text("garbage\n")
    assert jobs_of(tmp_path, ("0", "1")) == ("77",)
    assert jobs_of(tmp_path, ("1", "2", "3", "4")) == ("8", "77")
    assert jobs_of(tmp_path / "absent", ("0",)) == ()
    assert release(tmp_path, "77") == ["0", "1"]


def test_jobs_of_reads_only_files_named_by_a_gpu_index(tmp_path: Path) -> None:
    """The EFA collector's GPUs come from `nvidia-smi topo -m` and a cache under /run: a GPU named as a path
    must not make it read (and label series with) a file outside the mapping folder."""
    (tmp_path / "elsewhere").write_text("99\n")
    mapping = tmp_path / "map"
    mapping.mkdir()
    (mapping / "0").write_text("5\n")
    (mapping / "1").symlink_to(tmp_path / "elsewhere")
    assert jobs_of(mapping, ("0", "1", "../elsewhere", str(tmp_path / "elsewhere"))) == ("5",)


@pytest.mark.parametrize("command", ["prolog", "epilog"])
def test_console_script_exits_0_even_when_it_cannot_write(tmp_path: Path, command: str) -> None:
    """The installed `gpuforge node prolog|epilog`, as slurmd runs it: environment in, exit 0 out."""
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("")
    for folder, expect_file in ((tmp_path / "map", command == "prolog"), (blocker / "map", False)):
        completed = subprocess.run(
            [str(GPUFORGE), "node", command, "--mapping-dir", str(folder)],
            env={**os.environ, "SLURM_JOB_ID": "31", "SLURM_JOB_GPUS": "4"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        assert "Traceback" not in completed.stderr
        assert (folder / "4").is_file() == expect_file
