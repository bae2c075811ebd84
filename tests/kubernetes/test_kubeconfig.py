"""gpuforge.kubernetes.kubeconfig: which files are read and how they merge, and the credential plugin it runs.

The merging rules are kubectl's (https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/,
"Merging kubeconfig files"): the `kubernetes` Python client's own merger lets the last file's current-context win,
so a second file in $KUBECONFIG silently moved apply to another cluster than kubectl would talk to.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpuforge.errors import InputError
from gpuforge.kubernetes.kubeconfig import api_client, read_kubeconfig


def _certificate_pem() -> str:
    """A self-signed certificate, as the PEM a kubeconfig's certificate-authority names."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode("ascii")


def _write(path: Path, body: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(body), encoding="utf-8")
    return path


def _config(context: str | None, clusters: dict[str, str], contexts: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}} for name, server in clusters.items()],
        "contexts": [{"name": name, "context": {"cluster": cluster}} for name, cluster in contexts.items()],
    }
    if context is not None:
        body["current-context"] = context
    return body


def test_kubeconfig_files_merge_as_kubectl_merges_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _write(
        tmp_path / "a" / "config", _config("one", {"k": "https://first.example:443"}, {"one": "k"})
    )
    second = _write(
        tmp_path / "b" / "config",
        _config("two", {"k": "https://second.example:443", "j": "https://j.example"}, {"two": "j"}),
    )
    missing = tmp_path / "none" / "config"
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(missing), str(first), "", str(second)]))
    found = read_kubeconfig(None, None)
    # The first file to set current-context and cluster k wins; the missing file and the empty name are skipped.
    assert (found.context, found.server) == ("one", "https://first.example:443")
    assert read_kubeconfig(None, "two").server == "https://j.example"


def test_kubeconfig_lists_no_file_that_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    with pytest.raises(InputError, match="none of the files it lists exists"):
        read_kubeconfig(None, None)


def test_a_relative_certificate_path_is_read_from_the_kubeconfig_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "kube"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)  # not the kubeconfig's folder
    pem = _certificate_pem()
    (folder / "ca.crt").write_text(pem, encoding="ascii")
    body = _config("c", {"k": "https://k.example"}, {"c": "k"})
    body["clusters"][0]["cluster"]["certificate-authority"] = "ca.crt"
    found = read_kubeconfig(_write(folder / "config", body), None)
    cluster = found.client_dict["clusters"][0]["cluster"]
    assert "certificate-authority" not in cluster
    assert base64.b64decode(cluster["certificate-authority-data"]).decode() == pem


def test_a_credential_plugins_token_is_fetched_again_before_it_expires(tmp_path: Path) -> None:
    """The plugin counts its runs in a file; the first token has expired on arrival, so the client's refresh
    hook (called before each request) runs the plugin again and carries the new token."""
    runs = tmp_path / "runs"
    plugin = tmp_path / "get-token"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "token-$n", "expirationTimestamp": "2000-01-01T00:00:00Z"},
    }
    plugin.write_text(
        f'#!/bin/sh\necho x >> "{runs}"\nn=$(($(wc -l < "{runs}")))\ncat <<JSON\n{json.dumps(credential)}\nJSON\n',
        encoding="utf-8",
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    body = _config("c", {"k": "https://k.example"}, {"c": "k"})
    body["contexts"][0]["context"]["user"] = "u"
    body["users"] = [
        {
            "name": "u",
            "user": {
                "exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "./get-token"}
            },
        }
    ]
    client = api_client(read_kubeconfig(_write(tmp_path / "config", body), None), deadline=None)
    assert client.configuration.api_key["authorization"] == "Bearer token-1"
    assert client.configuration.get_api_key_with_prefix("authorization") == "Bearer token-2"
    assert runs.read_text(encoding="utf-8").count("x") == 2
