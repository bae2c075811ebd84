"""Young's and Daly's interval against LLNL SCR's published implementation, and the lost fraction.

Expected values: the output of SCR's scripts/python/scr_ckpt_interval.py
(https://github.com/LLNL/scr/blob/ee31e229a2a74505857468bb09e8b5013da2d1ab/scripts/python/scr_ckpt_interval.py,
the file's last commit; repository HEAD 85e30b19eb8fe0342675ebec6c9ec898a72911c0), run unchanged with
Python 3.11.7 outside this repository as

    DELTA=<delta> MTBF=<M> python3 run.py --model {young,daly} --stats --logfile x

where run.py puts a stand-in `scrjob.scrlog` first on sys.path whose parse_file returns one run's
entries (START; COMPUTE_END secs=M-delta; CHECKPOINT_END secs=delta), so SCR computes checkpoint cost
delta and mean time to interrupt (M-delta+delta)/1 start = M, then runs the script with runpy. The
"Checkpoint Interval (s)" line it printed is the expected value.

SCR's conventions that differ from gpuforge's:
- its M is the job's total run time over its number of starts (the end of an allocation counts as a
  failure, its own TODO says), and its delta includes flush time; gpuforge takes M from node failures
  and delta from the write time to /fsx;
- without --stats it prints int(seconds); its "--percent" overhead is delta/T alone, with no recompute
  term, where gpuforge's lost fraction is delta/T + (T/2 + R)/M;
- at that commit the script binds `scrjob.scrlog` but calls `scrlog.parse_file`, a NameError its bare
  `except` turns into the default "10.0" (10 % overhead): run.py also binds the stand-in as the builtin
  `scrlog` so the models run;
- its comments cite Young 1976 and Daly 2004 (the report); the papers are Young 1974 (CACM) and Daly
  2006 (FGCS).
"""

from __future__ import annotations

import math

import pytest

from gpuforge.checkpoint import interval

# (delta s, M s, SCR young, SCR daly)
SCR_CASES = [
    (60, 86400, 3219.937887599697, 3180.0621135984475),
    (300, 86400, 7200.0, 7001.388888888888),
    (3600, 86400, 24941.531628991834, 22599.266655910797),
    (40000, 86400, 83138.43876330611, 58610.10642697138),
    (86400, 86400, 122188.05178903541, 71376.27688842628),
    (172799, 86400, 172799.49999927662, 76799.99999951775),  # just below Daly's delta < 2M
    (172800, 86400, 172800.0, 86400.0),  # delta = 2M: Daly's T = M
    (500000, 86400, 293938.7691339814, 86400.0),
    (186.71, 1425283.2, 23070.094333227164, 22945.788897026017),  # ~p5-prod: 1043 GiB at 6000 MB/s
    (1, 3600, 84.8528137423857, 84.18745653272124),
]


@pytest.mark.parametrize(("delta", "mtbf", "young", "daly"), SCR_CASES)
def test_young_and_daly_match_scr(delta: float, mtbf: float, young: float, daly: float) -> None:
    assert interval.young_interval(delta, mtbf) == pytest.approx(young, rel=1e-12)
    assert interval.daly_interval(delta, mtbf) == pytest.approx(daly, rel=1e-12)


def test_lost_fraction_is_least_at_youngs_interval() -> None:
    """The first-order model's minimum is Young's interval, and its value there is sqrt(2 delta/M) + R/M."""
    delta, mtbf, restart = 200.0, 500_000.0, 200.0
    best = interval.young_interval(delta, mtbf)
    at_best = interval.lost_fraction(best, delta, mtbf, restart)
    assert at_best == pytest.approx(math.sqrt(2 * delta / mtbf) + restart / mtbf)
    for factor in (0.5, 0.9, 1.1, 2.0):
        assert interval.lost_fraction(best * factor, delta, mtbf, restart) > at_best


def test_beyond_mtbf_at_half_the_mtbf() -> None:
    """Young's interval reaches M exactly when delta reaches M/2, where the lost fraction reaches 1."""
    assert not interval.beyond_mtbf(4999.0, 10_000.0)
    assert interval.beyond_mtbf(5000.0, 10_000.0)
    young = interval.young_interval(5000.0, 10_000.0)
    assert interval.lost_fraction(young, 5000.0, 10_000.0, 0.0) == 1.0


@pytest.mark.parametrize(("delta", "mtbf"), [(0, 10), (10, 0), (-1, 10), (math.nan, 10), (10, math.inf)])
def test_bad_inputs_are_refused(delta: float, mtbf: float) -> None:
    with pytest.raises(ValueError, match="finite and positive"):
        interval.young_interval(delta, mtbf)
    with pytest.raises(ValueError, match="finite and positive"):
        interval.daly_interval(delta, mtbf)
