"""gpuforge: pinned GPU images and EFA-correct training clusters on AWS."""

__version__ = "0.1.0"
