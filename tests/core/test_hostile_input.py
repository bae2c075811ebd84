"""Hostile and broken input through every loader's public entry point: only gpuforge's own error comes out.

The property tests generate YAML and JSON of random shape, deep nesting, aliases, duplicate
keys, odd encodings and odd paths, and drive the stack config, the matrix (`matrix check`
and `matrix show`), the node manifest and the scheduler's topology file with it. Each input
must end as a value or an InputError/GpuforgeError within a time bound: never a traceback,
never a hang. The suite runs a fixed number of examples; for a longer run:

    GPUFORGE_FUZZ_EXAMPLES=20000 .venv/bin/pytest tests/core/test_hostile_input.py
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from fuzzing import ENCODINGS, FUZZ, SECONDS_PER_INPUT, VALUES, bounded, deep, encode, yaml_texts
from hypothesis import given
from hypothesis import strategies as st

from gpuforge.cli import main
from gpuforge.errors import GpuforgeError, InputError
from gpuforge.images.matrix import check_file
from gpuforge.node.manifest import load_manifest
from gpuforge.scheduler.topology import from_response
from gpuforge.stack_config import load_stack_config

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "images" / "matrices" / "p5-h100-cuda12.yaml"


def _stack_dir(tmp_path: Path) -> Path:
    stack_dir = tmp_path / "stack"
    stack_dir.mkdir(exist_ok=True)
    (stack_dir / "Pulumi.yaml").write_text("name: training\nruntime: python\n")
    return stack_dir


STACK_BASE: dict[str, Any] = {
    "config": {
        "aws:region": "us-east-1",
        "gpuforge:matrix": str(MATRIX),
        "gpuforge:instanceType": "p5.48xlarge",
        "gpuforge:nodeCount": 2,
        "gpuforge:nodeMode": "asg",
        "gpuforge:availabilityZone": "us-east-1a",
        "gpuforge:capacity": {"type": "on-demand"},
    }
}


@FUZZ
@given(
    text=st.one_of(
        yaml_texts(STACK_BASE["config"]).map(lambda t: "config:\n" + _indent(t)), yaml_texts(STACK_BASE)
    ),
    encoding=ENCODINGS,
)
def test_stack_config_loader(tmp_path: Path, text: str, encoding: str) -> None:
    stack_dir = _stack_dir(tmp_path)
    (stack_dir / "Pulumi.dev.yaml").write_bytes(encode(text, encoding))
    bounded(lambda: load_stack_config(stack_dir, "dev"))


def _indent(text: str) -> str:
    return "".join(f"  {line}\n" for line in text.splitlines())


@FUZZ
@given(
    matrix_path=st.one_of(
        st.text(min_size=1, max_size=300),
        st.integers(200, 5000).map(lambda n: "m" * n),
        st.builds(lambda value: json.dumps(value), VALUES),
    )
)
def test_stack_config_paths(tmp_path: Path, matrix_path: str) -> None:
    stack_dir = _stack_dir(tmp_path)
    config = {**STACK_BASE["config"], "gpuforge:matrix": matrix_path, "gpuforge:catalog": matrix_path}
    (stack_dir / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    bounded(lambda: load_stack_config(stack_dir, "dev"))


@pytest.mark.parametrize("key", ["gpuforge:matrix", "gpuforge:catalog"])
def test_a_path_in_the_home_of_an_unknown_user_is_refused_naming_the_key(tmp_path: Path, key: str) -> None:
    """`~0/...` (a user this machine lacks) once ended in pathlib's RuntimeError: the fuzz test above found it."""
    stack_dir = _stack_dir(tmp_path)
    config = {**STACK_BASE["config"], key: "~0/m.yaml"}
    (stack_dir / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_stack_config(stack_dir, "dev")
    message = str(caught.value)
    assert f"{key} = '~0/m.yaml'" in message and "~0 names the home folder of a user" in message
    assert "Fix:" in message


@FUZZ
@given(text=yaml_texts(yaml.safe_load(MATRIX.read_text())), encoding=ENCODINGS)
def test_matrix_loader(tmp_path: Path, text: str, encoding: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(encode(text, encoding))
    bounded(lambda: check_file(path))
    for command in ("check", "show"):
        started = time.monotonic()
        assert main(["matrix", command, str(path)]) in (0, 1, 2)
        assert time.monotonic() - started < SECONDS_PER_INPUT
    assert "Traceback" not in capsys.readouterr().err


MANIFEST = json.loads((REPO / "tests" / "fixtures" / "node" / "manifest" / "p5-h100.json").read_text())


def _json_texts(base: dict[str, Any]) -> st.SearchStrategy[str]:
    keys = sorted(base)
    return st.one_of(
        st.builds(lambda key, value: json.dumps({**base, key: value}), st.sampled_from(keys), VALUES),
        st.builds(lambda key: json.dumps(base)[:-1] + f', "{key}": 1}}', st.sampled_from(keys)),
        st.builds(json.dumps, VALUES),
        st.integers(1, 100_000).map(lambda n: deep(n, "[", "]")),
        st.sampled_from(["NaN", "[Infinity]", "[1e999]", '{"schema": true}', ""]),
        st.text(max_size=200),
    )


@FUZZ
@given(text=_json_texts(MANIFEST), encoding=ENCODINGS)
def test_manifest_loader(tmp_path: Path, text: str, encoding: str) -> None:
    path = tmp_path / "manifest.json"
    path.write_bytes(encode(text, encoding))
    bounded(lambda: load_manifest(path))


@FUZZ
@given(data=st.binary(max_size=400))
def test_binary_garbage(tmp_path: Path, data: bytes) -> None:
    for name in ("manifest.json", "matrix.yaml"):
        (tmp_path / name).write_bytes(data)
    bounded(lambda: load_manifest(tmp_path / "manifest.json"))
    bounded(lambda: check_file(tmp_path / "matrix.yaml"))


CATALOG = {"schema": 1, "images": {}}


@FUZZ
@given(text=_json_texts(CATALOG), encoding=ENCODINGS)
def test_catalog_loader(tmp_path: Path, text: str, encoding: str) -> None:
    from gpuforge.images.catalog import load_catalog

    path = tmp_path / "catalog.json"
    path.write_bytes(encode(text, encoding))
    bounded(lambda: load_catalog(path))


TOPOLOGY = {"Instances": [{"InstanceId": "i-0123456789abcdef0", "InstanceType": "p5.48xlarge"}]}


@FUZZ
@given(text=_json_texts(TOPOLOGY))
def test_topology_loader(tmp_path: Path, text: str) -> None:
    from gpuforge.scheduler.cli import _read_topology  # the --topology reader of `scheduler render`

    path = tmp_path / "topology.json"
    path.write_text(text, encoding="utf-8")
    bounded(lambda: from_response(_read_topology(path), where=str(path)))


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "/proc/self", "/dev/null"])
def test_devices_and_directories_are_refused_before_reading(
    special: str, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert main(["matrix", "check", special]) == 2
    assert "not a regular file" in capsys.readouterr().out  # matrix check reports on stdout
    assert time.monotonic() - started < SECONDS_PER_INPUT


def test_a_fifo_does_not_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "manifest.json"
    os.mkfifo(fifo)
    assert main(["node", "check", "--expect", "p5.48xlarge", "--manifest", str(fifo)]) == 2
    assert "not a regular file" in capsys.readouterr().err


# --- the silent accepts, one test per class ---------------------------------------------------


def _stack(tmp_path: Path, **overrides: Any) -> Path:
    stack_dir = _stack_dir(tmp_path)
    config = {**STACK_BASE["config"], **overrides}
    (stack_dir / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": config}), encoding="utf-8")
    return stack_dir


def test_a_duplicate_stack_key_is_refused(tmp_path: Path) -> None:
    stack_dir = _stack(tmp_path)
    path = stack_dir / "Pulumi.dev.yaml"
    path.write_text(path.read_text() + "  gpuforge:nodeCount: 3\n")
    with pytest.raises(GpuforgeError, match="duplicate key 'gpuforge:nodeCount'"):
        load_stack_config(stack_dir, "dev")


@pytest.mark.parametrize("count", [10**9, 10**30])
def test_node_counts_no_subnet_can_hold_are_refused(tmp_path: Path, count: int) -> None:
    with pytest.raises(GpuforgeError, match=r"gpuforge:nodeCount.*less than or equal to 65531"):
        load_stack_config(_stack(tmp_path, **{"gpuforge:nodeCount": count}), "dev")


def test_addresses_beyond_the_subnet_are_refused(tmp_path: Path) -> None:
    # A p5.48xlarge node takes one address (its primary interface; EFA-only ones take none),
    # and the default VPC's private /17 gives 32763.
    config = {"gpuforge:instanceType": "p5.48xlarge", "gpuforge:nodeCount": 32_764}
    with pytest.raises(GpuforgeError) as caught:
        load_stack_config(_stack(tmp_path, **config), "dev")
    message = caught.value.message
    assert "gpuforge:nodeCount" in message and "32763 the subnet 10.0.0.0/17 can give" in message
    assert "subnet-sizing.html" in message
    # 3,000 On-Demand p5 nodes fit: their EFA-only interfaces take no address.
    assert load_stack_config(_stack(tmp_path, **{"gpuforge:nodeCount": 3000}), "dev").node_count == 3000


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        ("2025-07-01T11:30:00Z", "2125-07-01T11:30:00Z", "lasts at most 182 days"),
        ("2025-07-15T11:30:00Z", "2025-07-01T11:30:00Z", "ends after it starts"),
    ],
)
def test_capacity_block_dates_aws_cannot_sell(tmp_path: Path, start: str, end: str, message: str) -> None:
    capacity = {"type": "capacity-block", "reservationId": "cr-0123456789abcdef0", "start": start, "end": end}
    with pytest.raises(GpuforgeError, match=message):
        load_stack_config(_stack(tmp_path, **{"gpuforge:capacity": capacity}), "dev")


def test_the_same_target_twice_is_a_finding(tmp_path: Path) -> None:
    data = yaml.safe_load(MATRIX.read_text())
    data["targets"] = [data["targets"][0], data["targets"][0]]
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    report = check_file(path)
    assert not report.ok
    assert any("appears more than once" in f.message and f.field == "targets" for f in report.findings)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(schema=True), "'schema': must be the integer 1"),
        (lambda d: d.update(extra=1), "'extra': is not a manifest key"),
        (lambda d: d["matrix"].update(digest="not-a-digest"), "'matrix.digest': must be a matrix digest"),
        (lambda d: d["components"].update(kernal="6.8"), "'components.kernal': is not a manifest key"),
        (lambda d: d.update(targets=["p5.48xlarge", "p5.48xlarge"]), "'targets': must name each"),
    ],
)
def test_manifest_strictness(tmp_path: Path, change: Callable[[dict[str, Any]], None], message: str) -> None:
    data = json.loads(json.dumps(MANIFEST))
    change(data)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GpuforgeError, match=message):
        load_manifest(path)


def test_binary_manifest_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "manifest.json"
    path.write_bytes(bytes(range(256)))
    assert main(["node", "check", "--expect", "p5.48xlarge", "--manifest", str(path)]) == 2
    assert "not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-3"])
def test_timeouts_must_be_finite_and_positive(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["image", "build", str(MATRIX), "--region", "us-east-1", f"--timeout={value}"])
    assert usage.value.code == 2
    assert "finite number of seconds above 0" in capsys.readouterr().err


def test_image_list_escapes_terminal_control_characters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuforge.images.catalog import CatalogEntry, record_entry

    entry = CatalogEntry(
        "ami-0123456789abcdef0",
        "us-east-1",
        "evil\x1b[2J\nname",
        "1",
        "a" * 64,
        "2026-01-01T00:00:00+00:00",
        "1.11",
    )
    record_entry(tmp_path / "c.json", entry)  # a name a pull request could carry: the schema takes it
    assert main(["image", "list", "--catalog", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "evil\\x1b[2J\\nname" in out


def test_render_into_an_unwritable_place_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code = main(["image", "render", str(MATRIX), "--region", "us-east-1", "--out", str(blocker / "out")])
    assert code == 2
    assert "cannot create the output folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["matrix", "show", "{bad}", "--json"],
        ["image", "list", "--catalog", "{bad}", "--json"],
        ["node", "check", "--manifest", "{bad}", "--json"],
        ["validate", "report", "--instance-type", "p5.48xlarge", "--nodes", "2", "{bad}", "--json"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_json_commands_print_a_json_error_object(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff")
    assert main([str(bad) if arg == "{bad}" else arg for arg in argv]) == 2
    captured = capsys.readouterr()
    error = json.loads(captured.out)["error"]
    assert error["exit_code"] == 2 and "not UTF-8 text" in error["message"]
    assert "gpuforge: error:" in captured.err
