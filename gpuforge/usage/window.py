"""The report's time window: two aware UTC datetimes, from --since and --until."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from gpuforge.display import cut
from gpuforge.errors import InputError

DEFAULT_DAYS = 7  # --since defaults to a week before --until: one report per week is the usual ask


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


def parse_time(flag: str, text: str) -> datetime:
    """An ISO 8601 time with a time zone, or a date (midnight UTC); InputError naming the flag otherwise.

    A time without a zone is refused rather than guessed: sacct prints the controller's local time
    and the report is in UTC, so a zone-less value could be off by hours without anyone noticing.
    """
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        value = datetime.fromisoformat(text)
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise InputError(
            f"{flag} {cut(text)}: not a date (YYYY-MM-DD, taken as 00:00 UTC) nor an ISO 8601 time with a "
            f"time zone. Fix: pass e.g. {flag} 2026-12-01 or {flag} 2026-12-01T09:00:00Z."
        )
    return value.astimezone(UTC)


def window(since: str | None, until: str | None, *, now: datetime) -> Window:
    """The window the flags name; --until defaults to now, --since to DEFAULT_DAYS before --until."""
    end = parse_time("--until", until) if until is not None else now.astimezone(UTC).replace(microsecond=0)
    start = parse_time("--since", since) if since is not None else end - timedelta(days=DEFAULT_DAYS)
    if start >= end:
        raise InputError(
            f"--since {start.isoformat()} is not before --until {end.isoformat()}: the window is empty. "
            "Fix: pass a --since earlier than --until."
        )
    return Window(start, end)
