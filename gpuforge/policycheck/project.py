"""A Python Pulumi project as the Pulumi CLI reads it: Pulumi.yaml, the stack's config file, the program.

What is read, as the project file reference describes it
(source: https://www.pulumi.com/docs/iac/concepts/projects/project-file/):

- `Pulumi.yaml` (or `Pulumi.yml`): `name`, `runtime` (`python`, or a mapping whose
  `name` is `python`), `main` (the program's folder or file, relative to the project;
  default the project folder, whose `__main__.py` is the program), `stackConfigDir`
  (where the stack files live) and the project-level `config:` (a plain value, or a
  mapping with `value` or `default`);
- the stack's config: `Pulumi.<stack>.yaml` in the stack config folder, or the file
  `--config-file` names (the Pulumi CLI's flag of the same name). Its values win over
  the project's.

A key without a namespace is the project's (`instanceType` is `<project>:instanceType`),
and every value reaches the program as the engine sends it: strings as they are,
anything else as JSON text (`gpuforge.stack_config.engine_config`). A `secure:` value
cannot be decrypted without the stack's secrets provider, so it is left out and named
if the program asks for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuforge.errors import InputError
from gpuforge.loading import expand_user, load_yaml
from gpuforge.pulumi_mocks import DEFAULT_REGION
from gpuforge.regions import region_problem
from gpuforge.stack_config import REGION_KEY, engine_config

PROJECT_FILES = ("Pulumi.yaml", "Pulumi.yml")
PROGRAM = "__main__.py"
PROJECT_DOC = "https://www.pulumi.com/docs/iac/concepts/projects/project-file/"


@dataclass(frozen=True)
class ProgramProject:
    """Everything needed to run one stack of a Python Pulumi program as the engine would."""

    directory: Path  # the folder that holds Pulumi.yaml
    name: str  # the project name: the namespace of keys written without one
    program: Path  # the file runpy runs
    stack: str
    config_file: Path | None  # the stack's config file; None for a stack that has none yet
    config: Mapping[str, str]  # every key as the engine hands it to the program
    secrets: frozenset[str]  # keys the config file holds encrypted (left out of `config`)

    @property
    def region(self) -> str:
        """`aws:region`, else the mocks' default (the provider would read the environment)."""
        return self.config.get(REGION_KEY) or DEFAULT_REGION

    @property
    def config_source(self) -> str:
        """Where the config came from, for messages."""
        if self.config_file is None:
            return f"the project file {self.directory / PROJECT_FILES[0]} (stack {self.stack} has no config file)"
        return str(self.config_file)


def load_project(
    directory: Path,
    *,
    stack: str | None = None,
    config_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> ProgramProject:
    """Read the project in `directory` and the config of one stack; InputError names the file and the fix.

    `overrides` are set on top of the files (a value of None removes the key), as
    `pulumi config set` would set them; the pytest plugin passes its `config=` here.
    """
    directory = expand_user(directory, what="the project directory")
    if not _is_dir(directory):
        raise InputError(
            f"{directory}: not a folder. Fix: point gpuforge policy check at the folder that holds the "
            "program's Pulumi.yaml."
        )
    directory = directory.resolve()
    project_file, data = _project_file(directory)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(
            f"{project_file}: name = {name!r}: a Pulumi project needs a non-empty string name. "
            f"Fix: add `name: <project>` ({PROJECT_DOC})."
        )
    _check_runtime(project_file, data.get("runtime"))
    program = _program(project_file, directory, data.get("main"))
    stack_dir = _relative_dir(project_file, directory, data.get("stackConfigDir"), "stackConfigDir")
    stack_name, stack_file = _stack_file(stack_dir, stack, config_file)

    values = _project_config(project_file, name, data.get("config"))
    secrets: set[str] = set()
    if stack_file is not None:
        raw = _stack_config(stack_file)
        given = engine_config(stack_file, raw)  # refuses keys that are not strings
        values.update({_namespaced(name, key): value for key, value in given.items()})
        secrets = {
            _namespaced(name, key)
            for key, value in raw.items()
            if isinstance(value, dict) and set(value) == {"secure"}
        }
    for key, value in (overrides or {}).items():
        full = _namespaced(name, key)
        if value is None:
            values.pop(full, None)
        else:
            values[full] = value if isinstance(value, str) else json.dumps(value)
            secrets.discard(full)
    project = ProgramProject(
        directory=directory,
        name=name,
        program=program,
        stack=stack_name,
        config_file=stack_file,
        config=values,
        secrets=frozenset(secrets),
    )
    _check_region(project)
    return project


def _check_region(project: ProgramProject) -> None:
    """`aws:region` must be a region AWS has: the mocks would answer for any name, AWS for none."""
    region = project.config.get(REGION_KEY)
    problem = None if region is None else region_problem(region)
    if problem is not None:
        raise InputError(f"{project.config_source}: {REGION_KEY} = {problem}.")


def _project_file(directory: Path) -> tuple[Path, dict[str, Any]]:
    path = next((directory / name for name in PROJECT_FILES if _exists(directory / name)), None)
    if path is None:
        raise InputError(
            f"{directory}: no Pulumi.yaml. Fix: point gpuforge policy check at a Pulumi project folder "
            f"(one with a Pulumi.yaml naming the project and `runtime: python`; {PROJECT_DOC})."
        )
    data = load_yaml(path, what="Pulumi project file", fix=f"write a valid Pulumi.yaml ({PROJECT_DOC})")
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: a project file is a YAML mapping; it holds {type(data).__name__}. "
            f"Fix: write `name:` and `runtime: python` ({PROJECT_DOC})."
        )
    return path, data


def _check_runtime(project_file: Path, runtime: Any) -> None:
    name = runtime.get("name") if isinstance(runtime, dict) else runtime
    if name != "python":
        raise InputError(
            f"{project_file}: runtime = {runtime!r}: gpuforge policy check runs Python programs only, "
            "in this process under the Pulumi SDK's mocks. Fix: check a project with `runtime: python`, "
            "or run the pack with the real engine: `pulumi preview --policy-pack policies/`."
        )


def _relative_dir(project_file: Path, directory: Path, value: Any, key: str) -> Path:
    if value is None:
        return directory
    if not isinstance(value, str) or not _is_dir(directory / value):
        raise InputError(
            f"{project_file}: {key} = {value!r} is not a folder under {directory}. "
            f"Fix: give the folder's path relative to Pulumi.yaml ({PROJECT_DOC})."
        )
    return (directory / value).resolve()


def _program(project_file: Path, directory: Path, main: Any) -> Path:
    if main is not None and not isinstance(main, str):
        raise InputError(
            f"{project_file}: main = {main!r}: expected the program's folder or file as a path relative "
            f"to Pulumi.yaml. Fix: write e.g. `main: infra/` ({PROJECT_DOC})."
        )
    target = directory / main if main else directory
    program = target / PROGRAM if _is_dir(target) else target
    if not _is_file(program) or program.suffix != ".py":
        where = f"main = {main!r} in {project_file}" if main else f"the project folder {directory}"
        raise InputError(
            f"{program}: no such Python program ({where}). Fix: put the program in {PROGRAM} beside "
            "Pulumi.yaml, or point `main:` at its folder or .py file."
        )
    return program.resolve()


def _stack_file(stack_dir: Path, stack: str | None, config_file: Path | None) -> tuple[str, Path | None]:
    """The stack's name and config file, chosen as the Pulumi CLI chooses them."""
    shipped = sorted(path.name[len("Pulumi.") : -len(".yaml")] for path in stack_dir.glob("Pulumi.*.yaml"))
    if config_file is not None:
        path = expand_user(config_file, what="the stack config file").absolute()
        if not _is_file(path):
            raise InputError(f"{path}: no such config file. Fix: pass --config-file with an existing file.")
        if stack is not None:
            return stack, path
        if path.name.startswith("Pulumi.") and path.name.endswith(".yaml") and len(path.name) > 12:
            return path.name[len("Pulumi.") : -len(".yaml")], path
        raise InputError(
            f"{path}: the stack's name cannot be read from this file name. Fix: pass --stack NAME as well."
        )
    if stack is None:
        if len(shipped) == 1:
            return shipped[0], stack_dir / f"Pulumi.{shipped[0]}.yaml"
        raise InputError(
            f"{stack_dir}: {'no stack file' if not shipped else 'stacks ' + ', '.join(shipped)}: "
            "which stack to check is not clear. Fix: pass --stack NAME (reads Pulumi.NAME.yaml) or "
            "--config-file FILE."
        )
    path = stack_dir / f"Pulumi.{stack}.yaml"
    if not _is_file(path):
        raise InputError(
            f"{path}: no such stack file. Fix: pass --stack with one of this project's stacks "
            f"({', '.join(shipped) or 'none'}), or --config-file with the stack's config."
        )
    return stack, path


def _stack_config(path: Path) -> dict[str, Any]:
    data = load_yaml(
        path,
        what="stack config file",
        fix="write a YAML mapping with a `config:` mapping of keys to values",
        timestamps_as_text=True,
    )
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: a stack config file is a YAML mapping with a `config:` key; it holds "
            f"{type(data).__name__}. Fix: write `config:` and the keys under it."
        )
    config = data.get("config", {})
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise InputError(
            f"{path}: config = {config!r}: expected a mapping of keys to values. "
            "Fix: write each setting as `key: value` under `config:`."
        )
    return config


def _project_config(project_file: Path, project: str, config: Any) -> dict[str, str]:
    """The project-level config's values: a plain value, or an entry's `value` or `default`."""
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise InputError(
            f"{project_file}: config = {config!r}: expected a mapping of keys to values or to "
            f"{{type, default}} entries. Fix: see {PROJECT_DOC} (config options)."
        )
    plain: dict[str, Any] = {}
    for key, entry in config.items():
        if isinstance(entry, dict):
            chosen = next((entry[field] for field in ("value", "default") if field in entry), None)
            if chosen is not None:
                plain[key] = chosen
        else:
            plain[key] = entry
    return {_namespaced(project, key): value for key, value in engine_config(project_file, plain).items()}


def _exists(path: Path) -> bool:
    """False also for a path no file can have (a NUL byte, a name longer than the system allows)."""
    try:
        return path.exists()
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    return _exists(path) and path.is_dir()


def _is_file(path: Path) -> bool:
    return _exists(path) and path.is_file()


def _namespaced(project: str, key: str) -> str:
    return key if ":" in key else f"{project}:{key}"
