"""The EKS support calendar in gpuforge/data/kubernetes.yaml, against the rule the calendar itself states.

Amazon EKS user guide, "Understand the Kubernetes version lifecycle on EKS" (awsdocs/amazon-eks-user-guide
latest/ug/versioning/kubernetes-versions.adoc at 0e7fca3762579493a98cb32ab54b137ab194a2d7): a minor is in standard
support for 14 months after its EKS release, then in extended support for 12 more. Every row of the table must
carry its EKS release day and ends that follow from it, so a row copied wrongly (or from a source without the
release day) fails here.
"""

from __future__ import annotations

from datetime import date

import pytest

from gpuforge.kubernetes_versions import EksVersion, kubernetes_facts

STANDARD_MONTHS = 14
EXTENDED_MONTHS = 12


def months_after(day: date, months: int) -> date:
    """The same day of the month `months` later (the calendar's rows all fall on days every month has)."""
    index = day.month - 1 + months
    return day.replace(year=day.year + index // 12, month=index % 12 + 1)


ROWS = sorted(kubernetes_facts().eks.versions.items())


@pytest.mark.parametrize(("minor", "row"), ROWS, ids=[minor for minor, _ in ROWS])
def test_each_row_ends_14_and_26_months_after_its_eks_release(minor: str, row: EksVersion) -> None:
    release = row.eks_release
    assert release is not None, f"{minor}: no EKS release day; the official calendar gives one"
    assert row.end_of_standard_support == months_after(release, STANDARD_MONTHS)
    assert row.end_of_extended_support == months_after(release, STANDARD_MONTHS + EXTENDED_MONTHS)


def test_the_newest_row_is_the_official_calendars_newest() -> None:
    """1.35 is the newest row of the stored official calendar (no 1.36 row there yet): EKS release 2026-01-27."""
    newest = max(
        kubernetes_facts().eks.versions, key=lambda minor: tuple(int(part) for part in minor.split("."))
    )
    assert newest == "1.35"
    assert kubernetes_facts().eks.versions[newest].eks_release == date(2026, 1, 27)
