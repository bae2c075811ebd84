"""What the AMI rules know about an AMI id: its image-catalog entries and their matrices.

An AMI is pinned when the image catalog records it, and the catalog entry's matrix
(found under the matrices folder by its digest) passes `gpuforge matrix check`.
Both paths come from the policy's config, because the engine runs the pack in its
own virtual environment and working directory. The defaults are the catalog and
matrices that ship beside `gpuforge.images`.

Catalogs and matrix folders are read once per change of the files (their size and
modification time), not once per resource.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from gpuforge.errors import GpuforgeError, InputError
from gpuforge.images import matrix as matrix_module
from gpuforge.images.catalog import DEFAULT_CATALOG, Catalog, CatalogEntry, load_catalog
from gpuforge.images.matrix import MatrixReport, check_file

CATALOG_KEY = "catalogPath"
MATRICES_KEY = "matricesDir"
DEFAULT_MATRICES = Path(matrix_module.__file__).resolve().parent / "matrices"

CONFIG_PROPERTIES: dict[str, dict[str, Any]] = {
    CATALOG_KEY: {
        "type": "string",
        "description": "The image catalog (JSON) that records pinned AMIs. A relative path is taken "
        "from the working directory of the process that runs the pack.",
        "default": str(DEFAULT_CATALOG),
    },
    MATRICES_KEY: {
        "type": "string",
        "description": "The folder of image matrices (*.yaml) that catalog entries are matched to by digest.",
        "default": str(DEFAULT_MATRICES),
    },
}


@dataclass(frozen=True)
class PinnedImage:
    """One catalog entry for an AMI id, and the check of the matrix it was built from."""

    entry: CatalogEntry
    matrix: MatrixReport | None
    """None when no matrix under the matrices folder has the entry's digest."""


@dataclass(frozen=True)
class MatrixIndex:
    """The matrices of a folder that parse, by digest, and the files that do not."""

    by_digest: Mapping[str, MatrixReport]
    unreadable: tuple[str, ...]


@dataclass(frozen=True)
class ImageSources:
    """The catalog and the matrices folder a policy was configured with."""

    catalog_path: Path
    matrices_dir: Path

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ImageSources:
        return cls(Path(str(config[CATALOG_KEY])), Path(str(config[MATRICES_KEY])))

    def pinned(self, ami_id: str) -> list[PinnedImage]:
        """Every catalog entry for `ami_id` (one per region it was copied to), with its matrix check.

        Raises InputError when the catalog or the matrices folder cannot be read.
        """
        catalog = _catalog(str(self.catalog_path), _catalog_stamp(self.catalog_path))
        index = self.matrices()
        return [
            PinnedImage(entry, index.by_digest.get(entry.matrix_digest))
            for entry in catalog.entries
            if entry.ami_id == ami_id
        ]

    def matrices(self) -> MatrixIndex:
        return _matrices(str(self.matrices_dir), _folder_stamp(self.matrices_dir))

    def recorded(self) -> int:
        """How many AMIs the catalog records (for messages)."""
        return len(_catalog(str(self.catalog_path), _catalog_stamp(self.catalog_path)).entries)


def _stamp(path: Path) -> tuple[int, int]:
    """What changes when a file changes; (0, -1) for a missing file (an empty catalog)."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return 0, -1
    except OSError as error:
        raise InputError(f"{path}: cannot read it ({error.strerror}). Fix: make the file readable.") from None
    return status.st_mtime_ns, status.st_size


def _catalog_stamp(path: Path) -> tuple[tuple[str, int, int], ...]:
    """What changes when the catalog changes: its file's stamp, or each record's in a catalog folder.

    A folder's own mtime would miss a record rewritten in place within one timestamp tick; each
    record's name, mtime and size do not."""
    if path.is_dir():
        return _files_stamp(path, "*.json")
    return ((path.name, *_stamp(path)),)


def _folder_stamp(folder: Path) -> tuple[tuple[str, int, int], ...]:
    if not folder.is_dir():
        raise InputError(
            f"matrices folder {folder}: not a folder. Fix: point the policy's matricesDir config at the "
            "folder of image matrices (images/matrices in the gpuforge repository)."
        )
    return _files_stamp(folder, "*.yaml")


def _files_stamp(folder: Path, pattern: str) -> tuple[tuple[str, int, int], ...]:
    """Each matching file's name and stamp, in name order: what changes when any of them does."""
    return tuple((path.name, *_stamp(path)) for path in sorted(folder.glob(pattern)))


@lru_cache(maxsize=4)
def _catalog(path: str, stamp: tuple[tuple[str, int, int], ...]) -> Catalog:
    return load_catalog(Path(path))


@lru_cache(maxsize=4)
def _matrices(folder: str, stamp: tuple[tuple[str, int, int], ...]) -> MatrixIndex:
    """Each matrix's check, by digest. A file that is not YAML or not a matrix has no digest;
    it is listed as unreadable, so a message can name it."""
    reports: dict[str, MatrixReport] = {}
    unreadable: list[str] = []
    for name, *_ in stamp:
        try:
            report = check_file(Path(folder) / name)
        except GpuforgeError:
            unreadable.append(name)
            continue
        if report.digest is None:
            unreadable.append(name)
        else:
            reports[report.digest] = report
    return MatrixIndex(reports, tuple(unreadable))
