"""The report contract: JSON keys, health rule, atomic files in the report directory."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from gpuforge.node.report import NodeReport, dumps, failed, passed, warned, write_report


def _report(*checks: object) -> NodeReport:
    return NodeReport("p5.48xlarge", tuple(checks))  # type: ignore[arg-type]


def test_json_shape_is_the_contract() -> None:
    report = _report(passed("gpu.inventory", "8 GPUs"), warned("gpu.ecc", "n/a", "ECC off"))
    data = json.loads(dumps(report))
    assert list(data) == ["instance_type", "healthy", "checks"]
    assert data["healthy"] is True
    assert data["checks"][1] == {"id": "gpu.ecc", "status": "warn", "evidence": "n/a", "cause": "ECC off"}
    assert all(list(check) == ["id", "status", "evidence", "cause"] for check in data["checks"])


def test_one_failure_makes_the_node_unhealthy_warnings_do_not() -> None:
    assert _report(warned("a", "e", "c")).healthy
    report = _report(passed("a", "e"), failed("b", "e", "c"))
    assert not report.healthy
    assert [check.id for check in report.failures] == ["b"]
    assert report.to_text().splitlines()[-1] == "NOT HEALTHY: 1 check(s) failed"


def test_write_report_writes_timestamped_and_latest(tmp_path: Path) -> None:
    report = _report(failed("xid", "Xid 79", "reboot"))
    target = tmp_path / "var/log/gpuforge"
    paths = write_report(report, target, now=datetime(2026, 12, 2, 17, 5, 9, tzinfo=UTC))
    assert [path.name for path in paths] == ["node-check-20261202T170509Z.json", "latest.json"]
    assert paths[0].read_text() == paths[1].read_text() == dumps(report)
    # nothing half-written is left beside them
    assert sorted(path.name for path in target.iterdir()) == [
        "latest.json",
        "node-check-20261202T170509Z.json",
    ]
