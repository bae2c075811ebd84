"""The mocked run: a stack's own `__main__.py` under the Pulumi SDK's mocks.

The run follows what the Python language host does for `pulumi up`: reset the
runtime, hand the program its config through `set_all_config` (every value a
string, as the engine sends it), run `__main__.py` with runpy inside a root
Stack, and wait for every outstanding registration. Only the monitor differs:
`gpuforge.pulumi_mocks` answers in place of the engine and AWS, and records each
resource as the engine would have received it.

Each run happens in a copy of the current `contextvars` context, the way the SDK
isolates an inline program, so the runtime's ambient state (root resource, config,
settings) does not leak from one run into the next: tests and the benchmark plan
many stacks in one process.
"""

from __future__ import annotations

import contextvars
import os
import runpy
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pulumi
from pulumi.runtime.settings import SETTINGS, get_root_resource
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from gpuforge import pulumi_mocks
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.loading import expand_user
from gpuforge.pulumi_mocks import GpuforgeMocks, RecordedResource
from gpuforge.stack_config import StackConfig, load_stack_config

PROGRAM = "__main__.py"


@dataclass(frozen=True)
class ProgramRun:
    """What one mocked run of a Pulumi program produced."""

    mocks: GpuforgeMocks
    outputs: Mapping[str, Any]  # the stack outputs, resolved

    @property
    def resources(self) -> tuple[RecordedResource, ...]:
        return self.mocks.resources


def run_program(
    program: Path,
    *,
    project: str,
    stack: str,
    config: Mapping[str, str],
    region: str,
    mocks: GpuforgeMocks | None = None,
) -> ProgramRun:
    """Run `program` (a Pulumi Python program file) once under fresh mocks; see the module docstring.

    `mocks` replaces the default `GpuforgeMocks(region=region)`: `gpuforge policy check`
    passes mocks that also answer the lookups any program may make.

    A `pulumi.RunError` raised from a GpuforgeError (how a stack program reports bad
    input to the real engine without a traceback) comes back as that GpuforgeError.
    """
    context = contextvars.copy_context()
    chosen = mocks if mocks is not None else GpuforgeMocks(region=region)
    return context.run(_run_isolated, program, project, stack, dict(config), chosen)


def _run_isolated(
    program: Path, project: str, stack: str, config: dict[str, str], chosen: GpuforgeMocks
) -> ProgramRun:
    pulumi.runtime.reset_options(project=project, stack=stack, preview=False)
    pulumi.runtime.set_all_config(config)
    mocks = pulumi_mocks.install(chosen, project=project, stack=stack, preview=False)
    SETTINGS.outputs = set()  # MockSettings leaves the previous run's set in place
    outputs: dict[str, Any] = {}

    async def run() -> None:
        with _exits_refused(program):
            runpy.run_path(str(program), run_name="__main__")
        root = get_root_resource()
        stack_outputs: Mapping[str, Any] = getattr(root, "outputs", {})
        for name, value in stack_outputs.items():
            outputs[name] = await pulumi.Output.from_input(value).future()

    try:
        _sync_await(run_pulumi_func(run))
    except pulumi.RunError as error:
        if isinstance(error.__cause__, GpuforgeError):
            raise error.__cause__ from None
        raise
    return ProgramRun(mocks=mocks, outputs=outputs)


@contextmanager
def _exits_refused(program: Path) -> Iterator[None]:
    """Run a program so that it cannot end the check: a verdict must come from what it registered.

    Under `pulumi up` a program that exits early fails the update; here `sys.exit(0)` or
    `os._exit(0)` would otherwise end gpuforge with a success code and no verdict, a false pass
    in CI. Both become a bad-input error naming the call."""

    def exited(call: str) -> InputError:
        return InputError(
            f"{program}: the program called {call} before it finished. Fix: let the program return; a "
            "Pulumi program reports a problem by raising an exception (pulumi.RunError)."
        )

    def refuse(code: object = None) -> NoReturn:
        raise exited(f"os._exit({code!r})")

    real_exit = os._exit
    os._exit = refuse  # type: ignore[assignment]
    try:
        yield
    except SystemExit as stop:
        raise exited(f"sys.exit({stop.code!r})") from None
    finally:
        os._exit = real_exit


def stack_program(config: StackConfig) -> Path:
    """The stack's `__main__.py`, or an InputError naming the missing file."""
    program = config.stack_dir / PROGRAM
    if not program.is_file():
        raise InputError(
            f"{program}: no such file. Fix: point gpuforge plan at a stack directory that holds the "
            "Pulumi program (__main__.py), such as stacks/training."
        )
    return program


def with_catalog(config: StackConfig, catalog: Path) -> StackConfig:
    """The config with `gpuforge:catalog` set to `catalog`, as `pulumi config set` would set it."""
    path = expand_user(catalog, what="--catalog").resolve()
    values = {**config.engine_values, "gpuforge:catalog": str(path)}
    return config.model_copy(update={"catalog_path": path, "engine_values": values})


def load(stack_dir: Path, stack: str, catalog: Path | None = None) -> StackConfig:
    """The validated stack config, with the catalog override applied."""
    config = load_stack_config(stack_dir, stack)
    return config if catalog is None else with_catalog(config, catalog)


def run_stack(config: StackConfig) -> ProgramRun:
    """Run the stack's own program with its config under the mocks."""
    return run_program(
        stack_program(config),
        project=config.project,
        stack=config.stack,
        config=config.engine_values,
        region=config.region,
    )
