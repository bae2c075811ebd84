"""Teams, QOS and accounting in the stack config: the happy path and every plan-time refusal.

Each refusal is read the way `plan` and `scheduler render` read a stack (load_stack_config), so
the message names the file, the gpuforge:scheduler key as written, the rule, the values and the fix.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from stack_files import slurm_stack, write_stack

from gpuforge.components.specs import QosSpec, SchedulerSpec, TeamSpec, TeamUser, team_quota_advice
from gpuforge.errors import InputError
from gpuforge.stack_config import load_stack_config

QOS = [
    {"name": "production", "priority": 1000, "preempts": ["research"]},
    {"name": "research", "priority": 100},
]
TEAMS = [
    {
        "name": "llm",
        "users": ["alice", {"name": "bob", "default": True}],
        "gpuQuota": 12,
        "qos": ["production", "research"],
    },
    {"name": "vision", "users": ["carol", "bob"], "gpuQuota": 4, "qos": "research"},
]


def _scheduler(**changes: Any) -> dict[str, Any]:
    block: dict[str, Any] = {
        "type": "slurm",
        "controllerInstanceType": "m7i.2xlarge",
        "qos": QOS,
        "teams": TEAMS,
    }
    block.update(changes)
    return {key: value for key, value in block.items() if value is not None}


def _load(tmp_path: Path, scheduler: dict[str, Any]) -> SchedulerSpec:
    # Two p5.48xlarge: 16 GPUs.
    folder = write_stack(tmp_path / "stack", "dev", slurm_stack(**{"gpuforge:scheduler": scheduler}))
    return load_stack_config(folder, "dev").scheduler


def _refused(tmp_path: Path, scheduler: dict[str, Any]) -> str:
    with pytest.raises(InputError) as caught:
        _load(tmp_path, scheduler)
    message = caught.value.message
    assert "Pulumi.dev.yaml" in message and "Fix:" in message, message
    return message


def test_teams_and_qos_are_read_as_written(tmp_path: Path) -> None:
    scheduler = _load(tmp_path, _scheduler(accounting={"database": "aurora"}))
    assert scheduler.accounting.database == "aurora"
    assert scheduler.qos == (
        QosSpec(name="production", priority=1000, preempts=("research",)),
        QosSpec(name="research", priority=100),
    )
    assert scheduler.teams == (
        TeamSpec(
            name="llm",
            users=(TeamUser(name="alice"), TeamUser(name="bob", default=True)),
            gpu_quota=12,
            qos=("production", "research"),
        ),
        TeamSpec(
            name="vision",
            users=(TeamUser(name="carol"), TeamUser(name="bob")),
            gpu_quota=4,
            qos=("research",),
        ),
    )


def test_accounting_is_local_when_not_written(tmp_path: Path) -> None:
    scheduler = _load(tmp_path, {"type": "slurm", "controllerInstanceType": "m7i.2xlarge"})
    assert scheduler.accounting.database == "local"
    assert scheduler.qos == () and scheduler.teams == ()


def test_a_quota_above_today_s_gpus_is_kept_and_advised_not_refused(tmp_path: Path) -> None:
    """Quotas are budgets and node groups grow: 17 on 16 GPUs is read as written, and said as advice."""
    teams = [dict(TEAMS[0], gpuQuota=17), TEAMS[1]]
    scheduler = _load(tmp_path, _scheduler(teams=teams))
    assert scheduler.teams[0].gpu_quota == 17
    assert team_quota_advice(scheduler, node_count=2, gpus_per_node=8) == [
        "team llm: gpuQuota 17 is above the cluster's 16 GPUs today (nodeCount 2 x 8 GPUs per node), so it "
        "does not limit the team until nodeCount reaches 3; kept as written (a quota is a budget)"
    ]
    assert team_quota_advice(scheduler, node_count=3, gpus_per_node=8) == []


def test_a_quota_no_node_group_of_the_type_can_reach_is_refused(tmp_path: Path) -> None:
    """nodeCount is at most one subnet's addresses (65531), so 65531 x 8 GPUs is the most a quota can bind."""
    assert _load(tmp_path, _scheduler(teams=[dict(TEAMS[0], gpuQuota=65531 * 8), TEAMS[1]])).teams
    message = _refused(tmp_path, _scheduler(teams=[dict(TEAMS[0], gpuQuota=65531 * 8 + 1), TEAMS[1]]))
    assert "gpuforge:scheduler.teams[llm].gpuQuota = 524249" in message
    assert "524248 GPUs of the largest node group a stack can have (65531 nodes" in message, message


def test_a_qos_that_preempts_itself_is_refused(tmp_path: Path) -> None:
    qos = [QOS[0], {"name": "research", "priority": 100, "preempts": ["research"]}]
    message = _refused(tmp_path, _scheduler(qos=qos))
    assert "gpuforge:scheduler.qos[research].preempts = ['research']" in message
    assert "cannot preempt itself" in message


def test_a_preemption_cycle_is_refused(tmp_path: Path) -> None:
    qos = [
        QOS[0],
        {"name": "research", "priority": 100, "preempts": ["batch"]},
        {"name": "batch", "priority": 10, "preempts": ["production"]},
    ]
    message = _refused(tmp_path, _scheduler(qos=qos))
    assert "gpuforge:scheduler.qos.preempts = 'batch -> production -> research -> batch'" in message
    assert "cycle" in message


@pytest.mark.parametrize(
    ("qos", "teams", "field"),
    [
        ([QOS[0], QOS[1]], [dict(TEAMS[0], qos=["production", "research", "research"])], "teams[llm].qos"),
        ([dict(QOS[0], preempts=["research", "research"]), QOS[1]], [], "qos[production].preempts"),
    ],
)
def test_a_qos_listed_twice_is_refused(tmp_path: Path, qos: Any, teams: Any, field: str) -> None:
    """Slurm keeps a list's name once, so a repeated one would make every sync-accounts change the list again."""
    message = _refused(tmp_path, _scheduler(qos=qos, teams=teams))
    assert f"gpuforge:scheduler.{field} = [" in message and "research is listed more than once" in message, (
        message
    )


@pytest.mark.parametrize(
    ("qos", "teams", "field"),
    [
        ([QOS[1]], [dict(TEAMS[0], qos=["research", "production"])], "gpuforge:scheduler.teams[llm].qos"),
        (
            [{"name": "production", "priority": 1000, "preempts": ["reserch"]}],
            [],
            "gpuforge:scheduler.qos[production].preempts",
        ),
    ],
)
def test_an_unknown_qos_name_is_refused(tmp_path: Path, qos: Any, teams: Any, field: str) -> None:
    message = _refused(tmp_path, _scheduler(qos=qos, teams=teams))
    assert field in message
    assert "is not a QOS of gpuforge:scheduler.qos" in message
    assert "define it there" in message


@pytest.mark.parametrize(("llm_bob", "vision_bob", "marked"), [(False, False, 0), (True, True, 2)])
def test_a_user_in_two_teams_needs_exactly_one_default(
    tmp_path: Path, llm_bob: bool, vision_bob: bool, marked: int
) -> None:
    teams = [
        dict(TEAMS[0], users=["alice", {"name": "bob", "default": llm_bob}]),
        dict(TEAMS[1], users=["carol", {"name": "bob", "default": vision_bob}]),
    ]
    message = _refused(tmp_path, _scheduler(teams=teams))
    assert "gpuforge:scheduler.teams.users[bob]" in message
    assert f"bob is in 2 teams (llm, vision) and marked default in {marked}" in message
    assert "{name: bob, default: true} in exactly one of those teams" in message


@pytest.mark.parametrize("key", ["accounting", "qos", "teams"])
def test_accounting_qos_and_teams_are_refused_without_a_scheduler(tmp_path: Path, key: str) -> None:
    value = {"accounting": {"database": "aurora"}, "qos": QOS, "teams": TEAMS}[key]
    message = _refused(tmp_path, {"type": "none", key: value})
    assert f"'given': ['{key}']" in message
    assert f"remove {key}, or set type: slurm" in message


@pytest.mark.parametrize(
    "scheduler",
    [
        {"type": "none"},
        {"type": "slurm", "controller_instance_type": "m7i.2xlarge", "teams": [], "qos": []},
        {
            "type": "kubernetes",
            "kubernetes_version": "1.35",
            "system_node_type": "m7i.large",
            "admin_role_arn": "arn:aws:iam::123456789012:role/admin",
        },
    ],
)
def test_a_scheduler_written_out_whole_reads_back_as_the_same_spec(scheduler: dict[str, Any]) -> None:
    """The policy check's child process and the plan's caches pass specs as JSON with every default
    written out (accounting: {database: local} on a type none scheduler included): the defaults
    configure nothing and must not be refused as keys that type does not take."""
    spec = SchedulerSpec(**scheduler)
    assert SchedulerSpec.model_validate_json(spec.model_dump_json()) == spec


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"teams": [dict(TEAMS[0], name="LLM")]}, "gpuforge:scheduler.teams.name = 'LLM'"),
        ({"teams": [dict(TEAMS[0], name="root")]}, "gpuforge:scheduler.teams.name = 'root'"),
        ({"qos": [QOS[0], dict(QOS[1], name="Research")]}, "gpuforge:scheduler.qos.name = 'Research'"),
        ({"teams": [dict(TEAMS[0], users=["Alice"])]}, "gpuforge:scheduler.teams.users.name = 'Alice'"),
        ({"accounting": {"database": "postgres"}}, "gpuforge:scheduler.accounting.database = 'postgres'"),
        ({"teams": [dict(TEAMS[0], gpuQuota=0)]}, "gpuforge:scheduler.teams.gpuQuota = 0"),
        ({"qos": [dict(QOS[0], priority=2**32), QOS[1]]}, "gpuforge:scheduler.qos.priority = 4294967296"),
    ],
)
def test_bad_names_and_values_are_refused_with_their_key(
    tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    assert field in _refused(tmp_path, _scheduler(**change))


def test_a_cluster_built_in_code_takes_a_quota_above_its_gpus_and_refuses_an_unreachable_one() -> None:
    """GpuClusterSpec applies the same quota rule as the stack config (one function, check_team_quotas)."""
    from components_helpers import cluster_spec

    scheduler = SchedulerSpec(
        type="slurm",
        controller_instance_type="m7i.2xlarge",
        teams=[{"name": "llm", "users": ["alice"], "gpu_quota": 17}],  # type: ignore[list-item]
    )
    assert cluster_spec(scheduler=scheduler).scheduler.teams[0].gpu_quota == 17
    unreachable = scheduler.model_copy(
        update={"teams": (scheduler.teams[0].model_copy(update={"gpu_quota": 65531 * 8 + 1}),)}
    )
    with pytest.raises(InputError, match=r"scheduler.teams\[llm\].gpuQuota = 524249: the quota is above"):
        cluster_spec(scheduler=unreachable)
