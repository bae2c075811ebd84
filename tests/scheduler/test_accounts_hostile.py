"""`gpuforge scheduler sync-accounts` on sacctmgr output it cannot trust: a clear error (exit 1, sacctmgr's
answer, not the user's file, is what is wrong) naming the entity, the field and the value, never a traceback.

Each output is a real capture (tests/fixtures/accounts-sync, Slurm 26.05.5) with one thing changed. A real
sacctmgr cannot be made to print these, so the CLI tests put a stand-in `sacctmgr` on PATH that prints the
changed capture: the part under test is gpuforge's reading of the bytes, which the stand-in hands over as
sacctmgr would (stdout, exit 0).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuforge.cli import main
from gpuforge.components.specs import SchedulerSpec
from gpuforge.scheduler.accounts import (
    ACCOUNT_QUERY,
    QOS_QUERY,
    USER_QUERY,
    AccountsError,
    assoc_query,
    desired_state,
    plan_changes,
    read_current,
)

SYNCED = Path(__file__).resolve().parents[1] / "fixtures" / "accounts-sync"
CLUSTER = "gfcapture"


def _captured() -> dict[tuple[str, ...], bytes]:
    return {
        QOS_QUERY: (SYNCED / "qos.txt").read_bytes(),
        ACCOUNT_QUERY: (SYNCED / "accounts.txt").read_bytes(),
        assoc_query(CLUSTER): (SYNCED / "assoc.txt").read_bytes(),
        USER_QUERY: (SYNCED / "users.txt").read_bytes(),
    }


def _runner(outputs: dict[tuple[str, ...], bytes]):  # type: ignore[no-untyped-def]
    def run(args: Sequence[str]) -> str:
        return outputs[tuple(args)].decode("utf-8")

    return run


def _desired():  # type: ignore[no-untyped-def]
    scheduler = SchedulerSpec(
        type="slurm",
        controller_instance_type="m7i.2xlarge",
        qos=[
            {"name": "production", "priority": 1000, "preempts": ["research"]},
            {"name": "research", "priority": 100, "grace_period": 300},
        ],  # type: ignore[list-item]
        teams=[  # type: ignore[list-item]
            {
                "name": "llm",
                "users": ["alice", {"name": "bob", "default": True}],
                "gpu_quota": 3,
                "qos": ["production", "research"],
            },
            {"name": "vision", "users": ["carol", "bob"], "gpu_quota": 1, "qos": "research"},
        ],
    )
    return desired_state(CLUSTER, scheduler)


def _changed(query: tuple[str, ...], old: bytes, new: bytes) -> dict[tuple[str, ...], bytes]:
    outputs = _captured()
    assert old in outputs[query]
    outputs[query] = outputs[query].replace(old, new)
    return outputs


@pytest.mark.parametrize("priority", [b"high", b"-1", b"1e3", b"\xd9\xa1", b" 1000", b"99999999999"])
def test_a_priority_that_is_not_a_whole_number_names_the_qos_field_and_value(priority: bytes) -> None:
    outputs = _changed(QOS_QUERY, b"production|1000|", b"production|" + priority + b"|")
    with pytest.raises(AccountsError) as caught:
        read_current(_runner(outputs), CLUSTER)
    message = caught.value.message
    assert caught.value.exit_code == 1
    assert "QOS 'production'" in message and "Priority = " in message and "Fix:" in message, message


def test_a_gpu_quota_that_is_not_a_whole_number_is_no_quota_not_a_traceback() -> None:
    """'²' is a digit to str.isdigit and not to int(); a quota gpuforge cannot read is set again."""
    outputs = _changed(assoc_query(CLUSTER), b"gres/gpu=3", "gres/gpu=\u00b2".encode())
    current = read_current(_runner(outputs), CLUSTER)
    assert current.accounts["llm"].gpu_quota is None
    assert [change.what for change in plan_changes(_desired(), current)] == [
        "set account llm: quota 3 GPUs, QOS production, research"
    ]


def test_a_description_holding_the_separator_is_read_whole() -> None:
    """--parsable2 does not escape '|': a free-text last column takes the rest of the line."""
    outputs = _changed(QOS_QUERY, b"Normal QOS default", b"Normal | default | QOS")
    current = read_current(_runner(outputs), CLUSTER)
    assert current.qos["normal"].description == "Normal | default | QOS"
    assert plan_changes(_desired(), current) == []


def test_an_organization_holding_the_separator_is_never_read_as_gpuforge_s() -> None:
    """An account's Organization is not the last column: extra fields are read into it, so a separator in
    either free-text column can only make an account look not gpuforge's (refused), never gpuforge's (removed)."""
    outputs = _changed(ACCOUNT_QUERY, b"finance|hr|finance", b"finance|gpuforge|x|finance")
    current = read_current(_runner(outputs), CLUSTER)
    assert current.accounts["finance"].organization == "gpuforge|x"
    assert not [change for change in plan_changes(_desired(), current) if "finance" in change.what]


@pytest.mark.parametrize(
    "grace", [b"300", b"5 min", b"00:60:00", b"24:00:00", b"-1", b"\xd9\xa1:00:00", b"UNLIMITED"]
)
def test_a_grace_time_sacctmgr_would_not_print_names_the_qos_field_and_value(grace: bytes) -> None:
    outputs = _changed(QOS_QUERY, b"|00:05:00|", b"|" + grace + b"|")
    with pytest.raises(AccountsError) as caught:
        read_current(_runner(outputs), CLUSTER)
    message = caught.value.message
    assert caught.value.exit_code == 1
    assert "GraceTime = " in message and "QOS 'research'" in message and "[days-]HH:MM:SS" in message, message


@pytest.mark.parametrize(
    ("query", "old", "new", "words"),
    [
        (QOS_QUERY, b"research|100||requeue|00:05:00|gpuforge", b"research|100", "2 fields, not 6"),
        (
            assoc_query(CLUSTER),
            b"gfcapture|vision|carol|||research|research",
            b"gfcapture|vision|carol|||research|research|x",
            "8 fields, not 7",
        ),
        (USER_QUERY, b"carol|vision", b"carol", "1 fields, not 2"),
    ],
)
def test_a_line_of_the_wrong_width_is_exit_1_naming_it(
    query: tuple[str, ...], old: bytes, new: bytes, words: str
) -> None:
    with pytest.raises(AccountsError) as caught:
        read_current(_runner(_changed(query, old, new)), CLUSTER)
    assert words in caught.value.message, caught.value.message
    assert "Fix: run sync-accounts on the controller gpuforge made" in caught.value.message


def test_an_association_of_an_account_sacctmgr_does_not_list_is_exit_1() -> None:
    """`show account` printing nothing while `show assoc` lists accounts: the answers disagree, and reading them
    would call gpuforge's own accounts another's (Organization empty)."""
    outputs = _captured() | {ACCOUNT_QUERY: b""}
    with pytest.raises(AccountsError) as caught:
        read_current(_runner(outputs), CLUSTER)
    assert "account 'root'" in caught.value.message and "show account" in caught.value.message


def _stand_in(folder: Path, outputs: dict[tuple[str, ...], bytes]) -> None:
    """A `sacctmgr` on PATH printing each query's bytes (the queries are gpuforge's own)."""
    folder.mkdir()
    lines = ["#!/bin/sh", 'shift 3; case "$*" in']  # after --parsable2 --noheader --immediate
    for index, (query, output) in enumerate(outputs.items()):
        (folder / f"out{index}").write_bytes(output)
        lines.append(f"  {shlex.quote(' '.join(query))}) cat {shlex.quote(str(folder / f'out{index}'))} ;;")
    lines += ['  *) echo unexpected: "$*" >&2; exit 9 ;;', "esac"]
    script = folder / "sacctmgr"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    script.chmod(0o755)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ((QOS_QUERY, b"production|1000|", b"production|high|"), "Priority = 'high'"),
        ((QOS_QUERY, b"research|100||requeue|00:05:00|gpuforge", b"research|100"), "2 fields, not 6"),
    ],
)
def test_sync_accounts_on_hostile_output_is_exit_1_without_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: tuple[tuple[str, ...], bytes, bytes],
    words: str,
) -> None:
    _stand_in(tmp_path / "bin", _changed(*change))
    accounts = tmp_path / "accounts.json"
    accounts.write_text(json.dumps(_desired().to_json()), encoding="utf-8")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert main(["scheduler", "sync-accounts", "--accounts", str(accounts), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err, err


def test_sync_accounts_reads_output_that_is_not_utf_8(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another admin's Latin-1 description does not stop gpuforge syncing its own teams."""
    _stand_in(tmp_path / "bin", _changed(ACCOUNT_QUERY, b"finance|hr|finance", b"finance|hr|caf\xe9"))
    accounts = tmp_path / "accounts.json"
    accounts.write_text(json.dumps(_desired().to_json()), encoding="utf-8")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert main(["scheduler", "sync-accounts", "--accounts", str(accounts), "--dry-run"]) == 0
    assert "nothing to change" in capsys.readouterr().out
