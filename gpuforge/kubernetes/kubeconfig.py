"""The one way gpuforge reads a kubeconfig and makes a `kubernetes` API client from it.

The `kubernetes` client's own loader opens whatever the kubeconfig names with a plain open (a pipe as the
kubeconfig, its CA file or its token file blocks it for ever), reads any size, raises ValueError, TypeError
or KeyError for a file of the wrong shape, and logs and swallows a failed credential plugin (the request
then goes out without a token and is refused, far from the cause). So gpuforge reads the kubeconfig the
way it reads every file a user hands it (`gpuforge.loading`: regular files, a size cap, strict UTF-8,
guarded YAML), checks the one context it will use, reads the files that context names through the same
loader, runs its credential plugin itself (bounded, its failure reported with the plugin's own words) and
hands the client a kubeconfig with everything inline. Every problem is an InputError (exit 2) naming the
file, the key and the fix.

Which files, merged how (https://kubernetes.io/docs/concepts/configuration/organize-cluster-access-kubeconfig/,
"Merging kubeconfig files" and "File references"): `--kubeconfig PATH` alone, else the files $KUBECONFIG
lists (empty names ignored, files that do not exist skipped, the first file to set a value or a named entry
wins), else ~/.kube/config; a relative path in a file is relative to that file's folder.

The credential plugin (`exec`, what `aws eks update-kubeconfig` writes: `aws eks get-token ...`) follows
https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins: run
with KUBERNETES_EXEC_INFO, without a terminal, its ExecCredential read from stdout; its token is fetched again
once its expirationTimestamp is near (an EKS token lasts 15 minutes; `validate` runs for hours).

The client (`api_client`) makes every request once (urllib3's default would retry three more times) with a
timeout cut from the command's deadline, and refuses a 2xx answer that is not a JSON object (an HTML page from
a proxy, a web server at the wrong URL) as `UnexpectedAnswer`: every answer gpuforge asks for is one, but a pod's
log (`.../log`, text).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gpuforge.display import cut, printable
from gpuforge.errors import InputError
from gpuforge.loading import expand_user, parse_json, parse_yaml, read_text

if TYPE_CHECKING:
    from gpuforge.deadline import Deadline

# Far above a kubeconfig of dozens of clusters (each an inline CA of about 1.5 KiB); the YAML parser reads
# about 150 KiB a second, so the cap also bounds the time a hostile file takes.
MAX_KUBECONFIG_BYTES = 1024 * 1024
MAX_REFERENCED_BYTES = 256 * 1024  # a CA bundle, a client certificate or key, a token file
MAX_PLUGIN_OUTPUT_CHARS = 1024 * 1024
EXEC_TIMEOUT_S = 60.0  # `aws eks get-token` answers in about a second; SSO may fetch role credentials first
REFRESH_MARGIN_S = 60.0  # fetch a plugin's token again this long before it expires
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
DEFAULT_PATH = Path("~/.kube/config")
FIX = (
    "pass the kubeconfig of the stack's EKS cluster (`aws eks update-kubeconfig --name CLUSTER --kubeconfig PATH` "
    "writes one)"
)
# (kubeconfig key naming a file, the key that carries its content inline)
_CLUSTER_FILES = (("certificate-authority", "certificate-authority-data"),)
_USER_FILES = (("client-certificate", "client-certificate-data"), ("client-key", "client-key-data"))


class UnexpectedAnswer(Exception):
    """A 2xx answer that is not what a Kubernetes API server sends (not JSON, not an object)."""

    def __init__(self, url: str, status: int, detail: str) -> None:
        super().__init__(f"{url} answered HTTP {status} with {detail}")
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class _Entry:
    """A named cluster, user or context, and the file that defined it (relative paths are relative to it)."""

    name: str
    value: dict[str, Any]
    file: Path


@dataclass
class _Merged:
    files: list[Path] = field(default_factory=list)
    current_context: str | None = None
    current_context_file: Path | None = None
    clusters: dict[str, _Entry] = field(default_factory=dict)
    contexts: dict[str, _Entry] = field(default_factory=dict)
    users: dict[str, _Entry] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return ", ".join(str(path) for path in self.files)


@dataclass
class Kubeconfig:
    """The context gpuforge will use, resolved: the client's kubeconfig with every file inline."""

    context: str
    server: str
    source: str  # the file(s) it came from, for messages
    client_dict: dict[str, Any]
    plugin: _Plugin | None = None


def _fail(where: object, problem: str) -> InputError:
    return InputError(f"{where}: {problem}. Fix: {FIX}, or correct it.")


def kubeconfig_paths(explicit: Path | None) -> list[Path]:
    """The files to read: `--kubeconfig`, else $KUBECONFIG's (the existing ones), else ~/.kube/config."""
    if explicit is not None:
        return [expand_user(explicit, what="--kubeconfig")]
    listed = os.environ.get("KUBECONFIG")
    if listed:
        names = [name for name in listed.split(os.pathsep) if name]
        paths = [expand_user(Path(name), what="KUBECONFIG") for name in names]
        present = [path for path in paths if os.path.lexists(path)]
        if not present:
            raise InputError(
                f"KUBECONFIG={cut(listed)}: none of the files it lists exists. Fix: {FIX}, and point KUBECONFIG "
                "at it (or pass --kubeconfig)."
            )
        return present
    return [expand_user(DEFAULT_PATH, what="the default kubeconfig")]


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(where, f"must be a mapping, found {cut(value)}")
    return value


def _text(mapping: dict[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
    value = mapping.get(key)
    if value is None:
        if required:
            raise _fail(where, f"{key} is required")
        return None
    if not isinstance(value, str) or not value:
        raise _fail(where, f"{key} must be a non-empty string, found {cut(value)}")
    return value


def _read_file(path: Path, what: str) -> str:
    return read_text(path, what=what, max_bytes=MAX_KUBECONFIG_BYTES, fix=FIX)


def _merge(paths: list[Path]) -> _Merged:
    merged = _Merged(files=paths)
    for path in paths:
        data = parse_yaml(_read_file(path, "kubeconfig"), source=str(path), fix=FIX)
        if data is None:
            continue  # an empty file sets nothing, as for kubectl
        data = _mapping(data, str(path))
        context = data.get("current-context")
        if context is not None and context != "" and merged.current_context is None:
            if not isinstance(context, str):
                raise _fail(path, f"current-context must be a string, found {cut(context)}")
            merged.current_context, merged.current_context_file = context, path
        for key, into in (
            ("clusters", merged.clusters),
            ("contexts", merged.contexts),
            ("users", merged.users),
        ):
            items = data.get(key) or []
            if not isinstance(items, list):
                raise _fail(path, f"{key} must be a list, found {cut(items)}")
            for index, item in enumerate(items):
                where = f"{path}: {key}[{index}]"
                item = _mapping(item, where)
                name = _text(item, "name", where, required=True)
                assert name is not None
                body = _mapping(item.get(key[:-1]) or {}, f"{where}.{key[:-1]}")
                into.setdefault(name, _Entry(name, body, path))  # the first file to name it wins
    return merged


def _inline(entry: _Entry, files: tuple[tuple[str, str], ...], where: str) -> dict[str, Any]:
    """`entry`'s value with each file it names read (through gpuforge's loader) and carried inline."""
    value = dict(entry.value)
    for file_key, data_key in files:
        data = _text(value, data_key, where)
        if data is not None:
            try:
                base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise _fail(where, f"{data_key} is not base64 ({cut(data)})") from None
        name = _text(value, file_key, where)
        if name is None:
            continue
        path = expand_user(Path(name), what=f"{where}.{file_key}")
        path = path if path.is_absolute() else entry.file.parent / path
        text = read_text(path, what=f"{file_key} of {where}", max_bytes=MAX_REFERENCED_BYTES, fix=FIX)
        value.pop(file_key)
        value[data_key] = base64.b64encode(text.encode()).decode()
    return value


def _cluster(entry: _Entry, where: str) -> dict[str, Any]:
    value = _inline(entry, _CLUSTER_FILES, where)
    server = _text(value, "server", where, required=True)
    assert server is not None
    try:
        parts = urlsplit(server)
        parts.port  # noqa: B018  (a port that is no number raises here)
    except ValueError:
        raise _fail(where, f"server {cut(server)} is not a URL") from None
    if parts.scheme not in {"https", "http"} or not parts.hostname:
        raise _fail(where, f"server {cut(server)} is not an https:// URL of an API server")
    skip = value.get("insecure-skip-tls-verify", False)
    if not isinstance(skip, bool):
        raise _fail(where, f"insecure-skip-tls-verify must be true or false, found {cut(skip)}")
    _text(value, "tls-server-name", where)
    ca = value.get("certificate-authority-data")
    if ca is not None:
        try:
            ssl.create_default_context(cadata=base64.b64decode(ca).decode("ascii", "replace"))
        except (ssl.SSLError, ValueError):
            raise _fail(where, "certificate-authority(-data) holds no PEM certificate") from None
    return value


@dataclass
class _Plugin:
    """A user's credential plugin (`exec`), run by gpuforge: bounded, its failure reported."""

    user: str
    where: str
    command: str
    args: list[str]
    env: dict[str, str]
    api_version: str
    cwd: Path
    cluster: dict[str, Any] | None  # provideClusterInfo
    deadline: Deadline | None = None
    expires: float | None = None  # time.time() of the token's expiry

    def executable(self) -> str:
        """The plugin's program (looked up on PATH, or relative to the kubeconfig's folder); InputError where
        this host does not have it, checked when the kubeconfig is read."""
        if "/" in self.command:
            candidate = Path(self.command)
            found: str | None = str(candidate if candidate.is_absolute() else self.cwd / candidate)
        else:
            found = shutil.which(self.command, path=self.env.get("PATH"))
        if found is None or not Path(found).is_file() or not os.access(found, os.X_OK):
            raise InputError(
                f"{self.where}: user {self.user}'s credential plugin runs {cut(self.command)}, which is not "
                f"installed here (not found on PATH or not executable). Fix: install it (`aws` is the AWS CLI v2, "
                "which `aws eks update-kubeconfig` names), or use a kubeconfig whose user this host can run."
            )
        return found

    def run(self) -> dict[str, Any]:
        """The ExecCredential's status (token, or client certificate and key)."""
        executable = self.executable()
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster is not None:
            spec["cluster"] = self.cluster
        env = {
            **self.env,
            "KUBERNETES_EXEC_INFO": json.dumps(
                {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
            ),
        }
        timeout = EXEC_TIMEOUT_S if self.deadline is None else self.deadline.timeout(EXEC_TIMEOUT_S)
        if self.deadline is not None:
            self.deadline.doing = f"run user {self.user}'s credential plugin ({printable(self.command)})"
        try:
            done = subprocess.run(
                [executable, *self.args],
                env=env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise InputError(
                f"{self.where}: user {self.user}'s credential plugin ({cut(self.command)}) did not finish within "
                f"{timeout:.0f} s. Fix: run it by hand to see what it waits for (a sign-in, the network), then "
                "run again."
            ) from None
        except OSError as error:
            raise InputError(
                f"{self.where}: user {self.user}'s credential plugin ({cut(self.command)}) cannot run: "
                f"{error.strerror or error}. Fix: install it, or correct the kubeconfig's exec.command."
            ) from None
        said = printable(" ".join(done.stderr.split())[:500])
        if done.returncode != 0:
            raise InputError(
                f"{self.where}: user {self.user}'s credential plugin ({cut(self.command)}) failed (exit "
                f"{done.returncode}){': ' + said if said else ''}. Fix: what it says (for `aws eks get-token`: "
                "sign in, e.g. `aws sso login`, with the profile the kubeconfig names), then run again."
            )
        return self._status(done.stdout)

    def _status(self, stdout: str) -> dict[str, Any]:
        what = f"{self.where}: the ExecCredential user {self.user}'s credential plugin printed"
        if len(stdout) > MAX_PLUGIN_OUTPUT_CHARS:
            raise InputError(
                f"{what} is {len(stdout)} characters, more than one may hold. Fix: check the plugin."
            )
        answer = _mapping(parse_json(stdout, source=what, fix="check the plugin by running it"), what)
        status = _mapping(answer.get("status"), f"{what}: status")
        token = status.get("token")
        pair = (status.get("clientCertificateData"), status.get("clientKeyData"))
        if not (isinstance(token, str) and token) and not all(
            isinstance(part, str) and part for part in pair
        ):
            raise InputError(
                f"{what} has neither status.token nor status.clientCertificateData and clientKeyData. Fix: check "
                "the plugin by running it."
            )
        stamp = status.get("expirationTimestamp")
        self.expires = None
        if isinstance(stamp, str):
            try:
                self.expires = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            except ValueError:
                raise InputError(
                    f"{what}: expirationTimestamp {cut(stamp)} is not an RFC 3339 time."
                ) from None
        return status

    def refresh(self, configuration: Any) -> None:
        """The client's refresh_api_key_hook: a new token once the one in use is about to expire."""
        if self.expires is None or time.time() < self.expires - REFRESH_MARGIN_S:
            return
        token = self.run().get("token")
        if isinstance(token, str) and token:
            configuration.api_key["authorization"] = f"Bearer {token}"


def _user(entry: _Entry | None, where: str, cluster: dict[str, Any]) -> tuple[dict[str, Any], _Plugin | None]:
    if entry is None:
        return {}, None
    value = _inline(entry, _USER_FILES, where)
    if "auth-provider" in value:
        raise _fail(
            where,
            "auth-provider (gcp, azure, oidc) credentials are not supported by gpuforge; an EKS kubeconfig uses "
            "exec (`aws eks get-token`)",
        )
    token_file = _text(value, "tokenFile", where)
    if token_file is not None:
        path = expand_user(Path(token_file), what=f"{where}.tokenFile")
        path = path if path.is_absolute() else entry.file.parent / path
        value["token"] = read_text(
            path, what=f"tokenFile of {where}", max_bytes=MAX_REFERENCED_BYTES, fix=FIX
        ).strip()
        value.pop("tokenFile")
    _text(value, "token", where)
    plugin = None
    if "exec" in value:
        spec = _mapping(value.pop("exec"), f"{where}.exec")
        command = _text(spec, "command", f"{where}.exec", required=True)
        api_version = _text(spec, "apiVersion", f"{where}.exec", required=True)
        args = spec.get("args") or []
        env_items = spec.get("env") or []
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise _fail(f"{where}.exec", f"args must be a list of strings, found {cut(args)}")
        if not isinstance(env_items, list):
            raise _fail(f"{where}.exec", f"env must be a list of name/value pairs, found {cut(env_items)}")
        env = dict(os.environ)
        for index, item in enumerate(env_items):
            pair = _mapping(item, f"{where}.exec.env[{index}]")
            name = _text(pair, "name", f"{where}.exec.env[{index}]", required=True)
            assert name is not None
            env[name] = str(pair.get("value", ""))
        if spec.get("interactiveMode") == "Always":
            raise _fail(
                f"{where}.exec",
                "interactiveMode is Always: the plugin needs a terminal, and gpuforge runs it without one",
            )
        provide = spec.get("provideClusterInfo") is True
        assert command is not None and api_version is not None
        plugin = _Plugin(
            user=entry.name,
            where=str(entry.file),
            command=command,
            args=list(args),
            env=env,
            api_version=api_version,
            cwd=entry.file.parent,
            cluster={
                key: cluster[key]
                for key in (
                    "server",
                    "certificate-authority-data",
                    "tls-server-name",
                    "insecure-skip-tls-verify",
                )
                if key in cluster
            }
            if provide
            else None,
        )
        plugin.executable()
    return value, plugin


def read_kubeconfig(explicit: Path | None, context: str | None) -> Kubeconfig:
    """The context to use (`context`, else current-context), checked, its files read, ready for the client."""
    merged = _merge(kubeconfig_paths(explicit))
    if not merged.contexts:
        raise InputError(
            f"{merged.where}: no contexts in it: not a kubeconfig (or an empty one). Fix: {FIX}, and pass it."
        )
    name = context if context is not None else merged.current_context
    listed = ", ".join(sorted(merged.contexts))
    if name is None:
        raise InputError(
            f"{merged.where}: no current-context, and no --context was given (the contexts are: {listed}). "
            f"Fix: pass --context NAME, or `kubectl config use-context NAME`."
        )
    chosen = merged.contexts.get(name)
    if chosen is None:
        given = "--context" if context is not None else f"current-context in {merged.current_context_file}"
        raise InputError(
            f"{merged.where}: no context {cut(name)} ({given}); the contexts are: {listed}. Fix: pass --context "
            "with one of them, or `aws eks update-kubeconfig --name CLUSTER` to add the cluster's."
        )
    where = f"{chosen.file}: context {name}"
    cluster_name = _text(chosen.value, "cluster", where, required=True)
    user_name = _text(chosen.value, "user", where)
    assert cluster_name is not None
    cluster_entry = merged.clusters.get(cluster_name)
    if cluster_entry is None:
        raise _fail(where, f"names cluster {cut(cluster_name)}, which no file defines")
    user_entry = None
    if user_name is not None:
        user_entry = merged.users.get(user_name)
        if user_entry is None:
            raise _fail(where, f"names user {cut(user_name)}, which no file defines")
    cluster = _cluster(cluster_entry, f"{cluster_entry.file}: cluster {cluster_name}")
    user, plugin = _user(user_entry, f"{user_entry.file}: user {user_name}" if user_entry else where, cluster)
    client_dict = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "contexts": [
            {"name": name, "context": {"cluster": cluster_name, **({"user": user_name} if user_name else {})}}
        ],
        "users": [{"name": user_name, "user": user}] if user_name else [],
    }
    server = str(cluster["server"]).rstrip("/")
    return Kubeconfig(name, server, merged.where, client_dict, plugin)


def api_client(config: Kubeconfig, *, deadline: Deadline | None) -> Any:
    """A `kubernetes` ApiClient for `config`: every request once, bounded (module docstring).

    With a credential plugin, it is run now (under `deadline`), and again when its token nears expiry.
    """
    from kubernetes import client
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import load_kube_config_from_dict

    client_dict = config.client_dict
    if config.plugin is not None:
        config.plugin.deadline = deadline
        status = config.plugin.run()
        user = client_dict["users"][0]["user"]
        if status.get("token"):
            user["token"] = status["token"]
        else:
            user["client-certificate-data"] = base64.b64encode(
                status["clientCertificateData"].encode()
            ).decode()
            user["client-key-data"] = base64.b64encode(status["clientKeyData"].encode()).decode()
    configuration = client.Configuration()
    try:
        load_kube_config_from_dict(
            client_dict,
            context=config.context,
            client_configuration=configuration,
            persist_config=False,
        )
    except (ConfigException, ValueError, TypeError, KeyError) as error:
        raise _fail(config.source, f"context {config.context} cannot be used: {error}") from None
    if config.plugin is not None and client_dict["users"][0]["user"].get("token"):
        configuration.refresh_api_key_hook = config.plugin.refresh
    configuration.retries = False  # each request once: urllib3's default Retry(3) quadrupled every wait
    return _bounded_client_class(client.ApiClient)(configuration, deadline)


def _bounded_client_class(base: type) -> type:
    class BoundedApiClient(base):  # type: ignore[misc]  # kubernetes ships no types
        def __init__(self, configuration: Any, deadline: Deadline | None) -> None:
            super().__init__(configuration)
            self.deadline = deadline

        def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            if self.deadline is None:
                kwargs["_request_timeout"] = (CONNECT_TIMEOUT_S, READ_TIMEOUT_S)
            else:
                kwargs["_request_timeout"] = (
                    self.deadline.timeout(CONNECT_TIMEOUT_S),
                    self.deadline.timeout(READ_TIMEOUT_S),
                )
            try:
                answer = super().request(method, url, *args, **kwargs)
            except UnicodeDecodeError as error:
                raise UnexpectedAnswer(url, 200, f"a body that is not UTF-8 text ({error.reason})") from None
            if not urlsplit(url).path.endswith("/log"):  # a pod's log is text; every other answer is JSON
                _check_json(url, answer)
            return answer

    return BoundedApiClient


def _check_json(url: str, answer: Any) -> None:
    body = answer.data
    status = int(getattr(answer, "status", 200))
    kind = str(answer.getheader("Content-Type") or "no Content-Type")
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        shown = "an HTML page" if text.lstrip()[:1] == "<" else cut(text, 60)
        raise UnexpectedAnswer(url, status, f"{printable(kind)}: {shown}, not a JSON object")


def connection_problem(error: BaseException) -> str:
    """One line saying why a request failed without an answer: refused, timed out, TLS, name unknown.

    urllib3 puts its own words last among an error's arguments, after the connection's repr."""
    reason = getattr(error, "reason", None) or error
    words = [arg for arg in getattr(reason, "args", ()) if isinstance(arg, str)]
    text = " ".join((words[-1] if words else str(reason)).split())
    text = re.sub(r"timeout=([0-9.]+)", lambda found: f"timeout {float(found[1]):.1f} s", text)
    return printable(text[:300])
