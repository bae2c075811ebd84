"""gpuforge.rendered_set: what the two `render --out` commands' own tests do not reach.

tests/scheduler/test_render_out.py and tests/monitoring/test_render_cli.py hold the rule as each
command meets it (foreign files, another cluster, a file that cannot be written, an out that is
not a folder); here are the set's subfolders: a stale file in one is removed, and a subfolder
that is a link, a file where a folder of the set belongs, or a folder the set has not stops the
write before anything is written.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from gpuforge.cli import main
from gpuforge.errors import InputError
from gpuforge.rendered_set import write_set

CLUSTER = "train"
SHIPPED_STACKS = Path(__file__).resolve().parents[2] / "stacks" / "training"


def _header(relative: str, cluster: str = CLUSTER) -> str:
    return f"# {relative} for cluster {cluster}, rendered by test\n"


def _recognise(relative: PurePosixPath, first_line: str) -> bool:
    return first_line == _header(str(relative)).rstrip("\n")


SET = {"top.conf": _header("top.conf") + "a = 1\n", "rules/one.yml": _header("rules/one.yml") + "b: 2\n"}


def _tree(folder: Path) -> dict[str, bytes | str]:
    """Every entry below `folder`: a file's bytes, a link's target, a folder as 'folder'."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            found[key] = f"-> {path.readlink()}"
        elif path.is_dir():
            found[key] = "folder"
        else:
            found[key] = path.read_bytes()
    return found


def test_a_stale_file_of_this_cluster_in_a_subfolder_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "rules").mkdir(parents=True)
    (out / "rules" / "old.yml").write_text(_header("rules/old.yml") + "c: 3\n", encoding="utf-8")
    written, removed = write_set(out, SET, CLUSTER, _recognise)
    assert removed == [out / "rules" / "old.yml"]
    assert sorted(written) == sorted(out / name for name in SET)
    assert _tree(out) == {"rules": "folder", **{name: text.encode() for name, text in SET.items()}}


def test_monitoring_render_removes_its_own_earlier_dashboard_that_it_no_longer_produces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    args = ["monitoring", "render", str(SHIPPED_STACKS), "--stack", "p5-prod", "--out", str(out)]
    assert main(args) == 0
    # A dashboard an earlier gpuforge rendered for this cluster, which this one no longer renders.
    old = out / "dashboards" / "gpuforge-retired.json"
    old.write_text(
        (out / "dashboards" / "gpuforge-fabric.json")
        .read_text(encoding="utf-8")
        .replace("gpuforge-fabric.json for cluster", "gpuforge-retired.json for cluster", 1),
        encoding="utf-8",
    )
    capsys.readouterr()
    assert main(args) == 0
    assert not old.exists()
    assert f"removed {old}" in capsys.readouterr().out


@pytest.mark.parametrize("case", ["subfolder-link", "file-as-subfolder", "foreign-subfolder"])
def test_what_is_not_the_set_s_own_folder_is_refused_before_anything_is_written(
    tmp_path: Path, case: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # A link to a folder holding what looks like this cluster's file: never followed, never written through.
    (elsewhere / "one.yml").write_text(_header("rules/one.yml") + "kept\n", encoding="utf-8")
    if case == "subfolder-link":
        (out / "rules").symlink_to(elsewhere)
        named = "'rules'"
    elif case == "file-as-subfolder":
        (out / "rules").write_text("not a folder\n", encoding="utf-8")
        named = "'rules'"
    else:
        (out / "old").mkdir()
        named = "'old'"
    before, outside = _tree(out), _tree(elsewhere)
    with pytest.raises(InputError) as refused:
        write_set(out, SET, CLUSTER, _recognise)
    assert named in str(refused.value) and f"did not render for cluster {CLUSTER}" in str(refused.value)
    assert _tree(out) == before and _tree(elsewhere) == outside


def test_another_cluster_s_file_in_a_subfolder_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "rules").mkdir(parents=True)
    (out / "rules" / "one.yml").write_text(_header("rules/one.yml", "other") + "d: 4\n", encoding="utf-8")
    before = _tree(out)
    with pytest.raises(InputError, match=r"'rules/one.yml'"):
        write_set(out, SET, CLUSTER, _recognise)
    assert _tree(out) == before
