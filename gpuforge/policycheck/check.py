"""One `gpuforge policy check`: the program's mocked run and the policy pack's verdicts on it.

The program runs as the Python language host runs it: its folder is the working
directory and first on `sys.path` (so `import helpers` finds its own modules), in a
fresh module namespace (runpy, through `gpuforge.plan.run.run_program`). Modules it
imported from its folder are dropped afterwards, so two projects with a `helpers.py`
each do not see each other's.

Whatever the program raises becomes one InputError (exit 2) that names the program,
the line and the fix; a missing config key names the key and the config file. No
output is written before the run and the policies have finished. The SDK leaves the
failed run's futures behind holding the same exception, and asyncio would log each
as "exception was never retrieved", a traceback on stderr at exit; those are settled
while the run's scope is open (`_AbandonedFutures`), since the error itself is reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pulumi

from gpuforge.errors import GpuforgeError, InputError
from gpuforge.images.catalog import DEFAULT_CATALOG, load_catalog
from gpuforge.plan.run import ProgramRun, run_program
from gpuforge.plan.stack_plan import policy_config
from gpuforge.policies.node_settings import AMI_FIELD
from gpuforge.policies.pinned_images import DEFAULT_MATRICES, ImageSources
from gpuforge.policies.rules_ami import AMI_PINNED
from gpuforge.policies.runner import Verdict, run_policies
from gpuforge.policycheck.answers import MockAnswers, load_answers
from gpuforge.policycheck.mocks import AmiLookup, PolicyCheckMocks, catalogued_amis
from gpuforge.policycheck.project import ProgramProject, load_project
from gpuforge.pulumi_mocks import RecordedResource

_ABANDONED = ("Future exception was never retrieved", "Task exception was never retrieved")


@dataclass(frozen=True)
class PolicyCheck:
    """One checked program: the project and stack, the run, the AMI lookups and the pack's verdicts."""

    project: ProgramProject
    catalog: Path
    run: ProgramRun
    lookups: tuple[AmiLookup, ...]
    verdicts: tuple[Verdict, ...]

    @property
    def resources(self) -> tuple[RecordedResource, ...]:
        return self.run.resources

    @property
    def mandatory_failures(self) -> tuple[Verdict, ...]:
        return tuple(verdict for verdict in self.verdicts if verdict.enforcement == "mandatory")


def check(
    directory: Path,
    *,
    stack: str | None = None,
    config_file: Path | None = None,
    catalog: Path | None = None,
    mock_answers: Path | None = None,
    config: Mapping[str, Any] | None = None,
) -> PolicyCheck:
    """Run the program in `directory` under the mocks, then the policy pack on what it registered.

    `config` is set on top of the stack's config file (see `project.load_project`).
    """
    project = load_project(directory, stack=stack, config_file=config_file, overrides=config)
    catalog_path = (catalog or DEFAULT_CATALOG).expanduser().resolve()
    sources = ImageSources(catalog_path, DEFAULT_MATRICES)
    mocks = PolicyCheckMocks(
        region=project.region,
        program=project.program,
        catalogued=catalogued_amis(load_catalog(catalog_path), sources.matrices()),
        answers=load_answers(mock_answers) if mock_answers is not None else MockAnswers(),
    )
    run = _run(project, mocks)
    verdicts = run_policies(run.resources, policy_config(catalog_path))
    lookups = mocks.ami_lookups
    return PolicyCheck(
        project=project,
        catalog=catalog_path,
        run=run,
        lookups=lookups,
        verdicts=tuple(explain_lookups(verdicts, run.resources, lookups, project.program)),
    )


def _run(project: ProgramProject, mocks: PolicyCheckMocks) -> ProgramRun:
    failure: GpuforgeError
    with _program_folder(project.program.parent), _AbandonedFutures() as abandoned:
        try:
            return run_program(
                project.program,
                project=project.name,
                stack=project.stack,
                config=project.config,
                region=project.region,
                mocks=mocks,
            )
        except pulumi.ConfigMissingError as error:
            failure = _missing_key(project, error.key, _line(project, error))
        except pulumi.ConfigTypeError as error:
            failure = InputError(
                f"{project.config_source}: {error.key} = {error.value!r}: the program reads it as "
                f"{error.expect_type}{_line(project, error)}, and it is not one. "
                f"Fix: give {error.key} a value of type {error.expect_type}."
            )
        except GpuforgeError as error:
            # A fresh error without the run's traceback, which holds the SDK's futures alive.
            failure = GpuforgeError(error.message, exit_code=error.exit_code)
        except Exception as error:  # noqa: BLE001  # whatever a program raises is reported, naming it
            failure = InputError(
                f"{project.program}: the program raised {type(error).__name__}: {error}{_line(project, error)}. "
                "Fix: correct the program or the config it reads; it ran as under `pulumi preview`, with "
                "gpuforge's mocks in place of AWS."
            )
        abandoned.collect()
    raise failure


def _line(project: ProgramProject, error: BaseException) -> str:
    """`(at FILE:LINE)` for the deepest frame of the program's own files, or ''."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if Path(frame.filename).resolve().is_relative_to(project.directory)
    ]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


def _missing_key(project: ProgramProject, key: str, where: str) -> InputError:
    short = key.split(":", 1)[1] if key.startswith(f"{project.name}:") else key
    if key in project.secrets:
        return InputError(
            f"{project.config_source}: the program reads {key}{where}, which the file holds as a secret "
            "(secure:); it cannot be decrypted offline. Fix: pass --config-file with a copy of the stack's "
            f"config that gives {short} a plain stand-in value."
        )
    target = project.config_file or project.directory / f"Pulumi.{project.stack}.yaml"
    return InputError(
        f"{project.config_source}: the program requires config key {key}{where}, which is not set. "
        f"Fix: add `{short}: VALUE` under `config:` in {target} (what `pulumi config set {short} VALUE "
        f"--stack {project.stack}` writes)."
    )


@contextlib.contextmanager
def _program_folder(folder: Path) -> Iterator[None]:
    """The program's folder as working directory and first on sys.path; its own modules dropped after."""
    before = set(sys.modules)
    previous = Path.cwd()
    sys.path.insert(0, str(folder))
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)
        with contextlib.suppress(ValueError):
            sys.path.remove(str(folder))
        for name in set(sys.modules) - before:
            origin = getattr(sys.modules[name], "__file__", None)
            if origin and Path(origin).resolve().is_relative_to(folder):
                del sys.modules[name]


class _AbandonedFutures(logging.Filter):
    """While open, asyncio's 'exception was never retrieved' lines are dropped; `collect` settles a
    failed run's leftover futures.

    The SDK keeps a failed run's futures (its RPC manager's list, in the run's context)
    until the interpreter exits, when asyncio would log each one with a traceback.
    `collect` frees what a collection can free, inside this scope, and marks the
    exception of every other finished future as retrieved (which is all `exception()`
    does to a done future): the run's error is reported once, by gpuforge.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_ABANDONED)

    def __enter__(self) -> _AbandonedFutures:
        logging.getLogger("asyncio").addFilter(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        logging.getLogger("asyncio").removeFilter(self)

    def collect(self) -> None:
        gc.collect()
        for leftover in gc.get_objects():
            if isinstance(leftover, asyncio.Future) and leftover.done() and not leftover.cancelled():
                leftover.exception()


def explain_lookups(
    verdicts: Sequence[Verdict],
    resources: Sequence[RecordedResource],
    lookups: Sequence[AmiLookup],
    program: Path,
) -> list[Verdict]:
    """`ami-pinned` verdicts on a node whose AMI is an unpinned lookup's stand-in id, naming the lookup."""
    unpinned = {lookup.ami_id: lookup for lookup in lookups if not lookup.pinned}
    by_urn = {resource.urn: resource for resource in resources}
    explained = []
    for verdict in verdicts:
        resource = by_urn.get(verdict.urn)
        field = (
            AMI_FIELD.get(resource.type)
            if resource is not None and verdict.policy == AMI_PINNED.name
            else None
        )
        lookup = unpinned.get(str(resource.inputs.get(field))) if resource is not None and field else None
        if lookup is not None:
            verdict = replace(
                verdict,
                message=f"{verdict.message} That id stands for the lookup {lookup.describe()} in {program}, "
                f"which pins no AMI: {lookup.reason}.",
            )
        explained.append(verdict)
    return explained
