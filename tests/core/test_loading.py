"""gpuforge.loading: each class of bad file ends in one InputError that names the file, the rule and the fix."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuforge.atomic import write_text_atomic
from gpuforge.errors import InputError
from gpuforge.loading import MAX_CONFIG_BYTES, MAX_DEPTH, load_json, load_yaml, parse_json, parse_yaml

FIX = "do the documented thing"


def _yaml(text: str, **options: bool) -> object:
    return parse_yaml(text, source="f.yaml", fix=FIX, **options)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &x [1, 2]\nb: *x\n", "aliases (*name) are not allowed"),
        ("a: 1\nb: 2\na: 3\n", "duplicate key 'a'"),
        ("a: 1\n<<: {a: 2}\n", "duplicate key 'a'"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} levels"),
        ("{[1]: 2}", "a mapping key must be text or a number"),
        ("a: 2025-02-30\n", "day is out of range"),
        ("a: 1\n---\nb: 2\n", "expected a single document"),
        ("\x1f", "unacceptable character"),
        ("a: [1\n", "not valid YAML"),
    ],
)
def test_bad_yaml_is_one_input_error(text: str, message: str) -> None:
    with pytest.raises(InputError, match=r"^f\.yaml: .*Fix: do the documented thing\.$") as caught:
        _yaml(text)
    assert message in caught.value.message
    assert '"<unicode string>"' not in caught.value.message  # the mark names the file


def test_an_alias_bomb_is_refused_at_once() -> None:
    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 12)
    )
    started = time.monotonic()
    with pytest.raises(InputError, match="aliases"):
        _yaml(bomb)
    assert time.monotonic() - started < 1


def test_plain_yaml_still_loads_and_timestamps_can_stay_text() -> None:
    assert _yaml("a: [1, {b: c}]\n<<: {d: 1}\n") == {"a": [1, {"b": "c"}], "d": 1}
    assert _yaml("t: 2025-07-01T11:30:00Z\n", timestamps_as_text=True) == {"t": "2025-07-01T11:30:00Z"}
    assert _yaml("t: 2025-07-01T11:30:00Z\n") != {"t": "2025-07-01T11:30:00Z"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ("[NaN]", "NaN is not a JSON number"),
        ("[-Infinity]", "-Infinity is not a JSON number"),
        ("[1e999]", "1e999 is beyond the range of a number"),
        ("[" * 100_000, f"nested more than {MAX_DEPTH} levels deep"),
        ("{'a': 1}", "not valid JSON (line 1, column 2"),
    ],
)
def test_bad_json_is_one_input_error(text: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_json(text, source="f.json", fix=FIX)
    assert caught.value.message.startswith("f.json: ") and message in caught.value.message


def test_brackets_inside_json_strings_do_not_count_as_nesting() -> None:
    assert parse_json('{"a": "' + "[" * 1000 + '\\"{"}', source="f", fix=FIX) == {"a": "[" * 1000 + '"{'}


def test_reads_refuse_what_is_not_a_small_regular_utf8_file(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("a: 1\n" + "#" * MAX_CONFIG_BYTES)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"a": "caf\xe9"}')
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    cases = {
        tmp_path / "absent.yaml": "no such file",
        tmp_path: "not a regular file",
        Path("/dev/zero"): "not a regular file",
        fifo: "not a regular file",
        big: f"{MAX_CONFIG_BYTES + 5} bytes is more than it may hold",
        latin: "not UTF-8 text (byte 10 is b'\\xe9')",
        Path("a\0b"): "a path cannot hold a NUL byte",
        Path("n" * 5000): "the path is longer than the system allows",
    }
    for path, message in cases.items():
        with pytest.raises(InputError) as caught:
            load_json(path, what="test file", fix=FIX)
        assert f"cannot read the test file: {message}" in caught.value.message, path
        assert caught.value.message.endswith(f"Fix: {FIX}.")
        with pytest.raises(InputError, match="cannot read the test file"):
            load_yaml(path, what="test file", fix=FIX)


def test_an_unreadable_file_names_the_permission(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a mode-000 file")
    path = tmp_path / "secret.yaml"
    path.write_text("a: 1\n")
    path.chmod(0)
    with pytest.raises(InputError, match="Permission denied"):
        load_yaml(path, what="test file", fix=FIX)


def test_the_json_half_needs_no_yaml() -> None:
    """The node agent reads its manifest on bare GPU nodes: loading JSON must not import PyYAML."""
    probe = (
        "import sys\nfrom gpuforge.loading import parse_json\n"
        "parse_json('{}', source='s', fix='f')\nprint('yaml' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_an_unwritable_target_is_an_input_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match=r"file/sub/out.conf: cannot write the file \(.*\)\. Fix: "):
        write_text_atomic(blocker / "sub" / "out.conf", "x")
    with pytest.raises(InputError, match="cannot write the file"):
        write_text_atomic(tmp_path / "a\0b", "x")


def test_finite_numbers_only() -> None:
    assert parse_json("[1.5, -2e10]", source="s", fix=FIX) == [1.5, -2e10]
    assert all(math.isfinite(v) for v in parse_json("[1e308]", source="s", fix=FIX))
