"""What each Slurm version can do: release series, PMIx support and feature gates.

The facts live in `gpuforge/data/slurm.yaml`, each with its source. The renderer asks
`require` before it writes a version-dependent setting, and the matrix rules ask the
same table, so a setting and the check that the pinned Slurm knows it cannot drift apart.
"""

from __future__ import annotations

import re
from datetime import date
from functools import cache
from importlib import resources

import yaml
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict

from gpuforge.errors import InputError
from gpuforge.scheduler import slurm_values

SLURM_FILE = "data/slurm.yaml"
# Slurm's own release numbering: YY.MM.MICRO (e.g. 26.05.5), slurm_values' rule. `\Z` makes
# `.match` (as the matrix rules call it) take the whole text: `$` would let a trailing newline through.
SLURM_VERSION = re.compile(rf"(?:{slurm_values.SLURM_VERSION.pattern.pattern})\Z")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Series(_Strict):
    released: date
    end_of_support: date


class SeriesTable(_Strict):
    source: str
    warn_days_before_eol: int
    entries: dict[str, Series]


class PmixTable(_Strict):
    source: str
    supported_majors: dict[str, list[int]]


class Feature(_Strict):
    min_version: str
    setting: str
    source: str


class SlurmFacts(_Strict):
    schema_: int = 1
    series: SeriesTable
    pmix: PmixTable
    features: dict[str, Feature]

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


@cache
def facts() -> SlurmFacts:
    """The Slurm fact table shipped in the package."""
    raw = yaml.safe_load(resources.files("gpuforge").joinpath(SLURM_FILE).read_text(encoding="utf-8"))
    raw["schema_"] = raw.pop("schema")
    return SlurmFacts.model_validate(raw)


def parse_version(text: str, *, where: str) -> Version:
    """A Slurm release number (`26.05.5`), or an InputError naming `where` and the form."""
    slurm_values.SLURM_VERSION.check(text, field=where)
    try:
        return Version(text)
    except InvalidVersion:  # unreachable for the pattern above; kept as a clear error, not a traceback
        raise InputError(f"{where} = {text!r}: not a version number.") from None


def series_of(version: Version) -> str:
    """`26.05` for 26.05.5: the major release a version belongs to."""
    return f"{version.major:02d}.{version.minor:02d}"


def missing_features(features: tuple[str, ...], version: Version) -> list[tuple[str, Feature]]:
    """The features of `features` that `version` predates, with their facts."""
    table = facts().features
    return [(name, table[name]) for name in features if version < Version(table[name].min_version)]


def require(features: tuple[str, ...], version: Version, *, what: str) -> None:
    """Stop with an InputError when `version` lacks any of `features` (`what` names the setting's reason)."""
    missing = missing_features(features, version)
    if missing:
        lines = "; ".join(
            f"{fact.setting} needs Slurm {fact.min_version} or newer (source: {fact.source})"
            for _, fact in missing
        )
        raise InputError(
            f"Slurm {version}: {what} uses settings this version does not know: {lines}. "
            "Fix: pin a newer Slurm in the matrix (slurm.version), or drop the option that needs it."
        )


# The features every rendered gpuforge config uses (configless, dynamic nodes joining
# through nodesets, cons_tres, auth/slurm), and those added when the cluster has a network
# topology. The renderer and the matrix rule `slurm.features` both read these.
RENDERED_FEATURES: tuple[str, ...] = ("cons_tres", "configless", "dynamic_nodes", "auth_slurm")
TOPOLOGY_FEATURES: tuple[str, ...] = ("topology_tree", "dynamic_node_topology")


def has(feature: str, version: Version) -> bool:
    """Whether `version` knows `feature` (a name in gpuforge/data/slurm.yaml `features`).

    For settings rendered only where the pinned Slurm has them, such as slurmctld's own
    OpenMetrics (`openmetrics`), which the monitoring layer scrapes when slurm.conf turns them on.
    """
    return not missing_features((feature,), version)
