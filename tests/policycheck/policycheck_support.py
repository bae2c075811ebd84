"""Paths and values shared by the policy-check tests (a module of its own: every test folder has a conftest)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "policycheck"
RENDER_FARM = FIXTURES / "render-farm"  # plain pulumi-aws, project render-farm
MATRIX = REPO / "images" / "matrices" / "p5-h100-cuda12.yaml"
# The AMI id Pulumi.pinned.yaml names; the test catalog records it for MATRIX in us-east-1.
PINNED_AMI = "ami-0123456789abcdef0"
REGION = "us-east-1"
