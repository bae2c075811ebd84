"""The report's time window: two aware UTC datetimes, from --since and --until, ending no later than now.

Rules (README, "Usage and cost"):
- a time without a zone is refused (sacct prints the controller's local time; a guess could be off by hours);
- no time before 1970-01-01T00:00:00Z: Slurm's accounting records times as seconds since the Unix epoch,
  with 0 meaning "not set", so nothing it records is older; a window reaching back past it (or past
  what Python's datetime can hold, year 1 to 9999) is bad input, not a figure;
- the window ends at now at the latest: hours not yet past were neither held nor left unused, so a
  --until in the future is clipped at now and the report says so (`window.until_requested`, `note`);
  a window that starts after now has nothing in it and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from gpuforge.display import cut
from gpuforge.errors import InputError

DEFAULT_DAYS = 7  # --since defaults to a week before --until: one report per week is the usual ask
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # Slurm's time 0 ("not set"); nothing it records is older


@dataclass(frozen=True)
class Window:
    since: datetime
    until: datetime

    @property
    def seconds(self) -> int:
        return int((self.until - self.since).total_seconds())

    def clip(self, start: datetime, end: datetime) -> int:
        """Whole seconds of [start, end) inside the window (0 when they do not meet)."""
        return max(0, int((min(end, self.until) - max(start, self.since)).total_seconds()))


@dataclass(frozen=True)
class Asked:
    """The window the report covers, and the --until that was asked for when it lay after now."""

    window: Window
    until_requested: datetime

    @property
    def note(self) -> str | None:
        if self.until_requested == self.window.until:
            return None
        return (
            f"--until {self.until_requested.isoformat()} is after now: the window ends now "
            f"({self.window.until.isoformat()}); hours not yet past are neither held nor unused"
        )


def _outside(flag: str, shown: str) -> InputError:
    return InputError(
        f"{flag} {shown}: outside the times the report can use (from 1970-01-01T00:00:00Z, the Unix epoch "
        "Slurm's accounting counts from, to now). Fix: pass a time after 1970, e.g. "
        f"{flag.split()[0]} 2026-12-01."
    )


def parse_time(flag: str, text: str) -> datetime:
    """An ISO 8601 time with a time zone, or a date (midnight UTC); InputError naming the flag otherwise."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            value: datetime | None = datetime(day.year, day.month, day.day, tzinfo=UTC)
        else:
            value = datetime.fromisoformat(text)
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise InputError(
            f"{flag} {cut(text)}: not a date (YYYY-MM-DD, taken as 00:00 UTC) nor an ISO 8601 time with a "
            f"time zone. Fix: pass e.g. {flag} 2026-12-01 or {flag} 2026-12-01T09:00:00Z."
        )
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # year 1 less an hour, year 9999 plus one: beyond what a datetime holds
        raise _outside(flag, cut(text)) from None
    if utc < EPOCH:
        raise _outside(flag, cut(text))
    return utc


def window(since: str | None, until: str | None, *, now: datetime) -> Asked:
    """The window the flags name, clipped at `now`; --until defaults to now, --since to DEFAULT_DAYS
    before --until (the --until asked for, so a week that has not begun yet is refused, not shifted)."""
    now = now.astimezone(UTC).replace(microsecond=0)
    end = parse_time("--until", until) if until is not None else now
    if since is not None:
        start = parse_time("--since", since)
    else:
        start = end - timedelta(days=DEFAULT_DAYS)
        if start < EPOCH:
            raise _outside("--since (default: a week before --until)", start.isoformat())
    if start >= now:
        raise InputError(
            f"--since {start.isoformat()} is after now ({now.isoformat()}): nothing has been held in the window "
            "yet. Fix: pass a --since in the past (it defaults to a week before --until)."
        )
    if start >= end:
        raise InputError(
            f"--since {start.isoformat()} is not before --until {end.isoformat()}: the window is empty. "
            "Fix: pass a --since earlier than --until."
        )
    return Asked(Window(start, min(end, now)), end)
