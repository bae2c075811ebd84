"""The acceptance's Kubernetes workloads: their manifests, and the judging of what they print.

Manifests are checked against the official Kubernetes schemas (kubernetes-validate, strict) of
the EKS versions in standard support, and the policy pack's offline check (check_object). The
launcher's judging runs `run_acceptance` over pod logs that are published outputs
(tests/fixtures/validate). The Jobs, and a multi-node run's Secret, headless Service and Indexed
Job, are created on a real kube-apiserver (tests/kubernetes/kube_cluster.py; no kubelet,
scheduler or Kueue runs there: creation and server-side validation only).
"""

from __future__ import annotations

import base64
import json
import shlex
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpuforge import hardware
from gpuforge.errors import InputError
from gpuforge.validate import kubernetes_jobs as kj
from gpuforge.validate.floors import floors_for
from gpuforge.validate.run import DEBUG_ENV, Plan, run_acceptance

KUBERNETES_VERSIONS = ("1.33.0", "1.34.0", "1.35.0")
FIXTURES = Path(__file__).parents[1] / "fixtures" / "validate"
DIGEST = "sha256:" + "ab" * 32
NODES = ("node-a", "node-b")
SWITCH = kj.LAYER_LABEL.format(hardware.get("p5.48xlarge").topology_layers)


def plan(nodes: tuple[str, ...] = NODES) -> Plan:
    return Plan(nodes, hardware.get("p5.48xlarge"), floors_for("p5.48xlarge"))


def settings(timeout_s: float = 900.0) -> kj.Workloads:
    return kj.Workloads(
        namespace="llm",
        queue="llm",
        image=kj.image_from_reference(f"registry.invalid/nccl-tests@{DIGEST}"),
        run_id="t1",
        timeout_s=timeout_s,
    )


def _env(container: Mapping[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in container["env"]}


KEYS = kj.kubernetes_mpi.keypair()


def nccl(nodes: tuple[str, ...] = NODES, labels: Mapping[str, Mapping[str, str]] | None = None) -> list[Any]:
    return kj.nccl_run(plan(nodes), settings(), "gpuforge-t1-nccl-3", nodes, labels or {}, KEYS)


def nodes_of(count: int) -> tuple[str, ...]:
    return tuple(f"node-{index}" for index in range(count))


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_jobs_fit_the_official_schema(version: str) -> None:
    job_plan = plan()
    for job in (
        kj.diag_job(job_plan, settings(), "d", "node-a"),
        kj.nvlink_job(job_plan, settings(), "n", "node-a"),
        *nccl(),
    ):
        kubernetes_validate.validate(job, version, strict=True)


def test_the_policy_pack_takes_every_workload() -> None:
    """Image by digest, the GPU taint tolerated, requests equal to limits, /dev/shm: no finding on any of them."""
    from gpuforge.kubernetes.check import check_object

    for obj in (kj.diag_job(plan(), settings(), "d", "node-a"), *nccl(), *nccl(nodes_of(4))):
        assert check_object(obj, obj["kind"]) == [], obj["kind"]


@pytest.mark.parametrize("count", [2, 4])
def test_multi_node_run_is_an_indexed_job_that_ends_with_index_0(count: int) -> None:
    nodes = nodes_of(count)
    secret, service, job = nccl(nodes)
    assert [secret["kind"], service["kind"], job["kind"]] == ["Secret", "Service", "Job"]
    spec = job["spec"]
    assert job["metadata"]["labels"][kj.QUEUE_LABEL] == "llm" and spec["suspend"] is True
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", count, count)
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert spec["backoffLimit"] == 0
    # Pods are <job>-<index> under the headless Service of the same name, which selects exactly the Job's pods.
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"] == job["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": job["metadata"]["name"]}
    assert "hostNetwork" not in pod
    (container,) = pod["containers"]
    # p5.48xlarge: 8 GPUs, 32 EFA interfaces (the catalog).
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert container["image"] == f"registry.invalid/nccl-tests@{DIGEST}"
    assert _env(container) == plan().env
    assert DEBUG_ENV.items() <= _env(container).items() and _env(container)["FI_PROVIDER"] == "efa"
    # The key: the Secret mounted read-only, a keypair that belongs together.
    assert {"name": "ssh", "mountPath": kj.kubernetes_mpi.SSH_DIR, "readOnly": True} in container[
        "volumeMounts"
    ]
    (volume,) = [item for item in pod["volumes"] if item["name"] == "ssh"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    private, public = (
        base64.b64decode(secret["data"][key]).decode() for key in ("id_ed25519", "id_ed25519.pub")
    )
    assert public.split()[:2] == _public_of(private).split()[:2]
    # One pod per listed node.
    affinity = pod["affinity"]
    (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == sorted(nodes)
    # Index 0 waits for every other sshd, writes the hostfile of every pod's name, then mpirun over all of them.
    script = container["command"][2]
    names = [f"gpuforge-t1-nccl-3-{index}.gpuforge-t1-nccl-3" for index in range(count)]
    assert f"printf '{''.join(f'{name} slots=8{chr(92)}n' for name in names)}'" in script
    for name in names[1:]:
        assert f"-o ConnectTimeout=5 {name} true" in script
    mpirun = shlex.split(script.splitlines()[-1])[1:]
    assert mpirun[mpirun.index("-np") + 1] == str(8 * count)
    assert mpirun[mpirun.index("--hostfile") + 1] == kj.kubernetes_mpi.HOSTFILE
    assert sorted(mpirun[index + 1] for index, item in enumerate(mpirun) if item == "-x") == sorted(
        plan().env
    )
    assert mpirun[-len(plan().all_reduce_command()) :] == plan().all_reduce_command()


def _public_of(private: str) -> str:
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".key") as key:
        key.write(private)
        key.flush()
        Path(key.name).chmod(0o600)
        return subprocess.run(
            ["ssh-keygen", "-y", "-f", key.name], check=True, capture_output=True, text=True
        ).stdout


def test_pair_under_one_switch_requires_it_else_prefers_it() -> None:
    same = {"node-a": {SWITCH: "nn-1"}, "node-b": {SWITCH: "nn-1"}}
    apart = {"node-a": {SWITCH: "nn-1"}, "node-b": {SWITCH: "nn-2"}}

    def annotations(labels: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
        job = nccl(NODES, labels)[-1]
        assert (
            "annotations" not in job["metadata"]
        )  # Kueue reads a batch Job's topology from its pod template
        result: dict[str, str] = job["spec"]["template"]["metadata"]["annotations"]
        return result

    assert annotations(same) == {kj.REQUIRED_TOPOLOGY: SWITCH}
    assert annotations(apart) == {kj.PREFERRED_TOPOLOGY: SWITCH}
    assert annotations({}) == {kj.PREFERRED_TOPOLOGY: SWITCH}


def test_image_by_tag_is_refused() -> None:
    with pytest.raises(InputError, match="pinned by digest"):
        kj.image_from_reference("public.ecr.aws/hpc-cloud/nccl-tests:latest")


class LogCluster:
    """The API calls answered from published outputs: every workload completes, its pods print `logs[kind]`."""

    def __init__(self, logs: Mapping[str, str]) -> None:
        self.logs_by_kind = logs
        self.created: list[Mapping[str, Any]] = []
        self.deleted: list[Mapping[str, Any]] = []
        self.selectors: list[str] = []

    def create(self, obj: Mapping[str, Any]) -> None:
        self.created.append(obj)

    def conditions(self, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
        assert obj["kind"] == "Job", "only Jobs are waited on"
        return [{"type": "Complete", "status": "True"}]

    def delete(self, obj: Mapping[str, Any]) -> None:
        assert obj["kind"] != "Job", "nothing times out here"
        self.deleted.append(obj)

    def logs(self, namespace: str, selector: str) -> str:
        self.selectors.append(selector)
        name = selector.split("=")[1].split(",")[0]
        kind = name.split("-")[2]
        return self.logs_by_kind[kind]


def test_socket_fallback_from_a_kubernetes_run_fails_naming_it() -> None:
    logs = {
        "diag": (FIXTURES / "dcgm-4.4.2-r2-pass.txt").read_text(),
        "nvlink": (FIXTURES / "nccl-h100-2node-gcp-a3mega.txt").read_text(),
        "nccl": (FIXTURES / "nccl_logs" / "socket-fallback-aws-do-eks-excerpt.txt").read_text(),
    }
    cluster = LogCluster(logs)
    launcher = kj.KubernetesLauncher(cluster, settings(), poll_s=0.0)  # type: ignore[arg-type]
    report = run_acceptance(launcher, plan())
    assert not report.passed
    (pair,) = [item for item in report.nccl if item.file.startswith("pair:")]
    assert not pair.passed
    assert any("Socket" in problem for problem in pair.problems), pair.problems
    assert [obj["kind"] for obj in cluster.created] == [
        "Job",
        "Job",
        "Job",
        "Job",
        "Secret",
        "Service",
        "Job",
    ]
    # The pair's output is index 0's log; its Secret and Service are deleted once it ended.
    assert cluster.selectors[-1] == (
        "batch.kubernetes.io/job-name=gpuforge-t1-nccl-5,batch.kubernetes.io/job-completion-index=0"
    )
    assert [(obj["kind"], obj["metadata"]["name"]) for obj in cluster.deleted] == [
        ("Secret", "gpuforge-t1-nccl-5-ssh"),
        ("Service", "gpuforge-t1-nccl-5"),
    ]


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sys.path.insert(0, str(Path(__file__).parents[1] / "kubernetes"))
    from kube_cluster import open_api_server

    with open_api_server(tmp_path_factory.mktemp("apiserver")) as server:
        yield server


@pytest.mark.slow
def test_jobs_are_created_suspended_and_a_stuck_round_is_bounded(api_server: Any) -> None:
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(api_server.kubeconfig))
    client.CoreV1Api(api_client).create_namespace({"metadata": {"name": "llm"}})
    cluster = kj.Cluster(api_client)
    job = kj.diag_job(plan(), settings(), "gpuforge-t1-diag-0", "node-a")
    cluster.create(job)
    stored = client.BatchV1Api(api_client).read_namespaced_job("gpuforge-t1-diag-0", "llm")
    assert stored.spec.suspend is True
    assert stored.metadata.labels[kj.QUEUE_LABEL] == "llm"
    assert stored.spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8"
    # No Kueue admits and no kubelet runs here: the round ends at its timeout, each job deleted, never a pass.
    launcher = kj.KubernetesLauncher(cluster, settings(timeout_s=1.0), poll_s=0.2)
    results = launcher.diag_steps(plan())
    assert [problem is not None and "did not finish within 1 s" in problem for _, problem in results] == [
        True,
        True,
    ]
    left = client.BatchV1Api(api_client).list_namespaced_job("llm").items
    assert [item.metadata.name for item in left] == ["gpuforge-t1-diag-0"]


REPO = Path(__file__).parents[2]
STACK_ARGS = ["validate", str(REPO / "stacks" / "training"), "--stack", "p5-eks"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--image is required"),
        (["--image", "public.ecr.aws/hpc-cloud/nccl-tests:latest"], "pinned by digest"),
        (["--image", f"r.invalid/x@{DIGEST}", "--team", "nobody"], "LocalQueues are llm, vision"),
    ],
)
def test_kubernetes_stack_refuses_bad_input(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuforge.cli import main

    assert main([*STACK_ARGS, *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_cli_runs_the_acceptance_as_jobs_on_the_stacks_nodes(
    api_server: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gpuforge validate` on the p5-eks stack finds its Ready GPU node by the node-group label, submits the
    diag and NVLink Jobs to team llm's queue, and, with nothing to run them, fails at the timeout (exit 1)."""
    from kubernetes import client, config

    from gpuforge.cli import main
    from gpuforge.kubernetes.addons import pins

    api_client = config.new_client_from_config(str(api_server.kubeconfig))
    core = client.CoreV1Api(api_client)
    if not any(item.metadata.name == "llm" for item in core.list_namespace().items):
        core.create_namespace({"metadata": {"name": "llm"}})
    label = pins().node_labels.node_group
    for name, group in (("gpu-1", "p5-eks-gpu"), ("other-1", "other-gpu")):
        core.create_node({"metadata": {"name": name, "labels": {label: group}}})
        core.patch_node_status(name, {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    monkeypatch.setenv("KUBECONFIG", str(api_server.kubeconfig))
    code = main([*STACK_ARGS, "--image", f"r.invalid/x@{DIGEST}", "--timeout", "1", "--json"])
    out = capsys.readouterr().out
    assert code == 1, out
    # Each run was a Job on gpu-1 only (the other group's node is not the stack's), ended at its timeout.
    assert "diag:gpu-1" in out and "nvlink:gpu-1" in out and "other-1" not in out
    assert out.count("did not finish within 1 s") >= 2, out
    left = (
        client.BatchV1Api(api_client).list_namespaced_job("llm", label_selector=f"{kj.RUN_LABEL}!=t1").items
    )
    assert left == []


def test_diag_pauses_profiling_on_the_nodes_hostengine_and_always_resumes() -> None:
    job = kj.diag_job(plan(), settings(), "d", "node-a")
    spec = job["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["nodeSelector"] == {kj.HOSTNAME_LABEL: "node-a"}
    script = spec["containers"][0]["command"][2]
    lines = script.splitlines()
    assert lines[0] == "trap 'dcgmi profile --resume' EXIT"
    assert lines[2].startswith("dcgmi profile --pause") and lines[3] == "dcgmi diag -r 1 & wait $!"


@pytest.mark.parametrize("terminate", [False, True])
def test_diag_script_resumes_profiling_when_the_diag_ends_or_the_pod_is_stopped(
    tmp_path: Path, terminate: bool
) -> None:
    """The pod's script run by /bin/sh with a stand-in dcgmi that records its calls (the diag sleeps)."""
    import contextlib
    import os
    import signal
    import subprocess

    from waiting import WAIT_S, wait_until

    calls = tmp_path / "calls"
    fake = tmp_path / "dcgmi"
    # The diag's stand-in records its pid and becomes the sleep, which the test ends by that pid.
    diag_pid = tmp_path / "diag.pid"
    sleep = f'[ "$1" = diag ] && echo $$ > {diag_pid} && exec sleep {30 if terminate else 0}'
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n{sleep}\nexit 0\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    with subprocess.Popen(["/bin/sh", "-c", kj.diag_script(2)], env=env) as shell:
        if terminate:
            # The diag runs once its stand-in wrote its pid (after recording its call): then stop the pod.
            wait_until(
                "the diag's pid",
                lambda: diag_pid.read_text() if diag_pid.exists() else "",
                lambda pid: pid.strip() != "",
            )
            shell.send_signal(signal.SIGTERM)
        assert shell.wait(timeout=WAIT_S) == (143 if terminate else 0)
    if terminate:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(diag_pid.read_text()), signal.SIGKILL)
    assert calls.read_text().splitlines() == ["profile --pause", "diag -r 2", "profile --resume"]


@pytest.mark.slow
@pytest.mark.parametrize("count", [2, 4])
def test_multi_node_run_is_accepted_by_the_api_server(api_server: Any, count: int) -> None:
    """Server-side dry run (dryRun=All): admission and the built-in types' validation of 1.35, successPolicy included."""
    from kubernetes import client, config, dynamic

    api_client = config.new_client_from_config(str(api_server.kubeconfig))
    _namespace(client.CoreV1Api(api_client))
    api = dynamic.DynamicClient(api_client)
    for obj in nccl(nodes_of(count)):
        resource = api.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        stored = resource.create(body=obj, namespace="llm", query_params=[("dryRun", "All")]).to_dict()
        if obj["kind"] == "Job":
            assert stored["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
            assert stored["spec"]["completions"] == count and stored["spec"]["suspend"] is True
            assert stored["spec"]["template"]["spec"]["subdomain"] == obj["metadata"]["name"]


@pytest.mark.slow
def test_a_stuck_multi_node_run_is_deleted_with_its_secret_and_service(api_server: Any) -> None:
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(api_server.kubeconfig))
    core = client.CoreV1Api(api_client)
    _namespace(core)
    launcher = kj.KubernetesLauncher(kj.Cluster(api_client), settings(timeout_s=1.0), poll_s=0.2)
    launcher._count = 100  # names no other test in this module uses
    (result,) = launcher.all_reduce_steps(plan(), [NODES], "pairs")
    assert result[1] is not None and "did not finish within 1 s" in result[1]
    selector = f"{kj.RUN_LABEL}=t1"
    assert [
        item.metadata.name for item in core.list_namespaced_secret("llm", label_selector=selector).items
    ] == []
    assert [
        item.metadata.name for item in core.list_namespaced_service("llm", label_selector=selector).items
    ] == []
    left = client.BatchV1Api(api_client).list_namespaced_job("llm", label_selector=selector).items
    assert "gpuforge-t1-nccl-101" not in [item.metadata.name for item in left]


def _namespace(core: Any) -> None:
    if not any(item.metadata.name == "llm" for item in core.list_namespace().items):
        core.create_namespace({"metadata": {"name": "llm"}})


@pytest.mark.parametrize("answers", [True, False])
def test_index_0_waits_for_every_sshd_then_runs_mpirun_else_fails_naming_the_pod(
    tmp_path: Path, answers: bool
) -> None:
    """The pod script run by /bin/sh as index 0, its paths moved under tmp_path, with stand-ins for ssh
    (pod 2's sshd answers at the second try, or never), sshd, ssh-keygen and mpirun that record their calls."""
    import os
    import subprocess

    count, job = 3, nccl(nodes_of(3))[-1]
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    keys, home, run = tmp_path / "keys", tmp_path / "root-ssh", tmp_path / "run-sshd"
    keys.mkdir()
    (keys / "id_ed25519").write_text(KEYS[0])
    (keys / "id_ed25519.pub").write_text(KEYS[1])
    hostfile = tmp_path / "hostfile"
    for old, new in (
        (kj.kubernetes_mpi.SSH_DIR, str(keys)),
        ("/root/.ssh", str(home)),
        ("/run/sshd", str(run)),
        (kj.kubernetes_mpi.HOSTFILE, str(hostfile)),
        ("/usr/sbin/sshd", "sshd"),
        (f"-lt {kj.kubernetes_mpi.SSH_TRIES} ]", "-lt 2 ]"),
    ):
        assert old in script
        script = script.replace(old, new)
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    late = "gpuforge-t1-nccl-3-2.gpuforge-t1-nccl-3"
    ssh = (
        f'host=$(echo "$*" | tr " " "\\n" | grep gpuforge-t1); echo "ssh $host" >> {calls}\n'
        f'if [ "$host" = {late} ]; then [ -e {tmp_path}/tried ] && {"exit 0" if answers else "exit 255"}; '
        f"touch {tmp_path}/tried; exit 255; fi\nexit 0\n"
    )
    for name, body in (
        ("ssh", ssh),
        ("sshd", f'echo "sshd $*" >> {calls}\n'),
        ("ssh-keygen", f'echo "ssh-keygen $*" >> {calls}\n'),
        ("mpirun", f'echo "mpirun" >> {calls}\n'),
    ):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": "0"}
    done = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    pods = [f"gpuforge-t1-nccl-3-{index}.gpuforge-t1-nccl-3" for index in range(count)]
    if answers:
        assert done.returncode == 0, done.stderr
        assert calls.read_text().splitlines() == [
            "ssh-keygen -A",
            "sshd ",
            f"ssh {pods[1]}",
            f"ssh {pods[2]}",
            f"ssh {pods[2]}",
            "mpirun",
        ]
        assert hostfile.read_text().splitlines() == [f"{pod} slots=8" for pod in pods]
        assert (home / "authorized_keys").read_text() == KEYS[1]
    else:
        assert done.returncode == 1
        assert f"gpuforge: sshd on {pods[2]} did not answer" in done.stderr
        assert "mpirun" not in calls.read_text()


def test_a_worker_index_runs_sshd_in_the_foreground(tmp_path: Path) -> None:
    """Any index but 0 execs `sshd -De` (the Job's successPolicy ends it once index 0 has succeeded)."""
    script = nccl()[-1]["spec"]["template"]["spec"]["containers"][0]["command"][2]
    (line,) = [item for item in script.splitlines() if "JOB_COMPLETION_INDEX" in item]
    assert line == 'if [ "$JOB_COMPLETION_INDEX" != 0 ]; then exec /usr/sbin/sshd -De; fi'


def _kueue_served(api_server: Any) -> None:
    """Kueue's CRDs on the module's API server (once): its Workload kind served, as on a cluster with Kueue."""
    from kube_cluster import install_kueue_crds
    from kubernetes import client, config

    api = client.ApiextensionsV1Api(config.new_client_from_config(str(api_server.kubeconfig)))
    if not any(
        crd.metadata.name == "workloads.kueue.x-k8s.io" for crd in api.list_custom_resource_definition().items
    ):
        install_kueue_crds(api_server.kubeconfig)


# The Workload a real Kueue v0.17.1 made for the README's example job when its ClusterQueue did not cover
# vpc.amazonaws.com/efa (tests/fixtures/kueue/README.md says how it was captured): its QuotaReserved condition
# (False, reason Pending, the flavor assigner's message) is what Kueue writes on a Workload it holds.
HELD_WORKLOAD = json.loads(
    (Path(__file__).parents[1] / "fixtures/kueue/workload-held-no-efa-quota.json").read_text()
)
HELD = [
    {key: condition[key] for key in ("type", "status", "reason", "message")}
    for condition in HELD_WORKLOAD["status"]["conditions"]
]


class KueueAnswers(kj.Cluster):
    """The real API server, with the test playing Kueue's controller at the moment it acts: when a Job is created,
    its Workload is made as Kueue's job reconciler makes it (jobframework.ConstructWorkload at tag v0.17.6, and as the
    captured HELD_WORKLOAD shows: named after the Job, labelled with its uid under the label Kueue used there, owned
    by it, one pod set `main` of the Job's template and parallelism, the Job's queue and WorkloadPriorityClass), and
    its status set to `conditions`, as Kueue's scheduler sets it."""

    def __init__(self, api_client: Any, conditions: list[dict[str, str]] | None) -> None:
        super().__init__(api_client)
        self.api_client = api_client
        self.workload_conditions_written = conditions

    def create(self, obj: Mapping[str, Any]) -> None:
        from kubernetes import client, dynamic

        super().create(obj)
        if obj["kind"] != "Job" or self.workload_conditions_written is None:
            return
        metadata = obj["metadata"]
        job = client.BatchV1Api(self.api_client).read_namespaced_job(metadata["name"], metadata["namespace"])
        workloads = dynamic.DynamicClient(self.api_client).resources.get(
            api_version="kueue.x-k8s.io/v1beta2", kind="Workload"
        )
        name = f"job-{metadata['name']}-0a1b2"
        workloads.create(
            namespace=metadata["namespace"],
            body={
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {
                    "name": name,
                    "labels": {label: job.metadata.uid for label in HELD_WORKLOAD["metadata"]["labels"]},
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": metadata["name"],
                            "uid": job.metadata.uid,
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {
                    "queueName": metadata["labels"][kj.QUEUE_LABEL],
                    "priorityClassRef": {
                        "group": "kueue.x-k8s.io",
                        "kind": "WorkloadPriorityClass",
                        "name": metadata["labels"][kj.PRIORITY_LABEL],
                    },
                    "priority": 1_000_000_000,
                    "podSets": [
                        {
                            "name": "main",
                            "count": obj["spec"].get("parallelism", 1),
                            "template": obj["spec"]["template"],
                        }
                    ],
                },
            },
        )
        now = "2026-12-08T00:00:00Z"
        conditions = [
            {**condition, "lastTransitionTime": now} for condition in self.workload_conditions_written
        ]
        workloads.status.patch(
            name=name,
            namespace=metadata["namespace"],
            body={"status": {"conditions": conditions}},
            content_type="application/merge-patch+json",
        )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("conditions", "said"),
    [
        (
            HELD,
            "held by Kueue: 'Pending': \"couldn't assign flavors to pod set main: resource vpc.amazonaws.com/efa "
            'unavailable in ClusterQueue"',
        ),
        (None, "Kueue made no Workload for it"),
    ],
)
def test_a_job_kueue_holds_fails_with_kueues_reason(
    api_server: Any, conditions: list[dict[str, str]] | None, said: str
) -> None:
    """A Job not finished at the deadline is reported with its Workload's QuotaReserved reason and message, read
    from the API server by the Job's uid, and deleted; with no Workload at all, that is said instead."""
    from kubernetes import client, config

    _kueue_served(api_server)
    api_client = config.new_client_from_config(str(api_server.kubeconfig))
    _namespace(client.CoreV1Api(api_client))
    launcher = kj.KubernetesLauncher(
        KueueAnswers(api_client, conditions), settings(timeout_s=1.0), poll_s=0.2
    )
    launcher._count = 200 if conditions else 300  # names no other test in this module uses
    ((_, problem),) = launcher.diag_steps(plan(("node-a",)))
    assert problem is not None and "did not finish within 1 s" in problem, problem
    assert said in problem, problem
    assert problem.endswith("; deleted"), problem
    left = client.BatchV1Api(api_client).list_namespaced_job("llm").items
    assert f"gpuforge-t1-diag-{launcher._count}" not in [item.metadata.name for item in left]


KUEUE_FIXTURES = Path(__file__).parents[1] / "fixtures" / "kueue"


@pytest.mark.parametrize(
    ("fixture", "said"),
    [
        ("workload-admitted.json", "admitted by Kueue, still running"),
        (
            "workload-held-no-efa-quota.json",
            "held by Kueue: 'Pending': \"couldn't assign flavors to pod set main: resource vpc.amazonaws.com/efa",
        ),
        (
            "conditions-reclaimed-in-cohort.json",
            "evicted by Kueue: 'Preempted': 'Preempted to accommodate a workload (UID: 2609960a-5695-49e2-8647-"
            "d076e4621c04, JobUID: 8beb18ac-7054-422f-942f-ce90db583ae6) due to reclamation within the cohort; "
            "preemptor path: /p5-eks-teams/vision; preemptee path: /p5-eks-teams/llm'; held since: 'Pending': "
            "\"couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor "
            'p5-eks-gpu, 8 more needed"',
        ),
    ],
)
def test_what_kueue_wrote_is_said_in_words(fixture: str, said: str) -> None:
    """The conditions a real Kueue v0.17.1 wrote (tests/fixtures/kueue/README.md), as a late Job's error says them."""
    captured = json.loads((KUEUE_FIXTURES / fixture).read_text())
    conditions = captured if isinstance(captured, list) else captured["status"]["conditions"]
    assert said in kj.kueue_state(conditions)
