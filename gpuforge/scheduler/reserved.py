"""What a stack's scheduler block may not take: names Kubernetes or Slurm reserve or already use.

A team becomes a Slurm account with its users, or on Kubernetes a Namespace, a ClusterQueue and a
LocalQueue (gpuforge.kubernetes.kueue); a QOS becomes a Slurm QOS, or a core PriorityClass and a Kueue
WorkloadPriorityClass; `systemNodeType` is the EKS node group the system add-ons run on. Some of those
names exist before gpuforge makes anything, and taking one over gives gpuforge's labels and queues to
something it does not own, or fails only on the cluster. `check` refuses them where the stack's
scheduler block is read (components.specs.SchedulerSpec, so `plan`, every render, `pulumi up` and code
that builds a spec alike), each with the key, the value, the rule and its source, and the fix.

Each rule holds for the scheduler that makes the name, and only there: a Slurm stack's teams never
become namespaces, so `kube-system` is a good Slurm account; a Kubernetes stack has no slurmdbd, so
`normal` is a good Kubernetes QOS and `root` is not refused among its teams' users.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from gpuforge.display import cut
from gpuforge.errors import InputError

if TYPE_CHECKING:
    from gpuforge.components.specs import SchedulerSpec

# --- Kubernetes ---------------------------------------------------------------------------------

NAMES_DOC = "https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names"
NAMESPACES_DOC = "https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/"
PRIORITY_DOC = (
    "https://kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption/#priorityclass"
)
# RFC 1123 label: what a namespace name must be; gpuforge gives queues and priority classes the same names.
DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?")
# "Kubernetes starts with four initial namespaces" and "Avoid creating namespaces with the prefix `kube-`, since
# it is reserved for Kubernetes system namespaces" (NAMESPACES_DOC, "Initial namespaces" and its note).
INITIAL_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
SYSTEM_NAMESPACE_PREFIX = "kube-"
# "The name of a PriorityClass object must be a valid DNS subdomain name, and it cannot be prefixed with
# `system-`" (PRIORITY_DOC, as kubernetes/website content/en/docs/concepts/scheduling-eviction/
# pod-priority-preemption.md at commit 09959b44d2425b46e76b54daa8bf97d1228cd3d2 says): the API server's validation
# refuses such a class (https://github.com/kubernetes/kubernetes/pull/59382, SystemPriorityClassPrefix), and
# Kubernetes ships system-cluster-critical and system-node-critical.
SYSTEM_PRIORITY_PREFIX = "system-"
# gpuforge's own PriorityClass and WorkloadPriorityClass, that `gpuforge validate`'s Jobs run at
# (gpuforge.kubernetes.kueue.acceptance_priority_class): a QOS of that name would take it over.
ACCEPTANCE_PRIORITY_CLASS = "gpuforge-acceptance"
# Kueue manages no job in kube-system or in its own namespace unless its configuration says otherwise (its
# default managedJobsNamespaceSelector is `kubernetes.io/metadata.name NotIn [kube-system, <Kueue's namespace>]`:
# kubernetes-sigs/kueue apis/config/v1beta2/defaults.go, commit 2601150557765691ed47b97c9298d29949767a0a), so a
# team there would have a queue that never admits its jobs, and share a namespace with an add-on's pods.
KUEUE_DEFAULTS = (
    "https://github.com/kubernetes-sigs/kueue/blob/2601150557765691ed47b97c9298d29949767a0a/"
    "apis/config/v1beta2/defaults.go"
)
# EC2's accelerated computing series, the letters before the generation (p5en -> p, trn1 -> trn). In AWS's
# DescribeInstanceTypes data as moto 5.2.5 ships it (moto/ec2/resources/instance_types.json.gz, 1,395 types), every
# type that reports GPUs, Neuron, Inferentia, FPGA or media accelerators is of these series, and every type of
# them reports one but trn2u.48xlarge (Trainium2 UltraServer nodes, listed without NeuronInfo):
# tests/components/test_reserved_names.py checks both against that data.
ACCELERATED_SERIES = frozenset({"dl", "f", "g", "gr", "inf", "p", "trn", "vt"})
ACCELERATED_SOURCE = "AWS DescribeInstanceTypes (GpuInfo, NeuronInfo, InferenceAcceleratorInfo, FpgaInfo)"


class TeamLike(Protocol):
    """What is read of a team (components.specs.TeamSpec)."""

    @property
    def name(self) -> str: ...


class QosLike(Protocol):
    """What is read of a QOS (components.specs.QosSpec)."""

    @property
    def name(self) -> str: ...


class UserLike(Protocol):
    """What is read of a team's user (components.specs.TeamUser)."""

    @property
    def name(self) -> str: ...


class TeamWithUsers(Protocol):
    """What the Slurm rules read of a team (components.specs.TeamSpec)."""

    @property
    def name(self) -> str: ...
    @property
    def users(self) -> Sequence[UserLike]: ...


@dataclass(frozen=True)
class Problem:
    """One name that may not be taken: the key as SchedulerSpec spells it, the value, why, the fix, the source."""

    field: str
    value: str
    rule: str
    fix: str
    source: str

    def line(self) -> str:
        return f"{self.field} = {cut(self.value)}: {self.rule}. Fix: {self.fix}. (source: {self.source})"


def addon_namespaces() -> dict[str, str]:
    """The namespaces of the add-ons gpuforge installs, each with what lives there.

    Taken from what places them, not written again: the render puts every add-on DaemonSet in
    `addons.NAMESPACE` (`addons._daemonset`), and `scheduler apply` installs Kueue's chart into
    `apply.KUEUE_NAMESPACE`; tests/components/test_reserved_names.py checks that the render uses no other.
    """
    from gpuforge.kubernetes import addons, apply

    return {addons.NAMESPACE: "the device plugins' DaemonSets", apply.KUEUE_NAMESPACE: "Kueue's controller"}


def dns_label_problem(field: str, value: str, what: str) -> Problem | None:
    """A Problem when `value` cannot name a Kubernetes object (an RFC 1123 label)."""
    if DNS_LABEL.fullmatch(value):
        return None
    return Problem(
        field,
        value,
        f"{what} (rule: an RFC 1123 label: lower-case letters, digits and '-', at most 63, starting and ending "
        "with a letter or digit)",
        "rename it, e.g. with '-' in place of '_'; Slurm takes that name too",
        NAMES_DOC,
    )


def namespace_problem(field: str, name: str) -> Problem | None:
    """A Problem when a team named `name` cannot have the namespace of that name as its own."""
    what = f"a team's name is its Kubernetes namespace, and {name} is "
    fix = f"rename the team (e.g. team-{name.removeprefix(SYSTEM_NAMESPACE_PREFIX)})"
    if name in INITIAL_NAMESPACES:
        return Problem(
            field, name, what + "one of the namespaces every cluster starts with", fix, NAMESPACES_DOC
        )
    used = addon_namespaces()
    if name in used:
        return Problem(
            field,
            name,
            what + f"the namespace of {used[name]}, which gpuforge installs; Kueue manages no job there",
            fix,
            KUEUE_DEFAULTS,
        )
    if name.startswith(SYSTEM_NAMESPACE_PREFIX):
        return Problem(
            field,
            name,
            what + f"under the prefix {SYSTEM_NAMESPACE_PREFIX!r}, reserved for Kubernetes system namespaces",
            fix,
            NAMESPACES_DOC,
        )
    return dns_label_problem(field, name, what + "not a namespace name")


def priority_class_problem(field: str, name: str) -> Problem | None:
    """A Problem when a QOS named `name` cannot be a PriorityClass (and a WorkloadPriorityClass) of that name."""
    what = f"a QOS's name is its Kubernetes PriorityClass, and {name} is "
    if name.startswith(SYSTEM_PRIORITY_PREFIX):
        return Problem(
            field,
            name,
            what + f"under the prefix {SYSTEM_PRIORITY_PREFIX!r}, which Kubernetes keeps for its own classes "
            "(the API server refuses it)",
            f"rename the QOS (e.g. {name.removeprefix(SYSTEM_PRIORITY_PREFIX) or 'critical'}-jobs)",
            PRIORITY_DOC,
        )
    if name == ACCEPTANCE_PRIORITY_CLASS:
        return Problem(
            field,
            name,
            what + "gpuforge's own class, the priority `gpuforge validate` runs its acceptance Jobs at",
            "rename the QOS",
            "gpuforge/kubernetes/kueue.py, acceptance_priority_class",
        )
    return dns_label_problem(field, name, what + "not a Kubernetes object name")


def accelerated(instance_type: str) -> bool:
    """Whether `instance_type` is of an EC2 accelerated computing series (GPUs, Trainium, Inferentia, FPGAs)."""
    series = re.match(r"[a-z]+", instance_type)
    return series is not None and series.group(0) in ACCELERATED_SERIES


def system_node_type_problem(field: str, instance_type: str) -> Problem | None:
    """A Problem when the system node group would be of an accelerated type.

    Refused, not advised: no stack is better for it. The group's two on-demand nodes run CPU add-ons only: they
    carry neither gpuforge's GPU instance-type label that the NVIDIA device plugin selects, nor the node-group
    label of Kueue's ResourceFlavor, so no pod can ever be given their accelerators, which are paid for by the
    hour and count against the account's On-Demand quota for accelerated instances.
    """
    if not accelerated(instance_type):
        return None
    return Problem(
        field,
        instance_type,
        "the system node group runs the CPU add-ons (CoreDNS, Kueue, the device plugins' controllers) and never "
        "offers its accelerators to a pod (the NVIDIA device plugin and Kueue select gpuforge's GPU nodes only), "
        f"so an accelerated type there ({', '.join(sorted(ACCELERATED_SERIES))} series) is paid for and unused",
        "give a CPU type, e.g. m7i.xlarge; the GPU nodes are gpuforge:instanceType",
        ACCELERATED_SOURCE,
    )


def kubernetes_problems(
    teams: Iterable[TeamLike], qos: Iterable[QosLike], system_node_type: str | None = None
) -> list[Problem]:
    """Every name of a `type: kubernetes` block that Kubernetes reserves or gpuforge's add-ons already use."""
    problems = [namespace_problem(f"scheduler.teams[{team.name}].name", team.name) for team in teams]
    problems += [priority_class_problem(f"scheduler.qos[{level.name}].name", level.name) for level in qos]
    if system_node_type is not None:
        problems.append(system_node_type_problem("scheduler.systemNodeType", system_node_type))
    return [problem for problem in problems if problem is not None]


# --- Slurm --------------------------------------------------------------------------------------

# slurmdbd makes QOS `normal` in every new database (Description "Normal QOS default": tests/fixtures/
# accounts-sync/qos.txt, printed by Slurm 26.05.5's sacctmgr on a fresh database), and gpuforge gives it to every
# team that lists no QOS (gpuforge.scheduler.accounts). gpuforge never takes over a QOS it did not make
# (accounts.plan_changes), so a stack QOS of that name would pass plan and fail on the controller.
SLURM_DEFAULT_QOS = "normal"
SLURM_QOS_SOURCE = (
    "tests/fixtures/accounts-sync/qos.txt (Slurm 26.05.5); https://slurm.schedmd.com/sacctmgr.html"
)


def slurm_qos_problem(field: str, name: str) -> Problem | None:
    """A Problem when a Slurm QOS named `name` would be one Slurm already has."""
    if name != SLURM_DEFAULT_QOS:
        return None
    return Problem(
        field,
        name,
        "slurmdbd makes QOS normal in every database, and it is the QOS of every team that lists none; "
        "gpuforge changes only the QOS it made, so sync-accounts on the controller would refuse it",
        "rename the QOS (e.g. standard); a team that should run at Slurm's own priority lists no QOS",
        SLURM_QOS_SOURCE,
    )


# slurmdbd makes user root, with DefaultAccount root, in every new database (tests/fixtures/accounts-sync/users.txt,
# `root|root`, printed by Slurm 26.05.5's sacctmgr). gpuforge sets each team user's DefaultAccount to the team, so
# a team listing root would move the Slurm administrator's default account to the team.
SLURM_ADMIN_USER = "root"
SLURM_USER_SOURCE = (
    "tests/fixtures/accounts-sync/users.txt (Slurm 26.05.5); https://slurm.schedmd.com/sacctmgr.html"
)


def slurm_user_problem(field: str, name: str) -> Problem | None:
    """A Problem when a team user named `name` is the user Slurm makes for itself."""
    if name != SLURM_ADMIN_USER:
        return None
    return Problem(
        field,
        name,
        "slurmdbd makes user root, with DefaultAccount root, in every database, and gpuforge sets a team user's "
        "DefaultAccount to the team, so it would move the Slurm administrator's default account",
        "leave root out of the teams; root's jobs can still name a team with --account",
        SLURM_USER_SOURCE,
    )


def slurm_problems(qos: Iterable[QosLike], teams: Iterable[TeamWithUsers] = ()) -> list[Problem]:
    """Every name of a `type: slurm` block that Slurm already uses."""
    found = [slurm_qos_problem(f"scheduler.qos[{level.name}].name", level.name) for level in qos]
    found += [
        slurm_user_problem(f"scheduler.teams[{team.name}].users", user.name)
        for team in teams
        for user in team.users
    ]
    return [problem for problem in found if problem is not None]


# --- Both ----------------------------------------------------------------------------------------


def refuse(problems: list[Problem]) -> None:
    """InputError listing every Problem (exit 2); nothing when there is none."""
    if not problems:
        return
    if len(problems) == 1:
        raise InputError(problems[0].line())
    raise InputError(
        f"{len(problems)} names the scheduler cannot take:\n" + "\n".join(f"  {p.line()}" for p in problems)
    )


def check(scheduler: SchedulerSpec) -> None:
    """Refuse every name of the block that its own scheduler reserves or already uses (see the module docstring)."""
    if scheduler.type == "kubernetes":
        refuse(kubernetes_problems(scheduler.teams, scheduler.qos, scheduler.system_node_type))
    elif scheduler.type == "slurm":
        refuse(slurm_problems(scheduler.qos, scheduler.teams))
