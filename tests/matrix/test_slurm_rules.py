"""The Slurm and PMIx pins: exact, checksummed, over https, and the `slurm.*` rules, each passing and failing.

The facts come from gpuforge/data/slurm.yaml through `facts()`, so the tests read the
same table: a date or PMIx major changed there moves the expectation with it.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
import yaml
from matrix_cases import MATRICES, findings, rules, warnings

from gpuforge.compat import compat
from gpuforge.images.matrix import Matrix
from gpuforge.images.rules import rule_slurm_series
from gpuforge.scheduler.versions import facts


def _series_findings(data: dict[str, Any], today: date) -> list[tuple[str, str, str]]:
    matrix = Matrix.model_validate(data)
    return [(f.rule, f.severity, f.message) for f in rule_slurm_series(matrix, compat(), today=today)]


def test_every_shipped_matrix_pins_slurm_and_pmix(h100: dict[str, Any], b200: dict[str, Any]) -> None:
    for data in (h100, b200):
        assert data["slurm"]["version"] == "26.05.5"
        assert data["pmix"]["version"] == "5.0.3"
        assert rules(data) == set()


# --- shape and pins ---------------------------------------------------------------------------


@pytest.mark.parametrize("block", ["slurm", "pmix"])
@pytest.mark.parametrize("key", ["version", "sha256", "url"])
def test_each_key_of_a_tarball_block_is_required(h100: dict[str, Any], block: str, key: str) -> None:
    del h100[block][key]
    hits = [f for f in findings(h100) if f.rule == "schema.missing-key"]
    assert [f.field for f in hits] == [f"{block}.{key}"]


def test_an_unknown_key_in_the_slurm_block_is_an_error(h100: dict[str, Any]) -> None:
    h100["slurm"]["sha512"] = "0" * 128
    assert [(f.rule, f.field) for f in findings(h100)] == [("schema.unknown-key", "slurm.sha512")]


def test_a_matrix_without_slurm_and_pmix_passes(h100: dict[str, Any]) -> None:
    del h100["slurm"], h100["pmix"], h100["mariadb"]
    assert findings(h100) == []


@pytest.mark.parametrize(("block", "value"), [("slurm", "26.05.*"), ("slurm", "latest"), ("pmix", "5.x")])
def test_inexact_slurm_and_pmix_versions_fail_pin_exact(h100: dict[str, Any], block: str, value: str) -> None:
    h100[block]["version"] = value
    hits = [f for f in findings(h100) if f.rule == "pin.exact"]
    assert [f.field for f in hits] == [f"{block}.version"] and repr(value) in hits[0].message
    # A version that is not exact is reported once, not again by every rule that compares it.
    assert not [f for f in findings(h100) if f.rule.startswith("slurm.")]


@pytest.mark.parametrize("block", ["slurm", "pmix"])
def test_a_checksum_that_is_not_a_sha256_fails_pin_sha256(h100: dict[str, Any], block: str) -> None:
    h100[block]["sha256"] = "42CC1177"
    hits = [f for f in findings(h100) if f.rule == "pin.sha256"]
    assert [f.field for f in hits] == [f"{block}.sha256"]


@pytest.mark.parametrize(
    "url",
    [
        "http://deb.debian.org/debian/pool/main/s/slurm-wlm/slurm-wlm_26.05.5.orig.tar.gz",
        "ftp://example.org/slurm.tar.gz",
        "https://",
        "slurm-26.05.5.tar.bz2",
        "https://github.com/SchedMD/slurm/archive/slurm-26-05-5-1.tar.gz\n",
        "https://github.com/SchedMD/slurm/archive/slurm-26-05-5-1.tar.gz\u2028",
    ],
)
def test_a_download_that_is_not_https_fails_pin_url(h100: dict[str, Any], url: str) -> None:
    h100["slurm"]["url"] = url
    hit = [f for f in findings(h100) if f.rule == "pin.url"]
    assert rules(h100) == {"pin.url"} and hit[0].field == "slurm.url" and repr(url) in hit[0].message


def _tag_archive(version: str) -> str:
    return f"https://github.com/SchedMD/slurm/archive/slurm-{version.replace('.', '-')}-1.tar.gz"


def _pin_slurm(data: dict[str, Any], version: str) -> None:
    """Another Slurm release, with the URL of its own tarball (slurm.url-version)."""
    data["slurm"] |= {"version": version, "url": _tag_archive(version)}


def test_every_shipped_matrix_fetches_slurm_from_schedmds_tag_archive(h100: dict[str, Any]) -> None:
    # Debian's pool dropped the orig tarball the matrices used to name; the tag archive is the same file.
    for path in sorted(MATRICES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert data["slurm"]["url"] == _tag_archive(data["slurm"]["version"]), path.name
        assert not [f for f in findings(data) if f.rule.startswith("pin.url")], path.name


def test_a_url_in_a_distribution_pool_warns_that_it_will_leave(h100: dict[str, Any]) -> None:
    h100["slurm"]["url"] = "https://deb.debian.org/debian/pool/main/s/slurm-wlm/slurm-wlm_26.05.5.orig.tar.gz"
    hit = [f for f in findings(h100) if f.rule == "pin.url-durable"]
    assert rules(h100) == set() and len(hit) == 1
    assert hit[0].field == "slurm.url" and "github.com/SchedMD/slurm/archive" in hit[0].message
    assert "pin.url-durable" in warnings(h100)


@pytest.mark.parametrize(
    "url",
    [
        "https://download.schedmd.com/slurm/slurm-26.05.5.tar.bz2",
        "https://github.com/SchedMD/slurm/archive/slurm-26-05-5-1.tar.gz",
        "https://github.com/SchedMD/slurm/archive/slurm-26-05-5-2.tar.gz",
        "https://mirror.example.org/debian/slurm-wlm_26.05.5.orig.tar.gz",
    ],
)
def test_a_url_that_names_the_pinned_release_passes(h100: dict[str, Any], url: str) -> None:
    h100["slurm"]["url"] = url
    assert not [f for f in findings(h100) if f.rule == "slurm.url-version"]


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/SchedMD/slurm/archive/slurm-26-05-4-1.tar.gz",
        "https://download.schedmd.com/slurm/slurm-26.05.50.tar.bz2",
        "https://download.schedmd.com/slurm/slurm-126.05.5.tar.bz2",
        "https://github.com/SchedMD/slurm/archive/slurm-26-05-5-1.zip",
        "https://example.org/26.05.5/slurm.tar.gz",
    ],
)
def test_a_url_that_names_another_release_fails_slurm_url_version(h100: dict[str, Any], url: str) -> None:
    h100["slurm"]["url"] = url
    hit = [f for f in findings(h100) if f.rule == "slurm.url-version"]
    assert rules(h100) == {"slurm.url-version"}
    assert hit[0].field == "slurm.url" and "26.05.5" in hit[0].message and "slurm-26-05-5-1" in hit[0].message


def test_series_dates_are_the_first_release_tags_and_18_months_of_support() -> None:
    # Tagger dates of slurm-YY-MM-0-1 in SchedMD/slurm; end of support: the first day of the month
    # 18 months after the series' month (upgrades.html), never the table's later 26.05 year.
    entries = facts().series.entries
    assert entries["25.11"].released == date(2025, 11, 6)
    assert entries["26.05"].released == date(2026, 5, 26)
    for series, info in entries.items():
        year, month = 2000 + int(series[:2]), int(series[3:])
        assert (info.released.year, info.released.month) == (year, month), series
        months = year * 12 + month - 1 + 18
        assert info.end_of_support == date(months // 12, months % 12 + 1, 1), series


# --- slurm.pmix-required ----------------------------------------------------------------------


def test_slurm_without_pmix_fails(h100: dict[str, Any]) -> None:
    del h100["pmix"]
    hit = [f for f in findings(h100) if f.rule == "slurm.pmix-required"]
    assert rules(h100) == {"slurm.pmix-required"} and hit[0].field == "pmix"
    assert "26.05.5" in hit[0].message and "Fix:" in hit[0].message


def test_pmix_without_slurm_fails(h100: dict[str, Any]) -> None:
    del h100["slurm"], h100["mariadb"]
    assert rules(h100) == {"slurm.pmix-required"}


# --- slurm.series-supported -------------------------------------------------------------------


def test_a_supported_series_passes_and_warns_near_its_end(h100: dict[str, Any]) -> None:
    table = facts().series
    end = table.entries["26.05"].end_of_support
    assert _series_findings(h100, end - timedelta(days=table.warn_days_before_eol + 1)) == []
    near = _series_findings(h100, end - timedelta(days=table.warn_days_before_eol))
    assert [(rule, severity) for rule, severity, _ in near] == [("slurm.series-supported", "warning")]
    assert f"reaches end of support on {end}" in near[0][2]


def test_a_series_past_its_end_of_support_fails(h100: dict[str, Any]) -> None:
    end = facts().series.entries["26.05"].end_of_support
    for today in (end, end + timedelta(days=400)):
        hits = _series_findings(h100, today)
        assert [(rule, severity) for rule, severity, _ in hits] == [("slurm.series-supported", "error")]
        assert f"reached end of support on {end}" in hits[0][2]


def test_the_end_of_25_05_is_the_one_schedmd_publishes(h100: dict[str, Any]) -> None:
    _pin_slurm(h100, "25.05.4")
    assert _series_findings(h100, date(2026, 10, 31)) != []  # within the warning window
    hits = _series_findings(h100, date(2026, 11, 2))
    assert hits and hits[0][1] == "error" and "25.11" in hits[0][2] and "26.05" in hits[0][2]


@pytest.mark.parametrize("version", ["22.05.8", "24.11.5", "27.05.0"])
def test_an_unlisted_series_fails(h100: dict[str, Any], version: str) -> None:
    _pin_slurm(h100, version)
    hit = [f for f in findings(h100) if f.rule == "slurm.series-supported"]
    assert len(hit) == 1 and hit[0].severity == "error" and hit[0].field == "slurm.version"
    assert f"series {version[:5]}" in hit[0].message and hit[0].source == facts().series.source


@pytest.mark.parametrize("version", ["26.5.5", "26.05"])
def test_a_version_that_is_not_a_slurm_release_number_fails(h100: dict[str, Any], version: str) -> None:
    h100["slurm"]["version"] = version  # exact to pin.exact, but not YY.MM.MICRO: a series is not a release
    hit = [f for f in findings(h100) if f.rule == "slurm.series-supported"]
    assert rules(h100) == {"slurm.series-supported"} and "YY.MM.MICRO" in hit[0].message


# --- slurm.pmix-compatible --------------------------------------------------------------------


@pytest.mark.parametrize("pmix", ["5.0.8", "4.2.9", "3.2.5"])
def test_a_pmix_major_the_plugin_knows_passes(h100: dict[str, Any], pmix: str) -> None:
    h100["pmix"]["version"] = pmix
    assert rules(h100) == set()


@pytest.mark.parametrize("pmix", ["7.0.0", "1.2.5"])
def test_a_pmix_major_the_plugin_does_not_know_fails(h100: dict[str, Any], pmix: str) -> None:
    h100["pmix"]["version"] = pmix
    hit = [f for f in findings(h100) if f.rule == "slurm.pmix-compatible"]
    assert rules(h100) == {"slurm.pmix-compatible"}
    assert hit[0].field == "pmix.version" and pmix in hit[0].message and "2, 3, 4, 5, 6" in hit[0].message
    assert hit[0].source == facts().pmix.source


def test_pmix_6_builds_with_the_series_whose_configure_knows_it(h100: dict[str, Any]) -> None:
    # auxdir/x_ac_pmix.m4 knows PMIx 6 from slurm-25-11-0-1 on, not at slurm-25-05-0-1.
    h100["pmix"]["version"] = "6.0.0"
    for version in ("26.05.5", "25.11.7"):
        _pin_slurm(h100, version)
        assert not [f for f in findings(h100) if f.rule == "slurm.pmix-compatible"], version
    _pin_slurm(h100, "25.05.8")
    hit = [f for f in findings(h100) if f.rule == "slurm.pmix-compatible"]
    assert len(hit) == 1 and "25.05" in hit[0].message and "2, 3, 4, 5)" in hit[0].message


# --- slurm.features ---------------------------------------------------------------------------


def test_a_slurm_with_every_rendered_feature_passes(h100: dict[str, Any]) -> None:
    _pin_slurm(h100, "25.05.0")
    assert "slurm.features" not in {f.rule for f in findings(h100)}


def test_a_slurm_that_predates_a_rendered_feature_fails(
    h100: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every listed series is new enough today, so the table is given a series older than the feature.
    table = facts()
    old = table.series.entries["26.05"]
    series = table.series.model_copy(update={"entries": {**table.series.entries, "24.11": old}})
    pmix = table.pmix.model_copy(
        update={"supported_majors": {**table.pmix.supported_majors, "24.11": [2, 3, 4, 5]}}
    )
    patched = table.model_copy(update={"series": series, "pmix": pmix})
    monkeypatch.setattr("gpuforge.images.rules.facts", lambda: patched)
    _pin_slurm(h100, "24.11.5")
    hits = [f for f in findings(h100) if f.rule == "slurm.features"]
    assert rules(h100) == {"slurm.features"}
    assert len(hits) == 1 and hits[0].field == "slurm.version"
    fact = table.features["dynamic_node_topology"]
    assert fact.min_version in hits[0].message and hits[0].source == fact.source
    # Slurm's own warnings only: date-based rules of other parts (kubernetes.eks-supported) warn as days pass.
    assert not {w for w in warnings(h100) if w.startswith("slurm.")}


# --- nccl-tests: the same tarball rules ---------------------------------------------------------

NCCL_TESTS = {
    "version": "2.17.1",
    "sha256": "0" * 64,
    "sha256_source": "hashed: a test value, never downloaded",
    "url": "https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v2.17.1.tar.gz",
}


def test_a_pinned_nccl_tests_passes_and_an_inexact_one_fails_every_tarball_rule(h100: dict[str, Any]) -> None:
    h100["nccl_tests"] = dict(NCCL_TESTS)
    assert findings(h100) == []
    h100["nccl_tests"] |= {"version": "latest", "sha256": "abc", "url": "http://example.com/x.tar.gz"}
    h100["nccl_tests"].pop("sha256_source")
    fields = {(f.rule, f.field) for f in findings(h100)}
    assert {
        ("pin.exact", "nccl_tests.version"),
        ("pin.sha256", "nccl_tests.sha256"),
        ("pin.url", "nccl_tests.url"),
        ("pin.sha256-source", "nccl_tests.sha256_source"),
    } <= fields
