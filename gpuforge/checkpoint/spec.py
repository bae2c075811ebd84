"""`gpuforge:checkpoint`: the size of one training checkpoint and, optionally, its measured write time."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, field_validator


class CheckpointSpec(BaseModel):
    """`size_gib` is the whole checkpoint every node writes together (GiB); `write_seconds` a measured
    time to write it to /fsx, which replaces the estimate from the Lustre throughput."""

    model_config = ConfigDict(frozen=True)

    size_gib: float
    write_seconds: float | None = None

    @field_validator("size_gib", "write_seconds")
    @classmethod
    def _positive(cls, value: float | None) -> float | None:
        if value is not None and not (value > 0 and math.isfinite(value)):
            raise ValueError("must be a positive, finite number")
        return value
