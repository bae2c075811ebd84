"""The child process of `gpuforge policy check`: run the program under the mocks, send back its record.

See `channel` for the protocol and why there is a child. The program runs as the
Python language host runs it: its folder is the working directory and first on
`sys.path` (so `import helpers` finds its own modules), in a fresh module namespace
(runpy, through `gpuforge.plan.run.run_program`).

Whatever the program raises becomes one InputError that names the program, the line
and the fix; a missing config key names the key and the config file. The record is
built with functions bound before the program ran; a program that replaced a function
or class member of gpuforge, the Pulumi SDK or pulumi_policy during its run is refused
(`Replacements`), since the record could then say anything. The child ends with
`os._exit(0)`, so the SDK's leftover futures and the program's exit handlers never run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

import pulumi
from pulumi.output import Unknown
from pulumi.runtime.rpc import UNKNOWN

from gpuforge.errors import GpuforgeError, InputError
from gpuforge.images.catalog import CatalogEntry
from gpuforge.plan.run import ProgramRun, run_program
from gpuforge.policycheck.answers import MockAnswers
from gpuforge.policycheck.channel import (
    ChildRecord,
    ChildRequest,
    ErrorWire,
    LookupWire,
    ResourceWire,
)
from gpuforge.policycheck.mocks import CataloguedAmi, PolicyCheckMocks
from gpuforge.policycheck.project import ProgramProject

_ABANDONED = ("Future exception was never retrieved", "Task exception was never retrieved")
# Modules whose functions the record depends on: gpuforge's, the SDK's, the policy SDK's, and what
# writes the record (pydantic, json).
_GUARDED = ("gpuforge", "pulumi", "pulumi_policy", "pydantic", "pydantic_core", "json")


def main() -> None:
    """The child's entry point (`channel.CHILD_MAIN`); argv[1] is the pipe's write end."""
    exit_now, write = os._exit, os.write  # the program's replacements must not reach these
    channel = int(sys.argv[1])
    os.set_inheritable(channel, False)
    request = ChildRequest.model_validate_json(sys.stdin.buffer.read())
    _give_the_program_stdio()
    payload = _record(request).model_dump_json().encode()
    view = memoryview(payload)
    while view:
        view = view[write(channel, view) :]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a stream the program closed holds nothing of ours
            stream.flush()
    exit_now(0)


def _give_the_program_stdio() -> None:
    """An empty stdin (the request is read), and stdout onto stderr: the parent's stdout is its own."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)


def _record(request: ChildRequest) -> ChildRecord:
    """The run's record, or the error that stopped it; never raises."""
    try:
        project = _project(request)
        mocks = PolicyCheckMocks(
            region=request.region,
            program=project.program,
            catalogued=[CataloguedAmi(_entry(ami.entry), ami.name) for ami in request.catalogued],
            answers=MockAnswers(
                path=Path(request.answers_path) if request.answers_path else None,
                invokes=request.invokes,
            ),
        )
        _remember_call_sites(project.directory, mocks.call_sites)
        _remember_resource_sites(project.directory)
        guard = Replacements()
        try:
            run = _run(project, mocks)
        finally:
            guard.check(project.program)
        return ChildRecord(
            nonce=request.nonce,
            resources=[_resource(resource) for resource in run.resources],
            lookups=[
                LookupWire(
                    args=_wire(lookup.args, ""),
                    ami_id=lookup.ami_id,
                    pinned=lookup.pinned,
                    reason=lookup.reason,
                )
                for lookup in mocks.ami_lookups
            ],
            outputs={str(name): _shown(value) for name, value in run.outputs.items()},
        )
    except GpuforgeError as error:
        return ChildRecord(
            nonce=request.nonce, error=ErrorWire(message=error.message, exit_code=error.exit_code)
        )
    except BaseException as error:  # noqa: BLE001  # the parent needs a record whatever happened
        return ChildRecord(
            nonce=request.nonce,
            error=ErrorWire(
                message=f"{request.program}: the run stopped on {type(error).__name__}: {error}. Fix: correct "
                "the program; it ran as under `pulumi preview`, with gpuforge's mocks in place of AWS.",
                exit_code=2,
            ),
        )


def _project(request: ChildRequest) -> ProgramProject:
    return ProgramProject(
        directory=Path(request.directory),
        name=request.name,
        program=Path(request.program),
        stack=request.stack,
        config_file=Path(request.config_file) if request.config_file else None,
        config=request.config,
        secrets=frozenset(request.secrets),
    )


def _entry(data: Mapping[str, Any]) -> CatalogEntry:
    return CatalogEntry(**{**data, "shared_with": tuple(data.get("shared_with") or ())})


def _resource(resource: Any) -> ResourceWire:
    urn = resource.urn or ""
    return ResourceWire(
        type=resource.type,
        name=resource.name,
        inputs=_wire(resource.inputs, urn),
        outputs=_wire(resource.outputs, urn),
        id=resource.id,
        urn=urn,
        parent_urn=resource.parent_urn,
        custom=resource.custom,
        dependencies=list(resource.dependencies),
        ignore_changes=list(resource.ignore_changes),
        property_dependencies={key: list(urns) for key, urns in resource.property_dependencies.items()},
    )


def _wire(value: Any, urn: str, path: tuple[str, ...] = ()) -> Any:
    """A recorded value as the engine would send it: an unknown as the engine's unknown sentinel.

    A value the engine passes some other way (an asset, a resource reference) is refused
    here, as the offline policy runner refuses it (`engine_adapter._marshal`).
    """
    if isinstance(value, Unknown):
        return UNKNOWN
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(key): _wire(item, urn, (*path, str(key))) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_wire(item, urn, (*path, str(index))) for index, item in enumerate(value)]
    kind = "a resource reference" if isinstance(value, pulumi.Resource) else type(value).__name__
    raise GpuforgeError(
        f"{urn}: property {'.'.join(path) or '(properties)'} holds {kind}, which the offline policy runner "
        "cannot pass to a policy (it passes strings, numbers, booleans, lists, objects, secrets and unknowns). "
        "Fix: give the resource a plain value there, or extend _marshal in gpuforge/policies/engine_adapter.py."
    )


def _shown(value: Any) -> Any:
    """A stack output as JSON can hold it, for display: what JSON cannot hold, as its text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(key): _shown(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_shown(item) for item in value]
    return str(value)


def _remember_call_sites(directory: Path, sites: dict[str, str]) -> None:
    """Have the SDK's invoke functions note the program's line for each function token they are called with.

    The provider SDK calls `pulumi.runtime.invoke` (and `invoke_output`) on the program's
    thread; the mocks answer later, on a worker thread, so an unanswered function could not
    otherwise name the line that called it. Installed before `Replacements` looks.
    """
    for name in ("invoke", "invoke_output"):
        real = getattr(pulumi.runtime, name)

        def noting(token: str, *args: Any, _real: Any = real, **kwargs: Any) -> Any:
            site = _program_line(directory)
            if site:
                sites[token] = site
            return _real(token, *args, **kwargs)

        setattr(pulumi.runtime, name, noting)


# (type, name) -> " (at FILE:LINE)" where the program constructed the resource.
_RESOURCE_SITES: dict[tuple[str, str], str] = {}
# How the SDK names the resource whose inputs it could not serialize (pulumi/runtime/resource.py).
_SDK_RESOURCE_ERROR = re.compile(r"While processing resource: '(?P<name>[^']*)', type:? '(?P<type>[^']*)'")


def _remember_resource_sites(directory: Path) -> None:
    """Have the SDK note where the program constructed each resource.

    `Resource.__init__` calls `register_resource` (or `read_resource`) on the program's
    thread; the inputs are serialized later in a task, and an error there (a value of the
    wrong type) carries no frame of the program, only the resource's name and type.
    """
    for name in ("register_resource", "read_resource"):
        real = getattr(pulumi.resource, name)

        def noting(
            res: Any, ty: str, resource_name: str, *args: Any, _real: Any = real, **kwargs: Any
        ) -> Any:
            site = _program_line(directory)
            if site:
                _RESOURCE_SITES[(ty, resource_name)] = site
            return _real(res, ty, resource_name, *args, **kwargs)

        setattr(pulumi.resource, name, noting)


def _program_line(directory: Path) -> str:
    """` (at FILE:LINE)` of the innermost frame in the program's own files, or ''."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if Path(frame.f_code.co_filename).is_relative_to(directory):
            return f" (at {frame.f_code.co_filename}:{frame.f_lineno})"
        frame = frame.f_back
    return ""


class Replacements:
    """The functions and class members of the `_GUARDED` modules as they were before the run.

    `check` raises an InputError naming each one the program replaced or removed, with the
    file and line of the replacement when it is a function.
    """

    def __init__(self) -> None:
        self._before: list[tuple[str, Any, str, Any]] = []
        for module_name, module in list(sys.modules.items()):
            if module is None or module_name.split(".")[0] not in _GUARDED:
                continue
            for attr, value in list(vars(module).items()):
                if _is_code(value):
                    self._before.append((f"{module_name}.{attr}", module, attr, value))
                if isinstance(value, type) and value.__module__ == module_name:
                    for member, item in list(vars(value).items()):
                        if _is_code(item):
                            self._before.append((f"{module_name}.{attr}.{member}", value, member, item))

    def check(self, program: Path) -> None:
        missing = object()
        replaced = [
            (label, vars(owner).get(attr, missing))
            for label, owner, attr, value in self._before
            if vars(owner).get(attr, missing) is not value
        ]
        if replaced:
            shown = "; ".join(
                f"{label}{_defined_at(new) if new is not missing else ' (removed)'}"
                for label, new in replaced[:5]
            )
            more = f" and {len(replaced) - 5} more" if len(replaced) > 5 else ""
            raise InputError(
                f"{program}: the program replaced {shown}{more} while it ran. gpuforge's record of what the "
                "program registered is made by those functions, so it could then say anything. Fix: remove "
                "the replacement; a program under check registers resources and does not change gpuforge, "
                "the Pulumi SDK, pulumi_policy, pydantic or json."
            )


def _is_code(value: Any) -> bool:
    return callable(value) or isinstance(value, property | staticmethod | classmethod)


def _defined_at(value: Any) -> str:
    """` (at FILE:LINE)` for a replacement defined in Python code, else ''."""
    target = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
    code = getattr(target, "__code__", None)
    return f" (at {code.co_filename}:{code.co_firstlineno})" if code is not None else ""


def _run(project: ProgramProject, mocks: PolicyCheckMocks) -> ProgramRun:
    failure: GpuforgeError
    logging.getLogger("asyncio").addFilter(_abandoned)
    sys.path.insert(0, str(project.program.parent))
    os.chdir(project.program.parent)
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
        failure = error
    except ModuleNotFoundError as error:
        failure = _missing_module(project, error)
    except Exception as error:  # noqa: BLE001  # whatever a program raises is reported, naming it
        failure = InputError(
            f"{project.program}: the program raised {type(error).__name__}: {error}{_line(project, error)}. "
            "Fix: correct the program or the config it reads; it ran as under `pulumi preview`, with "
            "gpuforge's mocks in place of AWS."
        )
    raise failure


# Provider SDKs gpuforge offers as extras (pyproject.toml), by the module a program imports.
_EXTRAS = {"pulumi_kubernetes": "gpuforge[kubernetes-iac]"}


def _missing_module(project: ProgramProject, error: ModuleNotFoundError) -> InputError:
    """A program importing what is not installed: the program runs in gpuforge's Python, not its own virtualenv."""
    top = (error.name or "").split(".")[0]
    install = f"pip install '{_EXTRAS[top]}'" if top in _EXTRAS else "pip install <its package>"
    return InputError(
        f"{project.program}: the program imports {error.name!r}{_line(project, error)}, which is not installed "
        f"in the Python environment gpuforge runs in ({sys.prefix}); the check runs the program there, not in "
        f"the project's own virtualenv. Fix: `{install}` into that environment (with the version the project "
        "pins), then run the check again."
    )


def _abandoned(record: logging.LogRecord) -> bool:
    """asyncio's 'exception was never retrieved' about a failed run's futures: the error is reported once, by gpuforge."""
    return not record.getMessage().startswith(_ABANDONED)


def _line(project: ProgramProject, error: BaseException) -> str:
    """`(at FILE:LINE)` for the deepest frame of the program's own files, else where the program made
    the resource the SDK's error names, else ''."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if Path(frame.filename).resolve().is_relative_to(project.directory)
    ]
    if frames:
        return f" (at {frames[-1].filename}:{frames[-1].lineno})"
    named = _SDK_RESOURCE_ERROR.search(str(error))
    return _RESOURCE_SITES.get((named["type"], named["name"]), "") if named else ""


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
