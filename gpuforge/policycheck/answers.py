"""The mock-answers file: what a lookup the mocks cannot answer should return (`--mock-answers FILE`).

A program may call any provider function (`aws.ec2.get_vpc(default=True)`,
`aws.ssm.get_parameter(...)`); offline nothing can answer those, and an empty result
would let the program run on values no account holds. So such a call stops the
check, naming the function, and the user writes its result here (YAML, or JSON when
the file name ends in .json), keyed by the function's token, with the result's keys
camelCased as the provider returns them:

```yaml
invokes:
  aws:ec2/getVpc:getVpc:
    id: vpc-0123456789abcdef0
    cidrBlock: 10.0.0.0/16
```

An answer serves every call of that function, whatever its arguments. So a function
the mocks answer themselves cannot be answered here (`MOCKS_ANSWER`): the AMI lookup
(`aws:ec2/getAmi:getAmi`) resolves only from the image catalog, so a file cannot turn an
unpinned lookup into a pinned one, and the others (`getPolicyDocument`, `getRegion`,
`getAvailabilityZones`, ...) are computed from the call's own arguments and the
stack's region: a file answer for `getPolicyDocument` would hide the statements the
program wrote, a `*` on `*` among them, from the IAM rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.errors import InputError
from gpuforge.loading import expand_user, load_json, load_yaml
from gpuforge.pulumi_mocks import ANSWERED_CALLS

GET_AMI = "aws:ec2/getAmi:getAmi"
GET_AVAILABILITY_ZONES = "aws:index/getAvailabilityZones:getAvailabilityZones"
# pulumi-kubernetes' YAML decoder (kubernetes_components.decode_answer): an answer here would hide a manifest's objects.
YAML_DECODE = "kubernetes:yaml:decode"
# Every function `mocks.PolicyCheckMocks` answers itself, from the call's arguments, the region or the catalog.
MOCKS_ANSWER = frozenset({GET_AMI, GET_AVAILABILITY_ZONES, YAML_DECODE, *ANSWERED_CALLS})
INVOKES_KEY = "invokes"
# A function token is package:module:function, e.g. aws:ec2/getVpc:getVpc.
_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9_-]*:[A-Za-z0-9_/.-]*:[A-Za-z0-9_]+")
FIX = (
    "write the file as `invokes:` mapping each function token (e.g. aws:ec2/getVpc:getVpc) to the "
    "result it returns (see gpuforge/policycheck/answers.py)"
)


@dataclass(frozen=True)
class MockAnswers:
    """The user's answers, by function token; `path` is None when no file was given."""

    path: Path | None = None
    invokes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def load_answers(path: Path) -> MockAnswers:
    """Read a mock-answers file; InputError names the file, the key and the fix."""
    path = expand_user(path, what="the mock answers file").absolute()
    loader = load_json if path.suffix == ".json" else load_yaml
    data = loader(path, what="mock-answers file", fix=FIX)
    if not isinstance(data, dict) or set(data) != {INVOKES_KEY}:
        found = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{path}: expected one key, {INVOKES_KEY!r}; found {found}. Fix: {FIX}.")
    invokes = data[INVOKES_KEY] or {}
    if not isinstance(invokes, dict):
        raise InputError(f"{path}: {INVOKES_KEY} = {invokes!r}: expected a mapping. Fix: {FIX}.")
    for token, result in invokes.items():
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            raise InputError(
                f"{path}: {INVOKES_KEY}.{token!r} is not a function token (package:module:function). "
                f"Fix: use the token the error named, e.g. aws:ec2/getVpc:getVpc."
            )
        if token == GET_AMI:
            raise InputError(
                f"{path}: {INVOKES_KEY}.{token}: the AMI lookup is answered from the image catalog only, so "
                "that a lookup pins an AMI in the program, not in a test file. Fix: remove the entry, and "
                "filter the lookup on the image-id or exact name of a catalogued AMI (or use the id itself)."
            )
        if token in MOCKS_ANSWER:
            raise InputError(
                f"{path}: {INVOKES_KEY}.{token}: gpuforge's mocks answer this function themselves, from the "
                "arguments of each call and the stack's region, and an answer here would serve every call "
                "whatever its arguments (for getPolicyDocument, it would hide the statements the program "
                "wrote from the IAM rules). Fix: remove the entry; the answer is computed for you."
            )
        if not isinstance(result, dict):
            raise InputError(
                f"{path}: {INVOKES_KEY}.{token} = {result!r}: expected the result as a mapping of its "
                f"output names (camelCased) to values. Fix: {FIX}."
            )
    return MockAnswers(path=path, invokes=invokes)
