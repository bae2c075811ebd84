"""The CLI imports only the module of the command being run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpuforge.cli import COMMANDS, build_parser


def _modules_after(code: str) -> set[str]:
    python = Path(sys.executable).parent / "python"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, cwd="/")
    return set(json.loads(done.stdout))


def test_node_command_does_not_import_pulumi_or_other_commands() -> None:
    loaded = _modules_after(
        "import json, sys\n"
        "from gpuforge.cli import build_parser\n"
        "build_parser('node').parse_args(['node', 'check', '--expect', 'p5.48xlarge'])\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    assert "gpuforge.node.cli" in loaded
    assert not {
        m for m in loaded if m.split(".")[0] in {"pulumi", "pulumi_aws", "pulumi_policy", "boto3", "yaml"}
    }
    others = {module for name, (module, _) in COMMANDS.items() if name != "node"}
    assert not loaded & others


def test_top_level_help_imports_no_command_module() -> None:
    parser = build_parser()
    assert {name for name in COMMANDS} <= set(parser.format_help().split())
    loaded = _modules_after(
        "import json, sys\nfrom gpuforge.cli import build_parser\nbuild_parser()\nprint(json.dumps(sorted(sys.modules)))\n"
    )
    assert not loaded & {module for module, _ in COMMANDS.values()}
