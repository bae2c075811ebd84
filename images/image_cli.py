"""`gpuforge image render|build|list|verify`."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from gpuforge.errors import InputError
from gpuforge.images import ec2, packer
from gpuforge.images.build import DEFAULT_TIMEOUT_S, BuildRequest, build_image
from gpuforge.images.catalog import DEFAULT_CATALOG, LOCAL_CATALOG, load_catalog
from gpuforge.images.emulator import DUMMY_CREDENTIALS, LocalAws, SeedImage
from gpuforge.images.matrix import Matrix, load_valid
from gpuforge.images.progress import Progress
from gpuforge.images.render import BUILD_FILE, RenderOptions, base_ami, distro_defaults, render
from gpuforge.images.tags import ami_tags


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:  # nan compares false with everything, so test it first
        raise argparse.ArgumentTypeError(f"{text!r}: the timeout must be a finite number of seconds above 0")
    return value


def _printable(text: str) -> str:
    """`text` safe for a terminal: control characters (escape sequences, newlines) shown escaped.

    Catalog names come from files in pull requests; printed raw, an escape sequence could
    rewrite the screen or hide a row.
    """
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def register(subparsers: Any) -> None:
    image = subparsers.add_parser("image", help="render, build, list and verify pinned AMIs")
    commands = image.add_subparsers(dest="image_command", required=True, metavar="SUBCOMMAND")

    render_cmd = commands.add_parser("render", help="write the Packer build of a matrix")
    render_cmd.add_argument("matrix", type=Path, metavar="MATRIX")
    render_cmd.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new or empty folder")
    render_cmd.add_argument("--region", help="region of the base AMI (default: the matrix's only region)")
    render_cmd.add_argument(
        "--packer-version",
        metavar="VERSION",
        help="render for this packer version instead of the installed one (e.g. 1.6.6 or 1.11.2)",
    )
    render_cmd.set_defaults(handler=_render)

    build = commands.add_parser("build", help="build (or reuse) the AMI of a matrix and record it")
    build.add_argument("matrix", type=Path, metavar="MATRIX")
    build.add_argument("--region", required=True)
    build.add_argument("--catalog", type=Path, metavar="PATH", help="catalog to record the AMI in")
    build.add_argument("--force", action="store_true", help="rebuild even if an AMI of this matrix exists")
    build.add_argument("--local", action="store_true", help="build against a local AWS emulator (moto)")
    build.add_argument(
        "--timeout", type=_positive, default=DEFAULT_TIMEOUT_S, metavar="SECONDS", help="limit for packer"
    )
    build.set_defaults(handler=_build)

    listing = commands.add_parser("list", help="show the AMI catalog")
    listing.add_argument("--catalog", type=Path, default=DEFAULT_CATALOG, metavar="PATH")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)

    verify = commands.add_parser("verify", help="compare an AMI's tags with a matrix")
    verify.add_argument("ami", metavar="AMI")
    verify.add_argument("--matrix", type=Path, required=True)
    verify.add_argument("--region", required=True)
    verify.set_defaults(handler=_verify)


def _render_region(matrix: Matrix, region: str | None) -> str:
    if region is not None:
        return region
    regions = sorted(matrix.os.base_ami)
    if len(regions) != 1:
        raise InputError(
            f"the matrix pins base AMIs in {', '.join(regions)}; say which to render. Fix: pass --region."
        )
    return regions[0]


def _render(args: argparse.Namespace) -> int:
    matrix, digest = load_valid(args.matrix)
    region = _render_region(matrix, args.region)
    if args.packer_version:
        try:
            version = Version(args.packer_version)
        except InvalidVersion:
            raise InputError(
                f"--packer-version: {args.packer_version!r} is not a version, e.g. 1.6.6"
            ) from None
    else:
        version = packer.find_packer().version
    tool = packer.Packer("packer", version)
    rendered = render(matrix, digest, RenderOptions(region=region, imds=tool.supports_imds), args.out)
    print(
        f"rendered {matrix.name} {matrix.version} (digest {digest[:12]}) for packer {version} into {args.out}"
    )
    print(f"  AMI name: {rendered.ami_name}")
    if tool.has_init:
        print(f"  build: cd {args.out} && packer init . && packer build .")
    else:
        print(f"  build: cd {args.out} && packer build {BUILD_FILE}   (packer {version} has no `init`)")
    print("  or let gpuforge run it, verify the AMI and record it: gpuforge image build MATRIX --region R")
    return 0


def _build(args: argparse.Namespace) -> int:
    tool = packer.find_packer()
    catalog = args.catalog or (LOCAL_CATALOG if args.local else DEFAULT_CATALOG)
    request = BuildRequest(args.matrix, args.region, catalog, force=args.force, timeout_s=args.timeout)
    progress = Progress(sys.stderr)
    if not args.local:
        build_image(request, ec2.Aws(args.region), tool, progress=progress)
        return 0
    matrix, _ = load_valid(args.matrix)
    base_ami(matrix, args.region)
    _, root_device = distro_defaults(matrix)
    seeds = [
        SeedImage(
            ami_id,
            f"{matrix.os.distro} {matrix.os.release} base ({region})",
            matrix.os.boot_mode,
            root_device,
        )
        for region, ami_id in sorted(matrix.os.base_ami.items())
    ]
    with LocalAws(seeds) as emulator:
        print(f"local AWS emulator (moto) at {emulator.endpoint}; catalog {catalog}")
        aws = ec2.Aws(args.region, endpoint_url=emulator.endpoint, credentials=DUMMY_CREDENTIALS)
        build_image(request, aws, tool, progress=progress)
    return 0


def _list(args: argparse.Namespace) -> int:
    catalog = load_catalog(args.catalog)
    if args.json:
        print(json.dumps(catalog.to_json(), indent=2, sort_keys=True))
        return 0
    if not catalog.entries:
        print(f"{_printable(str(args.catalog))}: no AMIs recorded")
        return 0
    header = ("AMI", "REGION", "MATRIX", "VERSION", "DIGEST", "BUILT", "PACKER")
    rows = [
        tuple(
            _printable(cell)
            for cell in (
                e.ami_id,
                e.region,
                e.matrix_name,
                e.matrix_version,
                e.matrix_digest[:12],
                e.built_at,
                e.packer_version,
            )
        )
        for e in sorted(catalog.entries, key=lambda e: (e.matrix_name, e.matrix_version, e.region))
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def _verify(args: argparse.Namespace) -> int:
    matrix, digest = load_valid(args.matrix)
    aws = ec2.Aws(args.region)
    image = ec2.verify_image(aws.client(), aws, args.ami, ami_tags(matrix, digest))
    print(
        f"ok: {image.ami_id} in {args.region} carries every tag of {matrix.name} {matrix.version} (digest {digest[:12]})"
    )
    return 0
