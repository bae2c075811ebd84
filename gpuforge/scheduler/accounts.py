"""Teams, users and QOS in Slurm's database, kept equal to the stack config by `sacctmgr`.

`desired_state` turns the stack's `gpuforge:scheduler` block into the state Slurm should hold;
`gpuforge scheduler render` writes it as gpuforge-accounts.json beside slurm.conf, and the
controller runs `gpuforge scheduler sync-accounts`, which reads Slurm's current state
(`read_current`), computes the changes (`plan_changes`) and applies them with `sacctmgr -i`
(`apply`). A second run changes nothing; a change to the stack is one re-apply.

gpuforge marks what it makes: its accounts have Organization=gpuforge and its QOS
Description=gpuforge (sacctmgr's own fields), and it removes only accounts and QOS so marked,
and only the user associations under its own accounts. A team or QOS name already taken by
something gpuforge did not make is refused, never taken over.

Sources (Slurm 26.05; the test root's man pages say the same):
- https://slurm.schedmd.com/sacctmgr.html (add/modify/remove of account, user, qos; --parsable2,
  --noheader, --immediate; GrpTRES, QOS, DefaultQOS, DefaultAccount, Organization, Description,
  Priority, Preempt, PreemptMode, GraceTime)
- https://slurm.schedmd.com/resource_limits.html (GrpTRES=gres/gpu=N on an account's association)
- https://slurm.schedmd.com/preempt.html (a QOS's Preempt list; PreemptMode=requeue; GraceTime: "Once a job has
  been selected for preemption, its end time is set to the current time plus GraceTime. The job is immediately
  sent SIGCONT and SIGTERM signals in order to provide notification of its imminent termination. This is followed
  by the SIGCONT, SIGTERM and SIGKILL signal sequence upon reaching its new end time", doc/html/preempt.shtml at
  SchedMD/slurm tag slurm-26-05-3-1)
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuforge.display import cut
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.loading import MAX_DATA_BYTES, parse_json, read_text
from gpuforge.scheduler import reserved, slurm_values

if TYPE_CHECKING:
    from gpuforge.components.specs import SchedulerSpec

# The mark on what gpuforge made (an account's Organization, a QOS's Description).
MARKER = "gpuforge"
FORMAT: Literal[1] = 1
DEFAULT_ACCOUNTS_PATH = "/etc/slurm/gpuforge-accounts.json"
SACCTMGR_TIMEOUT_S = 60
GPU_TRES = "gres/gpu"

Runner = Callable[[Sequence[str]], str]


class AccountsError(GpuforgeError):
    """sacctmgr did not answer or refused a change; the next run tries again (exit 1)."""

    exit_code = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Qos(_Strict):
    name: str
    priority: int
    preempt: tuple[str, ...] = ()
    grace_time: int = 0  # seconds between a preempted job's SIGTERM and its requeue (the QOS's GraceTime)


class Account(_Strict):
    name: str
    gpu_quota: int
    qos: tuple[str, ...] = ()  # the first is the account's DefaultQOS


class User(_Strict):
    name: str
    accounts: tuple[str, ...]
    default_account: str


class AccountsState(_Strict):
    """What Slurm should hold for one cluster: gpuforge's QOS, accounts and users."""

    comment: str = ""  # the rendered header (JSON has no comments)
    format: Literal[1] = FORMAT
    cluster: str
    qos: tuple[Qos, ...] = ()
    accounts: tuple[Account, ...] = ()
    users: tuple[User, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"comment"})

    def check(self, where: str) -> AccountsState:
        """Every name by Slurm's rules and every reference known, else an InputError naming `where`."""
        problems: list[str] = []

        def rule(value: str, check: slurm_values.Rule, field: str) -> None:
            problem = check.problem(value)
            if problem is not None:
                problems.append(f"{field} = {cut(value)}: {problem}")

        rule(self.cluster, slurm_values.CLUSTER_NAME, "cluster")
        qos = {level.name for level in self.qos}
        accounts = {account.name for account in self.accounts}
        for level in self.qos:
            rule(level.name, slurm_values.QOS_NAME, "qos.name")
            taken = reserved.slurm_qos_problem("qos.name", level.name)
            if taken is not None:
                problems.append(f"qos.name = {cut(level.name)}: {taken.rule} (source: {taken.source})")
            problems += _repeated(f"qos[{level.name}].preempt", level.preempt)
            if not 0 <= level.grace_time <= _GRACE_MAX:
                problems.append(
                    f"qos[{level.name}].grace_time = {level.grace_time}: GraceTime is 0 or more seconds, at most "
                    f"{_GRACE_MAX} (a uint32 below Slurm's INFINITE and NO_VAL)"
                )
            problems += [
                f"qos[{level.name}].preempt: {name} is not a QOS of the file"
                for name in level.preempt
                if name not in qos
            ]
        for account in self.accounts:
            rule(account.name, slurm_values.ACCOUNT_NAME, "accounts.name")
            problems += _repeated(f"accounts[{account.name}].qos", account.qos)
            if account.gpu_quota < 1:
                problems.append(
                    f"accounts[{account.name}].gpu_quota = {account.gpu_quota}: a quota is 1 or more GPUs"
                )
            problems += [
                f"accounts[{account.name}].qos: {name} is not a QOS of the file"
                for name in account.qos
                if name not in qos
            ]
        for user in self.users:
            rule(user.name, slurm_values.USER_NAME, "users.name")
            admin = reserved.slurm_user_problem("users.name", user.name)
            if admin is not None:
                problems.append(f"users.name = {cut(user.name)}: {admin.rule} (source: {admin.source})")
            problems += [
                f"users[{user.name}].accounts: {name} is not an account of the file"
                for name in user.accounts
                if name not in accounts
            ]
            if user.default_account not in user.accounts:
                problems.append(
                    f"users[{user.name}].default_account = {cut(user.default_account)}: not one of its accounts"
                )
        if problems:
            raise InputError(
                f"{where}: not a gpuforge accounts file:\n  "
                + "\n  ".join(problems)
                + "\nFix: render it again from the stack (gpuforge scheduler render) instead of editing it."
            )
        return self


def _repeated(field: str, names: Sequence[str]) -> list[str]:
    """A problem line when `names` lists one twice (Slurm keeps it once, so no sync would ever be done)."""
    twice = sorted({name for name in names if names.count(name) > 1})
    return [f"{field}: {', '.join(twice)} is listed more than once"] if twice else []


def desired_state(cluster: str, scheduler: SchedulerSpec) -> AccountsState:
    """The state Slurm should hold for the stack's teams and QOS (the spec's rules already hold)."""
    memberships: dict[str, list[tuple[str, bool]]] = {}
    for team in scheduler.teams:
        for user in team.users:
            memberships.setdefault(user.name, []).append((team.name, user.default))
    users = tuple(
        User(
            name=name,
            accounts=tuple(team for team, _ in where),
            # One team: that team; several: the one marked default (SchedulerSpec requires exactly one).
            default_account=next((team for team, default in where if default), where[0][0]),
        )
        for name, where in sorted(memberships.items())
    )
    return AccountsState(
        cluster=cluster,
        qos=tuple(
            Qos(name=q.name, priority=q.priority, preempt=q.preempts, grace_time=q.grace_period or 0)
            for q in scheduler.qos
        ),
        accounts=tuple(Account(name=t.name, gpu_quota=t.gpu_quota, qos=t.qos) for t in scheduler.teams),
        users=users,
    )


def parse_state(text: str, where: str) -> AccountsState:
    """An accounts file's JSON text as an AccountsState; InputError (exit 2) naming the field otherwise."""
    try:
        state = AccountsState.model_validate_json(text)
    except ValidationError as error:
        lines = [
            f"  {'.'.join(str(part) for part in detail['loc']) or '(file)'} = {cut(detail.get('input'))}: {detail['msg']}"
            for detail in error.errors()
        ]
        raise InputError(
            f"{where}: not a gpuforge accounts file:\n"
            + "\n".join(lines)
            + "\nFix: render it again from the stack (gpuforge scheduler render) instead of editing it."
        ) from None
    return state.check(where)


def read_accounts_file(path: Path) -> AccountsState:
    """The rendered gpuforge-accounts.json at `path`; InputError (exit 2) for a missing or bad file."""
    fix = (
        "render it with `gpuforge scheduler render` (the controller installs it as "
        + DEFAULT_ACCOUNTS_PATH
        + ")"
    )
    text = read_text(path, what="accounts file", max_bytes=MAX_DATA_BYTES, fix=fix)
    parse_json(text, source=str(path), fix=fix)  # duplicate keys, depth, non-finite numbers
    return parse_state(text, str(path))


# --- What Slurm holds now ---------------------------------------------------------------


@dataclass(frozen=True)
class CurrentQos:
    name: str
    priority: int
    preempt: tuple[str, ...]
    preempt_mode: str
    grace_time: int
    description: str


@dataclass(frozen=True)
class CurrentAccount:
    name: str
    organization: str
    gpu_quota: int | None  # None: no GrpTRES gres/gpu on the cluster's association
    qos: tuple[str, ...]
    default_qos: str


@dataclass(frozen=True)
class CurrentState:
    qos: dict[str, CurrentQos]
    accounts: dict[str, CurrentAccount]
    user_accounts: dict[str, tuple[str, ...]]  # user -> accounts with an association on the cluster
    default_accounts: dict[str, str]  # user -> DefaultAccount


def _rows(text: str, columns: int, command: str, *, free_text: int | None = None) -> list[list[str]]:
    """The `|`-separated lines of a `sacctmgr --parsable2` answer, each of `columns` fields.

    --parsable2 does not escape a `|` inside a value, and only free text (a Description, an Organization) can
    hold one, so the extra fields of a wider line are read back into column `free_text`; any other width is an
    AccountsError naming the line.
    """
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("|")
        extra = len(fields) - columns
        if extra > 0 and free_text is not None:
            fields[free_text : free_text + extra + 1] = ["|".join(fields[free_text : free_text + extra + 1])]
        if len(fields) != columns:
            raise AccountsError(
                f"`sacctmgr {command}` printed a line of {len(fields)} fields, not {columns}: {cut(line)}. "
                "Fix: run sync-accounts on the controller gpuforge made, with the sacctmgr of the Slurm its "
                "matrix pins (which prints these columns)."
            )
        rows.append(fields)
    return rows


def _names(field: str) -> tuple[str, ...]:
    return tuple(sorted(name for name in field.split(",") if name))


# sacctmgr prints a uint32 (a QOS's Priority) or a TRES count in ASCII digits; str.isdigit and int() take other
# scripts' digits, signs, spaces and '_' too, so the whole value is matched.
_COUNT = re.compile(r"[0-9]{1,20}")
_PRIORITY_MAX = 2**32 - 1
# slurmdb_qos_rec_t.grace_time is a uint32 whose top two values mean INFINITE and NO_VAL (slurm/slurm.h).
_GRACE_MAX = 2**32 - 3
# How sacctmgr prints a QOS's GraceTime: print_fields_time_from_secs, which writes secs2time_str's
# "[days-]HH:MM:SS" (days only when there are any), or nothing when unset (SchedMD/slurm src/common/print_fields.c
# and src/common/parse_time.c at tag slurm-26-05-3-1).
_GRACE_TIME = re.compile(
    r"(?:(?P<days>[0-9]{1,5})-)?(?P<hours>[0-9]{2}):(?P<minutes>[0-5][0-9]):(?P<seconds>[0-5][0-9])"
)


def _priority(value: str, name: str, command: str) -> int:
    """A QOS's Priority as sacctmgr prints it: a uint32, empty when unset (0); AccountsError otherwise."""
    if not value:
        return 0
    if _COUNT.fullmatch(value) and int(value) <= _PRIORITY_MAX:
        return int(value)
    raise AccountsError(
        f"`sacctmgr {command}` printed Priority = {cut(value)} for QOS {cut(name)}: a QOS priority is a whole "
        f"number from 0 to {_PRIORITY_MAX} (slurmdb_qos_rec_t.priority, a uint32 in slurm/slurm.h), so the "
        "answer is not the database's. Fix: look at that QOS with `sacctmgr show qos where name=NAME format=Name,Priority` and set "
        "it with `sacctmgr modify qos where name=NAME set Priority=N`, then run again."
    )


def _grace_time(value: str, name: str, command: str) -> int:
    """A QOS's GraceTime as sacctmgr prints it, in seconds (empty: unset, 0); AccountsError otherwise."""
    if not value:
        return 0
    match = _GRACE_TIME.fullmatch(value)
    if match is not None and int(match["hours"]) < 24:
        seconds = int(match["days"] or 0) * 86400 + int(match["hours"]) * 3600
        seconds += int(match["minutes"]) * 60 + int(match["seconds"])
        if seconds <= _GRACE_MAX:
            return seconds
    raise AccountsError(
        f"`sacctmgr {command}` printed GraceTime = {cut(value)} for QOS {cut(name)}: sacctmgr prints a grace time "
        "as [days-]HH:MM:SS (print_fields_time_from_secs), so the answer is not the database's. Fix: look at that "
        "QOS with `sacctmgr show qos where name=NAME format=Name,GraceTime` and set it with `sacctmgr modify qos "
        "where name=NAME set GraceTime=SECONDS`, then run again."
    )


def _gpu_quota(tres: str) -> int | None:
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == GPU_TRES and _COUNT.fullmatch(value):
            return int(value)
    return None


# Each query: its sacctmgr arguments and its column count.
QOS_QUERY = ("show", "qos", "format=Name,Priority,Preempt,PreemptMode,GraceTime,Description")
ACCOUNT_QUERY = ("show", "account", "format=Account,Organization,Description")
USER_QUERY = ("show", "user", "format=User,DefaultAccount")


def assoc_query(cluster: str) -> tuple[str, ...]:
    return (
        "show",
        "assoc",
        f"cluster={cluster}",
        "format=Cluster,Account,User,ParentName,GrpTRES,QOS,DefaultQOS",
    )


def read_current(run: Runner, cluster: str) -> CurrentState:
    """Slurm's QOS, accounts, associations and default accounts, from `sacctmgr --parsable2 --noheader show`.

    Text, not --json: sacctmgr 26.05's JSON of these entities is a data_parser dump whose shape
    changes with the plugin version, while these columns are sacctmgr's documented format fields.
    """
    command = " ".join(QOS_QUERY)
    qos = {
        row[0]: CurrentQos(
            row[0],
            _priority(row[1], row[0], command),
            _names(row[2]),
            row[3],
            _grace_time(row[4], row[0], command),
            row[5],
        )
        for row in _rows(run(QOS_QUERY), 6, command, free_text=5)
    }
    # Organization, not the last column, takes a stray '|': an account then reads as not gpuforge's (refused
    # by plan_changes), never as gpuforge's (which a sync may remove).
    organizations = {
        row[0]: row[1] for row in _rows(run(ACCOUNT_QUERY), 3, " ".join(ACCOUNT_QUERY), free_text=1)
    }
    accounts: dict[str, CurrentAccount] = {}
    user_accounts: dict[str, list[str]] = {}
    query = assoc_query(cluster)
    for row_cluster, account, user, _parent, tres, qos_list, default_qos in _rows(
        run(query), 7, " ".join(query)
    ):
        if row_cluster != cluster:
            continue
        if user:
            user_accounts.setdefault(user, []).append(account)
            continue
        if account not in organizations:
            # Slurm keeps no association of an account it does not hold: two answers of one moment disagree.
            raise AccountsError(
                f"`sacctmgr {' '.join(query)}` lists account {cut(account)}, which `sacctmgr "
                f"{' '.join(ACCOUNT_QUERY)}` did not print, so one of the answers is not the database's. "
                "Fix: check that slurmdbd runs (`sacctmgr show cluster`), then run again."
            )
        accounts[account] = CurrentAccount(
            account, organizations[account], _gpu_quota(tres), _names(qos_list), default_qos
        )
    # An account with no association on this cluster is still an account (sacctmgr show account).
    for name, organization in organizations.items():
        accounts.setdefault(name, CurrentAccount(name, organization, None, (), ""))
    defaults = {row[0]: row[1] for row in _rows(run(USER_QUERY), 2, " ".join(USER_QUERY))}
    return CurrentState(
        qos, accounts, {user: tuple(sorted(a)) for user, a in user_accounts.items()}, defaults
    )


# --- The changes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One sacctmgr command and what it does, in words."""

    what: str
    args: tuple[str, ...]


def _qos_settings(level: Qos) -> tuple[str, ...]:
    return (
        f"Priority={level.priority}",
        # An empty value clears the list (sacctmgr(1): "''" restores the default; the shell passes it as empty).
        f"Preempt={','.join(level.preempt)}",
        "PreemptMode=requeue",
        # Seconds between SIGTERM and the requeue; 0 requeues at once (sacctmgr(1), GraceTime).
        f"GraceTime={level.grace_time}",
        f"Description={MARKER}",
    )


def _account_settings(account: Account) -> tuple[str, ...]:
    return (
        f"GrpTRES={GPU_TRES}={account.gpu_quota}",
        f"QOS={','.join(account.qos) if account.qos else 'normal'}",
        f"DefaultQOS={account.qos[0] if account.qos else 'normal'}",
    )


def plan_changes(desired: AccountsState, current: CurrentState) -> list[Change]:
    """The sacctmgr commands that make `current` equal to `desired`, in an order Slurm accepts:
    QOS before the accounts that use them, associations before a default account points at one,
    and removals last (users' associations, then accounts, then QOS nothing uses any more).

    A team or QOS name held by an account or QOS gpuforge did not make is an InputError (exit 2).
    """
    cluster = desired.cluster
    changes: list[Change] = []
    taken = [
        f"QOS {level.name} (Description {cut(current.qos[level.name].description)})"
        for level in desired.qos
        if level.name in current.qos and current.qos[level.name].description != MARKER
    ] + [
        f"account {account.name} (Organization {cut(current.accounts[account.name].organization)})"
        for account in desired.accounts
        if account.name in current.accounts and current.accounts[account.name].organization != MARKER
    ]
    if taken:
        raise InputError(
            f"{'; '.join(taken)} already exists in Slurm and was not made by gpuforge (its mark is "
            f"Organization={MARKER} on accounts, Description={MARKER} on QOS), so gpuforge will not change it. "
            "Fix: rename the team or QOS in gpuforge:scheduler, or hand it to gpuforge with `sacctmgr modify "
            f"account NAME set Organization={MARKER}` (or `modify qos NAME set Description={MARKER}`)."
        )
    # QOS: every missing one made first without Preempt (sacctmgr refuses a Preempt naming a QOS that does not
    # exist yet: "You gave a bad qos"), then each set whole where it differs.
    for level in desired.qos:
        if level.name not in current.qos:
            changes.append(
                Change(
                    f"add QOS {level.name} (priority {level.priority})",
                    (
                        "add",
                        "qos",
                        level.name,
                        f"Priority={level.priority}",
                        "PreemptMode=requeue",
                        f"GraceTime={level.grace_time}",
                        f"Description={MARKER}",
                    ),
                )
            )
    for level in desired.qos:
        now = current.qos.get(level.name)
        if now is None and not level.preempt:
            continue
        if now is None or (now.priority, now.preempt, now.preempt_mode, now.grace_time) != (
            level.priority,
            tuple(sorted(level.preempt)),
            "requeue",
            level.grace_time,
        ):
            changes.append(
                Change(
                    f"set QOS {level.name}: priority {level.priority}, "
                    f"preempts {', '.join(level.preempt) or 'none'} (requeued)"
                    + (
                        f", its jobs get SIGTERM and {level.grace_time} s when preempted"
                        if level.grace_time
                        else ""
                    ),
                    ("modify", "qos", "where", f"name={level.name}", "set", *_qos_settings(level)),
                )
            )
    for account in desired.accounts:
        now_account = current.accounts.get(account.name)
        settings = _account_settings(account)
        if now_account is None:
            changes.append(
                Change(
                    f"add account {account.name} (quota {account.gpu_quota} GPUs, QOS {', '.join(account.qos) or 'normal'})",
                    (
                        "add",
                        "account",
                        account.name,
                        f"Cluster={cluster}",
                        f"Organization={MARKER}",
                        f"Description={account.name}",
                        *settings,
                    ),
                )
            )
        elif (now_account.gpu_quota, now_account.qos, now_account.default_qos) != (
            account.gpu_quota,
            tuple(sorted(account.qos or ("normal",))),
            (account.qos or ("normal",))[0],
        ):
            changes.append(
                Change(
                    f"set account {account.name}: quota {account.gpu_quota} GPUs, QOS {', '.join(account.qos) or 'normal'}",
                    (
                        "modify",
                        "account",
                        "where",
                        f"name={account.name}",
                        f"cluster={cluster}",
                        "set",
                        *settings,
                    ),
                )
            )
    ours = {name for name, account in current.accounts.items() if account.organization == MARKER}
    ours |= {account.name for account in desired.accounts}
    wanted_users = {user.name: user for user in desired.users}
    for user in desired.users:
        held = set(current.user_accounts.get(user.name, ()))
        missing = [account for account in user.accounts if account not in held]
        if missing:
            changes.append(
                Change(
                    f"add user {user.name} to {', '.join(missing)}",
                    (
                        "add",
                        "user",
                        user.name,
                        f"Cluster={cluster}",
                        f"Account={','.join(missing)}",
                        f"DefaultAccount={user.default_account}",
                    ),
                )
            )
        if current.default_accounts.get(user.name) not in (None, user.default_account):
            changes.append(
                Change(
                    f"set user {user.name}'s default account to {user.default_account}",
                    (
                        "modify",
                        "user",
                        "where",
                        f"name={user.name}",
                        "set",
                        f"DefaultAccount={user.default_account}",
                    ),
                )
            )
    for name, held_accounts in sorted(current.user_accounts.items()):
        wanted = set(wanted_users[name].accounts) if name in wanted_users else set()
        stale = sorted(account for account in held_accounts if account in ours and account not in wanted)
        if stale:
            changes.append(
                Change(
                    f"remove user {name} from {', '.join(stale)}",
                    (
                        "remove",
                        "user",
                        "where",
                        f"name={name}",
                        f"cluster={cluster}",
                        f"account={','.join(stale)}",
                    ),
                )
            )
    wanted_accounts = {account.name for account in desired.accounts}
    for name in sorted(ours - wanted_accounts):
        changes.append(Change(f"remove account {name}", ("remove", "account", "where", f"name={name}")))
    wanted_qos = {level.name for level in desired.qos}
    for name, level_now in sorted(current.qos.items()):
        if level_now.description == MARKER and name not in wanted_qos:
            changes.append(Change(f"remove QOS {name}", ("remove", "qos", "where", f"name={name}")))
    return changes


def run_sacctmgr(args: Sequence[str]) -> str:
    """`sacctmgr --parsable2 --noheader --immediate ARGS`; its stdout, or an AccountsError (exit 1)."""
    argv = ["sacctmgr", "--parsable2", "--noheader", "--immediate", *args]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=SACCTMGR_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AccountsError(
            f"`sacctmgr {' '.join(args)}` did not run: {error}. Fix: run on the Slurm controller, with slurmdbd up."
        ) from None
    # Slurm stores the bytes it was given: another admin's Latin-1 description is not UTF-8. gpuforge's own
    # names are ASCII (slurm_values), so a replaced byte only ever marks text that is not gpuforge's.
    if done.returncode != 0:
        raise AccountsError(
            f"`sacctmgr {' '.join(args)}` exited {done.returncode}: "
            f"{cut(done.stderr.decode('utf-8', errors='replace').strip())}. "
            "Fix: check that slurmdbd runs (`sacctmgr show cluster`), then run again."
        )
    return done.stdout.decode("utf-8", errors="replace")


def sync(
    desired: AccountsState, run: Runner, *, dry_run: bool, report: Callable[[str], None]
) -> list[Change]:
    """Read Slurm's state, compute the changes, and (unless `dry_run`) apply them in order; the changes made.

    A failed command stops the run (AccountsError, exit 1): the changes before it stay applied, and the
    next run computes the rest from what Slurm then holds.
    """
    changes = plan_changes(desired, read_current(run, desired.cluster))
    for change in changes:
        if dry_run:
            report(f"would {change.what}: sacctmgr -i {' '.join(change.args)}")
        else:
            run(change.args)
            report(f"{change.what}: sacctmgr -i {' '.join(change.args)}")
    if not changes:
        report(
            f"nothing to change: Slurm holds the {len(desired.accounts)} team(s), {len(desired.users)} user(s) and {len(desired.qos)} QOS of the file"
        )
    return changes
