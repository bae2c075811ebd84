"""dcgm-exporter's field list for one instance type, from gpuforge/data/monitoring_fields.yaml.

dcgm-exporter reads `DCGM field, Prometheus type, help` rows from a CSV (`-f FILE`; `#` starts a
comment: its counter_config.go reads it with Go's csv reader, Comment '#'). Its default list
leaves SM_ACTIVE, SM_OCCUPANCY, ECC, row-remap pending, throttle violations and NVLink errors
and bytes out; gpuforge renders its own, per GPU architecture: profiling fields where the
architecture serves them, NVLink rows where the GPUs have NVLink. Every row's name and id are
DCGM's own (dcgm_fields.h at the pinned tag), named in the data file beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpuforge.errors import InputError
from gpuforge.hardware import InstanceType

DATA_FILE = "data/monitoring_fields.yaml"
NEEDS_NVLINK = "nvlink"
FIELDS_FILE = "dcgm-exporter-fields.csv"
_TYPES = ("gauge", "counter")


@dataclass(frozen=True)
class DcgmField:
    """One DCGM field the exporter collects."""

    name: str
    field_id: int
    prom_type: str
    help: str
    architectures: str | tuple[str, ...]  # "all", "profiling", or a list of architectures
    needs: str | None

    @property
    def profiling(self) -> bool:
        """A DCP field (ids 1001 and up, DCGM_FI_PROF_*): served only where the architecture profiles."""
        return self.name.startswith("DCGM_FI_PROF_")


@dataclass(frozen=True)
class FieldCatalog:
    dcgm_tag: str
    dcgm_exporter_tag: str
    profiling: dict[str, bool]  # architecture -> serves profiling fields
    fields: tuple[DcgmField, ...]

    def for_type(self, instance: InstanceType) -> tuple[DcgmField, ...]:
        """The fields dcgm-exporter collects on `instance`'s GPUs."""
        architecture = instance.gpu_architecture
        if architecture not in self.profiling:
            raise InputError(
                f"{DATA_FILE}: GPU architecture {architecture!r} of {instance.name} has no row in `architectures`, "
                "so gpuforge does not know which DCGM fields its GPUs serve. Fix: add the architecture with "
                "`profiling: true|false` and its source."
            )
        return tuple(
            field for field in self.fields if _applies(field, architecture, self.profiling, instance)
        )


def _applies(field: DcgmField, architecture: str, profiling: dict[str, bool], instance: InstanceType) -> bool:
    if field.needs == NEEDS_NVLINK and not instance.nvswitch:
        return False
    if field.architectures == "all":
        return True
    if field.architectures == "profiling":
        return profiling[architecture]
    return architecture in field.architectures


def _field(row: dict[str, Any]) -> DcgmField:
    architectures = row["architectures"]
    field = DcgmField(
        name=row["name"],
        field_id=row["id"],
        prom_type=row["type"],
        help=row["help"],
        architectures=architectures if isinstance(architectures, str) else tuple(architectures),
        needs=row.get("needs"),
    )
    problems = []
    if not field.name.startswith("DCGM_FI_"):
        problems.append("a DCGM field name starts with DCGM_FI_")
    if field.prom_type not in _TYPES:
        problems.append(f"type is one of {', '.join(_TYPES)}")
    if field.profiling != (field.architectures == "profiling"):
        problems.append("DCGM_FI_PROF_* rows, and only they, take `architectures: profiling`")
    if field.needs not in (None, NEEDS_NVLINK):
        problems.append(f"`needs` is {NEEDS_NVLINK} or absent")
    if any(ch in field.help for ch in ',"\n'):
        problems.append("help holds no comma, quote or newline (it is a CSV cell)")
    if problems:
        raise ValueError(f"{DATA_FILE}: row {field.name}: " + "; ".join(problems))
    return field


@cache
def load_fields() -> FieldCatalog:
    """The field catalog shipped with gpuforge (a broken shipped file is a bug: ValueError)."""
    data = yaml.safe_load(resources.files("gpuforge").joinpath(DATA_FILE).read_text(encoding="utf-8"))
    fields = tuple(_field(row) for row in data["fields"])
    for attribute in ("name", "field_id"):
        values = [getattr(field, attribute) for field in fields]
        duplicates = sorted({str(value) for value in values if values.count(value) > 1})
        if duplicates:
            raise ValueError(f"{DATA_FILE}: {attribute} appears twice: {', '.join(duplicates)}")
    return FieldCatalog(
        dcgm_tag=data["dcgm_tag"],
        dcgm_exporter_tag=data["dcgm_exporter_tag"],
        profiling={name: bool(row["profiling"]) for name, row in data["architectures"].items()},
        fields=fields,
    )


def field_list_csv(instance: InstanceType, *, cluster: str) -> str:
    """dcgm-exporter's CSV (`dcgm-exporter -f FILE`) for the GPUs of `instance`."""
    catalog = load_fields()
    rows = catalog.for_type(instance)
    lines = [
        f"# {FIELDS_FILE} for cluster {cluster}, rendered by gpuforge: the fields of {instance.name} "
        f"({instance.gpu_architecture}) for DCGM {catalog.dcgm_tag} and dcgm-exporter {catalog.dcgm_exporter_tag}",
        "# DCGM field, Prometheus metric type, help message (names and ids: gpuforge/data/monitoring_fields.yaml)",
    ]
    lines += [f"{field.name}, {field.prom_type}, {field.help}" for field in rows]
    return "\n".join(lines) + "\n"
