"""The controller's accounting boot: MariaDB on the state volume or Aurora's secret, slurmdbd.conf, slurmdbd first.

The script is real bash (bash -n, shellcheck); the Python that writes slurmdbd.conf is taken out of the
rendered script and run as the controller would run it, against a password file on disk (local) and against
Secrets Manager on moto's server on 127.0.0.1 (aurora).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from gpuforge.components.user_data import Accounting, ControllerParams, render_controller

KEY_ARN = "arn:aws:secretsmanager:us-east-1:123456789012:secret:demo-slurm-key-secret-abcdef"
DB_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rds!cluster-0a1b2c3d-4e5f-6789-abcd-ef0123456789-Ab1Cd2"
ENDPOINT = "demo-slurm-accounting-cluster-1a2b3c4.cluster-abcdefghijkl.us-east-1.rds.amazonaws.com"
# A slurmdbd.conf as the renderer may give it: without a password, perhaps with a StorageHost of its own.
RENDERED_DBD = "AuthType=auth/slurm\nDbdHost=demo-slurmctld\nSlurmUser=slurm\nStorageType=accounting_storage/mysql\nStorageHost=localhost\n"
BASE = ControllerParams(
    cluster="demo",
    host="demo-slurmctld",
    address="10.0.0.10",
    state_volume_id="vol-0123456789abcdef0",
    state_dir="/var/spool/slurmctld",
    key_secret_arn=KEY_ARN,
    files={"slurm.conf": "ClusterName=demo\n", "slurmdbd.conf": RENDERED_DBD},
)
LOCAL = dataclasses.replace(BASE, accounting=Accounting("local"))
AURORA = dataclasses.replace(
    BASE, accounting=Accounting("aurora", host=ENDPOINT, port=3306, secret_arn=DB_SECRET)
)


def _main(script: str) -> list[str]:
    body = script[script.index("\nmain() {\n") :]
    return [line.strip() for line in body.splitlines()[1:] if line.strip()]


def _writer(script: str) -> str:
    """The Python of write_slurmdbd_conf, as the script hands it to the image's interpreter."""
    function = script[script.index("write_slurmdbd_conf() {") :]
    return function[function.index("<<'PYTHON'\n") + len("<<'PYTHON'\n") : function.index("\nPYTHON\n")]


def test_both_databases_give_valid_bash(tmp_path: Path) -> None:
    for index, params in enumerate((LOCAL, AURORA)):
        path = tmp_path / f"controller-{index}.sh"
        path.write_text(render_controller(params))
        subprocess.run(["bash", "-n", str(path)], check=True)
        subprocess.run(["shellcheck", "--shell=bash", str(path)], check=True)


def test_local_mariadb_lives_on_the_state_volume_and_starts_before_slurmdbd_before_slurmctld() -> None:
    script = render_controller(LOCAL)
    main = _main(script)
    order = [
        "step mount_state",
        "step setup_mariadb",
        "step write_slurmdbd_conf",
        "step start_slurmdbd",
        "step start_slurmctld",
    ]
    assert [main.index(step) for step in order] == sorted(main.index(step) for step in order)
    assert "readonly MARIADB_DIR=/var/spool/slurmctld/mariadb\n" in script
    assert "readonly ACCOUNTING_SECRET=/var/spool/slurmctld/accounting-db.password\n" in script
    assert "datadir=$MARIADB_DIR" in script and "bind-address=127.0.0.1" in script
    assert "RequiresMountsFor=$STATE_DIR" in script.split("MARIADB_DROP_IN")[-1]
    # The password is made on the controller at the volume's first boot, root-only, never in the script.
    assert "secrets.token_urlsafe(32)" in script and "umask 077" in script
    assert 'chown root:root "$ACCOUNTING_SECRET"' in script and 'chmod 0600 "$ACCOUNTING_SECRET"' in script
    # slurmctld waits for slurmdbd.
    assert "readonly SLURMCTLD_ORDER='Wants=slurmdbd.service\nAfter=slurmdbd.service'\n" in script


def test_the_rendered_slurmdbd_conf_is_kept_aside_and_never_written_world_readable() -> None:
    script = render_controller(LOCAL)
    assert 'write_file "$SLURMDBD_TEMPLATE"' in script
    assert 'write_file "$SLURM_ETC/slurmdbd.conf"' not in script
    assert "readonly SLURMDBD_CONF=/etc/slurm/slurmdbd.conf\n" in script
    function = script[script.index("write_slurmdbd_conf() {") :]
    assert 'chown "$SLURM_USER:$SLURM_USER" "$tmp"' in function and 'chmod 0600 "$tmp"' in function


def test_aurora_reads_the_rds_secret_and_runs_no_local_database() -> None:
    script = render_controller(AURORA)
    assert "readonly STORAGE_TLS_CA=/etc/gpuforge/rds-ca-bundle.pem\n" in script
    assert "readonly STORAGE_TLS_CA=''\n" in render_controller(LOCAL)
    assert f"readonly ACCOUNTING_SECRET='{DB_SECRET}'\n" in script
    assert f"readonly STORAGE_HOST={ENDPOINT}\n" in script
    assert "setup_mariadb" not in script and "mariadb" not in script.lower().replace("slurmdbd", "")
    main = _main(script)
    assert (
        main.index("step write_slurmdbd_conf")
        < main.index("step start_slurmdbd")
        < main.index("step start_slurmctld")
    )


def test_no_accounting_means_no_slurmdbd_and_a_rendered_slurmdbd_conf_needs_a_database() -> None:
    plain = dataclasses.replace(BASE, files={"slurm.conf": "ClusterName=demo\n"})
    script = render_controller(plain)
    assert "start_slurmdbd" not in script and "write_slurmdbd_conf" not in script
    assert "readonly SLURMCTLD_ORDER=''\n" in script
    with pytest.raises(ValueError, match="no accounting database"):
        render_controller(BASE)
    with pytest.raises(ValueError, match=r"has no slurmdbd\.conf"):
        render_controller(dataclasses.replace(LOCAL, files={"slurm.conf": "ClusterName=demo\n"}))
    with pytest.raises(ValueError, match="secret ARN"):
        Accounting("aurora", host=ENDPOINT)
    with pytest.raises(ValueError, match="not a host name"):
        Accounting("aurora", host="db.example.com\nStoragePass=x", secret_arn=DB_SECRET)


def _write(
    script: str,
    tmp_path: Path,
    secret: str,
    env: dict[str, str] | None = None,
    user: str = "slurm",
    tls_ca: str = "",
) -> subprocess.CompletedProcess[str]:
    template = tmp_path / "slurmdbd.conf.rendered"
    template.write_text(RENDERED_DBD)
    target = str(tmp_path / "slurmdbd.conf")
    return subprocess.run(
        [sys.executable, "-", str(template), target, ENDPOINT, "3306", user, secret, tls_ca],
        input=_writer(script),
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _storage(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line.startswith("Storage"))


def test_local_password_file_becomes_storagepass_escaped_for_slurm_s_parser(tmp_path: Path) -> None:
    password_file = tmp_path / "accounting-db.password"
    password_file.write_text("a#b\\c-XYZ_123\n")
    done = _write(render_controller(LOCAL), tmp_path, str(password_file))
    assert done.returncode == 0, done.stderr
    written = tmp_path / "slurmdbd.conf"
    # The rendered StorageHost=localhost is replaced, not repeated; '#' and '\' are escaped (parse_config.c).
    assert _storage(written) == {
        "StorageType": "accounting_storage/mysql",
        "StorageHost": ENDPOINT,
        "StoragePort": "3306",
        "StorageUser": "slurm",
        "StoragePass": "a\\#b\\\\c-XYZ_123",
    }
    assert "a#b" not in done.stdout + done.stderr


def test_a_password_slurmdbd_conf_cannot_carry_is_refused_without_showing_it(tmp_path: Path) -> None:
    password_file = tmp_path / "accounting-db.password"
    password_file.write_text('has"quote-SECRETVALUE\n')
    done = _write(render_controller(LOCAL), tmp_path, str(password_file))
    assert done.returncode != 0
    assert "cannot carry" in done.stderr and "SECRETVALUE" not in done.stderr
    assert (
        not (tmp_path / "slurmdbd.conf").exists()
        or "SECRETVALUE" not in (tmp_path / "slurmdbd.conf").read_text()
    )


def test_aurora_user_and_password_come_from_the_rds_secret(tmp_path: Path, moto_server: str) -> None:
    client = boto3.client(
        "secretsmanager",
        region_name="us-east-1",
        endpoint_url=moto_server,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    # RDS stores the master user's credentials as {"username", "password"} (rds-secrets-manager.html).
    arn = client.create_secret(
        Name="rds!cluster-0a1b2c3d",
        SecretString=json.dumps({"username": "slurmdbd", "password": "Rds-Generated#1"}),
    )["ARN"]
    env = {
        "AWS_ENDPOINT_URL": moto_server,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    bundle = tmp_path / "rds-ca-bundle.pem"
    missing = _write(
        render_controller(AURORA), tmp_path, arn, env, user="ignored-for-aurora", tls_ca=str(bundle)
    )
    assert missing.returncode != 0 and "cannot verify the database's TLS certificate" in missing.stderr
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    done = _write(
        render_controller(AURORA), tmp_path, arn, env, user="ignored-for-aurora", tls_ca=str(bundle)
    )
    assert done.returncode == 0, done.stderr
    storage = _storage(tmp_path / "slurmdbd.conf")
    assert storage["StorageUser"] == "slurmdbd" and storage["StoragePass"] == "Rds-Generated\\#1"
    assert storage["StorageHost"] == ENDPOINT
    # TLS verified against RDS's CAs (Aurora refuses plain connections: require_secure_transport=ON).
    assert storage["StorageParameters"] == f"SSL_CA={bundle}"


def test_the_written_file_mode_is_set_by_the_script_not_left_to_umask() -> None:
    function = render_controller(AURORA)
    body = function[function.index("write_slurmdbd_conf() {") :]
    # mktemp makes the file 0600 before any byte of the password is written into it.
    assert body.index('tmp="$(mktemp "$SLURMDBD_CONF.XXXXXX")"') < body.index("<<'PYTHON'")
    assert re.search(r'mv -f "\$tmp" "\$SLURMDBD_CONF"', body)


@pytest.mark.parametrize(
    ("password", "accepted"),
    [
        ("Zq3-xY_9" * 5, True),
        ("short-1", False),
        ("a'b" * 12, False),
        ("a\\b" * 12, False),
        ("a b" * 12, False),
    ],
)
def test_setup_mariadb_only_feeds_sql_a_password_it_made(password: str, accepted: bool) -> None:
    """The password goes into an SQL string literal, where ' and \\ are special: only token_urlsafe's alphabet."""
    script = render_controller(LOCAL)
    body = script[script.index("setup_mariadb() {") :]
    guard = body[
        body.index('    if [[ ! "$password" =~') : body.index(
            "    fi\n", body.index('if [[ ! "$password" =~')
        )
        + 7
    ]
    check = f'log() {{ :; }}\nACCOUNTING_SECRET=x\nf() {{\n    password="$1"\n{guard}    return 0\n}}\nf "$PASSWORD"\n'
    done = subprocess.run(["bash", "-c", check], env={"PASSWORD": password}, check=False)
    assert (done.returncode == 0) is accepted


def test_the_controller_enables_sync_accounts_after_slurmctld_without_waiting_for_it() -> None:
    files = {**BASE.files, "gpuforge-accounts.json": '{"cluster": "demo"}\n'}
    for params in (LOCAL, AURORA):
        script = render_controller(dataclasses.replace(params, files=files))
        main = _main(script)
        assert main.index("step start_slurmdbd") < main.index("step start_slurmctld")
        assert main.index("step start_slurmctld") < main.index("step start_sync_accounts")
        # Inside slurmctld's gate: no sync where a step before it failed.
        assert main.index("if ((${#FAILED_STEPS[@]} == 0)); then") < main.index("step start_sync_accounts")
        assert main.index("step start_sync_accounts") < main.index("else")
        assert 'write_file "$SLURM_ETC/gpuforge-accounts.json"' in script
        function = script[script.index("start_sync_accounts() {") :]
        function = function[: function.index("\n}\n")]
        # Enabled for later boots; started without blocking, so a sacctmgr retry never holds the boot.
        assert 'systemctl enable "$SYNC_ACCOUNTS_UNIT"' in function
        assert 'systemctl start --no-block "$SYNC_ACCOUNTS_UNIT"' in function
        assert "readonly SYNC_ACCOUNTS_UNIT=gpuforge-sync-accounts.service\n" in script
    # The unit the script names is the one the image installs.
    assert (Path(__file__).resolve().parents[2] / "images/files/gpuforge-sync-accounts.service").is_file()
    # Files without the accounts file: nothing to sync; an accounts file without accounting is refused.
    assert "step start_sync_accounts" not in render_controller(LOCAL)
    with pytest.raises(ValueError, match=r"gpuforge-accounts\.json"):
        render_controller(
            dataclasses.replace(
                BASE, files={"slurm.conf": "ClusterName=demo\n", "gpuforge-accounts.json": "{}"}
            )
        )


def test_the_boot_and_the_renderer_name_one_rds_ca_bundle() -> None:
    """The path the rendered slurmdbd.conf names (StorageParameters=SSL_CA=...) is the one the boot checks and
    writes: one constant, so the two cannot drift apart."""
    from gpuforge.scheduler import render

    site = render.SlurmSite(controller_host="demo-slurmctld", controller_addr="10.0.0.10")
    assert site.storage_tls_ca == render.RDS_CA_BUNDLE
    assert f"readonly STORAGE_TLS_CA={render.RDS_CA_BUNDLE}\n" in render_controller(AURORA)
