"""`gpuforge scheduler sync-accounts` against the real sacctmgr and slurmdbd of the Slurm test root.

MariaDB, slurmdbd, slurmctld and two GPU nodes of the rendered config (slurm_cluster.start_accounting_cluster);
the command runs on this machine with sacctmgr wrappers that run inside the cluster (run_with_cluster_clients),
as it runs on a controller. Proved: the first run applies the stack's QOS, teams and users; a second run
changes nothing; a changed stack is one re-apply (quota, QOS, membership, a team and a QOS removed); a name
Slurm already has that gpuforge did not make is refused with exit 2 and left alone; and a job of a team's
user runs under the account and QOS the sync made.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import (
    DEFAULT_ROOT,
    REPO,
    AccountingCluster,
    open_cluster,
    run_with_cluster_clients,
    start_accounting_cluster,
    unavailable_reason,
)

from gpuforge.components.specs import SchedulerSpec
from gpuforge.scheduler.render import ACCOUNTS_FILE, render_files

ROOT = Path(os.environ.get("GPUFORGE_SLURM_ROOT", DEFAULT_ROOT))
_SKIP = unavailable_reason(ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

GPUFORGE = str(REPO / ".venv/bin/gpuforge")
QOS: list[dict[str, Any]] = [
    {"name": "production", "priority": 1000, "preempts": ["research"]},
    {"name": "research", "priority": 100},
]
TEAMS: list[dict[str, Any]] = [
    {
        "name": "llm",
        "users": ["alice", {"name": "bob", "default": True}],
        "gpu_quota": 3,
        "qos": ["production", "research"],
    },
    {"name": "vision", "users": ["carol", "bob"], "gpu_quota": 1, "qos": "research"},
]


def _scheduler(qos: list[dict[str, Any]], teams: list[dict[str, Any]]) -> SchedulerSpec:
    return SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge", qos=qos, teams=teams)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def acct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AccountingCluster]:
    with open_cluster(tmp_path_factory.mktemp("accounts"), ROOT, REPO / "gpuforge") as cluster:
        started = start_accounting_cluster(
            cluster, name="gfsync", password="sync-test-only", scheduler=_scheduler(QOS, TEAMS)
        )
        cluster.add_users("alice", "bob", "carol")
        yield started


def _sync(acct: AccountingCluster, scheduler: SchedulerSpec, folder: Path, *extra: str) -> tuple[int, str]:
    """sync-accounts on the accounts file rendered for `scheduler` (the cluster's own spec otherwise)."""
    spec = acct.spec.__class__(**{**acct.spec.__dict__, "scheduler": scheduler})
    path = folder / ACCOUNTS_FILE
    path.write_text(render_files(spec)[ACCOUNTS_FILE], encoding="utf-8")
    done = run_with_cluster_clients(
        acct.cluster, [GPUFORGE, "scheduler", "sync-accounts", "--accounts", str(path), *extra]
    )
    return done.returncode, done.stdout + done.stderr


def _state(acct: AccountingCluster) -> dict[str, Any]:
    def rows(*args: str) -> list[list[str]]:
        out = acct.cluster.client(["sacctmgr", "--noheader", "--parsable2", "show", *args]).stdout
        return [line.split("|") for line in out.splitlines() if line]

    return {
        "qos": {
            r[0]: tuple(r[1:]) for r in rows("qos", "format=Name,Priority,Preempt,PreemptMode,Description")
        },
        "accounts": {
            r[0]: tuple(r[1:])
            for r in rows("assoc", "format=Account,User,GrpTRES,QOS,DefaultQOS")
            if not r[1]
        },
        "users": sorted(
            (r[0], r[1]) for r in rows("assoc", "format=User,Account") if r[0] and r[0] != "root"
        ),
        "defaults": {r[0]: r[1] for r in rows("user", "format=User,DefaultAccount") if r[0] != "root"},
    }


def test_sync_applies_once_then_changes_nothing_and_a_changed_stack_is_one_reapply(
    acct: AccountingCluster, tmp_path: Path
) -> None:
    code, out = _sync(acct, _scheduler(QOS, TEAMS), tmp_path, "--dry-run")
    assert code == 0, out
    assert "would add QOS production" in out
    assert _state(acct)["accounts"].keys() == {"root"}  # a dry run changes nothing

    code, out = _sync(acct, _scheduler(QOS, TEAMS), tmp_path)
    assert code == 0, out
    state = _state(acct)
    assert state["qos"]["production"] == ("1000", "research", "requeue", "gpuforge")
    assert state["qos"]["research"] == ("100", "", "requeue", "gpuforge")
    assert state["accounts"]["llm"] == ("", "gres/gpu=3", "production,research", "production")
    assert state["accounts"]["vision"] == ("", "gres/gpu=1", "research", "research")
    assert state["users"] == [("alice", "llm"), ("bob", "llm"), ("bob", "vision"), ("carol", "vision")]
    assert state["defaults"] == {"alice": "llm", "bob": "llm", "carol": "vision"}

    code, out = _sync(acct, _scheduler(QOS, TEAMS), tmp_path)
    assert (code, out.strip().splitlines()[-1:]) == (0, [out.strip().splitlines()[-1]])
    assert out.startswith("nothing to change"), out
    assert _state(acct) == state

    # The stack changes: llm's quota, bob only in vision (now his default), carol leaves, a new QOS
    # replaces research, and a team is added.
    qos = [{"name": "production", "priority": 2000, "preempts": ["batch"]}, {"name": "batch", "priority": 10}]
    teams = [
        {"name": "llm", "users": ["alice"], "gpu_quota": 4, "qos": ["production"]},
        {"name": "vision", "users": ["bob"], "gpu_quota": 2, "qos": "batch"},
    ]
    code, out = _sync(acct, _scheduler(qos, teams), tmp_path)
    assert code == 0, out
    changed = _state(acct)
    assert changed["qos"]["production"] == ("2000", "batch", "requeue", "gpuforge")
    assert "research" not in changed["qos"] and changed["qos"]["batch"] == ("10", "", "requeue", "gpuforge")
    assert changed["accounts"]["llm"] == ("", "gres/gpu=4", "production", "production")
    assert changed["accounts"]["vision"] == ("", "gres/gpu=2", "batch", "batch")
    assert changed["users"] == [("alice", "llm"), ("bob", "vision")]
    assert changed["defaults"] == {"alice": "llm", "bob": "vision"}
    code, out = _sync(acct, _scheduler(qos, teams), tmp_path)
    assert code == 0 and out.startswith("nothing to change"), out

    # Back to the first stack, for the job test.
    assert _sync(acct, _scheduler(QOS, TEAMS), tmp_path)[0] == 0


def test_a_team_named_like_an_account_gpuforge_did_not_make_is_refused(
    acct: AccountingCluster, tmp_path: Path
) -> None:
    acct.cluster.client(["sacctmgr", "--immediate", "add", "account", "finance", "organization=hr"])
    teams = [*TEAMS, {"name": "finance", "users": ["dave"], "gpu_quota": 1, "qos": "research"}]
    before = _state(acct)
    code, out = _sync(acct, _scheduler(QOS, teams), tmp_path)
    assert code == 2, out
    assert "account finance (Organization 'hr')" in out and "Fix:" in out
    assert _state(acct) == before


def test_a_team_user_s_job_runs_under_the_synced_account_and_default_qos(
    acct: AccountingCluster, tmp_path: Path
) -> None:
    assert _sync(acct, _scheduler(QOS, TEAMS), tmp_path)[0] == 0
    job = acct.cluster.client_as(
        "carol", ["sbatch", "--parsable", "--chdir=/tmp", "--gres=gpu:1", "--wrap", "true"]
    )
    job_id = job.stdout.strip().split(";")[0]
    shown = acct.cluster.job(job_id)
    assert (shown["Account"], shown["QOS"]) == ("vision", "research")
