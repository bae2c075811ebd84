"""One `gpuforge policy check`: the program's mocked run, in a child process, and the policy pack's verdicts.

The parent reads the project, the config, the catalog and the answers file (bad input
stops here, exit 2), hands the loaded project to a child process that runs the
program under the mocks (`child`, over the pipe of `channel`), and runs the policy pack
on the record the child sends back. So nothing the program does can reach the
verdict or the exit code: a program that ends its process, replaces it, or leaves an
exit handler behind gets no verdict at all, which is bad input (exit 2), and a program
that replaces gpuforge's functions replaces them in the child only.

No output is written before the run and the policies have finished.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from gpuforge.errors import GpuforgeError, InputError
from gpuforge.images.catalog import DEFAULT_CATALOG, load_catalog, read_catalog
from gpuforge.loading import expand_user
from gpuforge.plan.run import ProgramRun, stack_program
from gpuforge.plan.stack_plan import policy_config
from gpuforge.policies.node_settings import AMI_FIELD
from gpuforge.policies.pinned_images import DEFAULT_MATRICES, ImageSources
from gpuforge.policies.rules_ami import AMI_PINNED
from gpuforge.policies.runner import Verdict, run_policies
from gpuforge.policycheck.answers import MockAnswers, load_answers
from gpuforge.policycheck.channel import CatalogedAmiWire, ChildFailed, ChildRecord, ChildRequest, run_child
from gpuforge.policycheck.kubernetes_components import NotChecked, expand
from gpuforge.policycheck.mocks import AmiLookup, CataloguedAmi, catalogued_amis
from gpuforge.policycheck.project import ProgramProject, load_project
from gpuforge.pulumi_mocks import GpuforgeMocks, RecordedResource
from gpuforge.stack_config import NAMESPACE, StackConfig


@dataclass(frozen=True)
class PolicyCheck:
    """One checked program: the project and stack, the run, the AMI lookups and the pack's verdicts."""

    project: ProgramProject
    catalog: Path
    run: ProgramRun
    lookups: tuple[AmiLookup, ...]
    verdicts: tuple[Verdict, ...]
    # Resources whose Kubernetes objects the policies did not see (a Helm chart), and why.
    not_checked: tuple[NotChecked, ...] = ()

    @property
    def resources(self) -> tuple[RecordedResource, ...]:
        return self.run.resources

    @property
    def mandatory_failures(self) -> tuple[Verdict, ...]:
        return tuple(verdict for verdict in self.verdicts if verdict.enforcement == "mandatory")


# The config key a gpuforge stack program reads its image catalog from (gpuforge.stack_config).
CATALOG_CONFIG = f"{NAMESPACE}:catalog"


def check(
    directory: Path,
    *,
    stack: str | None = None,
    config_file: Path | None = None,
    catalog: Path | None = None,
    mock_answers: Path | None = None,
    config: Mapping[str, Any] | None = None,
) -> PolicyCheck:
    """Run the program in `directory` under the mocks (in a child process), then the policy pack on what
    it registered.

    `config` is set on top of the stack's config file (see `project.load_project`). The catalog
    is `catalog`, which the program also gets as `gpuforge:catalog`; else the program's own
    `gpuforge:catalog`; else the default one.
    """
    project = load_project(directory, stack=stack, config_file=config_file, overrides=config)
    if catalog is not None:
        # What `gpuforge plan --catalog` does: a gpuforge stack program resolves its AMI from this key.
        catalog_path = expand_user(catalog, what="catalog").resolve()
        project = replace(project, config={**project.config, CATALOG_CONFIG: str(catalog_path)})
    elif CATALOG_CONFIG in project.config:
        # Relative to the project folder, as gpuforge.stack_config resolves it for the program.
        catalog_path = (project.directory / project.config[CATALOG_CONFIG]).resolve()
    else:
        catalog_path = DEFAULT_CATALOG.resolve()
    given = "--catalog" if catalog is not None else f"{CATALOG_CONFIG} in {project.config_source}"
    # A catalog that was named must exist: the lenient reader takes a missing path as an empty catalog
    # (a first build writes it), which would turn a mistyped path into "every AMI unpinned" (exit 1).
    # The default catalog may be absent: nothing is pinned yet, and the policies say so.
    catalog_data = (
        load_catalog(catalog_path)
        if catalog_path == DEFAULT_CATALOG.resolve()
        else read_catalog(catalog_path, given_by=given)
    )
    sources = ImageSources(catalog_path, DEFAULT_MATRICES)
    answers = load_answers(mock_answers) if mock_answers is not None else MockAnswers()
    run, lookups = run_isolated(
        project,
        catalogued=catalogued_amis(catalog_data, sources.matrices()),
        answers=answers,
    )
    # What pulumi-kubernetes' provider would register under the engine and the mocks do not (kubernetes_components).
    kubernetes = expand(run.resources, project.program.parent)
    run = replace(run, mocks=GpuforgeMocks.replay(kubernetes.resources, region=project.region))
    verdicts = run_policies(run.resources, policy_config(catalog_path, project.region))
    return PolicyCheck(
        project=project,
        catalog=catalog_path,
        run=run,
        lookups=lookups,
        verdicts=tuple(explain_lookups(verdicts, run.resources, lookups, project.program)),
        not_checked=kubernetes.not_checked,
    )


def run_isolated(
    project: ProgramProject,
    *,
    catalogued: Sequence[CataloguedAmi] = (),
    answers: MockAnswers | None = None,
) -> tuple[ProgramRun, tuple[AmiLookup, ...]]:
    """Run the project's program in a child process under the mocks; its run and its AMI lookups.

    `gpuforge plan` runs a stack's program this way too (`run_stack_isolated`).
    """
    answers = answers or MockAnswers()
    request = ChildRequest(
        nonce=secrets.token_hex(16),
        directory=str(project.directory),
        name=project.name,
        program=str(project.program),
        stack=project.stack,
        config_file=str(project.config_file) if project.config_file else None,
        config=dict(project.config),
        secrets=sorted(project.secrets),
        region=project.region,
        catalogued=[CatalogedAmiWire(entry=asdict(ami.entry), name=ami.name) for ami in catalogued],
        answers_path=str(answers.path) if answers.path else None,
        invokes={token: dict(result) for token, result in answers.invokes.items()},
    )
    record = _child_record(project, request)
    lookups = tuple(
        AmiLookup(args=lookup.args, ami_id=lookup.ami_id, pinned=lookup.pinned, reason=lookup.reason)
        for lookup in record.lookups
    )
    return _replayed(project, record), lookups


def run_stack_isolated(config: StackConfig) -> ProgramRun:
    """`gpuforge.plan.run.run_stack` in a child process: a gpuforge stack's program, its config, the mocks."""
    project = ProgramProject(
        directory=config.stack_dir.resolve(),
        name=config.project,
        program=stack_program(config).resolve(),
        stack=config.stack,
        config_file=config.stack_dir.resolve() / f"Pulumi.{config.stack}.yaml",
        config=dict(config.engine_values),
        secrets=frozenset(),
    )
    run, _ = run_isolated(project)
    return run


def _child_record(project: ProgramProject, request: ChildRequest) -> ChildRecord:
    """The child's record; the error it reports, or what happened instead of a record, as a GpuforgeError."""
    try:
        record = run_child(request, cwd=str(project.program.parent))
    except ChildFailed as failed:
        raise InputError(
            f"{project.program}: the program ended the check before it finished: {failed.how}. Fix: let the "
            "program return; a Pulumi program reports a problem by raising an exception (pulumi.RunError), "
            "and under check it may not end or replace its process (posix._exit, os.exec*, signals)."
        ) from None
    if record.error is not None:
        error = record.error
        if error.exit_code == InputError.exit_code:
            raise InputError(error.message)
        raise GpuforgeError(error.message, exit_code=error.exit_code)
    return record


def _replayed(project: ProgramProject, record: ChildRecord) -> ProgramRun:
    """The child's record as a ProgramRun, for the policies and the views that walk the resource tree."""
    resources = [
        RecordedResource(
            type=resource.type,
            name=resource.name,
            inputs=resource.inputs,
            outputs=resource.outputs,
            id=resource.id,
            urn=resource.urn,
            parent_urn=resource.parent_urn,
            custom=resource.custom,
            dependencies=tuple(resource.dependencies),
            ignore_changes=tuple(resource.ignore_changes),
            property_dependencies={key: tuple(urns) for key, urns in resource.property_dependencies.items()},
        )
        for resource in record.resources
    ]
    return ProgramRun(mocks=GpuforgeMocks.replay(resources, region=project.region), outputs=record.outputs)


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
