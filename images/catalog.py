"""The AMI catalog: which AMI was built from which matrix, per region.

Stacks (`gpuforge plan`) and the policy pack may only use AMIs recorded here.
The file is schema-versioned JSON:

    {"schema": 1, "images": {"<matrix digest>": {"<region>": {<entry>}}}}

Writes replace the file atomically (temporary file, fsync, rename) under a
file lock, so two builds finishing at once both land and a reader never sees
half a file. A missing file is an empty catalog; anything else that is not a
valid catalog is an error naming the file and the field.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from gpuforge.atomic import write_text_atomic
from gpuforge.errors import InputError
from gpuforge.loading import MAX_DATA_BYTES, load_json

SCHEMA = 1
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CATALOG = REPO_ROOT / "images" / "catalog.json"
LOCAL_CATALOG = REPO_ROOT / "images" / "catalog.local.json"
LOCK_TIMEOUT_S = 60.0
FIX = "Fix: restore the file from version control, or delete it and rebuild with `gpuforge image build`."


@dataclass(frozen=True)
class CatalogEntry:
    """One AMI built from one matrix in one region."""

    ami_id: str
    region: str
    matrix_name: str
    matrix_version: str
    matrix_digest: str
    built_at: str
    packer_version: str


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ami_id: str = Field(pattern=r"^ami-([0-9a-f]{8}|[0-9a-f]{17})$")
    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
    matrix_name: str = Field(min_length=1)
    matrix_version: str = Field(min_length=1)
    matrix_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    built_at: str
    packer_version: str = Field(min_length=1)

    @field_validator("built_at")
    @classmethod
    def _utc_timestamp(cls, value: str) -> str:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError("must be an ISO 8601 timestamp such as 2026-01-31T12:00:00+00:00") from None
        offset = moment.utcoffset()
        if offset is None or offset.total_seconds() != 0:
            raise ValueError("must be in UTC (offset +00:00 or Z)")
        return value


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: StrictInt = Field(alias="schema")
    images: dict[str, dict[str, _Entry]]


@dataclass(frozen=True)
class Catalog:
    path: Path
    entries: tuple[CatalogEntry, ...]

    def lookup(self, digest: str, region: str) -> CatalogEntry | None:
        return next((e for e in self.entries if e.matrix_digest == digest and e.region == region), None)

    def to_json(self) -> dict[str, Any]:
        images: dict[str, dict[str, dict[str, str]]] = {}
        for entry in self.entries:
            images.setdefault(entry.matrix_digest, {})[entry.region] = asdict(entry)
        return {"schema": SCHEMA, "images": images}


def now_utc() -> str:
    """The build time format the catalog stores: ISO 8601, UTC, whole seconds."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def utc_timestamp(text: str) -> str:
    """An EC2 timestamp (e.g. CreationDate `2026-01-31T12:00:00.000Z`) in the catalog's format."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0).isoformat()


def _invalid(path: Path, field: str, problem: str) -> InputError:
    return InputError(f"{path}: not a valid gpuforge AMI catalog: {field}: {problem}. {FIX}")


def load_catalog(path: Path) -> Catalog:
    """Read a catalog; a missing file is an empty catalog, a malformed one an InputError."""
    try:
        path.stat()
    except FileNotFoundError:
        return Catalog(path, ())
    except (OSError, ValueError):
        pass  # a NUL byte, an over-long name, no permission: load_json reports it with the path and the fix
    raw = load_json(
        path, what="AMI catalog", max_bytes=MAX_DATA_BYTES, fix=FIX.removeprefix("Fix: ").rstrip(".")
    )
    if not isinstance(raw, dict):
        raise _invalid(path, "(file)", f"expected a JSON object, found {type(raw).__name__}")
    # `type(...) is int`: JSON's true equals 1 in Python, and a boolean is not a schema number.
    if type(raw.get("schema")) is not int or raw.get("schema") != SCHEMA:
        raise _invalid(
            path, "schema", f"this gpuforge reads schema {SCHEMA}, the file says {raw.get('schema')!r}"
        )
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _invalid(path, where, f"{first['msg']} (found {first.get('input')!r})") from None
    entries: list[CatalogEntry] = []
    for digest, regions in sorted(parsed.images.items()):
        for region, entry in sorted(regions.items()):
            if entry.matrix_digest != digest or entry.region != region:
                raise _invalid(
                    path,
                    f"images.{digest}.{region}",
                    f"the entry says digest {entry.matrix_digest} region {entry.region}, "
                    "but is filed under another key",
                )
            entries.append(CatalogEntry(**entry.model_dump()))
    return Catalog(path, tuple(entries))


def record_entry(path: Path, entry: CatalogEntry) -> Catalog:
    """Add or replace the entry for (digest, region), atomically and under the catalog's lock."""
    _Entry.model_validate(asdict(entry))
    lock = FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S)
    try:
        with lock:
            current = load_catalog(path)
            kept = [
                e
                for e in current.entries
                if (e.matrix_digest, e.region) != (entry.matrix_digest, entry.region)
            ]
            updated = Catalog(path, (*kept, entry))
            write_text_atomic(path, json.dumps(updated.to_json(), indent=2, sort_keys=True) + "\n")
    except Timeout:
        raise InputError(
            f"{path}: another build has held the catalog lock {path}.lock for {LOCK_TIMEOUT_S:g} s. "
            "Fix: wait for it to finish, or remove the lock file if no gpuforge is running."
        ) from None
    return load_catalog(path)
