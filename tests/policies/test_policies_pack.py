"""The pack itself: metadata readable without a server, a thin __main__.py, its files, and the real analyzer.

The last test starts the pack the way the engine does (its __main__.py, which serves
gRPC on 127.0.0.1) and sends it the engine's requests: it must report exactly what
the offline runner reports.
"""

from __future__ import annotations

import ast
import os
import select
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import grpc
import jsonschema
import pytest
import yaml
from google.protobuf import empty_pb2
from policy_helpers import LAUNCH_TEMPLATE, Images, edit, record_cluster, spec
from pulumi.runtime.proto import analyzer_pb2_grpc
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, StackValidationPolicy
from waiting import WAIT_S

from gpuforge import __version__
from gpuforge.policies import engine_adapter, pack
from gpuforge.policies.runner import reconcile_config, run_policies, to_wire

POLICIES_DIR = Path(pack.__file__).resolve().parent
MANDATORY = {
    "ami-pinned",
    "efa-network-interfaces",
    "efa-placement",
    "efa-security-group",
    "imdsv2-required",
    "no-public-ip",
    "ebs-encrypted",
    "node-open-ingress",
    "fsx-same-subnet",
    "fsx-s3-link",
    "s3-bucket-protection",
    "imds-hop-limit",
    "no-ssh-key",
    "iam-no-wildcard",
    "s3-no-public-principal",
    "s3-tls-only",
    "rds-database-hardened",
    "rds-not-public",
    "rds-tls-required",
    "eks-private-endpoint",
    "eks-secrets-encrypted",
    "eks-control-plane-logs",
    "eks-access-entries",
    "eks-addon-pinned",
    "kubernetes-image-digest",
    "kubernetes-gpu-pod",
    "kubernetes-workload-checked",
}
ADVISORY = {
    "p-family-capacity",
    "cost-allocation-tags",
    "driver-branch-eol",
    "slurm-controller-cpu",
    "kubernetes-gpu-shm",
    "kubernetes-grace-period",
}
# The served pack's start and each RPC: tests/waiting.py's one bound (a loaded machine's Python imports
# pulumi and grpc slowly), not a guess of its own.
STARTUP_TIMEOUT_S = RPC_TIMEOUT_S = WAIT_S


def test_metadata_without_a_server() -> None:
    names = [policy.name for policy in pack.POLICIES]
    assert len(names) == len(set(names))
    levels = {policy.name: policy.enforcement_level for policy in pack.POLICIES}
    assert {name for name, level in levels.items() if level is EnforcementLevel.MANDATORY} == MANDATORY
    assert {name for name, level in levels.items() if level is EnforcementLevel.ADVISORY} == ADVISORY
    stack_policies = {p.name for p in pack.POLICIES if isinstance(p, StackValidationPolicy)}
    assert "efa-security-group" in stack_policies  # its rules may be separate resources
    assert "s3-tls-only" in stack_policies  # it links each bucket to the policies that name it
    assert all(isinstance(p, ResourceValidationPolicy | StackValidationPolicy) for p in pack.POLICIES)
    for policy in pack.POLICIES:
        assert policy.description.endswith(".") and len(policy.description) > 60, policy.name


def test_config_schemas_and_their_defaults() -> None:
    with_schema = {p.name for p in pack.POLICIES if p.config_schema is not None}
    assert with_schema == {
        "ami-pinned",
        "driver-branch-eol",
        "efa-placement",
        "fsx-s3-link",
        "cost-allocation-tags",
        "imds-hop-limit",
        "no-ssh-key",
        "iam-no-wildcard",
        "s3-no-public-principal",
        "kubernetes-grace-period",
    }
    reconciled = reconcile_config(pack.POLICIES, {})
    for policy in pack.POLICIES:
        if policy.config_schema is None:
            continue
        schema = {"type": "object", "properties": policy.config_schema.properties}
        jsonschema.Draft7Validator.check_schema(schema)
        level, properties = reconciled[policy.name]
        assert level is policy.enforcement_level
        assert set(properties) == set(policy.config_schema.properties), "every setting has a default"
        jsonschema.validate(properties, schema)
    assert Path(reconciled["ami-pinned"][1]["matricesDir"], "p5-h100-cuda12.yaml").is_file()


def test_main_holds_only_the_policypack_call() -> None:
    tree = ast.parse((POLICIES_DIR / "__main__.py").read_text(encoding="utf-8"))
    body = [node for node in tree.body if not isinstance(node, ast.Import | ast.ImportFrom)]
    body = body[1:] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body
    [call] = body
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
    assert isinstance(call.value.func, ast.Name) and call.value.func.id == "PolicyPack"
    assert {keyword.arg for keyword in call.value.keywords} == {
        "name",
        "policies",
        "enforcement_level",
        "description",
    }


def test_pack_files() -> None:
    project = yaml.safe_load((POLICIES_DIR / "PulumiPolicy.yaml").read_text(encoding="utf-8"))
    assert project["runtime"]["name"] == "python"
    assert project["version"] == __version__ == pack.PACK_VERSION
    assert project["description"] == pack.PACK_DESCRIPTION
    requirements = (POLICIES_DIR / "requirements.txt").read_text(encoding="utf-8").splitlines()
    lines = [line for line in requirements if line and not line.startswith("#")]
    assert f"pulumi-policy=={engine_adapter.PINNED_VERSION}" in lines
    [editable] = [line for line in lines if line.startswith("-e ")]
    pyproject = tomllib.loads(
        (POLICIES_DIR / editable.removeprefix("-e ").strip() / "pyproject.toml").read_text()
    )
    assert pyproject["project"]["name"] == "gpuforge"
    assert f"pulumi-policy=={engine_adapter.PINNED_VERSION}" in pyproject["project"]["dependencies"]
    packaged = resources.files("gpuforge.policies")
    assert (
        packaged.joinpath("PulumiPolicy.yaml").is_file() and packaged.joinpath("requirements.txt").is_file()
    )


@pytest.fixture
def served_pack() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    """The pack's __main__.py run as the engine runs it, serving on 127.0.0.1; stopped after the test."""
    process = subprocess.Popen(
        [sys.executable, str(POLICIES_DIR / "__main__.py")],
        cwd=POLICIES_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], STARTUP_TIMEOUT_S)
        assert ready, f"the pack printed no port within {STARTUP_TIMEOUT_S}s"
        port = int(process.stdout.readline().decode().strip())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=RPC_TIMEOUT_S)


def test_served_pack_reports_what_the_runner_reports(
    served_pack: analyzer_pb2_grpc.AnalyzerStub, images: Images
) -> None:
    info = served_pack.GetAnalyzerInfo(empty_pb2.Empty(), timeout=RPC_TIMEOUT_S)
    assert info.name == pack.PACK_NAME
    assert [policy.name for policy in info.policies] == [policy.name for policy in pack.POLICIES]

    resources = record_cluster(
        spec(images), edit(LAUNCH_TEMPLATE, network_interfaces=lambda current: current[:2])
    )
    config = images.config()
    offline = run_policies(resources, config)
    assert {v.policy for v in offline} >= {"efa-network-interfaces", "p-family-capacity"}

    served_pack.Configure(
        engine_adapter.configure_request(reconcile_config(pack.POLICIES, config)), timeout=RPC_TIMEOUT_S
    )
    wire = [to_wire(resource) for resource in resources]
    online = []
    for inputs, _ in wire:
        response = served_pack.Analyze(engine_adapter.analyze_request(inputs), timeout=RPC_TIMEOUT_S)
        online += [
            (d.policy_name, d.enforcement_level.value, inputs.urn)
            for d in engine_adapter.diagnostics(response)
        ]
    response = served_pack.AnalyzeStack(
        engine_adapter.analyze_stack_request([outputs for _, outputs in wire]), timeout=RPC_TIMEOUT_S
    )
    online += [
        (d.policy_name, d.enforcement_level.value, d.urn or None)
        for d in engine_adapter.diagnostics(response)
    ]
    assert online == [(v.policy, v.enforcement, v.urn) for v in offline]
