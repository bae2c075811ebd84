"""`gpuforge usage` against a hostile user (issue 28, classes 3, 5 and 6): names with escape sequences,
answers from a Prometheus that is broken or not Prometheus, dates at the edges of time, and host lists
that name more nodes than any cluster gpuforge builds. Each is a clear exit 2, never a traceback or a
hang, and nothing from a file reaches the terminal raw.

Inputs are made from the real Slurm 26.05.5 capture in tests/fixtures/accounting by the one change
each test names. Malformed Prometheus answers come from a stand-in HTTP server on 127.0.0.1: a real
Prometheus never sends them (a proxy, a login page or a cut connection does), so no real part can.
Non-finite and negative values come from the real Prometheus, which stores and returns them.
"""

from __future__ import annotations

import contextlib
import json
import re
import resource
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from usage_support import StackMaker, prometheus_with_history

from gpuforge.cli import main
from gpuforge.errors import InputError
from gpuforge.usage.events import MAX_HOSTS, expand_hostlist
from gpuforge.usage.hostlist import NodeIndex, TooManyHosts, count_hosts
from gpuforge.usage.metrics import HELD, USEFUL, job_metrics
from gpuforge.usage.window import Window

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "accounting"
SINCE, UNTIL = "2026-12-04T15:54:00Z", "2026-12-04T15:56:00Z"
CLUSTER = "gfacct"
WINDOW = Window(datetime(2026, 12, 4, 15, 54, tzinfo=UTC), datetime(2026, 12, 4, 15, 56, tzinfo=UTC))


@pytest.fixture(autouse=True)
def _no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _sacct(tmp_path: Path, **changes: dict[str, Any]) -> Path:
    """The real capture with top-level fields of some jobs replaced: changes["0"] = {"account": ...}."""
    document = json.loads((FIXTURES / "sacct-duplicates.json").read_text(encoding="utf-8"))
    for index, fields in changes.items():
        document["jobs"][int(index)].update(fields)
    path = tmp_path / "sacct.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


# --- names reach the terminal and the plot escaped ------------------------------------------------

EVIL_ACCOUNT = "evil\x1b[2J\nok: forged"
EVIL_USER = "\x1b]0;owned\x07bob\r"


def test_names_from_accounting_are_escaped_in_the_text_and_the_plot(
    capsys: pytest.CaptureFixture[str], make_stack: StackMaker, tmp_path: Path
) -> None:
    """Job 1's account and job 2's user replaced by names carrying a screen clear, a newline that
    forges a line, a terminal-title sequence and a carriage return."""
    sacct = _sacct(tmp_path, **{"0": {"account": EVIL_ACCOUNT}, "1": {"user": EVIL_USER}})
    stack = make_stack(CLUSTER)
    cases = (
        ("team", r"evil\x1b[2J\nok: fo", r"evil\x1b[2J\nok: forged"),
        ("user", r"\x1b]0;owned\x07bob\r", r"\x1b]0;owned\x07bob\r"),
    )
    for by, in_text, in_plot in cases:
        plot = tmp_path / f"{by}.svg"
        flags = ("--since", SINCE, "--until", UNTIL, "--sacct-json", sacct, "--by", by, "--plot", plot)
        code, out, err = _run(capsys, "usage", stack, "--stack", CLUSTER, *flags)
        assert code == 0, err
        assert not any(ch in out for ch in "\x1b\x07\r"), out
        assert not any(line.startswith("ok: ") for line in out.splitlines()), out
        assert in_text in out, out  # the table's column holds the name's first 16 characters, escaped
        svg = plot.read_text(encoding="utf-8")
        assert not any(ch in svg for ch in "\x1b\x07\r")
        names = {g.attrib["data-group"] for g in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}g")}
        assert in_plot in names, names


# --- dates at the edges --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--until", "0001-01-01"], r"--until '0001-01-01': outside the times the report can use"),
        (["--since", "0001-01-01"], r"--since '0001-01-01': outside the times the report can use"),
        (
            ["--until", "0001-01-01T00:00:00+01:00"],
            r"--until '0001-01-01T00:00:00\+01:00': outside the times",
        ),
        (["--until", "9999-12-31T23:59:59-01:00"], r"--until '9999-12-31T23:59:59-01:00': outside the times"),
        (["--since", "1969-12-31"], r"--since '1969-12-31': outside the times"),
        (["--until", "1970-01-03"], r"--since \(default: a week before --until\) .*: outside the times"),
        (["--until", "9999-12-31"], r"--since 9999-12-24T00:00:00\+00:00 is after now"),
        (["--since", "9999-12-31T23:59:59+00:00"], r"--since 9999-12-31T23:59:59\+00:00 is after now"),
        (["--since", "2026-12-02", "--until", "2026-12-01"], r"--since .* is not before --until .* Fix:"),
        (["--since", "2026-12-01T00:00:00"], r"--since .*with a time zone\. Fix:"),
    ],
)
def test_dates_at_the_edges_are_exit_2(
    capsys: pytest.CaptureFixture[str],
    make_stack: StackMaker,
    tmp_path: Path,
    flags: list[str],
    expected: str,
) -> None:
    no_jobs = tmp_path / "sacct.json"
    no_jobs.write_text('{"jobs": []}', encoding="utf-8")
    code, out, err = _run(
        capsys, "usage", make_stack(CLUSTER), "--stack", CLUSTER, "--sacct-json", no_jobs, "--json", *flags
    )
    assert code == 2
    assert json.loads(out)["error"]["exit_code"] == 2
    assert re.search(expected, err), err
    assert "Fix:" in err


# --- a Prometheus that is broken or not Prometheus ------------------------------------------------


class _Canned(BaseHTTPRequestHandler):
    """Answers every GET with the server's `canned` (status, content type, body, declared length)."""

    def do_GET(self) -> None:
        status, content_type, body, length = self.server.canned  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _stand_in(status: int, content_type: str, body: bytes, length: int | None = None) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Canned)
    server.canned = (status, content_type, body, length)  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _vector(*samples: Any) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}
    ).encode()


HTML = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ((200, "application/json", b"{not json"), r"the answer to the held query: not valid JSON"),
        ((200, "text/html", HTML), r"the answer to the held query: not valid JSON"),
        ((502, "text/html", HTML), r"the held query was refused \(HTTP 502: '<html>"),
        ((200, "application/json", b"[]"), r"the answer to the held query: \[\]: a Prometheus query answer"),
        (
            (200, "application/json", b'{"status": "success", "data": []}'),
            r"data = \[\]: an object is expected",
        ),
        (
            (
                200,
                "application/json",
                b'{"status": "error", "errorType": "bad_data", "error": "parse error"}',
            ),
            r"Prometheus refused the held query: 'bad_data': 'parse error'",
        ),
        (
            (200, "application/json", _vector({"metric": {"hpc_job": "1"}, "value": [1, "abc"]})),
            r"data\.result\[0\]\.value = \[1, 'abc'\]: \[time, \"number\"\] is expected",
        ),
        (
            (200, "application/json", _vector({"metric": {"hpc_job": "1"}, "value": "60"})),
            r"data\.result\[0\]\.value = '60': \[time, \"number\"\] is expected",
        ),
        (
            (200, "application/json", _vector({"metric": "hpc_job=1", "value": [1, "60"]})),
            r"data\.result\[0\]\.metric = 'hpc_job=1': an object is expected",
        ),
        (
            (200, "application/json", _vector({"metric": {"hpc_job": 1}, "value": [1, "60"]})),
            r"data\.result\[0\]\.metric\.hpc_job = 1: a job id \(text\) is expected",
        ),
        (
            (
                200,
                "application/json",
                b'{"status": "success", "data": {"resultType": "matrix", "result": []}}',
            ),
            r"data\.resultType = 'matrix': an instant vector is expected",
        ),
        ((200, "application/json", b'{"status": "succ', 4096), r"the held query's answer was cut short"),
    ],
)
def test_a_malformed_prometheus_answer_is_exit_2_naming_the_query(
    capsys: pytest.CaptureFixture[str],
    make_stack: StackMaker,
    answer: tuple[int, str, bytes] | tuple[int, str, bytes, int],
    expected: str,
) -> None:
    flags = ("--since", SINCE, "--until", UNTIL, "--sacct-json", FIXTURES / "sacct-duplicates.json")
    with _stand_in(*answer) as url:
        code, out, err = _run(
            capsys, "usage", make_stack(CLUSTER), "--stack", CLUSTER, "--json", *flags, "--prometheus", url
        )
    assert code == 2
    assert json.loads(out)["error"]["exit_code"] == 2
    assert f"--prometheus '{url}'" in err and re.search(expected, err), err
    assert "Fix:" in err


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/", "127.0.0.1:9090", "http://"])
def test_a_prometheus_url_that_is_not_http_is_exit_2(url: str) -> None:
    with pytest.raises(InputError, match=r"--prometheus .*: not an http:// or https:// URL.*Fix:"):
        job_metrics(url, WINDOW)


def test_an_answer_larger_than_the_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuforge.usage import metrics

    monkeypatch.setattr(metrics, "MAX_ANSWER_BYTES", 1024)
    body = _vector(*({"metric": {"hpc_job": str(n)}, "value": [1, "60"]} for n in range(100)))
    with (
        _stand_in(200, "application/json", body) as url,
        pytest.raises(InputError, match=r"the held query's answer is larger than 1024 bytes"),
    ):
        job_metrics(url, WINDOW)


def _openmetrics(samples: list[tuple[str, str, str, int]]) -> str:
    """(metric, job, value, time) as an OpenMetrics document, each family's samples together."""
    lines = []
    for metric in (HELD, USEFUL):
        lines.append(f"# TYPE {metric} gauge")
        lines.extend(
            f'{metric}{{hpc_job="{job}"}} {value} {at}' for name, job, value, at in samples if name == metric
        )
    return "\n".join([*lines, "# EOF", ""])


@pytest.mark.slow
def test_values_out_of_range_from_the_real_prometheus_are_refused(tmp_path: Path) -> None:
    """The real Prometheus stores NaN, +Inf and negative samples and answers them as such; a useful
    sum over its held one is a fraction over 1. Each minute holds one case; each window takes one."""
    start = (int(time.time()) // 3600 - 6) * 3600  # inside retention, older than the head block
    cases = [
        ([(HELD, "1", "NaN", start)], r"the held query gave job '1' NaN GPU-seconds"),
        ([(HELD, "2", "+Inf", start + 600)], r"the held query gave job '2' inf GPU-seconds"),
        ([(HELD, "3", "-60", start + 1200)], r"the held query gave job '3' -60 GPU-seconds"),
        (
            [(HELD, "4", "120", start + 1800), (USEFUL, "4", "240", start + 1800)],
            r"the useful query gave job '4' 240 GPU-seconds, more than the 120 its held query gave",
        ),
    ]
    history = _openmetrics([sample for samples, _ in cases for sample in samples])
    with prometheus_with_history(history, tmp_path) as url:
        for samples, expected in cases:
            at = samples[0][3]
            window = Window(datetime.fromtimestamp(at - 30, UTC), datetime.fromtimestamp(at + 30, UTC))
            with pytest.raises(InputError, match=expected) as caught:
                job_metrics(url, window)
            assert "Fix:" in str(caught.value)


# --- bounded host lists ----------------------------------------------------------------------------


def _gpuforge_bounded(*argv: str | Path, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process with 2 GiB of address space and a time limit: a hang or a runaway
    expansion fails this test instead of the machine."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "gpuforge"), *(str(arg) for arg in argv)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        preexec_fn=limit,
        check=False,
    )


def _events(tmp_path: Path, node: str) -> Path:
    """The real events.txt with the node of its third line (the ecc drain of gpu2, 3 s) replaced."""
    lines = (FIXTURES / "events.txt").read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].replace("gf5326b-gpu2", node, 1)
    path = tmp_path / "events.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_host_list_beyond_the_largest_cluster_is_refused_at_once(
    make_stack: StackMaker, tmp_path: Path
) -> None:
    events = _events(tmp_path, "p5-[0-99999999]")
    flags = ("--since", SINCE, "--until", UNTIL, "--sacct-json", FIXTURES / "sacct-duplicates.json")
    done = _gpuforge_bounded("usage", make_stack(CLUSTER), "--stack", CLUSTER, *flags, "--events", events)
    assert done.returncode == 2, done.stderr
    assert re.search(
        rf"events\.txt: line 4: NodeName = 'p5-\[0-99999999\]' names 100000000 nodes, more than the {MAX_HOSTS} "
        r"of the largest cluster gpuforge builds.*Fix:",
        done.stderr,
    ), done.stderr


def test_an_event_on_every_node_of_the_largest_cluster_is_counted_quickly(
    make_stack: StackMaker, tmp_path: Path
) -> None:
    events = _events(tmp_path, f"gpu-[1-{MAX_HOSTS}]")
    flags = ("--since", SINCE, "--until", UNTIL, "--sacct-json", FIXTURES / "sacct-duplicates.json", "--json")
    done = _gpuforge_bounded(
        "usage", make_stack(CLUSTER), "--stack", CLUSTER, *flags, "--events", events, timeout_s=30
    )
    assert done.returncode == 0, done.stderr
    failures = json.loads(done.stdout)["failures"]
    # Every node drained 15:55:22-15:55:25 (3 s), and gpu2's own events: 15:55:27 to the window's end (33 s).
    assert round(failures["node_hours_lost"] * 3600) == MAX_HOSTS * 3 + 33


def test_a_jobs_huge_host_list_is_matched_without_expanding_it(
    make_stack: StackMaker, tmp_path: Path
) -> None:
    """Job 5 (CANCELLED at 15:55:13 on gpu1) given a node list of 10^8 names that holds gpu1's name."""
    sacct = _sacct(tmp_path, **{"4": {"nodes": "gf5326b-gpu[0-99999999]"}})
    lines = (FIXTURES / "events.txt").read_text(encoding="utf-8").splitlines()
    # gpu1's DOWN event widened to 15:55:10-15:55:20, so job 5 ended on a down node.
    lines[2] = lines[2].replace(
        "2026-12-04T15:55:20|2026-12-04T15:55:20", "2026-12-04T15:55:10|2026-12-04T15:55:20"
    )
    events = tmp_path / "events.txt"
    events.write_text("\n".join(lines) + "\n", encoding="utf-8")
    flags = ("--since", SINCE, "--until", UNTIL, "--sacct-json", sacct, "--events", events, "--json")
    done = _gpuforge_bounded("usage", make_stack(CLUSTER), "--stack", CLUSTER, *flags, timeout_s=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["failures"]["interrupted_jobs"] == ["5", "6"]


@pytest.mark.parametrize(
    ("hostlist", "names"),
    [
        ("gpu-[1-3,7]", ["gpu-1", "gpu-2", "gpu-3", "gpu-7"]),
        ("n[08-10],ctl", ["n08", "n09", "n10", "ctl"]),
        ("n[5-1]", ["n[5-1]"]),  # not a range Slurm prints: the name as written
    ],
)
def test_host_lists_expand_within_the_bound(hostlist: str, names: list[str]) -> None:
    assert expand_hostlist(hostlist) == names


def test_a_host_list_over_the_bound_is_refused_before_expanding() -> None:
    """A small bound stands in for MAX_HOSTS, so a regression expands a dozen names, not 10^12."""
    assert count_hosts("a[1-500000000000],b[1-500000000000]") == 10**12
    with pytest.raises(TooManyHosts, match=r"^'a\[1-6\],b\[1-6\]' names 12 nodes, more than the 10 it may$"):
        expand_hostlist("a[1-6],b[1-6]", limit=10)


@pytest.mark.parametrize(
    "hostlist",
    [
        "gpu-[1-3,7]",
        "n[08-10],ctl",
        "n1[0-9]",
        "rack[1-2]x",
        "a[01-03]b7",
        "n[5-1]",
        "gpu-[0-99999999]",
        "ctl,n9",
    ],
)
def test_the_node_index_finds_what_the_expansion_holds(hostlist: str) -> None:
    """Matching a list through the index is the same as looking each name up in its expansion."""
    names = [
        "gpu-1", "gpu-3", "gpu-4", "gpu-7", "gpu-07", "n08", "n8", "n10", "n11", "n15", "n9", "ctl", "rack1x",
        "rack2", "a02b7", "a2b7", "a02b", "n[5-1]", "gpu-99999999", "gpu-100000000",
    ]  # fmt: skip
    found = sorted(NodeIndex(names).named_by(hostlist))
    expanded = set() if count_hosts(hostlist) > 1000 else set(expand_hostlist(hostlist))
    if expanded:
        assert found == sorted(name for name in names if name in expanded)
    else:  # too many to expand here: the names the list holds by its own rule
        assert found == ["gpu-1", "gpu-3", "gpu-4", "gpu-7", "gpu-99999999"]
