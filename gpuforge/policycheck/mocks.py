"""Mocks for any Python Pulumi program: gpuforge's, plus the lookups such programs commonly make.

`PolicyCheckMocks` is `gpuforge.pulumi_mocks.GpuforgeMocks` (the same resource answers,
region, partition and caller identity) with four additions:

- `aws.get_availability_zones`: three zones, `<region>a` to `<region>c`, with stand-in
  zone ids `<region>-az1`..., less the call's `exclude_names`;
- `aws.ec2.get_ami`, answered from the image catalog, never from AWS. A lookup resolves
  to a catalogued AMI only when its filters pin one: an `image-id` filter with one value,
  or a `name` filter with one value and no wildcard (`*`, `?`), that is a catalogued AMI
  of the lookup's region (both, if both are given), and no `name_regex`. Anything else
  (`most_recent=True` on a name pattern, an exact name no catalog entry has) resolves to
  a stand-in id, `ami-unpinned-<12 hex digits of the arguments>`, which no catalog can
  hold: the `ami-pinned` policy refuses the instance or launch template that uses it,
  and `gpuforge policy check` names the lookup in that verdict. Under `pulumi preview`
  the same lookup returns whatever AWS has newest that day, which the catalog does not
  record either;
- pulumi-kubernetes' `kubernetes:yaml:decode`, which the SDK's own (v1) `yaml.ConfigFile` and
  `yaml.ConfigGroup` call for their objects: answered as the provider does
  (`kubernetes_components.decode_answer`), so those objects are registered and checked;
- the user's answers (`answers.MockAnswers`) for any other function (a file cannot answer
  one of these, see `answers.MOCKS_ANSWER`). A function with no answer stops the run
  with an InputError naming it and the file to write.

A catalogued AMI's name is the one the image pipeline gives it
(`gpuforge.images.render.ami_name`), known when the matrix it was built from is under
the matrices folder.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi.runtime.mocks import MockCallArgs

from gpuforge.errors import InputError
from gpuforge.images.catalog import Catalog, CatalogEntry
from gpuforge.images.render import ami_name
from gpuforge.policies.pinned_images import MatrixIndex
from gpuforge.policycheck.answers import (
    GET_AMI,
    GET_AVAILABILITY_ZONES,
    INVOKES_KEY,
    YAML_DECODE,
    MockAnswers,
)
from gpuforge.policycheck.kubernetes_components import decode_answer
from gpuforge.pulumi_mocks import ANSWERED_CALLS, GpuforgeMocks, RecordedCall

UNPINNED_PREFIX = "ami-unpinned-"
_WILDCARDS = ("*", "?")
ZONE_LETTERS = "abc"


@dataclass(frozen=True)
class CataloguedAmi:
    """A catalog entry and the AMI name the pipeline gave it (None when its matrix is not at hand)."""

    entry: CatalogEntry
    name: str | None


@dataclass(frozen=True)
class AmiLookup:
    """One `get_ami` call: its arguments, the id the mocks answered, and why that is or is not pinned."""

    args: Mapping[str, Any]  # as the provider receives them: camelCased
    ami_id: str
    pinned: bool
    reason: str

    def describe(self) -> str:
        """The call as a program writes it, e.g. `get_ami(most_recent=True, filters={'name': ['x-*']})`."""
        parts = []
        for key, label in (("mostRecent", "most_recent"), ("owners", "owners"), ("nameRegex", "name_regex")):
            if self.args.get(key) not in (None, False, []):
                parts.append(f"{label}={self.args[key]!r}")
        filters = {str(item.get("name")): list(item.get("values") or []) for item in _filters(self.args)}
        if filters:
            parts.append(f"filters={filters!r}")
        return f"get_ami({', '.join(parts)})"


def _filters(args: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [item for item in args.get("filters") or [] if isinstance(item, Mapping)]


def _values(args: Mapping[str, Any], name: str) -> list[str]:
    return [
        str(value)
        for item in _filters(args)
        if item.get("name") == name
        for value in item.get("values") or []
    ]


def resolve_ami(args: Mapping[str, Any], region: str, catalogued: Sequence[CataloguedAmi]) -> AmiLookup:
    """The answer to one AMI lookup; see the module docstring for when it is pinned."""
    ids, names = _values(args, "image-id"), _values(args, "name")
    problem: str | None = None
    wild = next((value for value in ids + names if any(mark in value for mark in _WILDCARDS)), None)
    if args.get("nameRegex"):
        problem = f"name_regex {args['nameRegex']!r} matches a pattern, not one AMI"
    elif wild is not None:
        problem = (
            f"the filter value {wild!r} is a wildcard, so the lookup takes whichever AMI matches when it runs"
        )
    elif not ids and not names:
        problem = "no image-id or name filter names one AMI"
    elif len(ids) > 1 or len(names) > 1:
        problem = f"the filters allow several AMIs ({', '.join(ids + names)})"
    if problem is None:
        found = [
            ami
            for ami in catalogued
            if ami.entry.region == region
            and (not ids or ami.entry.ami_id == ids[0])
            and (not names or ami.name == names[0])
        ]
        if found:
            entry = found[0].entry
            return AmiLookup(
                args=dict(args),
                ami_id=entry.ami_id,
                pinned=True,
                reason=f"the filters name the catalogued AMI {entry.ami_id} of matrix "
                f"{entry.matrix_name} {entry.matrix_version} in {region}",
            )
        wanted = " and ".join([*(f"image-id {i!r}" for i in ids), *(f"name {n!r}" for n in names)])
        problem = f"no AMI of the image catalog in {region} has {wanted}"
    digest = hashlib.sha256(json.dumps(dict(args), sort_keys=True, default=str).encode()).hexdigest()
    return AmiLookup(args=dict(args), ami_id=f"{UNPINNED_PREFIX}{digest[:12]}", pinned=False, reason=problem)


def catalogued_amis(catalog: Catalog, matrices: MatrixIndex) -> list[CataloguedAmi]:
    """Every catalog entry with its AMI name, from the matrix it was built from."""
    amis = []
    for entry in catalog.entries:
        report = matrices.by_digest.get(entry.matrix_digest)
        matrix = report.matrix if report is not None else None
        amis.append(CataloguedAmi(entry, ami_name(matrix, entry.matrix_digest) if matrix else None))
    return amis


class PolicyCheckMocks(GpuforgeMocks):
    """GpuforgeMocks that also answer the lookups of any program; see the module docstring."""

    def __init__(
        self,
        *,
        region: str,
        program: Path,
        catalogued: Sequence[CataloguedAmi],
        answers: MockAnswers,
    ) -> None:
        super().__init__(region=region)
        self.program = program
        self.catalogued = tuple(catalogued)
        self.answers = answers
        # Function token -> " (at FILE:LINE)" of the program's latest call (the child fills it in: the
        # mocks answer on the SDK's worker threads, where the program's frames are not on the stack).
        self.call_sites: dict[str, str] = {}
        self._lookups: list[AmiLookup] = []

    @property
    def ami_lookups(self) -> tuple[AmiLookup, ...]:
        with self._lock:
            return tuple(self._lookups)

    def call(self, args: MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        token, call_args = args.token, dict(args.args)
        if token == GET_AMI:
            lookup = resolve_ami(call_args, str(call_args.get("region") or self.region), self.catalogued)
            with self._lock:
                self._lookups.append(lookup)
            return self._record(token, call_args, self._ami_result(lookup))
        if token == GET_AVAILABILITY_ZONES:
            return self._record(token, call_args, self._zones(call_args))
        if token == YAML_DECODE:
            return self._record(
                token, call_args, decode_answer(call_args, self.program, self.call_sites.get(token, ""))
            )
        if token in ANSWERED_CALLS:
            return super().call(args)
        if token in self.answers.invokes:
            return self._record(token, call_args, dict(self.answers.invokes[token]))
        raise self._unanswered(token, call_args)

    def _record(
        self, token: str, call_args: dict[str, Any], result: dict[str, Any]
    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        with self._lock:
            self._calls.append(RecordedCall(token, call_args, result))
        return result, []

    def _unanswered(self, token: str, call_args: Mapping[str, Any]) -> InputError:
        given = {key: value for key, value in call_args.items() if value is not None}
        where = (
            f"add it to {self.answers.path}"
            if self.answers.path
            else "pass --mock-answers FILE (the pytest fixture's mock_answers=) holding it"
        )
        return InputError(
            f"{self.program}: the program calls the provider function {token!r}{self.call_sites.get(token, '')} "
            f"(arguments {given}), "
            f"which gpuforge's offline mocks cannot answer. Fix: give the result it should return: {where}, "
            f"as\n  {INVOKES_KEY}:\n    {token}:\n      id: ...\n(its output names camelCased, as the "
            "provider returns them; see gpuforge/policycheck/answers.py)."
        )

    def _ami_result(self, lookup: AmiLookup) -> dict[str, Any]:
        match = next((ami for ami in self.catalogued if ami.entry.ami_id == lookup.ami_id), None)
        name = (match.name if match else None) or f"unpinned lookup {lookup.describe()}"
        return {
            "id": lookup.ami_id,
            "imageId": lookup.ami_id,
            "arn": self.arn("ec2", f"image/{lookup.ami_id}", account=False),
            "name": name,
            "ownerId": self.account_id,
            "mostRecent": lookup.args.get("mostRecent"),
            "owners": lookup.args.get("owners") or [],
            "filters": lookup.args.get("filters") or [],
            "nameRegex": lookup.args.get("nameRegex"),
            "state": "available",
            "tags": {},
            "blockDeviceMappings": [],
            "productCodes": [],
        }

    def _zones(self, call_args: Mapping[str, Any]) -> dict[str, Any]:
        region = str(call_args.get("region") or self.region)
        excluded = set(call_args.get("excludeNames") or [])
        zones = [
            (f"{region}{letter}", f"{region}-az{index}")
            for index, letter in enumerate(ZONE_LETTERS, start=1)
            if f"{region}{letter}" not in excluded
        ]
        return {
            "id": region,
            "region": region,
            "names": [name for name, _ in zones],
            "zoneIds": [zone_id for _, zone_id in zones],
            "groupNames": [region],
            "state": call_args.get("state"),
        }
