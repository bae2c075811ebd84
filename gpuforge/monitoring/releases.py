"""Which Prometheus release series are still supported: the table the matrix rule
monitoring.prometheus-supported reads.

The facts live in `gpuforge/data/monitoring_versions.yaml`, each row with its source. Prometheus
supports a minor series for 6 weeks unless it is a long-term-support (LTS) series, which gets a
year; an image pins its Prometheus for longer than 6 weeks, so only an LTS series is accepted.
"""

from __future__ import annotations

from datetime import date
from functools import cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field

DATA_FILE = "data/monitoring_versions.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LtsSeries(_Strict):
    end_of_support: date
    source: str


class PrometheusSeries(_Strict):
    source: str
    non_lts_support_weeks: int = Field(gt=0)
    warn_days_before_eol: int = Field(ge=0)
    lts: dict[str, LtsSeries] = Field(min_length=1)

    def current(self, today: date) -> list[str]:
        """The LTS series still supported on `today`, newest first."""
        alive = [name for name, row in self.lts.items() if row.end_of_support > today]
        return sorted(alive, key=lambda name: tuple(int(part) for part in name.split(".")), reverse=True)


class MonitoringVersions(_Strict):
    schema_: int = Field(1, alias="schema")
    prometheus: PrometheusSeries

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


@cache
def monitoring_versions() -> MonitoringVersions:
    """The release-support table shipped in the package."""
    text = resources.files("gpuforge").joinpath(DATA_FILE).read_text(encoding="utf-8")
    return MonitoringVersions.model_validate(yaml.safe_load(text))
