"""The stack config reader: types, relations between keys, and errors that name file, key and value."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuforge.errors import InputError
from gpuforge.stack_config import engine_config, load_stack_config, parse_engine_values

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "images" / "matrices" / "p5-h100-cuda12.yaml"


def _config(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "aws:region": "us-east-1",
        "gpuforge:matrix": str(MATRIX),
        "gpuforge:instanceType": "p5.48xlarge",
        "gpuforge:nodeCount": 16,
        "gpuforge:nodeMode": "asg",
        "gpuforge:availabilityZone": "us-east-1a",
        "gpuforge:capacity": {
            "type": "capacity-block",
            "reservationId": "cr-0123456789abcdef0",
            "start": "2025-07-01T11:30:00Z",
            "end": "2025-07-15T11:30:00Z",
        },
        "gpuforge:lustre": {
            "deploymentType": "PERSISTENT_2",
            "storageCapacityGiB": 4800,
            "throughputPerTiB": 250,
            "s3Path": "s3://training-data/shards",
        },
    }
    config.update(overrides)
    return {key: value for key, value in config.items() if value is not None}


def _stack(tmp_path: Path, config: dict[str, Any], *, raw: str | None = None) -> Path:
    (tmp_path / "Pulumi.yaml").write_text("name: gpuforge-training\nruntime: python\n", encoding="utf-8")
    text = raw if raw is not None else yaml.safe_dump({"config": config})
    (tmp_path / "Pulumi.test.yaml").write_text(text, encoding="utf-8")
    return tmp_path


def _error(tmp_path: Path, config: dict[str, Any]) -> str:
    with pytest.raises(InputError) as caught:
        load_stack_config(_stack(tmp_path, config), "test")
    assert caught.value.exit_code == 2
    return caught.value.message


def test_reads_every_key_into_typed_fields(tmp_path: Path) -> None:
    config = load_stack_config(_stack(tmp_path, _config()), "test")
    assert config.project == "gpuforge-training"
    assert config.stack == "test"
    assert config.matrix_path == MATRIX
    assert config.instance_type == "p5.48xlarge"
    assert config.node_count == 16
    assert config.node_mode == "asg"
    assert config.availability_zone == "us-east-1a"
    assert config.region == "us-east-1"
    assert config.capacity.type == "capacity-block"
    assert config.capacity.reservation_id == "cr-0123456789abcdef0"
    assert config.capacity.placement_group is None
    assert config.capacity.start == datetime(2025, 7, 1, 11, 30, tzinfo=UTC)
    assert config.capacity.end is not None and config.capacity.end.tzinfo is not None
    assert config.lustre is not None
    assert config.lustre.deployment_type == "PERSISTENT_2"
    assert config.lustre.storage_capacity_gib == 4800
    assert config.lustre.throughput_per_tib == 250
    assert config.lustre.s3_path == "s3://training-data/shards"
    assert config.catalog_path is None


def test_relative_paths_resolve_against_the_stack_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack_dir = tmp_path / "stacks" / "training"
    stack_dir.mkdir(parents=True)
    matrices = tmp_path / "images" / "matrices"
    matrices.mkdir(parents=True)
    (matrices / "m.yaml").write_text(MATRIX.read_text(encoding="utf-8"), encoding="utf-8")
    config = _config(
        **{"gpuforge:matrix": "../../images/matrices/m.yaml", "gpuforge:catalog": "../../c.json"}
    )
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    loaded = load_stack_config(_stack(stack_dir, config), "test")
    assert loaded.matrix_path == (matrices / "m.yaml").resolve()
    assert loaded.catalog_path == (tmp_path / "c.json").resolve()


def test_engine_values_are_the_strings_the_engine_hands_a_program(tmp_path: Path) -> None:
    loaded = load_stack_config(_stack(tmp_path, _config()), "test")
    assert loaded.engine_values["gpuforge:nodeCount"] == "16"
    assert loaded.engine_values["gpuforge:instanceType"] == "p5.48xlarge"
    assert json.loads(loaded.engine_values["gpuforge:capacity"])["start"] == "2025-07-01T11:30:00Z"


def test_unquoted_yaml_timestamps_stay_as_written(tmp_path: Path) -> None:
    raw = yaml.safe_dump({"config": _config()}).replace("'2025-07-01T11:30:00Z'", "2025-07-01T11:30:00Z")
    assert "start: 2025-07-01T11:30:00Z" in raw
    loaded = load_stack_config(_stack(tmp_path, {}, raw=raw), "test")
    assert loaded.capacity.start == datetime(2025, 7, 1, 11, 30, tzinfo=UTC)


def test_engine_reader_and_file_reader_agree(tmp_path: Path) -> None:
    from_file = load_stack_config(_stack(tmp_path, _config()), "test")
    from_engine = parse_engine_values(
        from_file.engine_values,
        project="gpuforge-training",
        stack="test",
        stack_dir=tmp_path,
        source="engine",
    )
    assert from_engine.model_dump(exclude={"source"}) == from_file.model_dump(exclude={"source"})


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"gpuforge:nodeCnt": 4}, "unknown key 'gpuforge:nodeCnt'"),
        ({"gpuforge:nodeCount": "sixteen"}, "gpuforge:nodeCount = 'sixteen'"),
        ({"gpuforge:nodeCount": 2.5}, "gpuforge:nodeCount = 2.5"),
        ({"gpuforge:nodeCount": True}, "gpuforge:nodeCount = True"),
        ({"gpuforge:nodeCount": 0}, "gpuforge:nodeCount = 0"),
        ({"gpuforge:nodeMode": "spot"}, "gpuforge:nodeMode = 'spot'"),
        ({"gpuforge:instanceType": None}, "gpuforge:instanceType: required key is missing"),
        (
            {"gpuforge:lustre": {"deploymentType": "SCRATCH_2", "storageCapacityGiB": "1200"}},
            "storageCapacityGiB",
        ),
        (
            {"gpuforge:lustre": {"deploymentType": "SCRATCH_2", "storageCapacityGiB": 1200, "throughput": 1}},
            "gpuforge:lustre.throughput: unknown key",
        ),
        ({"gpuforge:capacity": "on-demand"}, "gpuforge:capacity = 'on-demand'"),
        ({"gpuforge:capacity": {"type": "spot"}}, "gpuforge:capacity.type = 'spot'"),
        ({"gpuforge:capacity": {"type": "reservation"}}, "gpuforge:capacity.reservationId = None"),
        ({"gpuforge:capacity": {"type": "reservation", "reservationId": "res-1"}}, "'res-1'"),
        (
            {"gpuforge:capacity": {"type": "on-demand", "reservationId": "cr-0123456789abcdef0"}},
            "on-demand capacity does not use reservation_id",
        ),
        (
            {
                "gpuforge:capacity": {
                    "type": "capacity-block",
                    "reservationId": "cr-0123456789abcdef0",
                    "start": "2025-07-01T11:30:00",
                    "end": "2025-07-02T11:30:00Z",
                }
            },
            "timezone",
        ),
        (
            {
                "gpuforge:capacity": {
                    "type": "capacity-block",
                    "reservationId": "cr-0123456789abcdef0",
                    "start": "2025-07-02T11:30:00Z",
                    "end": "2025-07-01T11:30:00Z",
                }
            },
            "gpuforge:capacity.end = '2025-07-01T11:30:00+00:00'",
        ),
        (
            {"gpuforge:lustre": {"deploymentType": "PERSISTENT_2", "storageCapacityGiB": 1200}},
            "gpuforge:lustre.throughputPerTiB = None",
        ),
        (
            {
                "gpuforge:lustre": {
                    "deploymentType": "SCRATCH_2",
                    "storageCapacityGiB": 1200,
                    "throughputPerTiB": 125,
                }
            },
            "gpuforge:lustre.throughputPerTiB = 125",
        ),
        (
            # SCRATCH_1 takes no DRA, and a stack's only S3 link is one: refused where it is read, with the fix.
            {"gpuforge:lustre": {"deploymentType": "SCRATCH_1", "storageCapacityGiB": 1200}},
            "gpuforge:lustre.deploymentType = 'SCRATCH_1'",
        ),
        (
            {"gpuforge:availabilityZone": "us-west-2a"},
            "gpuforge:availabilityZone = 'us-west-2a': the zone is in us-west-2, not in aws:region 'us-east-1'",
        ),
        ({"aws:region": None}, "aws:region = None"),
        # The right shape, but no region AWS has (botocore's endpoint data): refused where it is read.
        ({"aws:region": "us-east-9"}, "aws:region = 'us-east-9' is not a region AWS has"),
        # The monitoring block is read with the rest: plan and render refuse what `monitoring render` refuses.
        ({"gpuforge:monitoring": {"retention": 15}}, "gpuforge:monitoring.retention: unknown key"),
        ({"gpuforge:monitoring": {"enabled": True}}, "gpuforge:monitoring.enabled = True"),
        ({"gpuforge:instanceType": "p9.48xlarge"}, "gpuforge:instanceType: instance type 'p9.48xlarge'"),
        ({"gpuforge:nodeMode": "instances"}, "gpuforge:nodeMode = 'instances'"),
        (
            {
                "gpuforge:capacity": {
                    "type": "capacity-block",
                    "reservationId": "cr-0123456789abcdef0",
                    "placementGroup": "pg",
                    "start": "2025-07-01T11:30:00Z",
                    "end": "2025-07-15T11:30:00Z",
                }
            },
            "gpuforge:capacity.placementGroup = 'pg'",
        ),
        (
            {"gpuforge:lustre": {"deploymentType": "SCRATCH_2", "storageCapacityGiB": 1000}},
            "gpuforge:lustre.storageCapacityGiB = 1000",
        ),
        ({"gpuforge:matrix": "no/such/matrix.yaml"}, "gpuforge:matrix = 'no/such/matrix.yaml'"),
        ({"nodeCount": 3}, "key 'nodeCount' has no namespace"),
        ({"gpuforge-training:nodeCount": 3}, "project's namespace"),
        ({"gpuforge:instanceType": {"secure": "AAAA"}}, "is a secret"),
    ],
)
def test_bad_config_names_file_key_and_value(
    tmp_path: Path, overrides: dict[str, Any], expected: str
) -> None:
    message = _error(tmp_path, _config(**overrides))
    assert str(tmp_path / "Pulumi.test.yaml") in message
    assert expected in message
    assert "Fix:" in message


def test_other_namespaces_pass_through_and_secrets_of_other_namespaces_are_left_out(tmp_path: Path) -> None:
    config = _config(**{"aws:profile": "training", "aws:defaultTags": {"tags": {"team": "ml"}}})
    config["aws:secretKey"] = {"secure": "v1:abc"}
    loaded = load_stack_config(_stack(tmp_path, config), "test")
    assert loaded.engine_values["aws:profile"] == "training"
    assert json.loads(loaded.engine_values["aws:defaultTags"]) == {"tags": {"team": "ml"}}
    assert "aws:secretKey" not in loaded.engine_values


def test_missing_stack_file_lists_the_stacks_there(tmp_path: Path) -> None:
    _stack(tmp_path, _config())
    with pytest.raises(InputError, match=r"Pulumi\.prod\.yaml: no such stack file.*\(test\)"):
        load_stack_config(tmp_path, "prod")


def test_missing_pulumi_yaml_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"Pulumi\.yaml: cannot read the Pulumi project file: no such file"):
        load_stack_config(tmp_path, "test")


@pytest.mark.parametrize("raw", ["config: [1, 2]\n", "- a\n", "config:\n  a: [\n"])
def test_malformed_stack_files_are_input_errors(tmp_path: Path, raw: str) -> None:
    with pytest.raises(InputError, match=r"Pulumi\.test\.yaml"):
        load_stack_config(_stack(tmp_path, {}, raw=raw), "test")


def test_engine_config_turns_values_into_engine_strings(tmp_path: Path) -> None:
    values = engine_config(tmp_path / "f.yaml", {"a:b": 3, "a:c": "x", "a:d": {"k": [1, True]}})
    assert values == {"a:b": "3", "a:c": "x", "a:d": '{"k": [1, true]}'}


SLURM = {"type": "slurm", "controllerInstanceType": "m7i.2xlarge"}


def test_no_scheduler_key_means_no_scheduler(tmp_path: Path) -> None:
    config = load_stack_config(_stack(tmp_path, _config()), "test")
    assert config.scheduler.type == "none"
    assert config.slurm_version is None


def test_the_scheduler_block_and_the_matrix_s_slurm(tmp_path: Path) -> None:
    block = {
        **SLURM,
        "partitions": [{"name": "gpu", "maxTime": "2-00:00:00", "default": True}, {"name": "debug"}],
    }
    config = load_stack_config(_stack(tmp_path, _config(**{"gpuforge:scheduler": block})), "test")
    assert config.scheduler.type == "slurm"
    assert config.scheduler.controller_instance_type == "m7i.2xlarge"
    assert [(p.name, p.max_time, p.default) for p in config.scheduler.partitions] == [
        ("gpu", "2-00:00:00", True),
        ("debug", None, False),
    ]
    assert config.slurm_version == yaml.safe_load(MATRIX.read_text(encoding="utf-8"))["slurm"]["version"]
    # The engine hands the block over as JSON text, like gpuforge:capacity.
    assert json.loads(config.engine_values["gpuforge:scheduler"]) == block


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            {**SLURM, "partitions": [{"name": "a"}, {"name": "a"}]},
            "gpuforge:scheduler.partitions = ['a', 'a']",
        ),
        (
            {**SLURM, "partitions": [{"name": "two words"}]},
            "gpuforge:scheduler.partitions.name = 'two words'",
        ),
        (
            {**SLURM, "partitions": [{"name": "a", "maxTime": "soon"}]},
            "gpuforge:scheduler.partitions.maxTime",
        ),
        (
            {**SLURM, "partitions": [{"name": "a", "default": "yes"}]},
            "gpuforge:scheduler.partitions.0.default",
        ),
        (
            {**SLURM, "partitions": [{"name": "a", "default": True}, {"name": "b", "default": True}]},
            "at most one",
        ),
        ({**SLURM, "nodes": 3}, "gpuforge:scheduler.nodes: unknown key"),
        ({"type": "slurm"}, "gpuforge:scheduler.controllerInstanceType = None"),
        ({**SLURM, "controllerInstanceType": "big"}, "gpuforge:scheduler.controllerInstanceType = 'big'"),
        ({"type": "none", "controllerInstanceType": "m7i.2xlarge"}, "gpuforge:scheduler"),
        ({"type": "lsf"}, "gpuforge:scheduler.type = 'lsf'"),
        ("slurm", "gpuforge:scheduler = 'slurm'"),
    ],
)
def test_bad_scheduler_blocks_name_file_and_key(tmp_path: Path, block: Any, expected: str) -> None:
    message = _error(tmp_path, _config(**{"gpuforge:scheduler": block}))
    assert str(tmp_path / "Pulumi.test.yaml") in message
    assert expected in message and "Fix:" in message


def test_slurm_needs_a_matrix_that_pins_slurm(tmp_path: Path) -> None:
    data = yaml.safe_load(MATRIX.read_text(encoding="utf-8"))
    del data["slurm"], data["pmix"]
    matrix = tmp_path / "no-slurm.yaml"
    matrix.write_text(yaml.safe_dump(data), encoding="utf-8")
    message = _error(tmp_path, _config(**{"gpuforge:matrix": str(matrix), "gpuforge:scheduler": SLURM}))
    assert "gpuforge:scheduler.type = 'slurm', but gpuforge:matrix" in message
    assert "no-slurm.yaml pins no Slurm" in message and "or set gpuforge:scheduler.type: none" in message
    # Without Slurm the same matrix is fine.
    assert load_stack_config(_stack(tmp_path, _config(**{"gpuforge:matrix": str(matrix)})), "test")


def test_the_stack_names_pulumi_random_at_gpuforge_s_pin() -> None:
    pins = [
        line
        for line in tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
            "dependencies"
        ]
        if line.startswith("pulumi-random")
    ]
    requirements = (
        (REPO / "stacks" / "training" / "requirements.txt").read_text(encoding="utf-8").splitlines()
    )
    assert pins and [line for line in requirements if line.startswith("pulumi-random")] == pins


@pytest.mark.parametrize(
    "config",
    [
        {"gpuforge:" + "k" * 50_000: "v"},  # an unknown key
        {"gpuforge:instanceType": "p5.48xlarge", "gpuforge:nodeCount": "x" * 50_000},  # a wrong type
        {"gpuforge:matrix": "m\x1b[2J" + "x" * 50_000},  # a path that is no file, with an escape
    ],
)
def test_errors_cut_a_hostile_value_short_and_escape_it(tmp_path: Path, config: dict[str, Any]) -> None:
    message = _error(tmp_path, _config(**{}) | config)
    assert len(message) < 2_000
    assert "\x1b" not in message
    assert "characters)" in message


def test_a_monitoring_block_is_a_key_the_stack_config_reads(tmp_path: Path) -> None:
    block = {"retentionDays": 30, "drainOnAlert": False}
    loaded = load_stack_config(_stack(tmp_path, _config(**{"gpuforge:monitoring": block})), "test")
    assert json.loads(loaded.engine_values["gpuforge:monitoring"]) == block


def test_a_capacity_block_takes_an_upfront_fee_and_no_other_capacity_does(tmp_path: Path) -> None:
    block = {
        "type": "capacity-block",
        "reservationId": "cr-0123456789abcdef0",
        "start": "2025-07-01T11:30:00Z",
        "end": "2025-07-15T11:30:00Z",
    }
    loaded = load_stack_config(
        _stack(tmp_path, _config(**{"gpuforge:capacity": {**block, "upfrontFeeUsd": 1234.5}})), "test"
    )
    assert loaded.capacity.upfront_fee_usd == 1234.5
    whole = load_stack_config(
        _stack(tmp_path, _config(**{"gpuforge:capacity": {**block, "upfrontFeeUsd": 1000}})), "test"
    )
    assert whole.capacity.upfront_fee_usd == 1000.0
    assert load_stack_config(_stack(tmp_path, _config()), "test").capacity.upfront_fee_usd is None
    for fee in (0, -5, float("inf")):
        message = _error(tmp_path, _config(**{"gpuforge:capacity": {**block, "upfrontFeeUsd": fee}}))
        assert "gpuforge:capacity.upfrontFeeUsd" in message and "Fix:" in message, message
    message = _error(tmp_path, _config(**{"gpuforge:capacity": {**block, "upfrontFeeUsd": "12000"}}))
    assert "gpuforge:capacity.upfrontFeeUsd" in message, message
    for other in (
        {"type": "on-demand", "upfrontFeeUsd": 100},
        {"type": "reservation", "reservationId": "cr-0123456789abcdef0", "upfrontFeeUsd": 100},
    ):
        message = _error(tmp_path, _config(**{"gpuforge:capacity": other}))
        assert (
            "gpuforge:capacity.upfrontFeeUsd = 100" in message and "Fix: remove upfront_fee_usd" in message
        ), message
