"""A multi-node NCCL run on Kubernetes from built-in objects only: an Indexed Job, a headless Service, a Secret.

The Kubeflow MPI operator used to launch these runs (an MPIJob), but gpuforge cannot install it
pinned by digest (gpuforge/data/kubernetes_addons.yaml), so a run is made of objects every
cluster serves:

- a `batch/v1` Job with `completionMode: Indexed`, `parallelism = completions = len(nodes)`:
  one pod per node (pod anti-affinity on the Job's pods by hostname, node affinity to the group),
  each on all of the node's GPUs and EFA devices. Index 0 is the launcher (it also runs ranks);
  the others run sshd in the foreground. `successPolicy` with `succeededIndexes: "0"` makes the
  Job succeed when index 0 does: the Job controller adds SuccessCriteriaMet, terminates the
  lingering sshd pods, then sets Complete, the condition the launcher waits for (Kubernetes docs,
  Jobs, "Success policy", https://kubernetes.io/docs/concepts/workloads/controllers/job/#success-policy;
  "Kubernetes 1.33: Job's SuccessPolicy Goes GA", https://kubernetes.io/blog/2025/05/15/kubernetes-1-33-jobs-success-policy-goes-ga,
  which names this leader-follower MPI pattern; KEP-3998, https://www.kubernetes.dev/resources/keps/3998/:
  alpha v1.30, beta v1.31, stable v1.33).
  `backoffLimit: 0`: a pod that fails fails the whole Job at once, as an NCCL run whose rank died
  cannot be resumed by replacing one pod (mpirun would wait on the dead rank until the deadline);
  no podFailurePolicy is needed on top of that.
- a headless Service (`clusterIP: None`) named like the Job and selecting its pods, and the pod
  template's `subdomain` set to it: an Indexed Job's pod has hostname `<job>-<index>`, so pods
  reach each other as `<job>-<index>.<service>` (Kubernetes docs, "Job with Pod-to-Pod
  Communication", https://kubernetes.io/docs/tasks/job/job-with-pod-to-pod-communication/).
  `publishNotReadyAddresses` so a name resolves as soon as the pod has an IP.
- a Secret with an ed25519 keypair made for this run only (ssh-keygen: the `cryptography`
  package is not a gpuforge dependency), mounted read-only into every pod; index 0 waits, bounded,
  until every other pod's sshd answers, writes a hostfile of those names, and runs `mpirun` as
  the MPIJob's launcher did. The launcher deletes the Secret and the Service explicitly when the
  run ends (KubernetesLauncher.run_all): an ownerReference to the Job would need the Job's uid,
  known only after it is created, so a second write per run.

Kueue: the Job carries `kueue.x-k8s.io/queue-name` and is created suspended; the topology
annotation sits on the pod template's metadata, where Kueue's topology-aware scheduling reads it
for a batch Job (Kueue docs, "Run Workloads with Topology-Aware Scheduling", whose examples are
batch Jobs, https://kueue.sigs.k8s.io/docs/tasks/run/topology_aware_scheduling/; kubernetes-sigs/kueue
keps/2724-topology-aware-scheduling/README.md, "Integration support: Job"). Kueue admits a Job's pods
as one podset, all or none (Kueue docs, "Run a Kubernetes Job",
https://kueue.sigs.k8s.io/docs/tasks/run/jobs/).
"""

from __future__ import annotations

import base64
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuforge.kubernetes.kueue import HOSTNAME_LABEL

if TYPE_CHECKING:
    from gpuforge.validate.kubernetes_jobs import Workloads
    from gpuforge.validate.run import Plan

# The labels the Job controller puts on an Indexed Job's pods.
JOB_POD_LABEL = "batch.kubernetes.io/job-name"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
SSH_DIR = "/etc/gpuforge-ssh"
HOSTFILE = "/tmp/gpuforge-hostfile"
# Index 0 tries each worker's sshd this many times, 2 s apart (about 2 minutes with the connect timeout).
SSH_TRIES = 40
# Open MPI's own traffic over TCP on the pod network, not over the EFA devices NCCL uses
# (the --mca settings of aws-samples/awsome-distributed-training
# micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml, commit 50820097a734ff9300a05149b6a60ed5eb7f91af).
MPI_MCA = ("--mca", "pml", "^cm,ucx", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_exclude", "lo,docker0")


def keypair() -> tuple[str, str]:
    """A fresh ed25519 keypair (private, public) in OpenSSH format, made by ssh-keygen in a private temp dir."""
    with tempfile.TemporaryDirectory() as folder:
        key = Path(folder) / "id_ed25519"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuforge-acceptance", "-f", str(key)],
            check=True,
            capture_output=True,
        )
        return key.read_text(), key.with_suffix(".pub").read_text()


def hosts(name: str, count: int) -> list[str]:
    """The pods' names as the headless Service resolves them: `<job>-<index>.<service>`."""
    return [f"{name}-{index}.{name}" for index in range(count)]


def _script(plan: Plan, name: str, count: int) -> str:
    """The pods' shell: every pod installs the key and starts sshd; index 0 waits for the others, then runs mpirun."""
    gpus = plan.instance_type.gpu_count
    names = hosts(name, count)
    exports = [item for key in sorted(plan.env) for item in ("-x", key)]
    mpirun = [
        "mpirun",
        "--allow-run-as-root",
        "--hostfile",
        HOSTFILE,
        "-np",
        str(gpus * count),
        "-N",
        str(gpus),
        "--bind-to",
        "none",
        *exports,
        *MPI_MCA,
        *plan.all_reduce_command(),
    ]
    ssh = "ssh -o BatchMode=yes -o StrictHostKeyChecking=no -o ConnectTimeout=5"
    waits = "".join(
        f"n=0; until {ssh} {host} true; do n=$((n+1)); "
        f'[ "$n" -lt {SSH_TRIES} ] || {{ echo "gpuforge: sshd on {host} did not answer" >&2; exit 1; }}; '
        "sleep 2; done\n"
        for host in names[1:]
    )
    hostfile = "".join(f"{host} slots={gpus}\\n" for host in names)
    return (
        "set -eu\n"
        "mkdir -p /root/.ssh && chmod 700 /root/.ssh\n"
        f"cp {SSH_DIR}/id_ed25519 /root/.ssh/id_ed25519 && chmod 600 /root/.ssh/id_ed25519\n"
        f"cp {SSH_DIR}/id_ed25519.pub /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys\n"
        "mkdir -p /run/sshd && ssh-keygen -A >/dev/null\n"
        'if [ "$JOB_COMPLETION_INDEX" != 0 ]; then exec /usr/sbin/sshd -De; fi\n'
        "/usr/sbin/sshd\n"
        f"{waits}"
        f"printf '{hostfile}' > {HOSTFILE}\n"
        f"exec {shlex.join(mpirun)}\n"
    )


def mpi_run(
    plan: Plan,
    settings: Workloads,
    name: str,
    group: Sequence[str],
    topology: Mapping[str, str],
    pod_spec: dict[str, Any],
    keys: tuple[str, str],
) -> list[dict[str, Any]]:
    """The Secret, the headless Service and the Indexed Job of one run over `group`; the Job last.

    `pod_spec` is the GPU pod (kubernetes_jobs._gpu_pod_spec: image by digest, GPU toleration,
    equal requests and limits, /dev/shm); this adds the script, the key, the names and the placement."""
    from gpuforge.validate.kubernetes_jobs import RUN_LABEL, labels

    count = len(group)
    meta = {"namespace": settings.namespace, "labels": {RUN_LABEL: settings.run_id}}
    private, public = keys
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{name}-ssh", **meta},
        "type": "Opaque",
        "data": {
            "id_ed25519": base64.b64encode(private.encode()).decode(),
            "id_ed25519.pub": base64.b64encode(public.encode()).decode(),
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, **meta},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {JOB_POD_LABEL: name}},
    }
    spec = pod_spec
    (container,) = spec["containers"]
    container["command"] = ["/bin/sh", "-c", _script(plan, name, count)]
    container["volumeMounts"].append({"name": "ssh", "mountPath": SSH_DIR, "readOnly": True})
    spec["volumes"].append({"name": "ssh", "secret": {"secretName": f"{name}-ssh", "defaultMode": 0o400}})
    spec["subdomain"] = name
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(group)}]}
                ]
            }
        },
        # One pod per node: a pair is two nodes, never two pods on one.
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {JOB_POD_LABEL: name}}, "topologyKey": HOSTNAME_LABEL}
            ]
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": settings.namespace, "labels": labels(settings)},
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": count,
            "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
            "backoffLimit": 0,
            "activeDeadlineSeconds": int(settings.timeout_s),
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": {RUN_LABEL: settings.run_id}, "annotations": dict(topology)},
                "spec": spec,
            },
        },
    }
    return [secret, service, job]


def launcher_selector(job: Mapping[str, Any]) -> str:
    """Index 0's pod: mpirun there gathers every rank's output."""
    return f"{JOB_POD_LABEL}={job['metadata']['name']},{INDEX_LABEL}=0"
