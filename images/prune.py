"""`image prune`: deregister the AMIs the catalog has superseded, and their snapshots.

Superseded means: for one matrix name in one region, every build but the newest
`keep` (by `built_at`), plus any entry that a newer record for the same digest
and region shadows (two branches' records merged). An AMI that a stack of the
repository resolves to (each `stacks/*/Pulumi.<stack>.yaml`, through its matrix
and this catalog or its own `gpuforge:catalog`, as `gpuforge plan` resolves it)
is never removed: a prune that would remove one stops before any change, naming
the stack file and the AMI.

Each AMI is deregistered, its snapshots deleted, and its entry taken out of the
catalog right after, one atomic write each, so a prune stopped half-way leaves
a catalog that names no AMI it removed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from gpuforge.display import printable
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.images import ec2
from gpuforge.images.catalog import REPO_ROOT, Catalog, CatalogEntry, load_catalog, read_catalog, remove_entry
from gpuforge.images.matrix import load_valid

DEFAULT_STACKS = REPO_ROOT / "stacks"
DEFAULT_KEEP = 2


class PrunePinned(GpuforgeError):
    """A superseded AMI is still pinned by a stack (exit 1): nothing was pruned."""

    exit_code = 1


class ForeignAmi(GpuforgeError):
    """A catalog entry's AMI belongs to another account than the credentials' (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class Pin:
    """An AMI id a stack of the repository resolves to."""

    ami_id: str
    stack_file: Path


def _stack_files(stacks_dir: Path) -> list[tuple[Path, str]]:
    if not stacks_dir.is_dir():
        raise InputError(
            f"{stacks_dir}: not a folder of stacks, so pruning cannot tell which AMIs they pin. Fix: pass "
            "--stacks with the repository's stacks/ folder."
        )
    files = sorted(stacks_dir.glob("*/Pulumi.*.yaml"))
    return [(path, path.name[len("Pulumi.") : -len(".yaml")]) for path in files]


def stack_pins(stacks_dir: Path, catalog: Catalog) -> list[Pin]:
    """Every AMI id a stack resolves to, in this catalog and in the stack's own catalog.

    A stack file or matrix that cannot be read stops the prune (InputError): what it pins
    cannot be known, so nothing may be removed.
    """
    # Imported here: the stack config pulls in the Pulumi components' rules, which no other
    # image command needs, so `image build` keeps working without them.
    from gpuforge.stack_config import load_stack_config

    pins: list[Pin] = []
    for path, stack in _stack_files(stacks_dir):
        config = load_stack_config(path.parent, stack)
        _, digest = load_valid(config.matrix_path)
        catalogs = [catalog]
        if config.catalog_path is not None and config.catalog_path.resolve() != catalog.path.resolve():
            catalogs.append(load_catalog(config.catalog_path))
        for source in catalogs:
            entry = source.lookup(digest, config.region)
            if entry is not None:
                pins.append(Pin(entry.ami_id, path))
    return pins


def superseded(catalog: Catalog, keep: int) -> list[CatalogEntry]:
    """The entries older than the newest `keep` of their matrix name and region, and the shadowed ones."""
    lines: dict[tuple[str, str], list[CatalogEntry]] = defaultdict(list)
    for entry in catalog.entries:
        lines[(entry.matrix_name, entry.region)].append(entry)
    kept_ids: set[str] = set()
    old: list[CatalogEntry] = []
    for entries in lines.values():
        ranked = sorted(entries, key=lambda e: datetime.fromisoformat(e.built_at), reverse=True)
        kept_ids.update(e.ami_id for e in ranked[:keep])
        old += ranked[keep:]
    old += [entry for entry in catalog.shadowed if entry.ami_id not in kept_ids]
    return sorted(old, key=lambda e: (e.region, e.matrix_name, e.built_at))


def _refuse_pinned(catalog: Catalog, going: Iterable[CatalogEntry], pins: list[Pin], keep: int) -> None:
    by_ami = {pin.ami_id: pin for pin in pins}
    blocked = [(entry, by_ami[entry.ami_id]) for entry in going if entry.ami_id in by_ami]
    if blocked:
        lines = "\n  ".join(
            f"{entry.ami_id} ({entry.matrix_name} {entry.matrix_version}, {entry.region}; "
            f"{catalog.file_of(entry)}: images.{entry.matrix_digest}.{entry.region}) is pinned by {pin.stack_file}"
            for entry, pin in blocked
        )
        raise PrunePinned(
            f"prune --keep {keep} would remove AMIs that stacks still pin:\n  {lines}\nFix: move those stacks to "
            "a newer matrix (gpuforge:matrix), or raise --keep. Nothing was pruned."
        )


def _check_owner(catalog: Catalog, entry: CatalogEntry, image: ec2.Image, account: str) -> None:
    owner = entry.account_id or image.owner_id
    if owner and owner != account:
        raise ForeignAmi(
            f"{catalog.file_of(entry)}: images.{entry.matrix_digest}.{entry.region}: {entry.ami_id} belongs to "
            f"account {owner}, and these credentials are account {account}. Fix: prune with account {owner}'s "
            "credentials (AWS_PROFILE), or give each account its own catalog (--catalog). Nothing was pruned."
        )


def prune(
    catalog_path: Path,
    aws: ec2.Aws,
    *,
    keep: int,
    apply: bool,
    stacks_dir: Path = DEFAULT_STACKS,
    report: Callable[[str], None] = print,
) -> list[CatalogEntry]:
    """The superseded entries; with `apply`, each deregistered, its snapshots deleted, its entry removed."""
    catalog = read_catalog(catalog_path, given_by="--catalog")
    going = superseded(catalog, keep)
    _refuse_pinned(catalog, going, stack_pins(stacks_dir, catalog), keep)
    if not going:
        report(
            printable(
                f"{catalog_path}: nothing to prune (the newest {keep} of each matrix and region are kept)"
            )
        )
        return []
    account = aws.account()
    images: list[tuple[CatalogEntry, ec2.Image | None, ec2.Aws]] = []
    for entry in going:  # every check before any change
        region = aws.in_region(entry.region)
        image = ec2.describe_image(region.client(), region, entry.ami_id)
        if image is not None:
            _check_owner(catalog, entry, image, account)
        images.append((entry, image, region))
    verb = "pruning" if apply else "would prune (dry run; --apply to prune)"
    for entry, image, region in images:
        snapshots = ", ".join(image.snapshot_ids) if image and image.snapshot_ids else "no snapshots"
        state = f"and {snapshots}" if image else "(already deregistered: only its catalog entry goes)"
        report(
            printable(
                f"{verb}: {entry.ami_id} {state} in {entry.region}, {entry.matrix_name} {entry.matrix_version} "
                f"built {entry.built_at} ({catalog.file_of(entry)})"
            )
        )
        if apply:
            if image is not None:
                ec2.deregister(region.client(), region, image)
            remove_entry(catalog_path, entry)
    return going
