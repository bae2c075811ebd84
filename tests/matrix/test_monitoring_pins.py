"""The monitoring daemons' pins (node_exporter, prometheus, alertmanager): the same exact / sha256 /
sha256_source / https rules as every other downloaded tarball, the file named by the pinned release,
a warning where a matrix with Slurm leaves one out, and one dcgm-exporter field list per image."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from matrix_cases import MATRICES, findings, rules, warnings

from gpuforge.compat import compat
from gpuforge.images.matrix import MONITORING_KEYS, Matrix
from gpuforge.images.rules import rule_prometheus_supported
from gpuforge.monitoring.releases import monitoring_versions

KEYS = ("node_exporter", "prometheus", "alertmanager")


def _by_rule(data: dict[str, Any], rule: str) -> list[str]:
    return [f.field for f in findings(data) if f.rule == rule]


def test_the_keys_are_the_issues_contract_names() -> None:
    assert MONITORING_KEYS == KEYS


def test_every_shipped_matrix_pins_the_three_and_passes(h100: dict[str, Any]) -> None:
    for path in sorted(MATRICES.glob("*.yaml")):
        matrix = Matrix.model_validate(__import__("yaml").safe_load(path.read_text(encoding="utf-8")))
        pins = dict(matrix.monitoring_tarballs)
        assert set(pins) == set(KEYS), path.name
        for key, pin in pins.items():
            assert pin.url.endswith(f"/v{pin.version}/{key}-{pin.version}.linux-amd64.tar.gz"), path.name
    assert rules(h100) == set() and not {w for w in warnings(h100) if w.startswith("monitoring.")}


@pytest.mark.parametrize("block", KEYS)
@pytest.mark.parametrize("key", ["version", "sha256", "url"])
def test_each_key_of_a_monitoring_block_is_required(h100: dict[str, Any], block: str, key: str) -> None:
    del h100[block][key]
    assert _by_rule(h100, "schema.missing-key") == [f"{block}.{key}"]


@pytest.mark.parametrize("block", KEYS)
def test_a_monitoring_pin_goes_through_every_download_rule(h100: dict[str, Any], block: str) -> None:
    h100[block]["version"] = "latest"
    assert _by_rule(h100, "pin.exact") == [f"{block}.version"]
    h100[block]["version"] = "1.0.0"
    h100[block]["sha256"] = "42CC1177"
    assert _by_rule(h100, "pin.sha256") == [f"{block}.sha256"]
    h100[block]["sha256"] = "a" * 64
    del h100[block]["sha256_source"]
    assert _by_rule(h100, "pin.sha256-source") == [f"{block}.sha256_source"]
    h100[block]["sha256_source"] = "unverified: made up"
    assert _by_rule(h100, "pin.sha256-source") == [f"{block}.sha256_source"]
    h100[block]["sha256_source"] = "published: somewhere real"
    h100[block]["url"] = (
        f"http://github.com/prometheus/{block}/releases/download/v1.0.0/{block}-1.0.0.linux-amd64.tar.gz"
    )
    assert _by_rule(h100, "pin.url") == [f"{block}.url"]


@pytest.mark.parametrize("block", KEYS)
def test_a_url_that_names_another_release_is_refused(h100: dict[str, Any], block: str) -> None:
    pinned = h100[block]["version"]
    h100[block]["url"] = h100[block]["url"].replace(pinned, "0.0.1")
    hits = [f for f in findings(h100) if f.rule == "monitoring.url-version"]
    assert [f.field for f in hits] == [f"{block}.url"] and pinned in hits[0].message


@pytest.mark.parametrize("block", KEYS)
def test_a_matrix_with_slurm_and_without_a_monitoring_pin_warns(h100: dict[str, Any], block: str) -> None:
    del h100[block]
    assert rules(h100) == set()
    hits = [f for f in findings(h100) if f.rule == "monitoring.pinned"]
    assert [f.field for f in hits] == [block] and hits[0].severity == "warning"


def test_a_matrix_without_slurm_needs_no_monitoring_pins(h100: dict[str, Any]) -> None:
    for block in ("slurm", "pmix", "mariadb", *KEYS):
        del h100[block]
    assert findings(h100) == []


def test_targets_that_need_different_field_lists_are_refused(h100: dict[str, Any]) -> None:
    # g6 (Ada, no NVLink) and p5 (Hopper, NVLink) collect different DCGM fields: one image, one list.
    h100["targets"] = ["p5.48xlarge", "g6.xlarge"]
    hits = [f for f in findings(h100) if f.rule == "monitoring.one-field-list"]
    assert [f.field for f in hits] == ["targets"]
    assert "p5.48xlarge" in hits[0].message and "g6.xlarge" in hits[0].message


def test_the_digest_moves_with_a_monitoring_pin(h100: dict[str, Any]) -> None:
    from gpuforge.images.matrix import digest

    before = digest(Matrix.model_validate(h100))
    h100["prometheus"]["version"] = "3.5.1"
    assert digest(Matrix.model_validate(h100)) != before


# --- monitoring.prometheus-supported -----------------------------------------------------------


def _pin_prometheus(data: dict[str, Any], version: str) -> None:
    data["prometheus"]["version"] = version
    data["prometheus"]["url"] = (
        f"https://github.com/prometheus/prometheus/releases/download/v{version}/prometheus-{version}.linux-amd64.tar.gz"
    )


def _lts_findings(data: dict[str, Any], today: date) -> list[tuple[str, str, str]]:
    matrix = Matrix.model_validate(data)
    return [(f.rule, f.severity, f.message) for f in rule_prometheus_supported(matrix, compat(), today=today)]


def test_the_lts_table_holds_prometheus_ios_row_for_3_5() -> None:
    # prometheus.io release-cycle page, List of LTS releases: "Prometheus 3.5 | 2025-07-14 | 2026-07-31".
    table = monitoring_versions().prometheus
    assert table.lts["3.5"].end_of_support == date(2026, 7, 31)
    assert "prometheus.io/docs/introduction/release-cycle" in table.lts["3.5"].source


def test_the_lts_table_holds_prometheus_docs_row_for_3_13() -> None:
    # prometheus/docs docs/introduction/release-cycle.md at c105550aad07 (the source of prometheus.io's
    # page): "Prometheus 3.13 | 2026-07-01 | 2027-07-31 | Supported".
    row = monitoring_versions().prometheus.lts["3.13"]
    assert row.end_of_support == date(2027, 7, 31)
    assert "prometheus/docs docs/introduction/release-cycle.md" in row.source


def test_every_shipped_matrix_is_accepted_until_3_13_support_ends_and_refused_on_that_day() -> None:
    """The boundary of monitoring.prometheus-supported for the shipped pins: all of July 2027 still passes
    (a warning only), 2027-07-31, the day prometheus/docs gives as 3.13's end of support, is an error."""
    for path in sorted(MATRICES.glob("*.yaml")):
        data = __import__("yaml").safe_load(path.read_text(encoding="utf-8"))
        for today in (date(2027, 7, 1), date(2027, 7, 30)):
            severities = [severity for _, severity, _ in _lts_findings(data, today)]
            assert severities == ["warning"], (path.name, today)
        ended = _lts_findings(data, date(2027, 7, 31))
        assert [severity for _, severity, _ in ended] == ["error"], path.name
        assert "2027-07-31" in ended[0][2]


def test_every_shipped_matrix_pins_a_supported_lts_prometheus_on_2026_12_04() -> None:
    for path in sorted(MATRICES.glob("*.yaml")):
        data = __import__("yaml").safe_load(path.read_text(encoding="utf-8"))
        assert _lts_findings(data, date(2026, 12, 4)) == [], path.name


def test_a_supported_lts_passes_and_warns_near_its_end(h100: dict[str, Any]) -> None:
    table = monitoring_versions().prometheus
    _pin_prometheus(h100, "3.13.2")
    end = table.lts["3.13"].end_of_support
    assert _lts_findings(h100, end - timedelta(days=table.warn_days_before_eol + 1)) == []
    near = _lts_findings(h100, end - timedelta(days=table.warn_days_before_eol))
    assert [(rule, severity) for rule, severity, _ in near] == [
        ("monitoring.prometheus-supported", "warning")
    ]
    assert str(end) in near[0][2]


def test_an_lts_past_its_end_of_support_fails_naming_the_current_lts(h100: dict[str, Any]) -> None:
    _pin_prometheus(h100, "3.5.0")
    for today in (date(2026, 7, 31), date(2026, 12, 4)):
        hits = _lts_findings(h100, today)
        assert [(rule, severity) for rule, severity, _ in hits] == [
            ("monitoring.prometheus-supported", "error")
        ]
        assert "2026-07-31" in hits[0][2] and "3.13" in hits[0][2]
    # The day before: within the warning window, not yet an error.
    assert [severity for _, severity, _ in _lts_findings(h100, date(2026, 7, 30))] == ["warning"]
    assert rules(h100) >= {"monitoring.prometheus-supported"}  # and `matrix check` runs the rule


@pytest.mark.parametrize("version", ["3.11.2", "3.6.0", "2.55.1"])
def test_a_non_lts_series_fails_naming_the_current_lts(h100: dict[str, Any], version: str) -> None:
    _pin_prometheus(h100, version)
    hits = _lts_findings(h100, date(2026, 12, 4))
    assert [(rule, severity) for rule, severity, _ in hits] == [("monitoring.prometheus-supported", "error")]
    message = hits[0][2]
    assert "not a long-term-support series" in message and "6 weeks" in message and "3.13" in message


def test_a_prometheus_pin_that_is_not_exact_is_left_to_pin_exact(h100: dict[str, Any]) -> None:
    h100["prometheus"]["version"] = "latest"
    assert _lts_findings(h100, date(2026, 12, 4)) == []
    del h100["prometheus"]
    assert _lts_findings(h100, date(2026, 12, 4)) == []
