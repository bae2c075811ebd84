"""The controller's accounting boot against real daemons: MariaDB 11.8 and slurmdbd 26.05.5 (the forky test root,
tests/scheduler/slurm_cluster.py). The SQL `setup_mariadb` sends makes slurmdbd's user, and the slurmdbd.conf
`write_slurmdbd_conf` writes, password with '#' and '\\' included, is one real slurmdbd reads and connects with.
Every daemon is started and stopped by the harness, by its pid.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuforge.components.user_data import Accounting, ControllerParams, render_controller

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "scheduler"))
from slurm_cluster import (  # noqa: E402  (the harness lives beside the Slurm tests)
    CONTROLLER,
    DATABASE,
    DB_DIR,
    DB_PORT,
    DB_SOCKET,
    DBD,
    DEFAULT_ROOT,
    open_cluster,
    unavailable_reason,
)
from waiting import WAIT_S  # noqa: E402

_SKIP = unavailable_reason(DEFAULT_ROOT)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]
# A password as Slurm's parser would misread it unescaped: '#' starts a comment, '\' escapes.
PASSWORD = "a#b\\c-Zz_09"
RENDERED_DBD = (
    "AuthType=auth/slurm\n"
    f"DbdHost={CONTROLLER}\n"
    "SlurmUser=slurm\n"
    "LogFile=/var/log/slurm/slurmdbd.log\n"
    "PidFile=/run/slurmdbd/slurmdbd.pid\n"
    "StorageType=accounting_storage/mysql\n"
    "StorageLoc=slurm_acct_db\n"
)
PARAMS = ControllerParams(
    cluster="demo",
    host=CONTROLLER,
    address="10.0.0.10",
    state_volume_id="vol-0123456789abcdef0",
    state_dir="/var/spool/slurmctld",
    key_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:demo-key-abcdef",
    files={"slurm.conf": "ClusterName=demo\n", "slurmdbd.conf": RENDERED_DBD},
    accounting=Accounting("local"),
)


def _between(script: str, start: str, end: str) -> str:
    body = script[script.index(start) :]
    return body[len(start) : body.index(end)]


def test_the_boot_s_sql_and_slurmdbd_conf_work_with_real_mariadb_and_slurmdbd(tmp_path: Path) -> None:
    script = render_controller(PARAMS)
    # setup_mariadb's SQL, with the variables it expands at boot and a password it makes (token_urlsafe).
    made = "Zq3-xY_9" * 5
    sql = _between(script, "mariadb --protocol=socket <<SQL\n", "\nSQL\n")
    sql = (
        sql.replace("$STORAGE_LOC", "slurm_acct_db")
        .replace("$STORAGE_USER", "slurm")
        .replace("$password", made)
    )
    writer = _between(script[script.index("write_slurmdbd_conf() {") :], "<<'PYTHON'\n", "\nPYTHON\n")
    with open_cluster(tmp_path / "cluster", DEFAULT_ROOT, REPO / "gpuforge") as cluster:
        cluster.write_key()
        cluster.write_hosts(CONTROLLER)
        data = cluster.root / DB_DIR.lstrip("/")
        data.mkdir(parents=True)
        cluster.chroot(["chown", "mysql:mysql", DB_DIR, "/run/mysqld"])
        cluster.chroot(["mariadb-install-db", "--user=mysql", f"--datadir={DB_DIR}", "--skip-test-db"])
        cluster._start(  # the harness's own start-by-pid, as start_database uses it
            DATABASE,
            [
                "nsenter",
                f"--net={cluster.controller_namespace()}",
                "chroot",
                str(cluster.root),
                "mariadbd",
                "--user=mysql",
                f"--datadir={DB_DIR}",
                f"--socket={DB_SOCKET}",
                "--bind-address=127.0.0.1",
                f"--port={DB_PORT}",
                "--innodb-snapshot-isolation=OFF",
            ],
        )
        cluster.wait_database()

        def sql_as_root(text: str) -> None:
            subprocess.run(
                ["chroot", str(cluster.root), "mariadb", f"--socket={DB_SOCKET}"],
                input=text,
                text=True,
                check=True,
                capture_output=True,
                timeout=WAIT_S,
            )

        for _ in range(2):  # every boot runs it: the second run must succeed too
            sql_as_root(sql)
        # The user it made logs in with the password it was given (on standard input's config, not argv).
        login = subprocess.run(
            [
                "chroot",
                str(cluster.root),
                "mariadb",
                "--defaults-file=/dev/stdin",
                "-e",
                "SELECT CURRENT_USER()",
            ],
            input=f"[client]\nuser=slurm\npassword={made}\nsocket={DB_SOCKET}\n",
            text=True,
            capture_output=True,
            timeout=WAIT_S,
            check=False,
        )
        assert login.returncode == 0 and "slurm@localhost" in login.stdout, login.stderr
        # A password Slurm's parser would misread unescaped ('#', '\\'), as an RDS-made one may hold: set it with
        # SQL's own escaping, then write slurmdbd.conf with write_slurmdbd_conf's Python as the controller does.
        quoted = PASSWORD.replace("\\", "\\\\").replace("'", "\\'")
        sql_as_root(f"ALTER USER 'slurm'@'localhost' IDENTIFIED BY '{quoted}';\n")
        password_file = tmp_path / "accounting-db.password"
        password_file.write_text(PASSWORD + "\n")
        (tmp_path / "rendered").write_text(RENDERED_DBD)
        subprocess.run(
            [
                sys.executable,
                "-",
                str(tmp_path / "rendered"),
                str(tmp_path / "final"),
                "localhost",
                str(DB_PORT),
                "slurm",
                str(password_file),
                "",
            ],
            input=writer,
            text=True,
            check=True,
            capture_output=True,
        )
        final = (tmp_path / "final").read_text()
        assert "StoragePass=a\\#b\\\\c-Zz_09\n" in final
        cluster.start_slurmdbd(CONTROLLER, final)
        log = (cluster.root / "var/log/slurm/slurmdbd.log").read_text(errors="replace")
        assert "Access denied" not in log and cluster.alive(DBD)
