"""gpuforge.scheduler.accounts without Slurm: Slurm's state read from real sacctmgr output, the change set
from it, and `gpuforge scheduler sync-accounts`' exit codes. The real apply is tests/scheduler/test_accounts_daemons.py.

Fixtures: tests/fixtures/accounts-sync (captured after a real sync, README says how) and
tests/fixtures/accounting (captured by the accounting harness, its README says how).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuforge.cli import main
from gpuforge.components.specs import SchedulerSpec
from gpuforge.errors import InputError
from gpuforge.scheduler.accounts import (
    ACCOUNT_QUERY,
    QOS_QUERY,
    USER_QUERY,
    AccountsError,
    AccountsState,
    Qos,
    assoc_query,
    desired_state,
    parse_state,
    plan_changes,
    read_current,
    sync,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SYNCED = FIXTURES / "accounts-sync"
QOS = [
    {"name": "production", "priority": 1000, "preempts": ["research"]},
    {"name": "research", "priority": 100, "grace_period": 300},
]
TEAMS = [
    {
        "name": "llm",
        "users": ["alice", {"name": "bob", "default": True}],
        "gpu_quota": 3,
        "qos": ["production", "research"],
    },
    {"name": "vision", "users": ["carol", "bob"], "gpu_quota": 1, "qos": "research"},
]


def _desired(qos: object = QOS, teams: object = TEAMS, cluster: str = "gfcapture") -> AccountsState:
    scheduler = SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge", qos=qos, teams=teams)  # type: ignore[arg-type]
    return desired_state(cluster, scheduler)


def _runner(outputs: dict[tuple[str, ...], str], calls: list[tuple[str, ...]] | None = None):  # type: ignore[no-untyped-def]
    def run(args: Sequence[str]) -> str:
        key = tuple(args)
        if calls is not None:
            calls.append(key)
        return outputs.get(key, "")

    return run


def _synced(cluster: str = "gfcapture") -> dict[tuple[str, ...], str]:
    return {
        QOS_QUERY: (SYNCED / "qos.txt").read_text(encoding="utf-8"),
        ACCOUNT_QUERY: (SYNCED / "accounts.txt").read_text(encoding="utf-8"),
        assoc_query(cluster): (SYNCED / "assoc.txt").read_text(encoding="utf-8"),
        USER_QUERY: (SYNCED / "users.txt").read_text(encoding="utf-8"),
    }


def _fresh() -> dict[tuple[str, ...], str]:
    """A new cluster's database: the lines of the captured state that Slurm makes by itself."""
    synced = _synced()
    return {
        QOS_QUERY: synced[QOS_QUERY].splitlines(keepends=True)[0],
        ACCOUNT_QUERY: "root|root|default root account\n",
        assoc_query("gfcapture"): "".join(
            line for line in synced[assoc_query("gfcapture")].splitlines(True) if line.split("|")[1] == "root"
        ),
        USER_QUERY: "root|root\n",
    }


def test_the_state_after_a_real_sync_reads_back_as_the_desired_state() -> None:
    current = read_current(_runner(_synced()), "gfcapture")
    assert (
        current.qos["production"].preempt == ("research",)
        and current.qos["production"].preempt_mode == "requeue"
    )
    assert current.accounts["llm"].gpu_quota == 3 and current.accounts["llm"].organization == "gpuforge"
    assert current.accounts["finance"].organization == "hr" and current.accounts["finance"].gpu_quota is None
    assert current.user_accounts["bob"] == ("llm", "vision") and current.default_accounts["bob"] == "llm"
    assert plan_changes(_desired(), current) == []  # the second run changes nothing


def test_the_first_run_is_the_commands_the_real_first_run_printed() -> None:
    printed: list[str] = []
    sync(_desired(), _runner(_fresh()), dry_run=False, report=printed.append)
    assert printed == (SYNCED / "sync-first-run.txt").read_text(encoding="utf-8").splitlines()


def test_a_dry_run_runs_only_the_queries() -> None:
    calls: list[tuple[str, ...]] = []
    printed: list[str] = []
    changes = sync(_desired(), _runner(_fresh(), calls), dry_run=True, report=printed.append)
    assert calls == [QOS_QUERY, ACCOUNT_QUERY, assoc_query("gfcapture"), USER_QUERY]
    assert len(printed) == len(changes) == 8 and all(line.startswith("would ") for line in printed)


def test_a_changed_stack_changes_and_removes_only_what_gpuforge_made() -> None:
    qos = [{"name": "production", "priority": 2000}]
    teams = [{"name": "llm", "users": ["alice"], "gpu_quota": 4, "qos": "production"}]
    changes = plan_changes(_desired(qos, teams), read_current(_runner(_synced()), "gfcapture"))
    assert [change.what for change in changes] == [
        "set QOS production: priority 2000, preempts none (requeued)",
        "set account llm: quota 4 GPUs, QOS production",
        "remove user bob from llm, vision",
        "remove user carol from vision",
        "remove account vision",
        "remove QOS research",
    ]
    assert "Preempt=" in changes[0].args  # an empty value clears the list
    # finance (Organization hr) and normal (Slurm's own QOS) are never touched.
    assert not any("finance" in " ".join(c.args) or "name=normal" in c.args for c in changes)


def test_the_grace_period_is_the_qos_gracetime_read_back_and_changed() -> None:
    """research's gracePeriod is the GraceTime sacctmgr printed as 00:05:00 after the real sync; a new value is one
    `modify qos` setting GraceTime in seconds, and removing the key sets 0 (requeued at once)."""
    current = read_current(_runner(_synced()), "gfcapture")
    assert (current.qos["research"].grace_time, current.qos["production"].grace_time) == (300, 0)
    for grace, setting, words in (
        (120, "GraceTime=120", ", its jobs get SIGTERM and 120 s when preempted"),
        (None, "GraceTime=0", ""),
    ):
        qos = [QOS[0], {"name": "research", "priority": 100, "grace_period": grace}]
        (change,) = plan_changes(_desired(qos=qos), current)
        assert change.args[:4] == ("modify", "qos", "where", "name=research") and setting in change.args
        assert change.what == f"set QOS research: priority 100, preempts none (requeued){words}"


def test_a_name_slurm_has_that_gpuforge_did_not_make_is_refused() -> None:
    teams = [*TEAMS, {"name": "finance", "users": ["dave"], "gpu_quota": 1}]
    with pytest.raises(InputError) as caught:
        plan_changes(_desired(teams=teams), read_current(_runner(_synced()), "gfcapture"))
    assert "account finance (Organization 'hr')" in caught.value.message
    assert "Organization=gpuforge" in caught.value.message and "Fix:" in caught.value.message
    # A stack cannot name Slurm's own QOS normal (gpuforge.scheduler.reserved refuses it where the stack is read);
    # the controller's guard refuses it still, for a state built another way.
    with pytest.raises(InputError, match=r"QOS normal \(Description 'Normal QOS default'\)"):
        plan_changes(
            AccountsState(cluster="gfcapture", qos=(Qos(name="normal", priority=5),)),
            read_current(_runner(_synced()), "gfcapture"),
        )


def test_the_accounting_harness_capture_reads_too() -> None:
    """B's capture (tests/fixtures/accounting, cluster gfacct) in the association format sync-accounts asks for."""
    accounting = FIXTURES / "accounting"
    current = read_current(
        _runner(
            {
                ACCOUNT_QUERY: (accounting / "accounts.txt").read_text(encoding="utf-8"),
                assoc_query("gfacct"): (accounting / "assoc-format.txt").read_text(encoding="utf-8"),
                QOS_QUERY: "",
                USER_QUERY: "",
            }
        ),
        "gfacct",
    )
    assert (current.accounts["vision"].gpu_quota, current.accounts["vision"].default_qos) == (2, "research")
    assert current.user_accounts == {
        "alice": ("llm",),
        "bob": ("llm",),
        "carol": ("vision",),
        "root": ("root",),
    }


def test_a_line_sacctmgr_would_not_print_is_exit_1() -> None:
    outputs = _synced() | {QOS_QUERY: "production|1000\n"}
    with pytest.raises(AccountsError) as caught:
        read_current(_runner(outputs), "gfcapture")
    assert caught.value.exit_code == 1 and "2 fields, not 6" in caught.value.message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 2}, "format"),
        ({"surprise": 1}, "surprise"),
        ({"accounts": [{"name": "llm", "gpu_quota": "3", "qos": []}]}, "accounts.0.gpu_quota"),
        (
            {"accounts": [{"name": "llm", "gpu_quota": 3, "qos": ["gold"]}]},
            "accounts[llm].qos: gold is not a QOS",
        ),
        ({"users": [{"name": "Eve", "accounts": ["llm"], "default_account": "llm"}]}, "users.name = 'Eve'"),
        (
            {"accounts": [{"name": "llm", "gpu_quota": 3, "qos": ["production", "production"]}]},
            "accounts[llm].qos: production is listed more than once",
        ),
        (
            {"users": [{"name": "eve", "accounts": ["llm"], "default_account": "vision"}]},
            "not one of its accounts",
        ),
    ],
)
def test_a_bad_accounts_file_is_exit_2_naming_the_field(change: dict[str, object], message: str) -> None:
    document = _desired().to_json() | change
    with pytest.raises(InputError) as caught:
        parse_state(json.dumps(document), "gpuforge-accounts.json")
    assert message in caught.value.message and caught.value.exit_code == 2
    assert caught.value.message.startswith("gpuforge-accounts.json: not a gpuforge accounts file")


def test_sync_accounts_exit_codes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scheduler", "sync-accounts", "--accounts", str(tmp_path / "missing.json")]) == 2
    path = tmp_path / "accounts.json"
    path.write_text(json.dumps(_desired().to_json()), encoding="utf-8")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sacctmgr: run again on the controller
    assert main(["scheduler", "sync-accounts", "--accounts", str(path)]) == 1
    assert "did not run" in capsys.readouterr().err
