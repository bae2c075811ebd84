"""The acceptance on a Kubernetes (EKS) stack: the same runs as on Slurm, as workloads admitted through Kueue.

`run_acceptance` (gpuforge.validate.run) decides what runs and judges every output; this module
is the other way to launch its runs (`KubernetesLauncher`, a `Launcher` like `Slurm`):

- a single-node run (`dcgmi diag`, the NVLink all_reduce_perf) is a `batch/v1` Job of one pod
  pinned to its node by `kubernetes.io/hostname`;
- a multi-node run (a pair of the slow-node search, or the whole cluster) is an Indexed
  `batch/v1` Job with a headless Service and a per-run ssh key (gpuforge.validate.kubernetes_mpi):
  one pod per node, index 0's `mpirun` starting one rank per GPU over ssh, as AWS's EKS sample
  does with an MPIJob (aws-samples/awsome-distributed-training
  micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml, commit
  50820097a734ff9300a05149b6a60ed5eb7f91af), but from built-in objects only: no MPI operator to
  install. nccl-tests need MPI across nodes (built with MPI=1, as images/scripts/55-nccl-tests.sh
  builds them), and Kueue admits a Job's pods as one gang.

Every workload carries the team's LocalQueue (`kueue.x-k8s.io/queue-name`) and is created
suspended, so nothing runs until Kueue admits it. It runs at gpuforge's acceptance priority
(`kueue.x-k8s.io/priority-class: gpuforge-acceptance`, the WorkloadPriorityClass Kueue admits and
preempts by, and the pods' priorityClassName of the same name: gpuforge.kubernetes.kueue), above every
team QOS, so no team job preempts it by priority. A Job that has not finished by the deadline is
reported with its Workload's state: why Kueue holds it (the QuotaReserved condition's reason and
message, e.g. "couldn't assign flavors to pod set main: ..."), or that it was admitted and still ran. A pair whose two nodes share the lowest
network-node layer's label gets `kueue.x-k8s.io/podset-required-topology` at that layer (one
switch); other groups get the preferred form, so a later round's cross-switch pair is not left
pending forever.

Decisions, with why:
- No hostNetwork for NCCL: EFA traffic bypasses the pod network (the EFA device plugin hands the pod the
  EFA devices as `vpc.amazonaws.com/efa`; AWS's sample above and the EKS user guide's
  "Machine learning training using Elastic Fabric Adapter" run pods on the pod network), and
  only MPI's and NCCL's bootstrap use it.
- A container image pinned by digest, not the host's binaries: the AMI's nccl-tests are linked
  against the host's Open MPI, NCCL and glibc under paths a container would have to mount one by
  one, and index 0 reaches the other pods over ssh inside the image. The image must carry
  all_reduce_perf on PATH, Open MPI's mpirun, sshd, the EFA libfabric and aws-ofi-nccl (AWS's
  nccl-tests.Dockerfile in the same folder builds such an image), and `dcgmi`; gpuforge builds no
  such image yet, so `gpuforge validate --image REPOSITORY@sha256:...` names it.
- The diag alone runs on the host's network: the node's nv-hostengine (nvidia-dcgm.service, the
  same that dcgm-exporter reads) runs the diagnostics and listens on the host's loopback, and the
  pod pauses and resumes its profiling around the diag as the Slurm steps do. The image's dcgmi
  must be of the matrix's DCGM major version.
- The environment is `Plan.env`, the one the Slurm runs export (EFA provider, GPUDirect RDMA,
  NCCL_DEBUG=INFO with INIT,NET), so the transport check reads the same lines.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.hardware import InstanceType
from gpuforge.kubernetes.addons import Image, pins
from gpuforge.kubernetes.kueue import (
    ACCEPTANCE_PRIORITY_CLASS,
    EFA_RESOURCE,
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    LAYER_LABEL,
    node_resources,
)
from gpuforge.validate import kubernetes_mpi
from gpuforge.validate.run import PROFILE_PAUSE, PROFILE_RESUME, Outputs, Plan

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue takes a Job's priority from this label's WorkloadPriorityClass before its pods' priorityClassName
# (https://kueue.sigs.k8s.io/docs/concepts/workload_priority_class/); Kueue labels a Job's Workload with the Job's uid.
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
RUN_LABEL = "gpuforge.dev/acceptance"
_DIGEST_REF = re.compile(r"(?P<repository>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})")
POLL_S = 5.0


def image_from_reference(reference: str) -> Image:
    """`REPOSITORY@sha256:<64 hex>` as an Image; anything else (a tag) is refused with the fix."""
    match = _DIGEST_REF.fullmatch(reference)
    if match is None:
        raise InputError(
            f"--image {reference!r}: the acceptance image must be pinned by digest (rule: "
            "REPOSITORY@sha256:<64 hex>; a tag can point at another image tomorrow). Fix: pass the digest, "
            "e.g. from `crane digest REPOSITORY:TAG` or your registry's console."
        )
    return Image(
        repository=match["repository"],
        tag="",
        digest=match["digest"],
        digest_source="gpuforge validate --image",
    )


@dataclass(frozen=True)
class Workloads:
    """Where the acceptance's workloads go: namespace, the team's LocalQueue, the image, a run id."""

    namespace: str
    queue: str
    image: Image
    run_id: str
    timeout_s: float = 900.0


def labels(settings: Workloads) -> dict[str, str]:
    return {
        QUEUE_LABEL: settings.queue,
        PRIORITY_LABEL: ACCEPTANCE_PRIORITY_CLASS,
        RUN_LABEL: settings.run_id,
    }


def _env(values: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": key, "value": value} for key, value in sorted(values.items())]


def _gpu_pod_spec(
    plan: Plan, settings: Workloads, command: list[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """A container on all of a node's GPUs and EFA interfaces, with /dev/shm for NCCL and the GPU taint tolerated.

    No CPU or memory request: the node's own pods (device plugins, dcgm-exporter, the node agent) hold some of
    both, so a request of the node's whole share would fit no node, and the run needs no guarantee beyond the
    node's GPUs, which it holds whole."""
    node = node_resources(plan.instance_type)
    amounts = {GPU_RESOURCE: str(node.gpus)}
    if node.efa:
        amounts[EFA_RESOURCE] = str(node.efa)
    taint = pins().gpu_taint
    return {
        "restartPolicy": "Never",
        "priorityClassName": ACCEPTANCE_PRIORITY_CLASS,
        "tolerations": [{"key": taint.key, "operator": "Exists", "effect": taint.effect}],
        "containers": [
            {
                "name": "acceptance",
                "image": settings.image.reference,
                "command": command,
                "env": _env(env),
                # Extended resources need requests equal to limits (Kubernetes refuses overcommit).
                "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
            }
        ],
        # NCCL's shared-memory transport and its proxy buffers live in /dev/shm; the runtime's default is 64 MiB.
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }


def node_job(
    plan: Plan, settings: Workloads, name: str, node: str, command: list[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """A one-pod Job on `node`, suspended until Kueue admits it, ended at the step timeout."""
    spec = _gpu_pod_spec(plan, settings, command, env)
    spec["nodeSelector"] = {HOSTNAME_LABEL: node}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels(settings)},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(settings.timeout_s),
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": {RUN_LABEL: settings.run_id}}, "spec": spec},
        },
    }


def topology_annotation(
    plan: Plan, group: Sequence[str], node_labels: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """Required at the lowest network-node layer when every node of `group` sits under that switch, else preferred."""
    layers = plan.instance_type.topology_layers
    if layers == 0:
        return {}
    level = LAYER_LABEL.format(layers)
    switches = {node_labels.get(node, {}).get(level) for node in group}
    same = len(switches) == 1 and None not in switches
    return {(REQUIRED_TOPOLOGY if same else PREFERRED_TOPOLOGY): level}


def nccl_run(
    plan: Plan,
    settings: Workloads,
    name: str,
    group: Sequence[str],
    node_labels: Mapping[str, Mapping[str, str]],
    keys: tuple[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A multi-node run over exactly `group` (Secret, headless Service, Indexed Job): one rank per GPU, the Slurm
    run's env, a fresh ssh key unless `keys` is given."""
    pod = _gpu_pod_spec(plan, settings, [], plan.env)
    topology = topology_annotation(plan, group, node_labels)
    return kubernetes_mpi.mpi_run(
        plan, settings, name, group, topology, pod, keys or kubernetes_mpi.keypair()
    )


def diag_script(level: int) -> str:
    """`dcgmi diag` between `dcgmi profile --pause` and `--resume`, as the Slurm path runs them.

    The resume is the shell's EXIT trap, and SIGTERM (the pod deleted at the step's deadline)
    exits the shell, so profiling resumes however the diag ends; the diag runs in the background
    so that the shell takes the signal at once. The pause and resume lines do not disturb the
    table's parse (gpuforge.validate.dcgm reads the table only)."""
    pause, resume = " ".join(PROFILE_PAUSE), " ".join(PROFILE_RESUME)
    return (
        f"trap '{resume}' EXIT\n"
        "trap 'exit 143' TERM INT\n"
        f"{pause} || echo 'gpuforge: could not pause DCGM profiling; the diag may fail on its lock' >&2\n"
        f"dcgmi diag -r {level} & wait $!\n"
    )


def diag_job(plan: Plan, settings: Workloads, name: str, node: str) -> dict[str, Any]:
    """The node's `dcgmi diag`, run by the node's own nv-hostengine (nvidia-dcgm.service, images/scripts/75-dcgm.sh),
    which dcgmi reaches on the host's loopback, hence hostNetwork; the pod holds every GPU, as Slurm's step does."""
    job = node_job(plan, settings, name, node, ["/bin/sh", "-c", diag_script(plan.diag_level)], {})
    spec = job["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return job


def nvlink_job(plan: Plan, settings: Workloads, name: str, node: str) -> dict[str, Any]:
    """all_reduce_perf on every GPU of one node in one process (-g GPUs): no MPI needed within a node."""
    command = plan.all_reduce_command(gpus_per_task=plan.instance_type.gpu_count)
    return node_job(plan, settings, name, node, command, plan.env)


class Cluster:
    """The few API calls the launcher makes (the `kubernetes` client; a test points it at a real API server)."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client, dynamic

        self._dynamic = dynamic.DynamicClient(api_client)
        self._core = client.CoreV1Api(api_client)

    def create(self, obj: Mapping[str, Any]) -> None:
        resource = self._dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.create(body=dict(obj), namespace=obj["metadata"]["namespace"])

    def conditions(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        resource = self._dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        found = resource.get(name=obj["metadata"]["name"], namespace=obj["metadata"]["namespace"]).to_dict()
        return list((found.get("status") or {}).get("conditions") or [])

    def workload_conditions(self, job: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The conditions of the Kueue Workload made for `job` (labelled with the Job's uid), or None if there is none.

        The Workload is read at the API version gpuforge renders Kueue's objects at (Kueue v0.17 serves v1beta1 and
        v1beta2 and stores v1beta2: gpuforge/data/kubernetes_addons.yaml)."""
        metadata = job["metadata"]
        jobs = self._dynamic.resources.get(api_version=job["apiVersion"], kind=job["kind"])
        uid = jobs.get(name=metadata["name"], namespace=metadata["namespace"]).metadata.uid
        workloads = self._dynamic.resources.get(
            api_version=pins().addons["kueue"].api_version, kind="Workload"
        )
        found = workloads.get(
            namespace=metadata["namespace"], label_selector=f"{JOB_UID_LABEL}={uid}"
        ).to_dict()
        items = found.get("items") or []
        if not items:
            return None
        return list((items[0].get("status") or {}).get("conditions") or [])

    def delete(self, obj: Mapping[str, Any]) -> None:
        resource = self._dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        resource.delete(
            name=obj["metadata"]["name"],
            namespace=obj["metadata"]["namespace"],
            propagation_policy="Background",
        )

    def ready_nodes(self, selector: str) -> dict[str, dict[str, str]]:
        """The nodes matching `selector` that can take a pod now (Ready, not cordoned), with their labels."""
        found = {}
        for node in self._core.list_node(label_selector=selector).items:
            ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
            if ready and not node.spec.unschedulable:
                found[node.metadata.name] = dict(node.metadata.labels or {})
        return found

    def logs(self, namespace: str, selector: str) -> str:
        pods = self._core.list_namespaced_pod(namespace, label_selector=selector).items
        return "".join(self._core.read_namespaced_pod_log(pod.metadata.name, namespace) for pod in pods)


# A finished Job's condition (an Indexed Job meeting its successPolicy gets SuccessCriteriaMet, then Complete).
_DONE = {"Complete": True, "Failed": False}


@dataclass
class KubernetesLauncher:
    """A `Launcher` (gpuforge.validate.run): each run a workload, all of a round at once, bounded waits."""

    cluster: Cluster
    settings: Workloads
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    progress_line: Callable[[str], None] = field(default=lambda line: None)
    poll_s: float = POLL_S
    _count: int = 0

    def progress(self, line: str) -> None:
        self.progress_line(line)

    def _name(self, kind: str) -> str:
        self._count += 1
        return f"gpuforge-{self.settings.run_id}-{kind}-{self._count}"

    def diag_steps(self, plan: Plan) -> Outputs:
        jobs = [diag_job(plan, self.settings, self._name("diag"), node) for node in plan.nodes]
        return self.run_all([[job] for job in jobs], f"dcgmi diag -r {plan.diag_level}")

    def all_reduce_steps(
        self, plan: Plan, groups: Sequence[Sequence[str]], what: str, *, gpus_per_task: int = 1
    ) -> Outputs:
        runs = [
            [nvlink_job(plan, self.settings, self._name("nvlink"), group[0])]
            if len(group) == 1
            else nccl_run(plan, self.settings, self._name("nccl"), group, self.node_labels)
            for group in groups
        ]
        return self.run_all(runs, what)

    def run_all(self, runs: Sequence[Sequence[Mapping[str, Any]]], what: str) -> Outputs:
        """Create every run's objects (its Job last), wait for each Job (one deadline for the round), read its
        pods' logs, then delete the run's other objects (a multi-node run's Secret and Service)."""
        from kubernetes.client.exceptions import ApiException

        for objects in runs:
            for obj in objects:
                self.cluster.create(obj)
        deadline = time.monotonic() + self.settings.timeout_s
        results: Outputs = []
        for done, objects in enumerate(runs, start=1):
            *companions, job = objects
            problem = self._wait(job, deadline)
            try:
                text = self.cluster.logs(self.settings.namespace, _pod_selector(job))
            except ApiException as error:
                text = ""
                problem = problem or f"its pods' logs could not be read: {error.status} {error.reason}"
            for obj in companions:
                self.cluster.delete(obj)
            results.append((text, problem))
            self.progress(f"validate: {what}: {done}/{len(runs)} done")
        return results

    def _wait(self, obj: Mapping[str, Any], deadline: float) -> str | None:
        name = obj["metadata"]["name"]
        while True:
            for condition in self.cluster.conditions(obj):
                ended = _DONE.get(condition.get("type", ""))
                if ended is not None and condition.get("status") == "True":
                    return (
                        None
                        if ended
                        else f"{obj['kind']} {name} failed: {condition.get('message') or condition.get('reason')}"
                    )
            if time.monotonic() >= deadline:
                state = self._kueue_state(obj)
                self.cluster.delete(obj)
                return f"{obj['kind']} {name} did not finish within {self.settings.timeout_s:.0f} s ({state}); deleted"
            time.sleep(min(self.poll_s, max(0.0, deadline - time.monotonic())))

    def _kueue_state(self, job: Mapping[str, Any]) -> str:
        """What Kueue says of `job`: why its Workload is held, or that it was admitted; read when the Job is late."""
        from kubernetes.client.exceptions import ApiException
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        try:
            conditions = self.cluster.workload_conditions(job)
        except ResourceNotFoundError:
            return "Kueue's Workload kind is not served: is Kueue installed? `gpuforge scheduler apply` checks it"
        except ApiException as error:
            return f"its Kueue Workload could not be read: {error.status} {cut(str(error.reason))}"
        return kueue_state(conditions)


def kueue_state(conditions: Sequence[Mapping[str, Any]] | None) -> str:
    """A late Job's Workload in words: "held by Kueue: <reason>: <message>" while it has no quota (the
    QuotaReserved condition, False, as Kueue's scheduler writes it: reason Pending and the flavor assigner's
    message), "evicted by Kueue: ..." with why (preempted, reclaimed) and what holds it since, not admitted for
    another reason (Admitted False: admission checks), or admitted and still running.

    The message is the cluster's text, quoted (display.cut): Kueue's own words, escaped and bounded."""
    if conditions is None:
        return (
            "Kueue made no Workload for it: check that Kueue runs with the batch/job integration and that "
            f"`gpuforge scheduler apply` made the WorkloadPriorityClass {ACCEPTANCE_PRIORITY_CLASS} and the team's LocalQueue"
        )
    by_type = {str(condition.get("type")): condition for condition in conditions}

    def quoted(condition: Mapping[str, Any]) -> str:
        reason = str(condition.get("reason") or "no reason")
        return f"{cut(reason)}: {cut(str(condition.get('message') or ''), 300)}"

    reserved, admitted = by_type.get("QuotaReserved"), by_type.get("Admitted")
    evicted = by_type.get("Evicted")
    if evicted is not None and evicted.get("status") == "True" and (reserved or {}).get("status") != "True":
        held = f"; held since: {quoted(reserved)}" if reserved is not None else ""
        return f"evicted by Kueue: {quoted(evicted)}{held}"
    if reserved is None or reserved.get("status") != "True":
        return f"held by Kueue: {quoted(reserved)}" if reserved is not None else "not yet considered by Kueue"
    if admitted is not None and admitted.get("status") != "True":
        return f"quota reserved but not admitted by Kueue: {quoted(admitted)}"
    return "admitted by Kueue, still running"


def _pod_selector(job: Mapping[str, Any]) -> str:
    """The pod whose log is the run's output: a one-pod Job's pod, or an Indexed Job's index 0 (mpirun there)."""
    if job["spec"].get("completionMode") == "Indexed":
        return kubernetes_mpi.launcher_selector(job)
    return f"{kubernetes_mpi.JOB_POD_LABEL}={job['metadata']['name']}"


def by_switch(nodes: Mapping[str, Mapping[str, str]], layers: int) -> tuple[str, ...]:
    """Node names ordered by their network-node labels, top layer first, so round 1 pairs neighbours under one switch."""
    levels = [LAYER_LABEL.format(index) for index in range(1, layers + 1)]
    return tuple(sorted(nodes, key=lambda name: (*(nodes[name].get(level, "") for level in levels), name)))


def launcher_for(
    api_client: Any,
    stack: str,
    instance_type: InstanceType,
    team: str,
    image: Image,
    timeout_s: float,
    run_id: str,
) -> tuple[KubernetesLauncher, tuple[str, ...]]:
    """The launcher of a Kubernetes stack's acceptance, and its GPU nodes that can take a job, ordered by switch."""
    cluster = Cluster(api_client)
    labels = cluster.ready_nodes(f"{pins().node_labels.node_group}={stack}-gpu")
    settings = Workloads(namespace=team, queue=team, image=image, run_id=run_id, timeout_s=timeout_s)
    launcher = KubernetesLauncher(cluster, settings, node_labels=labels, progress_line=_stderr)
    return launcher, by_switch(labels, instance_type.topology_layers)


def _stderr(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)
