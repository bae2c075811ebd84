"""Real Slurm daemons on one machine: a controller and GPU nodes, each in its own network namespace.

The daemons come from the Slurm test root (`scripts/slurm-root.sh`: Debian testing's
slurmctld, slurmd and client commands in a chroot). Each test cluster mounts an overlay
of that root, so runs never see each other's state, and gives every daemon its own
network namespace on a private bridge: slurmctld and each slurmd get an address of their
own, as on a real cluster. Daemons are started with `nsenter --net=...` (not `ip netns
exec`, which remounts /sys, hides the cgroup mount, and slurmd then fails).

Everything this module creates it removes, by name and by pid: daemons, namespaces,
veth pairs, the bridge, mounts. Every wait polls the state the next step needs, bounded by
tests/waiting.py's one deadline (WAIT_S), and fails with the last state seen.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from waiting import WAIT_S, WaitFailed, wait_until

from gpuforge import hardware
from gpuforge.components.specs import SchedulerSpec
from gpuforge.scheduler.render import SlurmCluster, SlurmSite, node_registration, render_files

REPO = Path(__file__).resolve().parents[2]
DEFAULT_ROOT = REPO / ".cache" / "slurm-root"
_SERIAL = itertools.count(1)
# Inside the root: where the checkout's gpuforge package is mounted for the node agent,
# fake GPU device files, and flags that tell the health check which nodes are faulty.
AGENT_DIR = "/opt/gpuforge"
TEST_DIR = "/var/lib/gpuforge-test"
DEVICE_PREFIX = f"{TEST_DIR}/dev/nvidia"
FAULTY_DIR = f"{TEST_DIR}/faulty"
HEALTH_CHECK = "/usr/local/sbin/gpuforge-slurm-healthcheck"
# slurmd's Prolog and Epilog at the paths the rendered slurm.conf names (SlurmSite's defaults):
# the checkout's `gpuforge node prolog|epilog`, each node writing dcgm-exporter's job mapping
# files into a folder of its own (the nodes share one root here; on a cluster each has its /run).
JOB_MAP_DIR = f"{TEST_DIR}/job-map"
# A test holds a node's Epilog (or Prolog) while HOLD_DIR/<command>/<node> exists, as a loaded
# machine's slow Python start would: the node stays COMPLETING, deterministically. Bounded: the
# script goes on after HOLD_S seconds whatever the test does.
HOLD_DIR = f"{TEST_DIR}/hold"
HOLD_S = int(2 * WAIT_S)
JOB_SCRIPT = f"""#!/bin/sh
held=0
while [ -e {HOLD_DIR}/{{command}}/"$SLURMD_NODENAME" ] && [ "$held" -lt {HOLD_S} ]; do
    sleep 1
    held=$((held + 1))
done
PYTHONPATH={AGENT_DIR} exec python3 -c 'import sys; from gpuforge.cli import main; sys.exit(main())' \\
    node {{command}} --mapping-dir {JOB_MAP_DIR}/"$SLURMD_NODENAME"
"""
# A batch job that runs until the test cancels it or the cluster closes (bounded all the same):
# a job that must still be running when a later wait ends cannot be a guessed `sleep 60`.
UNTIL_CANCELLED = f"sleep {int(10 * WAIT_S)}"
RELEASE_DIR = f"{TEST_DIR}/release"


def until_released(name: str) -> str:
    """A batch job's command that runs until the test calls `release(name)`, then ends well (exit 0):
    a job that must run through a wait and then complete by itself. Bounded: it ends after HOLD_S."""
    return (
        f'held=0; while [ ! -e {RELEASE_DIR}/{name} ] && [ "$held" -lt {HOLD_S} ]; '
        "do sleep 1; held=$((held + 1)); done"
    )


# Accounting (start_database, start_slurmdbd): the daemons' names in `procs`, where MariaDB
# keeps its files (inside the overlay, so in the test's temporary folder), and the database
# slurmdbd uses. MariaDB listens on 127.0.0.1 of the controller's namespace, which no other
# cluster shares, and on its socket.
DATABASE = "mariadb"
DBD = "slurmdbd"
DB_DIR = f"{TEST_DIR}/mysql"
DB_SOCKET = "/run/mysqld/mysqld.sock"
DB_PORT = 3306
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"
# The database password of clusters whose test names none (tests only, never a real secret).
BACKEND_PASSWORD = "gpuforge-test-only"
ACCOUNTING_SLURMDBD = "AccountingStorageType=accounting_storage/slurmdbd"


def wants_slurmdbd(slurm_conf: str) -> bool:
    """Whether slurmctld will wait for slurmdbd: slurm.conf keeps its accounting there."""
    return re.search(rf"^{ACCOUNTING_SLURMDBD}\s*$", slurm_conf, re.M) is not None


class ClusterError(AssertionError):
    """A daemon did not start or a wait ran out; carries the daemon's log for the test report."""


State = TypeVar("State")


def node_is_empty(node: dict[str, str]) -> bool:
    """No job holds the node and none is still completing: `scontrol show node`'s State has the base
    IDLE and no COMPLETING flag (IDLE+DRAIN+DYNAMIC_NORM is empty, IDLE+COMPLETING+DYNAMIC_NORM is not).

    "Not ALLOCATED" is not this: a node whose last job is running its Epilog is IDLE+COMPLETING, and
    `scontrol delete nodename=` refuses it ("Requested nodes are busy"); a slurmd stopped then never
    reports the Epilog done, so the node stays COMPLETING until SlurmdTimeout.
    """
    base, *flags = node.get("State", "").split("+")
    return base == "IDLE" and "COMPLETING" not in flags


def _run(
    argv: list[str], *, timeout: float = WAIT_S, check: bool = True, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done


def unavailable_reason(root: Path) -> str | None:
    """Why real daemons cannot run here, or None when they can."""
    if os.geteuid() != 0:
        return "the real-Slurm tests need root (chroot, network namespaces, mounts)"
    if not (root / ".gpuforge-complete").exists():
        return f"no Slurm test root at {root}: run scripts/slurm-root.sh (scripts/test.sh does)"
    for tool in ("ip", "nsenter", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"gfprobe{os.getpid() % 100000}"
    made = _run(["ip", "netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"this machine cannot create network namespaces ({made.stderr.strip()})"
    _run(["ip", "netns", "del", probe], check=False)
    return None


@dataclass
class SlurmTestCluster:
    """One private Slurm cluster; use `open_cluster` so that it is always torn down."""

    base: Path  # a temporary folder holding the overlay
    lower: Path  # the Slurm test root
    # Names and addresses unique to this process and cluster, so that runs side by side
    # (and several clusters in one run) never share a bridge, a namespace or a subnet.
    serial: int = field(default_factory=lambda: next(_SERIAL))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)
    mounts: list[Path] = field(default_factory=list)
    links: list[str] = field(default_factory=list)

    @property
    def tag(self) -> str:
        return f"gf{os.getpid() % 10000}{chr(ord('a') + self.serial % 26)}"

    @property
    def subnet(self) -> str:
        return f"10.{200 + os.getpid() % 50}.{(os.getpid() // 50 + self.serial) % 250}"

    @property
    def root(self) -> Path:
        return self.base / "merged"

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    def address(self, index: int) -> str:
        return f"{self.subnet}.{index}"

    # -- set-up -------------------------------------------------------------------------

    def mount_root(self, agent_source: Path) -> None:
        for name in ("upper", "work", "merged"):
            (self.base / name).mkdir(parents=True)
        options = f"lowerdir={self.lower},upperdir={self.base / 'upper'},workdir={self.base / 'work'}"
        _run(["mount", "-t", "overlay", "overlay", "-o", options, str(self.root)])
        self.mounts.append(self.root)
        for source, flags in (("/proc", "--bind"), ("/dev", "--bind"), ("/sys", "--rbind")):
            target = self.root / source.lstrip("/")
            _run(["mount", flags, source, str(target)])
            self.mounts.append(target)
        agent = self.root / AGENT_DIR.lstrip("/") / "gpuforge"
        agent.mkdir(parents=True)
        _run(["mount", "--bind", "-o", "ro", str(agent_source), str(agent)])
        self.mounts.append(agent)
        for folder in ("etc/slurm", "var/spool/slurmctld", "var/spool/slurmd", "var/log/slurm"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        (self.root / FAULTY_DIR.lstrip("/")).mkdir(parents=True)
        self.install_job_scripts()
        self.chroot(["chown", "slurm:slurm", "/var/spool/slurmctld", "/var/log/slurm"])

    def install_job_scripts(self) -> None:
        """The Prolog and Epilog every rendered slurm.conf names; without them slurmd drains a node
        at its first job (a prolog that cannot run fails)."""
        site = SlurmSite(controller_host="unused", controller_addr="10.0.0.1")
        for command, path in (("prolog", site.prolog), ("epilog", site.epilog)):
            script = self.root / path.lstrip("/")
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(JOB_SCRIPT.format(command=command), encoding="utf-8")
            script.chmod(0o755)

    def release(self, name: str) -> None:
        """End the jobs running `until_released(name)`."""
        flag = self.root / RELEASE_DIR.lstrip("/") / name
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch()

    def make_gpus(self, count: int) -> None:
        """Fake GPU device files: character devices with NVIDIA's major number, 195."""
        folder = self.root / DEVICE_PREFIX.rsplit("/", 1)[0].lstrip("/")
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(count):
            _run(["mknod", f"{self.root}{DEVICE_PREFIX}{index}", "c", "195", str(index)])

    def write_key(self) -> None:
        key = self.root / "etc/slurm/slurm.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.chroot(["chown", "slurm:slurm", "/etc/slurm/slurm.key"])

    def write_files(self, files: dict[str, str]) -> None:
        for name, text in files.items():
            (self.root / "etc/slurm" / name).write_text(text, encoding="utf-8")

    def add_namespace(self, name: str, index: int) -> str:
        """A network namespace with one veth on the bridge at address `index`; returns its path."""
        if not self.links:
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            self.links.append(self.bridge)
            _run(["ip", "link", "set", self.bridge, "up"])
        namespace = f"{self.tag}-{name}"
        _run(["ip", "netns", "add", namespace])
        self.namespaces.append(namespace)
        host_end = f"{self.tag}v{index}"
        _run(["ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", namespace])
        self.links.append(host_end)
        _run(["ip", "link", "set", host_end, "master", self.bridge, "up"])
        for argv in (
            ["ip", "addr", "add", f"{self.address(index)}/24", "dev", "eth0"],
            ["ip", "link", "set", "eth0", "up"],
            ["ip", "link", "set", "lo", "up"],
        ):
            _run(["ip", "netns", "exec", namespace, *argv])
        return f"/var/run/netns/{namespace}"

    # -- daemons and commands -------------------------------------------------------------

    def chroot(
        self, argv: list[str], *, timeout: float = WAIT_S, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return _run(["chroot", str(self.root), *argv], timeout=timeout, check=check)

    def client(
        self, argv: list[str], *, timeout: float = WAIT_S, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm client command, run from the controller's namespace."""
        return _run(
            ["nsenter", f"--net=/var/run/netns/{self.tag}-ctl", "chroot", str(self.root), *argv],
            timeout=timeout,
            check=check,
        )

    def _start(self, name: str, argv: list[str]) -> None:
        log = (self.base / f"{name}.out").open("wb")
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def daemon_log(self, name: str) -> str:
        out = self.base / f"{name}.out"
        files = [out]  # MariaDB logs to its standard error, so to `out` alone
        if name != DATABASE:
            logs = {"ctl": "slurmctld.log", DBD: "slurmdbd.log"}
            files.append(self.root / "var/log/slurm" / logs.get(name, f"slurmd-{name}.log"))
        return "\n".join(path.read_text(errors="replace")[-4000:] for path in files if path.exists())

    def controller_namespace(self) -> str:
        """The `ctl` namespace at address 1, made on first use: slurmctld's, and the database's
        and slurmdbd's when the cluster keeps accounting (they run on the controller)."""
        namespace = f"{self.tag}-ctl"
        if namespace not in self.namespaces:
            self.add_namespace("ctl", 1)
        return f"/var/run/netns/{namespace}"

    def _start_as_host(self, name: str, host: str, argv: list[str]) -> None:
        """A daemon in the controller's namespace with hostname `host` (a UTS namespace of its own):
        nsenter, unshare and sh each exec the next, so the pid kept is the daemon's."""
        self._start(
            name,
            [
                "nsenter",
                f"--net={self.controller_namespace()}",
                "unshare",
                "--uts",
                "sh",
                "-c",
                f'hostname "$0" && exec chroot {self.root} "$@"',
                host,
                *argv,
            ],
        )

    def start_controller(self, host: str) -> None:
        """slurmctld in the `ctl` namespace with hostname `host` (its own UTS namespace).

        When slurm.conf keeps accounting in slurmdbd and none runs yet, MariaDB and slurmdbd are
        started first (`start_accounting_backend`): slurmctld 26.05.5 started with no slurmdbd
        and no state files retries for ever ("Still don't know my ClusterID") and never answers.
        """
        if wants_slurmdbd(self.read_file("slurm.conf")) and DBD not in self.procs:
            self.start_accounting_backend(host)
        self._start_as_host("ctl", host, ["slurmctld", "-D"])
        self.wait_for(
            "slurmctld to answer",
            lambda: self.client(["scontrol", "ping"], check=False).stdout,
            lambda shown: "UP" in shown,
            daemon="ctl",
        )

    def start_node(self, name: str, index: int, conf: str) -> None:
        """A dynamic node: `slurmd -Z -N name --conf-server <controller> --conf conf`."""
        netns = self.add_namespace(name, index)
        self._start(
            name,
            [
                "nsenter",
                f"--net={netns}",
                "chroot",
                str(self.root),
                "slurmd",
                "-D",
                "-Z",
                "-N",
                name,
                "--conf-server",
                self.address(1),
                "--conf",
                conf,
            ],
        )

    def alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def stop(self, name: str, *, timeout: float = 15) -> None:
        """Stop one daemon by its own pid: SIGTERM, then SIGKILL after `timeout`."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def wait_for(
        self,
        what: str,
        observe: Callable[[], State],
        done: Callable[[State], bool] = bool,
        *,
        daemon: str | None = None,
        beyond_s: float = 0.0,
    ) -> State:
        """tests/waiting.py's `wait_until` for this cluster: `observe` reads the state (`scontrol show
        node`, a job, a file), `done` says it is the one needed. With `daemon`, fails at once if that
        daemon exits, and any failure shows its log."""

        def stopped() -> str | None:
            return None if daemon is None or self.alive(daemon) else f"{daemon} exited"

        def context() -> str:
            return self.daemon_log(daemon) if daemon is not None else ""

        try:
            return wait_until(what, observe, done, beyond_s=beyond_s, stopped=stopped, context=context)
        except WaitFailed as failed:
            raise ClusterError(str(failed)) from None

    def wait_node(self, name: str, what: str, done: Callable[[dict[str, str]], bool]) -> dict[str, str]:
        """Wait until `scontrol show node NAME` is as `done` needs; fails with the last one seen, and
        with slurmd's log while the test runs that node's slurmd."""
        return self.wait_for(
            f"{name} {what}",
            lambda: self.node(name),
            done,
            daemon=name if name in self.procs else None,
        )

    def wait_empty(self, *names: str) -> None:
        """Each node holds no job and none is completing (`node_is_empty`): what a node must be
        before it leaves, and before the next test counts on it."""
        for name in names:
            self.wait_node(name, "with no job and none completing", node_is_empty)

    def wait_job(self, job_id: str, what: str, done: Callable[[dict[str, str]], bool]) -> dict[str, str]:
        """Wait until `scontrol show job` of `job_id` is as `done` needs; fails with the last one seen."""
        return self.wait_for(f"job {job_id} {what}", lambda: self.job(job_id), done)

    # -- accounting: MariaDB and slurmdbd on the controller -------------------------------

    def read_file(self, name: str) -> str:
        """A file of the root's /etc/slurm ('' when absent)."""
        path = self.root / "etc/slurm" / name
        return path.read_text(encoding="utf-8") if path.exists() else ""

    def start_accounting_backend(
        self, host: str, *, password: str = BACKEND_PASSWORD, dbd_conf: str | None = None
    ) -> None:
        """MariaDB and slurmdbd for a controller named `host`, as the controller boots them.

        slurmdbd reads `dbd_conf`, else the slurmdbd.conf already written to /etc/slurm (the
        rendered one), with the password line added as the boot adds it.
        """
        conf = dbd_conf or self.read_file("slurmdbd.conf")
        if not conf:
            raise ClusterError("slurm.conf keeps accounting in slurmdbd, but no slurmdbd.conf was written")
        self.write_hosts(host)
        self.start_database(password)
        self.start_slurmdbd(host, conf + storage_pass(password))

    def write_hosts(self, host: str) -> None:
        """/etc/hosts naming the controller at address 1: slurm.conf's AccountingStorageHost and
        slurmdbd.conf's DbdHost are names, and the chroot has no other resolver."""
        (self.root / "etc/hosts").write_text(
            f"127.0.0.1 localhost\n{self.address(1)} {host}\n", encoding="utf-8"
        )

    def start_database(self, password: str) -> None:
        """MariaDB in the controller's namespace: a new data folder, then mariadbd, then slurmdbd's
        user (`DB_USER` with `password`, all rights on `DB_NAME`), as the controller's boot does.

        `--innodb-snapshot-isolation=OFF`: MariaDB 11.8 turns it on by default, and slurmdbd
        26.05.5 then warns at start that it will fail on write conflicts. The database is made
        here, before slurmdbd's first start: left to make it itself, slurmdbd 26.05.5 with
        libmariadb 3.4.10 (Debian 1:11.8.9+ds-2) failed every query after ("5027 Number of columns
        in result (=1) set execeeds maxmimum allowed number of columns (=0)") and exited (fatal:
        _check_mysql_concat_is_sane: null result), seen in this root on 2026-12-04.
        """
        data = self.root / DB_DIR.lstrip("/")
        data.mkdir(parents=True)
        self.chroot(["chown", "mysql:mysql", DB_DIR, "/run/mysqld"])
        self.chroot(["mariadb-install-db", "--user=mysql", f"--datadir={DB_DIR}", "--skip-test-db"])
        self._start(
            DATABASE,
            [
                "nsenter",
                f"--net={self.controller_namespace()}",
                "chroot",
                str(self.root),
                "mariadbd",
                "--user=mysql",
                f"--datadir={DB_DIR}",
                f"--socket={DB_SOCKET}",
                "--bind-address=127.0.0.1",
                f"--port={DB_PORT}",
                "--innodb-snapshot-isolation=OFF",
            ],
        )
        self.wait_database()
        quoted = password.replace("\\", "\\\\").replace("'", "\\'")
        # On standard input, so that the password is in no process's arguments.
        _run(
            ["chroot", str(self.root), "mariadb", f"--socket={DB_SOCKET}"],
            stdin=(
                f"CREATE DATABASE {DB_NAME};\n"
                f"CREATE USER '{DB_USER}'@'localhost' IDENTIFIED BY '{quoted}';\n"
                f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'localhost';\n"
            ),
        )

    def wait_database(self) -> None:
        """Until mariadbd answers on its socket (`mariadb-admin ping`), or exits."""
        self.wait_for(
            "mariadbd to answer",
            lambda: self.chroot(["mariadb-admin", f"--socket={DB_SOCKET}", "ping"], check=False),
            lambda done: done.returncode == 0,
            daemon=DATABASE,
        )

    def start_slurmdbd(self, host: str, conf: str) -> None:
        """slurmdbd in the controller's namespace with hostname `host`, reading `conf` (the whole
        slurmdbd.conf, password included): owned by slurm, mode 0600, as slurmdbd insists."""
        path = self.root / "etc/slurm/slurmdbd.conf"
        path.write_text(conf, encoding="utf-8")
        path.chmod(0o600)
        (self.root / "run/slurmdbd").mkdir(exist_ok=True)
        self.chroot(["chown", "slurm:slurm", "/etc/slurm/slurmdbd.conf", "/run/slurmdbd"])
        self._start_as_host(DBD, host, ["slurmdbd", "-D"])
        log = self.root / "var/log/slurm/slurmdbd.log"
        self.wait_for(
            "slurmdbd to start",
            lambda: log.read_text(errors="replace") if log.exists() else "",
            lambda text: " started" in text,
            daemon=DBD,
        )

    def add_users(self, *names: str) -> None:
        """Unix users inside the root (no home): Slurm checks a job's user exists on the nodes."""
        for name in names:
            self.chroot(["useradd", "--no-create-home", "--shell", "/bin/sh", name])

    def client_as(
        self, user: str, argv: list[str], *, timeout: float = WAIT_S, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm client command run by `user` (auth/slurm authenticates it as that user)."""
        return _run(
            [
                "nsenter",
                f"--net={self.controller_namespace()}",
                "chroot",
                f"--userspec={user}:{user}",
                str(self.root),
                *argv,
            ],
            timeout=timeout,
            check=check,
        )

    def client_bin(self) -> Path:
        """A folder of `CLIENT_COMMANDS` wrappers that run the command inside this cluster (in the
        controller's namespace and root), made on first use; see `run_with_cluster_clients`."""
        folder = self.base / "client-bin"
        if not folder.is_dir():
            folder.mkdir()
            for command in CLIENT_COMMANDS:
                wrapper = folder / command
                wrapper.write_text(
                    "#!/bin/sh\n"
                    f'exec nsenter --net={self.controller_namespace()} chroot {self.root} {command} "$@"\n',
                    encoding="utf-8",
                )
                wrapper.chmod(0o755)
        return folder

    # -- reading state ------------------------------------------------------------------

    def node(self, name: str) -> dict[str, str]:
        """`scontrol show node NAME --oneliner` as key -> value ({} when Slurm does not know it)."""
        done = self.client(["scontrol", "show", "node", name, "--oneliner"], check=False)
        if done.returncode != 0:
            return {}
        return dict(re.findall(r"(\w+)=(\S*)", done.stdout))

    def job(self, job_id: str) -> dict[str, str]:
        done = self.client(["scontrol", "show", "job", job_id, "--oneliner"])
        return dict(re.findall(r"(\w+)=(\S*)", done.stdout))

    def sbatch(self, *args: str) -> str:
        done = self.client(["sbatch", "--parsable", "--chdir=/tmp", *args])
        return done.stdout.strip().split(";")[0]

    # -- tear-down ----------------------------------------------------------------------

    def _strays(self) -> list[int]:
        """Processes running inside this cluster's root that the test did not start itself:
        slurmstepd and job steps, which outlive a stopped slurmd."""
        strays = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                with contextlib.suppress(OSError):
                    if (proc / "root").readlink() == self.root:
                        strays.append(int(proc.name))
        return strays

    def close(self) -> None:
        if self.procs.get("ctl") is not None and self.alive("ctl"):
            self.client(["scancel", "--full", "--user=root"], check=False)
        # Last started, first stopped: nodes, slurmctld, then slurmdbd, then the database.
        for name in reversed(list(self.procs)):
            self.stop(name)

        def kill_strays() -> list[int]:
            strays = self._strays()
            for pid in strays:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            return strays

        left: WaitFailed | None = None
        try:
            wait_until("no process left in the cluster's root", kill_strays, lambda strays: not strays)
        except WaitFailed as failed:  # torn down all the same, then reported
            left = failed
        for namespace in reversed(self.namespaces):
            _run(["ip", "netns", "del", namespace], check=False)
        for link in reversed(self.links):
            _run(["ip", "link", "del", link], check=False)
        for target in reversed(self.mounts):
            _run(["umount", "-R", str(target)], check=False)
        if left is not None:
            raise left


# The client commands `client_bin` wraps: what `gpuforge usage` and the MTBF reader call on a controller.
CLIENT_COMMANDS = ("sacct", "sacctmgr", "sreport", "squeue", "sinfo", "scontrol")


def run_with_cluster_clients(
    cluster: SlurmTestCluster,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = WAIT_S,
) -> subprocess.CompletedProcess[str]:
    """Run a command of this machine (not of the root) as if on the cluster's controller.

    Slurm's client commands (`CLIENT_COMMANDS`) come first on PATH as wrappers that run the
    real ones inside the cluster, so a program that calls `sacct --json` or `sacctmgr show
    event` finds the running cluster's slurmdbd. For example, `gpuforge usage` the way it runs
    on a controller, to compare with the cluster's own `sacct` (both read the same slurmdbd):

        done = run_with_cluster_clients(
            cluster, [str(REPO / ".venv/bin/gpuforge"), "usage", stack_dir, "--stack", "dev", "--json"]
        )
        truth = json.loads(cluster.client(["sacct", "--json", "--allusers"]).stdout)

    The wrappers run as root; `env` is added to this process's environment. sacct prints
    times in the root's zone, UTC (its /etc/localtime); `--json` gives epoch seconds. Returns
    the finished process whatever its exit status (the caller asserts on it); a command that
    outlives `timeout` raises subprocess.TimeoutExpired.
    """
    environment = {**os.environ, **(env or {})}
    environment["PATH"] = f"{cluster.client_bin()}:{environment.get('PATH', '')}"
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=environment, check=False)


@contextlib.contextmanager
def open_cluster(base: Path, lower: Path, agent_source: Path) -> Iterator[SlurmTestCluster]:
    cluster = SlurmTestCluster(base=base, lower=lower)
    try:
        cluster.mount_root(agent_source)
        yield cluster
    finally:
        cluster.close()


# -- a whole cluster with accounting: MariaDB, slurmdbd, slurmctld and GPU nodes -----------

CONTROLLER = "gfctl"
# The one line a test adds to a rendered slurm.conf when its nodes register as a GPU instance type this
# machine is smaller than (start_accounting_cluster's `instance_type`).
CONFIG_OVERRIDES = "SlurmdParameters=config_overrides"


def this_machine(cluster: SlurmTestCluster, gpus: int) -> hardware.InstanceType:
    """p5.48xlarge's catalog row with this machine's CPUs and memory (from `slurmd -C`, so that
    Slurm's checks against the real hardware pass) and `gpus` GPUs on one NUMA node."""
    line = cluster.chroot(["slurmd", "-C"]).stdout.splitlines()[0]
    found = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)}
    sockets = found["SocketsPerBoard"]
    return dataclasses.replace(
        hardware.get("p5.48xlarge"),
        vcpus=found["CPUs"],
        sockets=sockets,
        cores=sockets * found["CoresPerSocket"],
        threads_per_core=found["ThreadsPerCore"],
        memory_mib=found["RealMemory"],
        gpu_count=gpus,
        numa_nodes=(hardware.NumaNode(index=0, gpus=tuple(range(gpus))),),
    )


def storage_pass(password: str) -> str:
    """The StoragePass line the controller adds at boot: Slurm's parser ends a value at an
    unescaped '#' and drops a backslash before any character, so both are escaped."""
    return "StoragePass=" + password.replace("\\", "\\\\").replace("#", "\\#") + "\n"


@dataclass(frozen=True)
class AccountingCluster:
    """A running cluster that keeps accounting, as `start_accounting_cluster` left it."""

    cluster: SlurmTestCluster
    spec: SlurmCluster
    nodes: tuple[str, ...]  # the GPU nodes' names, all idle at start


def start_accounting_cluster(
    cluster: SlurmTestCluster,
    *,
    name: str,
    password: str,
    node_count: int = 2,
    gpus_per_node: int = 2,
    scheduler: SchedulerSpec | None = None,
    instance_type: hardware.InstanceType | None = None,
) -> AccountingCluster:
    """MariaDB, slurmdbd, slurmctld and `node_count` GPU nodes of the rendered config, all up.

    Started in the order the controller boots them: the database (with slurmdbd's database
    and user), slurmdbd, slurmctld (which registers the cluster in slurmdbd by itself), then
    the nodes, each waited for idle. Only root's association exists at the start: teams,
    users and QOS are the caller's (sacctmgr or `gpuforge scheduler sync-accounts`); the
    Unix users jobs run as are made with `cluster.add_users`.

    The rendered JobAcctGatherType=jobacct_gather/cgroup is kept: `mount_root` bind-mounts the
    host's /sys, so slurmd finds the cgroup tree (cgroup v1 on this machine) and gathers job
    usage from it, as proctrack/cgroup already tracks jobs here; nothing is overridden.

    `instance_type`: the nodes register as that catalog row, with the CPUs, memory and GPUs (one
    device file each) a real node of the type registers, instead of this machine's own CPUs and
    memory with `gpus_per_node` GPUs. This machine has fewer CPUs and less memory than a GPU
    instance, so slurm.conf then gains one line that is not rendered: SlurmdParameters=config_overrides,
    Slurm's setting for this ("any node with less than the configured resources will not be set to
    INVAL/INVALID_REG. This option is generally only useful for testing purposes", slurm.conf(5) of
    26.05). The jobs' memory cgroups get the allocated limits (slurmd logs them), which a test's
    small jobs stay far below.
    """
    hardware_row = instance_type or this_machine(cluster, gpus_per_node)
    spec = SlurmCluster(
        name=name,
        instance_type=hardware_row,
        capacity_type="on-demand",
        max_nodes=node_count + 2,
        scheduler=scheduler or SchedulerSpec(type="slurm", controller_instance_type="m7i.2xlarge"),
        slurm_version=cluster.chroot(["slurmd", "-V"]).stdout.split()[-1],
        site=SlurmSite(
            controller_host=CONTROLLER,
            controller_addr=cluster.address(1),
            gpu_device_prefix=DEVICE_PREFIX,
        ),
    )
    files: dict[str, str] = dict(render_files(spec))
    dbd_conf = files.pop("slurmdbd.conf")
    if instance_type is not None:
        files["slurm.conf"] += f"{CONFIG_OVERRIDES}\n"
    cluster.make_gpus(hardware_row.gpu_count)
    cluster.write_key()
    cluster.write_files(files)
    # The rendered HealthCheckProgram: healthy (a test drains a node itself, with a gpuforge reason).
    health_check = cluster.root / spec.site.health_check_program.lstrip("/")
    health_check.parent.mkdir(parents=True, exist_ok=True)
    health_check.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    health_check.chmod(0o755)
    cluster.start_accounting_backend(CONTROLLER, password=password, dbd_conf=dbd_conf)
    cluster.start_controller(CONTROLLER)
    nodes = tuple(f"{cluster.tag}-gpu{number}" for number in range(1, node_count + 1))
    registration = node_registration(spec)
    for index, node in enumerate(nodes, start=11):
        cluster.start_node(node, index, registration)
    for node in nodes:
        cluster.wait_node(node, "idle", lambda shown: shown.get("State") == "IDLE+DYNAMIC_NORM")
    return AccountingCluster(cluster, spec, nodes)


# -- one slurmctld reading a config, for tests of what Slurm makes of a rendered file -------

# What slurmctld 26.05.5 logs at every start in the test root, whatever the config: the
# Debian package's MailProg and plugstack.conf. Any other "error:" means a file was misread.
_EXPECTED_ERRORS = (
    "Configured MailProg is invalid",
    "Slurm does not support glob parsing",
    '"Include" failed in file /etc/slurm/plugstack.conf',
)
READY_LINE = "Running as primary controller"
SLURM_FILES = ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf")


@dataclass(frozen=True)
class ControllerRead:
    """What slurmctld made of a config: whether it ran clean, its log, and what it says it read."""

    accepted: bool
    log: str
    partitions: dict[str, dict[str, str]]  # `scontrol show partition` per name ({} unless accepted)
    config: dict[str, str]  # `scontrol show config` ({} unless accepted)
    switches: frozenset[str] = frozenset()  # `scontrol show topology`'s switch names

    @property
    def errors(self) -> list[str]:
        return [
            line
            for line in self.log.splitlines()
            if ("error:" in line or "fatal:" in line) and not any(known in line for known in _EXPECTED_ERRORS)
        ]


def _reader_with_accounting(
    cluster: SlurmTestCluster, files: dict[str, str], host: str, address: str
) -> list[str]:
    """How `read_by_slurmctld` starts a slurmctld that keeps accounting: in the cluster's
    controller namespace, which gains `address` and, at the first read, MariaDB and slurmdbd (the
    first read's slurmdbd.conf and host name), which every later read's slurmctld registers its
    cluster with: slurmdbd checks DbdHost against its host name only when it starts, and each
    read's AccountingStorageHost names an address of this namespace. A cluster used for reads
    runs no controller."""
    netns = cluster.controller_namespace()
    namespace = Path(netns).name
    shown = _run(["ip", "netns", "exec", namespace, "ip", "-o", "addr", "show", "dev", "eth0"]).stdout
    if f" {address}/" not in shown:
        _run(["ip", "netns", "exec", namespace, "ip", "addr", "add", f"{address}/32", "dev", "eth0"])
    if DBD not in cluster.procs:
        cluster.start_accounting_backend(host, dbd_conf=files.get("slurmdbd.conf"))
    # start_accounting_backend named the host at address 1 in /etc/hosts; the read names `address`.
    (cluster.root / "etc/hosts").write_text(f"127.0.0.1 localhost\n{address} {host}\n", encoding="utf-8")
    return [
        "nsenter",
        f"--net={netns}",
        "unshare",
        "--uts",
        "sh",
        "-c",
        'hostname "$0" && exec chroot "$1" slurmctld -D',
        host,
        str(cluster.root),
    ]


def read_by_slurmctld(
    cluster: SlurmTestCluster, files: dict[str, str], *, host: str, address: str
) -> ControllerRead:
    """Start slurmctld on `files` in a network and UTS namespace of its own, ask it what it read, stop it.

    When slurm.conf keeps accounting in slurmdbd, slurmctld runs where a slurmdbd answers
    (`_reader_with_accounting`); otherwise it starts in about 0.1 s: the namespace has loopback and one veth pair holding `address`
    (slurmctld asks getaddrinfo with AI_ADDRCONFIG, which needs an address other than
    loopback), and the hostname `host`, the SlurmctldHost of the files. slurmctld is the
    process started here (unshare, sh and chroot each exec the next), stopped by its pid.
    """
    etc = cluster.root / "etc/slurm"
    for name in SLURM_FILES:
        (etc / name).unlink(missing_ok=True)
    cluster.write_files(files)
    (cluster.root / "etc/hosts").write_text(f"127.0.0.1 localhost\n{address} {host}\n", encoding="utf-8")
    state = cluster.root / "var/spool/slurmctld"
    for path in state.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    log = cluster.base / "slurmctld-read.out"
    if wants_slurmdbd(files.get("slurm.conf", "")):
        argv = _reader_with_accounting(cluster, files, host, address)
    else:
        script = (
            'hostname "$0" && ip link set lo up && ip link add a0 type veth peer name a1 && '
            'ip addr add "$1/24" dev a0 && ip link set a0 up && ip link set a1 up && exec chroot "$2" slurmctld -D'
        )
        argv = ["unshare", "--net", "--uts", "sh", "-c", script, host, address, str(cluster.root)]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        try:
            wait_until(
                "slurmctld to start or stop",
                lambda: log.read_text(errors="replace"),
                lambda text: proc.poll() is not None or READY_LINE in text,
                poll_s=0.02,  # it starts in about 0.1 s, and the hostile tests read many configs
            )
        except WaitFailed as failed:
            raise ClusterError(str(failed)) from None
        if proc.poll() is not None:
            return ControllerRead(False, log.read_text(errors="replace"), {}, {})

        def scontrol(*args: str) -> str:
            argv = [
                "nsenter",
                f"--net=/proc/{proc.pid}/ns/net",
                "chroot",
                str(cluster.root),
                "scontrol",
                *args,
            ]
            # Retried: slurmctld logs that it runs before its port is open. Fails with its last answer.
            try:
                done = wait_until(
                    f"scontrol {' '.join(args)} to answer",
                    lambda: _run(argv, check=False),
                    lambda done: done.returncode == 0,
                    stopped=lambda: None if proc.poll() is None else f"slurmctld exited {proc.returncode}",
                )
            except WaitFailed as failed:
                raise ClusterError(f"{failed}\n{log.read_text(errors='replace')[-3000:]}") from None
            return done.stdout

        partitions = {
            fields["PartitionName"]: fields
            for line in scontrol("show", "partition", "--oneliner").splitlines()
            if (fields := dict(re.findall(r"(\w+)=(\S*)", line)))
        }
        # Keys that may repeat are shown with an index: "Prolog[0]", "Epilog[0]" (src/api/config_info.c).
        config = dict(re.findall(r"^(\w+(?:\[\d+\])?)\s+= (.*)$", scontrol("show", "config"), re.M))
        switches = frozenset()
        if "topology.conf" in files:
            switches = frozenset(re.findall(r"^SwitchName=(\S+)", scontrol("show", "topology"), re.M))
        return ControllerRead(True, log.read_text(errors="replace"), partitions, config, switches)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
