"""A real Kubernetes API server on 127.0.0.1: etcd and kube-apiserver from the kube test root.

`scripts/kube-root.sh` builds kube-apiserver from the Go module k8s.io/kubernetes at the
matrices' pinned kubelet version and unpacks Debian testing's etcd-server; both land in
.cache/kube-root/usr/bin. `open_api_server` makes a CA, serving and admin client
certificates and the service-account key (Python cryptography), starts etcd and the API
server on free loopback ports, waits for /readyz (the API serves, not only listens; tests/waiting.py's
one bound), yields a kubeconfig, and stops
both by their own pids. There is no controller-manager, scheduler or kubelet: tests play
their parts where they need them (e.g. a PodDisruptionBudget's status).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from waiting import WAIT_S, wait_until

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ROOT = REPO / ".cache" / "kube-root"
STOP_TIMEOUT_S = 15.0


def kube_root() -> Path:
    return Path(os.environ.get("GPUFORGE_KUBE_ROOT", DEFAULT_ROOT))


def binaries() -> tuple[Path, Path]:
    """etcd and kube-apiserver of the kube test root. Absent: skip where the session cannot build
    them (not root), fail where it can (root: scripts/test.sh builds them first, so CI never skips)."""
    root = kube_root()
    etcd, apiserver = root / "usr/bin/etcd", root / "usr/bin/kube-apiserver"
    if (root / ".gpuforge-complete").exists() and etcd.exists() and apiserver.exists():
        return etcd, apiserver
    if os.geteuid() != 0:
        pytest.skip(f"no kube test root at {root}; scripts/kube-root.sh builds it (needs root)")
    pytest.fail(f"no kube test root at {root}: run scripts/kube-root.sh (scripts/test.sh does) and run again")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write_key(key: rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _certificate(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: x509.Name,
    signer: rsa.RSAPrivateKey,
    *,
    ca: bool,
    server: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(signer, hashes.SHA256())


@dataclass(frozen=True)
class ApiServer:
    """A running API server: its address and an admin (system:masters) kubeconfig."""

    url: str
    kubeconfig: Path
    ca: Path

    def user_kubeconfig(self, user: str, *groups: str) -> Path:
        """A kubeconfig that authenticates as `user` in `groups` (a client certificate of the test CA)."""
        folder = self.ca.parent
        ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), password=None)
        assert isinstance(ca_key, rsa.RSAPrivateKey)
        ca_cert = x509.load_pem_x509_certificate(self.ca.read_bytes())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        name = x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, user)])
        stem = user.replace(":", "_")
        key = _key()
        cert = _certificate(name, key, ca_cert.subject, ca_key, ca=False, server=False)
        (folder / f"{stem}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, folder / f"{stem}.key")
        return _kubeconfig(folder, self.url, stem)


def _pki(folder: Path, url: str) -> Path:
    """CA, serving cert, admin client cert, service-account key; returns the admin kubeconfig."""
    ca_key, server_key, admin_key, sa_key = _key(), _key(), _key(), _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuforge-test-ca")])
    ca_cert = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True, server=False)
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    admin_name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
            x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
        ]
    )
    pem = serialization.Encoding.PEM
    (folder / "ca.crt").write_bytes(ca_cert.public_bytes(pem))
    (folder / "server.crt").write_bytes(
        _certificate(server_name, server_key, ca_name, ca_key, ca=False, server=True).public_bytes(pem)
    )
    (folder / "admin.crt").write_bytes(
        _certificate(admin_name, admin_key, ca_name, ca_key, ca=False, server=False).public_bytes(pem)
    )
    _write_key(ca_key, folder / "ca.key")
    _write_key(server_key, folder / "server.key")
    _write_key(admin_key, folder / "admin.key")
    _write_key(sa_key, folder / "sa.key")
    (folder / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(pem, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return _kubeconfig(folder, url, "admin")


def _kubeconfig(folder: Path, url: str, user: str) -> Path:
    """A kubeconfig for `user`, whose certificate and key are folder/<user>.crt and .key."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": url, "certificate-authority": str(folder / "ca.crt")}}
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(folder / f"{user}.crt"),
                    "client-key": str(folder / f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        "current-context": "test",
    }
    path = folder / f"{user}.kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)


def _log(folder: Path, name: str) -> str:
    return (folder / f"{name}.log").read_text(encoding="utf-8", errors="replace")[-3000:]


def _wait_ready(url: str, folder: Path, procs: dict[str, subprocess.Popen[bytes]]) -> None:
    """Until /readyz answers 200 (every readiness check of the API server passed: etcd reached, its
    post-start hooks done), not only its port open; fails at once if etcd or the server exits."""
    context = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    context.load_cert_chain(str(folder / "admin.crt"), str(folder / "admin.key"))

    def status() -> int:
        with urllib.request.urlopen(f"{url}/readyz", context=context, timeout=WAIT_S) as answer:
            return int(answer.status)

    def stopped() -> str | None:
        exited = [
            f"{name} exited {proc.returncode}" for name, proc in procs.items() if proc.poll() is not None
        ]
        return ", ".join(exited) or None

    wait_until(
        "kube-apiserver's /readyz to answer 200",
        status,
        lambda code: code == 200,
        not_yet=(OSError,),
        stopped=stopped,
        context=lambda: "\n".join(f"{name}.log:\n{_log(folder, name)}" for name in procs),
    )


@contextlib.contextmanager
def open_api_server(folder: Path) -> Iterator[ApiServer]:
    """etcd plus kube-apiserver on 127.0.0.1, stopped by pid on the way out."""
    etcd, apiserver = binaries()
    client_port, peer_port, secure_port = _free_port(), _free_port(), _free_port()
    url = f"https://127.0.0.1:{secure_port}"
    kubeconfig = _pki(folder, url)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        with (folder / "etcd.log").open("wb") as log:
            procs["etcd"] = subprocess.Popen(
                [
                    str(etcd),
                    "--name=test",
                    f"--data-dir={folder / 'etcd'}",
                    f"--listen-client-urls=http://127.0.0.1:{client_port}",
                    f"--advertise-client-urls=http://127.0.0.1:{client_port}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                    f"--initial-cluster=test=http://127.0.0.1:{peer_port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        with (folder / "kube-apiserver.log").open("wb") as log:
            procs["kube-apiserver"] = subprocess.Popen(
                [
                    str(apiserver),
                    f"--etcd-servers=http://127.0.0.1:{client_port}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={secure_port}",
                    f"--cert-dir={folder / 'certs'}",
                    f"--tls-cert-file={folder / 'server.crt'}",
                    f"--tls-private-key-file={folder / 'server.key'}",
                    f"--client-ca-file={folder / 'ca.crt'}",
                    f"--service-account-key-file={folder / 'sa.pub'}",
                    f"--service-account-signing-key-file={folder / 'sa.key'}",
                    "--service-account-issuer=https://kubernetes.default.svc",
                    "--service-cluster-ip-range=10.96.0.0/24",
                    "--authorization-mode=Node,RBAC",
                    # EKS's admission plugins beyond kube-apiserver's defaults ("View Amazon EKS platform
                    # versions", https://docs.aws.amazon.com/eks/latest/userguide/platform-versions.html:
                    # every platform version enables NodeRestriction and ExtendedResourceToleration).
                    "--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration",
                    # EKS admits privileged containers: its own VPC CNI DaemonSet runs its init container
                    # privileged (aws/amazon-vpc-cni-k8s config/master/aws-k8s-cni.yaml, aws-vpc-cni-init,
                    # securityContext.privileged: true), as the EFA device plugin does. kube-apiserver's
                    # default is to refuse them.
                    "--allow-privileged=true",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _wait_ready(url, folder, procs)
        yield ApiServer(url=url, kubeconfig=kubeconfig, ca=folder / "ca.crt")
    finally:
        for name in ("kube-apiserver", "etcd"):
            if name in procs:
                _stop(procs[name])


CRDS = Path(__file__).parent / "crds"


def install_kueue_crds(kubeconfig: Path) -> None:
    """Create Kueue's vendored CRDs (crds/, Kueue v0.17.6) on the server and wait (bounded) until each is
    Established, as Kueue's chart leaves them: its kinds are then served."""
    from kubernetes import client, config

    api = client.ApiextensionsV1Api(config.new_client_from_config(str(kubeconfig)))
    names = []
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        api.create_custom_resource_definition(crd)
        names.append(crd["metadata"]["name"])
    for name in names:
        wait_until(
            f"CRD {name} Established",
            lambda name=name: [
                (c.type, c.status) for c in api.read_custom_resource_definition(name).status.conditions or []
            ],
            lambda conditions: ("Established", "True") in conditions,
        )
