"""The join configuration of a gpuforge EKS node: the files the image's kubelet unit reads.

The image (images/files/kubernetes/kubelet.service, kubelet-gpuforge.conf) runs the kubelet from these
files, and only after the node agent's boot gate has passed; a node whose user data wrote none of them
(a Slurm node from the same image) never starts a kubelet. The user data writes them at every first boot
(a cloud-config `write_files` part), so the join does not depend on an EKS bootstrap script in the AMI:
with a custom AMI EKS merges no user data of its own (launch-templates.adoc, "Amazon EC2 user data").

- KUBECONFIG: the cluster's endpoint and CA; the node authenticates with its instance role through
  `aws-iam-authenticator token -i <cluster>` (the exec credential form EKS kubeconfigs use), which the
  EC2_LINUX access entry of that role admits.
- AGENT_KUBECONFIG: the node agent's own kubeconfig (gpuforge.node.kubernetes.DEFAULT_KUBECONFIG): the same
  cluster, with a token signed after assuming the agent's IAM role (`aws-iam-authenticator token --role ARN`,
  "Assume an IAM Role ARN before signing this token": kubernetes-sigs/aws-iam-authenticator
  cmd/aws-iam-authenticator/token.go at 4d41a2428bd1a1f315f215aa68690f1efab608f8). That role's STANDARD
  access entry maps it to the Kubernetes group gpuforge.kubernetes.node_agent.GROUP, bound to the node
  agent's ClusterRole; the kubelet's identity cannot taint its own node (NodeRestriction).
- KUBELET_CONFIG: a KubeletConfiguration (kubelet.config.k8s.io/v1beta1).
- CA_FILE: the cluster CA, for the kubelet's client-certificate authentication.
- KUBELET_ENV: KUBELET_ARGS, the node labels (gpuforge.kubernetes.addons.node_labels) and the GPU taint.

`render_files` gives the files; `COMMENTS` says why each field is what it is, and every file carries it.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

import yaml

from gpuforge.node.kubernetes import DEFAULT_KUBECONFIG

KUBECONFIG = "/etc/kubernetes/kubelet/kubeconfig"
KUBELET_CONFIG = "/etc/kubernetes/kubelet/config.yaml"
CA_FILE = "/etc/kubernetes/pki/ca.crt"
KUBELET_ENV = "/etc/gpuforge/kubelet.env"
AGENT_KUBECONFIG = str(DEFAULT_KUBECONFIG)
# Files holding how to obtain credentials: root-only (mode 0600) in the user data.
SECRET_FILES = (KUBECONFIG, AGENT_KUBECONFIG)
# The credential helper named in the kubeconfig; the image must carry it at this path.
AUTHENTICATOR = "/usr/local/bin/aws-iam-authenticator"
CONTAINERD_SOCKET = "unix:///run/containerd/containerd.sock"
CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class JoinConfig:
    """What a node needs to join: the cluster, its endpoint, CA (base64 PEM), region, Service block, labels, taints,
    and the IAM role the node agent assumes for its own kubeconfig."""

    cluster: str
    endpoint: str
    certificate_authority: str
    region: str
    service_cidr: str
    labels: Mapping[str, str]
    taints: tuple[str, ...]
    agent_role_arn: str


def cluster_dns(service_cidr: str) -> str:
    """CoreDNS's Service address: the tenth address of the Service block, as EKS assigns it (10.100.0.10 in
    10.100.0.0/16; https://docs.aws.amazon.com/eks/latest/userguide/managing-coredns.html)."""
    return str(ipaddress.IPv4Network(service_cidr)[10])


def _yaml(header: str, document: Mapping[str, object]) -> str:
    return header + yaml.safe_dump(document, sort_keys=False)


def _kubeconfig(join: JoinConfig, user: str, token_args: list[str]) -> dict[str, object]:
    """A kubeconfig of the cluster whose `user` gets its token from aws-iam-authenticator with `token_args`."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": join.cluster,
                "cluster": {
                    "server": join.endpoint,
                    "certificate-authority-data": join.certificate_authority,
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": AUTHENTICATOR,
                        "args": token_args,
                    }
                },
            }
        ],
        "contexts": [{"name": user, "context": {"cluster": join.cluster, "user": user}}],
        "current-context": user,
    }


def render_files(join: JoinConfig) -> dict[str, str]:
    """Path -> content of each file the node's kubelet needs, each headed by comments giving every field's reason."""
    token = ["token", "-i", join.cluster, "--region", join.region]
    kubeconfig = _kubeconfig(join, "kubelet", token)
    agent = _kubeconfig(join, "gpuforge-node-agent", [*token, "--role", join.agent_role_arn])
    kubelet = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "containerRuntimeEndpoint": CONTAINERD_SOCKET,
        "clusterDNS": [cluster_dns(join.service_cidr)],
        "clusterDomain": CLUSTER_DOMAIN,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": CA_FILE},
        },
        "authorization": {"mode": "Webhook"},
    }
    labels = ",".join(f"{key}={value}" for key, value in sorted(join.labels.items()))
    args = [f"--node-labels={labels}"]
    if join.taints:
        args.append(f"--register-with-taints={','.join(join.taints)}")
    return {
        KUBECONFIG: _yaml(
            "# gpuforge: how this node reaches and authenticates to EKS cluster "
            f"{join.cluster}.\n"
            "# server, certificate-authority-data: the private endpoint and CA EKS reported (DescribeCluster).\n"
            "# exec: a token for the node's instance role, which an EC2_LINUX access entry admits.\n",
            kubeconfig,
        ),
        AGENT_KUBECONFIG: _yaml(
            f"# gpuforge: how the node agent reaches EKS cluster {join.cluster} to drain this node.\n"
            "# exec --role: a token signed after assuming the node agent's IAM role, whose STANDARD access entry\n"
            "# puts it in the group bound to the ClusterRole gpuforge-node-agent (the kubelet may not taint its node).\n",
            agent,
        ),
        KUBELET_CONFIG: _yaml(
            "# gpuforge: the kubelet of this node.\n"
            "# cgroupDriver systemd: the image's containerd uses SystemdCgroup (one cgroup manager).\n"
            "# containerRuntimeEndpoint: the image's containerd socket.\n"
            "# clusterDNS: CoreDNS at the tenth address of the cluster's Service block.\n"
            "# authentication/authorization: no anonymous access; the API server's webhook decides.\n",
            kubelet,
        ),
        CA_FILE: base64.b64decode(join.certificate_authority).decode("utf-8"),
        KUBELET_ENV: (
            "# gpuforge: the kubelet's flags on this node (read by kubelet.service as KUBELET_ARGS).\n"
            "# --node-labels: node group, GPU instance type and EFA, which Kueue's flavor and the device plugins select.\n"
            "# --register-with-taints: only pods that tolerate the GPU taint land on a GPU node.\n"
            f'KUBELET_ARGS="{" ".join(args)}"\n'
        ),
    }
