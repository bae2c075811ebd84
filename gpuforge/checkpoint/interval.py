"""Checkpoint interval models: Young's and Daly's optimum, and the fraction of GPU time lost.

Symbols (seconds): delta, the time to write one checkpoint; M, the job's mean time to interrupt (for a job
on N nodes, the per-node mean time between failures over N); R, the time to restart from a checkpoint;
T, the compute time between two checkpoints.

- Young, "A first order approximation to the optimum checkpoint interval", Communications of the ACM
  17(9):530-531, 1974: T = sqrt(2 delta M).
- Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", Future Generation
  Computer Systems 22(3):303-312, 2006, eq. 37: for delta < 2M,
  T = sqrt(2 delta M) [1 + (1/3) sqrt(delta/2M) + (1/9)(delta/2M)] - delta; else T = M.
  LLNL SCR implements both (scripts/python/scr_ckpt_interval.py); tests/checkpoint/test_interval.py
  checks these functions against its output.

The lost fraction is the first-order waste model Young's interval minimises (Young 1974; the same form
as Daly 2006, section 2): per unit of time the job spends delta/T writing checkpoints, and each failure,
arriving at rate 1/M, costs on average half an interval of recomputation plus the restart:

    lost(T) = delta/T + (T/2 + R)/M

Its assumptions: failures arrive as a Poisson process (exponential times between them, rate 1/M) that
checkpointing does not change; the write blocks the GPUs for delta (no asynchronous copy); a failure
strikes uniformly within an interval, so it loses T/2 on average; delta, R and T are small against M (the
first-order terms; no failure during a write or a restart). d lost/dT = 0 gives T = sqrt(2 delta M), and
lost(T) >= 1 there exactly when delta >= M/2 (R = 0): the cluster fails faster than it can checkpoint.
"""

from __future__ import annotations

import math


def _check(delta_s: float, mtbf_s: float) -> None:
    if not (delta_s > 0 and math.isfinite(delta_s)) or not (mtbf_s > 0 and math.isfinite(mtbf_s)):
        raise ValueError(f"checkpoint time {delta_s!r} s and MTBF {mtbf_s!r} s must be finite and positive")


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young's optimum compute time between checkpoints, seconds."""
    _check(delta_s, mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (eq. 37), seconds; M itself once a write takes 2M or more."""
    _check(delta_s, mtbf_s)
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - delta_s


def lost_fraction(interval_s: float, delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """The first-order fraction of GPU time lost (module docstring), capped at 1: all of it."""
    _check(delta_s, mtbf_s)
    if not interval_s > 0 or restart_s < 0:
        raise ValueError(
            f"interval {interval_s!r} s must be positive and restart {restart_s!r} s not negative"
        )
    return min(1.0, delta_s / interval_s + (interval_s / 2.0 + restart_s) / mtbf_s)


def beyond_mtbf(delta_s: float, mtbf_s: float) -> bool:
    """True when Young's interval reaches the MTBF (delta >= M/2): no interval makes progress in the
    first-order model, so a stack with such a checkpoint is refused."""
    return young_interval(delta_s, mtbf_s) >= mtbf_s
