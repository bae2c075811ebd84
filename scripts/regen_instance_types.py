#!/usr/bin/env python3
"""Regenerate gpuforge/data/instance_types.json from a real account's DescribeInstanceTypes.

Usage:
    AWS_PROFILE=... python scripts/regen_instance_types.py [--region us-east-1] [TYPE ...]

It uses boto3's standard credential chain (AWS_PROFILE, AWS_ENDPOINT_URL, ...).
The `aws` part of every row is replaced with what the API returns today; the
curated `platform` part (GPU architecture, NVSwitch, NVLink Subnet Manager, each
with a source) is kept. A type that is new to the catalog has no platform part yet,
so the script exits 1 and names it: someone must research and add it, because
the API does not say whether a board has NVSwitch. Nothing is written then.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3

from gpuforge.atomic import write_text_atomic
from gpuforge.hardware import aws_fields

CATALOG = Path(__file__).resolve().parent.parent / "gpuforge" / "data" / "instance_types.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("types", nargs="*", help="instance types (default: those already in the catalog)")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--output", type=Path, default=CATALOG)
    args = parser.parse_args(argv)

    current: dict[str, Any] = json.loads(CATALOG.read_text(encoding="utf-8"))
    rows: dict[str, Any] = current["instance_types"]
    names = sorted(set(args.types) | set(rows))

    ec2 = boto3.client("ec2", region_name=args.region)
    described: dict[str, Any] = {}
    for page in ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=names):
        for entry in page["InstanceTypes"]:
            described[entry["InstanceType"]] = entry
    missing = sorted(set(names) - set(described))
    if missing:
        print(
            f"error: DescribeInstanceTypes in {args.region} returned nothing for {missing}", file=sys.stderr
        )
        return 1

    needs_platform = [name for name in names if rows.get(name, {}).get("platform") is None]
    if needs_platform:
        print(
            f"error: add a sourced 'platform' entry by hand for: {', '.join(needs_platform)} "
            f"(nothing was written to {args.output})",
            file=sys.stderr,
        )
        return 1
    stamp = datetime.now(UTC).strftime("%Y-%m-%d")
    for name in names:
        rows[name]["aws"] = aws_fields(described[name])
    current["source"] = f"AWS EC2 DescribeInstanceTypes, region {args.region}, retrieved {stamp}"
    current["instance_types"] = dict(sorted(rows.items()))
    write_text_atomic(args.output, json.dumps(current, indent=2) + "\n")
    print(f"wrote {len(names)} instance types to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
