"""Times for people: each printed in the user's local time zone and in UTC.

Capacity Blocks start and end at fixed UTC times, while the person running
preflight plans in local time; printing both avoids a misread by hours. All
comparisons use timezone-aware datetimes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo


def when(moment: datetime, local: tzinfo | None) -> str:
    """`moment` in the local zone (`None`: the system's zone, with its rules on that date) and in UTC."""
    here = moment.astimezone(local)
    utc = moment.astimezone(UTC)
    if here.utcoffset() == timedelta(0) and here.tzname() in ("UTC", "GMT", None):
        return f"{utc:%Y-%m-%d %H:%M} UTC"
    return f"{here:%Y-%m-%d %H:%M} {here.tzname() or here.strftime('%z')} ({utc:%Y-%m-%d %H:%M} UTC)"


def span(delta: timedelta) -> str:
    """A duration in days, hours and minutes, e.g. '2 d 3 h 5 min'; negative spans read as their size."""
    minutes = int(abs(delta).total_seconds() // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{mins} min" if mins else ""]
    return " ".join(part for part in parts if part) or "0 min"
