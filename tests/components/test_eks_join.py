"""The EKS node's join files (components.eks_join): a golden rendering, checked structurally as well.

The matrices' OS is Ubuntu (every shipped matrix; root device /dev/sda1), and the files are the same on any
OS the image's kubelet unit runs on: plain paths, YAML and a systemd environment file. Regenerate the golden
file after an intended change with GPUFORGE_UPDATE_GOLDEN=1 and review its diff.
"""

from __future__ import annotations

import base64
import os
import shlex
from pathlib import Path

import yaml

from gpuforge.components import eks_join

GOLDEN = Path(__file__).with_name("eks_join.golden")
CA_PEM = "-----BEGIN CERTIFICATE-----\nplaceholder, not a certificate\n-----END CERTIFICATE-----\n"
JOIN = eks_join.JoinConfig(
    cluster="p5-eks",
    endpoint="https://0123456789ABCDEF0123456789ABCDEF.gr7.us-east-1.eks.amazonaws.com",
    certificate_authority=base64.b64encode(CA_PEM.encode()).decode("ascii"),
    region="us-east-1",
    service_cidr="172.20.0.0/16",
    labels={"gpuforge.dev/node-group": "p5-eks-gpu", "gpuforge.dev/efa": "true"},
    taints=("nvidia.com/gpu=true:NoSchedule",),
    agent_role_arn="arn:aws:iam::123456789012:role/p5-eks-nodes-agent-role",
)


def rendered() -> str:
    return "".join(f"==> {path} <==\n{text}" for path, text in sorted(eks_join.render_files(JOIN).items()))


def test_matches_the_golden_file() -> None:
    if os.environ.get("GPUFORGE_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(rendered(), encoding="utf-8")
    assert rendered() == GOLDEN.read_text(encoding="utf-8")


def test_every_file_is_well_formed_and_says_why() -> None:
    files = eks_join.render_files(JOIN)
    for path in (eks_join.KUBECONFIG, eks_join.AGENT_KUBECONFIG, eks_join.KUBELET_CONFIG):
        text = files[path]
        assert text.startswith("# gpuforge:"), path
        assert isinstance(yaml.safe_load(text), dict)
    kubelet = yaml.safe_load(files[eks_join.KUBELET_CONFIG])
    # Each field of the KubeletConfiguration is named in the header's reasons.
    header = "".join(line for line in files[eks_join.KUBELET_CONFIG].splitlines(True) if line.startswith("#"))
    for key in ("cgroupDriver", "containerRuntimeEndpoint", "clusterDNS", "authentication"):
        assert key in kubelet and key in header
    assert files[eks_join.CA_FILE] == CA_PEM
    (assignment,) = [line for line in files[eks_join.KUBELET_ENV].splitlines() if not line.startswith("#")]
    name, value = assignment.split("=", 1)
    assert name == "KUBELET_ARGS"
    assert shlex.split(value) == [
        "--node-labels=gpuforge.dev/efa=true,gpuforge.dev/node-group=p5-eks-gpu "
        "--register-with-taints=nvidia.com/gpu=true:NoSchedule"
    ]


def test_cluster_dns_is_the_tenth_service_address() -> None:
    assert eks_join.cluster_dns("10.100.0.0/16") == "10.100.0.10"
    assert eks_join.cluster_dns("172.20.0.0/16") == "172.20.0.10"


def test_the_node_agent_kubeconfig_assumes_its_role_and_the_kubelet_does_not() -> None:
    files = eks_join.render_files(JOIN)
    agent = yaml.safe_load(files[eks_join.AGENT_KUBECONFIG])
    kubelet = yaml.safe_load(files[eks_join.KUBECONFIG])
    assert agent["clusters"] == kubelet["clusters"]
    args = agent["users"][0]["user"]["exec"]["args"]
    assert args[args.index("--role") + 1] == JOIN.agent_role_arn
    assert "--role" not in kubelet["users"][0]["user"]["exec"]["args"]
    assert eks_join.AGENT_KUBECONFIG == "/etc/gpuforge/node-agent.kubeconfig"
