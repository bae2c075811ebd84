"""The AMI catalog: which AMI was built from which matrix, per region.

Stacks (`gpuforge plan`) and the policy pack may only use AMIs recorded here, and
they all read it through `load_catalog`. A catalog is one of two layouts, told
apart by the path:

- **a folder** (the default, `images/catalog/`): one record file per build, named
  `<matrix>-<digest>-<home region>.json`, holding the AMI of the region it was
  built in and of every region it was copied to. Builds in separate CI jobs write
  separate files, so git merges their branches without a conflict, and no job can
  overwrite another's entry. Each build's SBOM lies beside its record, in `sbom/`.
- **a single file** (`--catalog FILE.json`, the layout before folders): the same
  JSON in one file. It keeps working for reading and writing, without SBOMs.

Every file has the same schema-versioned JSON:

    {"schema": 2, "images": {"<matrix digest>": {"<region>": {<entry>}}}}

Schema 1 files (no account, copy, share or SBOM fields) are read as they are.

Writes replace one file atomically (temporary file, fsync, rename) under a lock
file, so a reader never sees half a file and a build writes all of its regions
or none. A writer only ever adds or replaces its own record; where two records
hold the same matrix and region (two branches merged), the newest `built_at`
wins and the older one is kept as `shadowed`, for `image prune` to deregister.
For a writer, a missing path is an empty catalog (the first build creates it);
a command that only reads (`image list`, `image prune`, `preflight`, `plan`,
`policy check`) goes through `read_catalog`, where a missing path is a
`CatalogNotFound` (exit 2): a mistyped path must not read as "no AMIs". Anything
else that is not a valid catalog is an error naming the file and the field.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator

from gpuforge.atomic import write_text_atomic
from gpuforge.display import cut
from gpuforge.errors import InputError
from gpuforge.loading import MAX_DATA_BYTES, load_json

SCHEMA = 2
READABLE_SCHEMAS = (1, 2)
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CATALOG = REPO_ROOT / "images" / "catalog"
LOCAL_CATALOG = REPO_ROOT / "images" / "catalog.local"
SBOM_FOLDER = "sbom"
LOCK_NAME = ".lock"
LOCK_TIMEOUT_S = 60.0
# A folder read while a build writes into it is read again; this many times at most.
READ_ATTEMPTS = 5
FIX = "Fix: restore the file from version control, or delete it and rebuild with `gpuforge image build`."


@dataclass(frozen=True)
class CatalogEntry:
    """One AMI built from one matrix in one region (built there, or copied from the home region)."""

    ami_id: str
    region: str
    matrix_name: str
    matrix_version: str
    matrix_digest: str
    built_at: str
    packer_version: str
    account_id: str | None = None
    """The AWS account that owns the AMI; None in schema 1 files."""
    copied_from: str | None = None
    """For a copy, the AMI id it was copied from (in the record's home region)."""
    shared_with: tuple[str, ...] = ()
    """Accounts the AMI and its snapshots are shared with."""
    sbom: str | None = None
    """The SBOM's path, relative to the catalog folder."""

    @property
    def key(self) -> tuple[str, str]:
        return self.matrix_digest, self.region

    def to_json(self) -> dict[str, Any]:
        """The entry as stored: optional fields only when set, so schema 1 readers' fields stay as they were."""
        data = asdict(self)
        data["shared_with"] = list(self.shared_with)
        return {key: value for key, value in data.items() if value not in (None, [])}


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ami_id: str = Field(pattern=r"^ami-([0-9a-f]{8}|[0-9a-f]{17})$")
    region: str = Field(pattern=r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
    matrix_name: str = Field(min_length=1)
    matrix_version: str = Field(min_length=1)
    matrix_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    built_at: str
    packer_version: str = Field(min_length=1)
    account_id: str | None = Field(default=None, pattern=r"^[0-9]{12}$")
    copied_from: str | None = Field(default=None, pattern=r"^ami-([0-9a-f]{8}|[0-9a-f]{17})$")
    shared_with: tuple[str, ...] = ()
    sbom: str | None = Field(default=None, pattern=r"^sbom/[A-Za-z0-9._-]+\.json$")

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

    @field_validator("shared_with")
    @classmethod
    def _accounts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for account in value:
            if not (len(account) == 12 and account.isdigit()):
                raise ValueError(f"{cut(account)} is not a 12-digit AWS account id")
        return value


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: StrictInt = Field(alias="schema")
    images: dict[str, dict[str, _Entry]]


@dataclass(frozen=True)
class Catalog:
    """The entries of a catalog: one per (digest, region), the newest where records disagree."""

    path: Path
    entries: tuple[CatalogEntry, ...]
    shadowed: tuple[CatalogEntry, ...] = ()
    """Entries that a newer record for the same digest and region replaced (after a merge)."""
    files: dict[tuple[str, str, str], Path] = field(default_factory=dict, compare=False)
    """(digest, region, AMI id) -> the file that records it, for messages and for removal."""

    def lookup(self, digest: str, region: str) -> CatalogEntry | None:
        return next((e for e in self.entries if e.key == (digest, region)), None)

    def file_of(self, entry: CatalogEntry) -> Path:
        return self.files.get((entry.matrix_digest, entry.region, entry.ami_id), self.path)

    def to_json(self) -> dict[str, Any]:
        return _document(self.entries)


def _document(entries: Sequence[CatalogEntry]) -> dict[str, Any]:
    images: dict[str, dict[str, dict[str, Any]]] = {}
    for entry in entries:
        images.setdefault(entry.matrix_digest, {})[entry.region] = entry.to_json()
    return {"schema": SCHEMA, "images": images}


def _text(entries: Sequence[CatalogEntry]) -> str:
    return json.dumps(_document(entries), indent=2, sort_keys=True) + "\n"


def now_utc() -> str:
    """The build time format the catalog stores: ISO 8601, UTC, whole seconds."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def utc_timestamp(text: str) -> str:
    """An EC2 timestamp (e.g. CreationDate `2026-01-31T12:00:00.000Z`) in the catalog's format."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0).isoformat()


def is_folder(path: Path) -> bool:
    """A catalog folder: an existing folder, or a path yet to be made that does not end in .json.

    One stat decides: asking "is it a folder?" and then "does it exist?" raced a first build that
    made the folder in between, and a reader then took the new folder for a single-file catalog.
    """
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):  # missing (or unreadable, or a NUL in the name): its name decides
        return path.suffix != ".json"
    return stat.S_ISDIR(mode)


def record_name(entry: CatalogEntry) -> str:
    """The record file of a build in a catalog folder: matrix name (for people), digest, home region."""
    return f"{entry.matrix_name}-{entry.matrix_digest}-{entry.region}.json"


def _invalid(path: Path, where: str, problem: str) -> InputError:
    return InputError(f"{path}: not a valid gpuforge AMI catalog: {where}: {problem}. {FIX}")


def _load_file(path: Path) -> list[CatalogEntry]:
    """One catalog file's entries; a missing file has none, a malformed one is an InputError."""
    try:
        path.stat()
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        pass  # a NUL byte, an over-long name, no permission: load_json reports it with the path and the fix
    raw = load_json(
        path, what="AMI catalog", max_bytes=MAX_DATA_BYTES, fix=FIX.removeprefix("Fix: ").rstrip(".")
    )
    if not isinstance(raw, dict):
        raise _invalid(path, "(file)", f"expected a JSON object, found {type(raw).__name__}")
    # `type(...) is int`: JSON's true equals 1 in Python, and a boolean is not a schema number.
    if type(raw.get("schema")) is not int or raw.get("schema") not in READABLE_SCHEMAS:
        raise _invalid(
            path,
            "schema",
            f"this gpuforge reads schemas {', '.join(map(str, READABLE_SCHEMAS))}, "
            f"the file says {cut(raw.get('schema'))}",
        )
    try:
        parsed = _File.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _invalid(path, where, f"{first['msg']} (found {cut(first.get('input'))})") from None
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
    return entries


def _legacy_beside(folder: Path) -> None:
    """A single-file catalog next to the folder that replaced it must be moved in, not ignored."""
    legacy = folder.with_name(folder.name + ".json")
    if legacy.is_file() and _load_file(legacy):
        raise InputError(
            f"{legacy}: a single-file AMI catalog lies beside the catalog folder {folder}, which gpuforge now "
            f"reads instead, so its entries would be lost. Fix: move it into the folder (`git mv {legacy} "
            f"{folder}/{legacy.name}`; the folder reads every *.json in it), or pass --catalog {legacy} to "
            "keep using the single file."
        )


def _snapshot(folder: Path) -> tuple[tuple[str, int], ...] | None:
    """The record files and their inodes: every write is a rename, so any write changes this.

    None when a record vanished between the listing and the stat (a prune): read again.
    """
    try:
        names = sorted(p for p in folder.glob("*.json") if not p.name.startswith("."))
        return tuple((p.name, p.stat().st_ino) for p in names)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InputError(
            f"{folder}: cannot list the AMI catalog folder ({error.strerror}). Fix: make it readable."
        ) from None


def _load_folder(folder: Path) -> Catalog:
    _legacy_beside(folder)
    for _ in range(READ_ATTEMPTS):
        before = _snapshot(folder)
        if before is None:
            continue
        per_file = [(folder / name, _load_file(folder / name)) for name, _ in before]
        if _snapshot(folder) == before:
            return _merge(folder, per_file)
    raise InputError(
        f"{folder}: the catalog folder changed on each of {READ_ATTEMPTS} reads (builds writing into it "
        "without pause). Fix: run the command again when they finish."
    )


def _merge(path: Path, per_file: Sequence[tuple[Path, Sequence[CatalogEntry]]]) -> Catalog:
    """One entry per (digest, region): the newest built_at, then the later file name; the rest shadowed."""
    ranked = sorted(
        ((entry, source) for source, entries in per_file for entry in entries),
        key=lambda item: (datetime.fromisoformat(item[0].built_at), item[1].name),
        reverse=True,
    )
    chosen: dict[tuple[str, str], CatalogEntry] = {}
    shadowed: list[CatalogEntry] = []
    files: dict[tuple[str, str, str], Path] = {}
    for entry, source in ranked:
        files.setdefault((*entry.key, entry.ami_id), source)
        if entry.key in chosen:
            if chosen[entry.key].ami_id != entry.ami_id:
                shadowed.append(entry)
        else:
            chosen[entry.key] = entry
    ordered = tuple(chosen[key] for key in sorted(chosen))
    return Catalog(path, ordered, tuple(sorted(shadowed, key=lambda e: (e.key, e.built_at))), files)


class CatalogNotFound(InputError):
    """A catalog path that a reading command was given does not exist (exit 2, as any bad input)."""

    def __init__(self, path: Path, given_by: str = "") -> None:
        by = f" (given by {given_by})" if given_by else ""
        super().__init__(
            f"{path}: no such AMI catalog{by}: neither a folder of records nor a .json file is there. Fix: "
            "point it at an existing catalog, such as images/catalog or images/catalog.local, or create one "
            "with `gpuforge image build MATRIX --region REGION --catalog PATH`."
        )
        self.path = path


def load_catalog(path: Path) -> Catalog:
    """Read a catalog folder or single file; a missing path is empty, a malformed one an InputError."""
    if is_folder(path):
        return _load_folder(path)
    return _merge(path, [(path, _load_file(path))])


def read_catalog(path: Path, *, given_by: str = "") -> Catalog:
    """Read a catalog that must exist (for commands that only read); `given_by` names the flag or key in messages.

    A missing path (a broken link included) is a CatalogNotFound; otherwise as `load_catalog`.
    """
    try:
        exists = path.exists()
    except (OSError, ValueError):  # a NUL byte, an over-long name: load_catalog reports it with the fix
        exists = True
    if not exists:
        raise CatalogNotFound(path, given_by)
    return load_catalog(path)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock_path = path / LOCK_NAME if is_folder(path) else Path(str(path) + ".lock")
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(
            f"{lock_path.parent}: cannot create the catalog folder ({error.strerror}). Fix: pass a --catalog "
            "in a folder you may write to."
        ) from None
    try:
        with FileLock(str(lock_path), timeout=LOCK_TIMEOUT_S):
            yield
    except Timeout:
        raise InputError(
            f"{path}: another build has held the catalog lock {lock_path} for {LOCK_TIMEOUT_S:g} s. "
            "Fix: wait for it to finish, or remove the lock file if no gpuforge is running."
        ) from None


def _check_accounts(path: Path, current: Catalog, entries: Sequence[CatalogEntry]) -> None:
    """A catalog serves one account: an entry recorded for another account is not replaced silently."""
    for entry in entries:
        old = current.lookup(*entry.key)
        if old and old.account_id and entry.account_id and old.account_id != entry.account_id:
            raise InputError(
                f"{current.file_of(old)}: images.{entry.matrix_digest}.{entry.region} records {old.ami_id} "
                f"of account {old.account_id}, and this build ran in account {entry.account_id} "
                f"({entry.ami_id}); stacks of either account would get an AMI the other owns. Fix: build "
                f"with account {old.account_id}'s credentials, or give each account its own catalog "
                f"(--catalog), or share the AMI with --share-with. Nothing was recorded in {path}."
            )


def stores_sbom(path: Path) -> bool:
    """Only a catalog folder has a place for SBOMs (beside each record, in sbom/)."""
    return is_folder(path)


def record_build(path: Path, entries: Sequence[CatalogEntry], sbom: str | None = None) -> Catalog:
    """Record one build (its home region first, then its copies) in one atomic write, under the lock.

    In a folder, the build's record file is written; in a single file, the whole file.
    Entries for the same digest and region replace the older ones in that file. `sbom`
    (JSON text) is written first, to sbom/ beside the record, and every entry names it;
    the record is the commit point, so a build stopped between the two leaves at most
    an SBOM that no entry names, which the next build of the same record replaces.
    """
    if not entries:
        raise ValueError("record_build needs at least the home region's entry")
    for entry in entries:
        _Entry.model_validate(entry.to_json())
    if len({entry.matrix_digest for entry in entries}) != 1:
        raise ValueError("one build records one matrix digest")
    with _locked(path):
        current = load_catalog(path)
        _check_accounts(path, current, entries)
        target = path / record_name(entries[0]) if is_folder(path) else path
        if sbom is not None and stores_sbom(path):
            relative = f"{SBOM_FOLDER}/{record_name(entries[0])}"
            write_text_atomic(path / relative, sbom)
            entries = [replace(entry, sbom=relative) for entry in entries]
        new_keys = {entry.key for entry in entries}
        kept = [e for e in _load_file(target) if e.key not in new_keys]
        write_text_atomic(target, _text([*kept, *entries]))
    return load_catalog(path)


def record_entry(path: Path, entry: CatalogEntry) -> Catalog:
    """Add or replace the entry for (digest, region): a build with no copies."""
    return record_build(path, [entry])


def remove_entry(path: Path, entry: CatalogEntry) -> Catalog:
    """Take one entry (by digest, region and AMI id) out of the file that records it, atomically.

    A record file left empty is deleted, with its SBOM when no entry left names it.
    """
    with _locked(path):
        current = load_catalog(path)
        source = current.file_of(entry)
        left = [e for e in _load_file(source) if (*e.key, e.ami_id) != (*entry.key, entry.ami_id)]
        if left or not is_folder(path):
            write_text_atomic(source, _text(left))
        else:
            _unlink(source)
        if entry.sbom and is_folder(path):
            after = load_catalog(path)
            if not any(e.sbom == entry.sbom for e in (*after.entries, *after.shadowed)):
                _unlink(path / entry.sbom)
    return load_catalog(path)


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as error:
        raise InputError(
            f"{path}: cannot delete it ({error.strerror}). Fix: make its folder writable."
        ) from None
