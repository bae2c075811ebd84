"""The same bad catalog gets the same exit code and a clear message from every command that reads it.

README's exit-code table: an unusable catalog is bad input, exit 2, for `image list`, `image prune`,
`preflight`, `plan --catalog` and `policy check --catalog`. Each message names the file, the field
where there is one, and the fix; none is a traceback. Every command runs in-process through
`gpuforge.cli.main`, as the console script does, and stops at the catalog before any AWS call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from catalog_records import made_up_entry

from gpuforge.cli import main
from gpuforge.images.catalog import record_entry, record_name

REPO = Path(__file__).resolve().parents[2]
STACK_DIR = REPO / "stacks" / "training"
MATRIX = REPO / "images" / "matrices" / "g6-dev-cuda12.yaml"  # the dev stack's matrix

COMMANDS: dict[str, list[str]] = {
    "image list": ["image", "list"],
    "image prune": ["image", "prune", "--stacks", str(STACK_DIR)],
    "preflight": ["preflight", str(STACK_DIR), "--stack", "dev"],
    "plan": ["plan", str(STACK_DIR), "--stack", "dev"],
    "policy check": ["policy", "check", str(STACK_DIR), "--stack", "dev"],
}


def _missing_folder(tmp: Path) -> tuple[Path, list[str]]:
    return tmp / "no-such-catalog", ["no such", "catalog", "Fix:"]


def _missing_file(tmp: Path) -> tuple[Path, list[str]]:
    return tmp / "no-such-catalog.json", ["no such", "catalog", "Fix:"]


def _not_json(tmp: Path) -> tuple[Path, list[str]]:
    path = tmp / "catalog.json"
    path.write_text("images: {not json\n", encoding="utf-8")
    return path, ["not valid JSON (line 1", "Fix:"]


def _bad_field_in_folder(tmp: Path) -> tuple[Path, list[str]]:
    folder = tmp / "catalog"
    entry = made_up_entry(MATRIX, "ami-0123456789abcdef0", "us-east-1")
    record_entry(folder, entry)
    record = folder / record_name(entry)
    document = json.loads(record.read_text(encoding="utf-8"))
    document["images"][entry.matrix_digest]["us-east-1"]["ami_id"] = "ami-NOT-AN-ID"
    record.write_text(json.dumps(document), encoding="utf-8")
    return folder, [f"images.{entry.matrix_digest}.us-east-1.ami_id", "ami-NOT-AN-ID", "Fix:"]


def _bad_schema_file(tmp: Path) -> tuple[Path, list[str]]:
    path = tmp / "catalog.json"
    path.write_text('{"schema": 99, "images": {}}', encoding="utf-8")
    return path, ["schema", "99", "Fix:"]


CATALOGS: dict[str, Callable[[Path], tuple[Path, list[str]]]] = {
    "missing folder": _missing_folder,
    "missing .json": _missing_file,
    "not JSON": _not_json,
    "record with a bad field": _bad_field_in_folder,
    "unknown schema": _bad_schema_file,
}


@pytest.mark.parametrize("catalog", list(CATALOGS))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_catalog_is_exit_2_naming_the_file_field_and_fix(
    command: str,
    catalog: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No AWS call may be made: credentials that cannot work, and no endpoint to reach.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    path, expected = CATALOGS[catalog](tmp_path)

    code = main([*COMMANDS[command], "--catalog", str(path)])

    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert err.startswith("gpuforge: error: ")
    assert str(path) in err
    for part in expected:
        assert part in err, err
