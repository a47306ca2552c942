"""The HTML feedback in a real browser: headless Chromium (Debian's `chromium`, which .ci/run
installs) loads a sample report from a file, and the tests check that every card and every picture
is in the page it built, that the page logged no error, and that a screenshot of it drew.

Chromium's own log lines (its sandbox, GPU, D-Bus, crash reporter: it runs here without a display,
a GPU or a session bus) are not the page's; what counts as the page's error is any line of its
JavaScript console (`CONSOLE`: the page has no script, so any console line is wrong), an
`Uncaught` exception, or a resource that failed to load (`net::ERR_`, "Failed to load resource":
the page must need no network).

The screenshot in docs/ is this sample, made with
  .venv/bin/python tests/test_html_browser.py docs/feedback-sample.png
and those of real reports (docs/feedback-bank-conflicts.png, docs/feedback-race.png) from the JSON
results of grading a known-wrong submission (tests/submissions/, its mutations applied to
solutions/: `gpugrade grade SUB matmul --format json --output R.json --seed 1`), with
  .venv/bin/python tests/test_html_browser.py docs/feedback-race.png R.json
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from grader.report.html import html_page
from grader.report.results import Results, Status, TestResult
from grader.wire.messages import Finding

RACE = ("data race on shared array 'partial' at index (0,): read conflicts with a write by thread (1, 0, 0) "
        "of block (0, 0, 0) with no syncthreads() in between")
RACE_SOURCE = [14, ["    partial[t] = x[i] if i < x.size else 0.0",
                    "    stride = cuda.blockDim.x // 2",
                    "    while stride > 0:",
                    "        if t < stride:",
                    "            partial[t] += partial[t + stride]",
                    "        stride //= 2",
                    "    if t == 0:"]]
BOUNDS = "out-of-bounds access to global array 'out' of shape (1000,) at index (1023,)"
BOUNDS_SOURCE = [5, ["@cuda.jit", "def add_kernel(a, b, out):", "    i = cuda.grid(1)",
                     "    out[i] = a[i] + b[i]", "", "", "def vector_add(a, b):"]]
COUNTER = ("global memory sectors per warp request (coalescing): 23.9 against the reference's 4 "
           "(at most 5 allowed)")
TIMING = {"source": "modelled", "gpu": "H100", "seconds": 8.4e-5, "bound": "memory", "bandwidth_fraction": 0.11,
          "global_bytes": 1 << 24, "reference_seconds": 2.1e-5, "ratio": 4.0, "max_time_ratio": 1.5, "credit": 0.0}
STRIDED = {"space": "global", "kind": "load", "line": 9, "kernel": "transpose", "per_request": 32.0, "itemsize": 4,
           "lanes": list(range(32)), "addresses": [lane * 4096 for lane in range(32)]}
CONFLICTED = {"space": "shared", "kind": "store", "line": 30, "kernel": "matmul", "per_request": 32.0, "itemsize": 4,
              "lanes": list(range(32)), "addresses": [lane * 128 for lane in range(32)]}
MISSED_EDGE = {"shape": [70, 50], "cell": [2, 1],
               "rows": ["." * 32 + "#" * 18] * 16 + ["#" * 50] * 19}  # the last columns and rows
TRAFFIC = {"ranks": 4, "host_bytes": 0, "links": [[0, 1, 6024, 6], [1, 2, 6024, 6], [2, 3, 6024, 6],
                                                   [3, 0, 6024, 6], [0, 2, 4012, 1]]}


def sample() -> Results:
    """A report with a passed stage, a race with its source, an out-of-bounds access, a performance
    test with its time, a missed counter and its warp's sectors, a wrong matrix's mask, a bank
    conflict's banks, an all-reduce's ring, and a hidden test."""
    race = Finding("races", "RaceError", f"kernel 'block_sum' at reduction.py:18, block (0, 0, 0), thread "
                   f"(0, 0, 0): {RACE}", "block_sum", "reduction.py", 18, (0, 0, 0), (0, 0, 0), "partial", (0,))
    bounds = Finding("bounds", "OutOfBoundsError", f"kernel 'add_kernel' at vector_add.py:8, block (3, 0, 0), "
                     f"thread (255, 0, 0): {BOUNDS}", "add_kernel", "vector_add.py", 8, (3, 0, 0), (255, 0, 0),
                     "out", (1023,))
    return Results("alice", "sim", tests=[
        TestResult("vector_add::small", "vector_add", 1, 1, 1, Status.PASSED),
        TestResult("vector_add::odd_size[n=1000]", "vector_add", 2, 2, 0, Status.FAILED,
                   f"{bounds.message}\n\nTraceback (most recent call last):\n  vector_add.py:8", finding=bounds,
                   source=BOUNDS_SOURCE),
        TestResult("vector_add::odd_size[n=33]", "vector_add", 2, 2, 0, Status.FAILED, bounds.message,
                   finding=bounds, source=BOUNDS_SOURCE),
        TestResult("reduction::block_sum[n=256]", "reduction", 1, 3, 0, Status.FAILED, race.message,
                   finding=race, source=RACE_SOURCE),
        TestResult("reduction::hidden_sizes", "reduction", 1, 2, 0, Status.FAILED, "SECRET expected 7",
                   visibility="after_due_date"),
        TestResult("transpose::correct", "transpose", 2, 2, 2, Status.PASSED),
        TestResult("transpose::coalesced", "transpose", 2, 3, 0, Status.FAILED,
                   f"{COUNTER}\n\ncriteria missed on the simulator:\n  - {COUNTER}", timing=TIMING, request=STRIDED),
        TestResult("matmul::tiled[70x37x50]", "matmul", 2, 2, 0, Status.FAILED,
                   "matmul_tiled(A, B): 1476 of 3500 elements wrong; first at index (0, 32)", wrong=MISSED_EDGE),
        TestResult("matmul::coarsened_without_bank_conflicts", "matmul", 3, 3, 0, Status.FAILED,
                   "shared memory passes per warp request (bank conflicts): 1.72 against the reference's 1 "
                   "(at most 1.05 allowed), worst at line 30 (store)", request=CONFLICTED),
        TestResult("allreduce::ring_traffic[N=4]", "allreduce", 2, 2, 0, Status.FAILED,
                   "not a ring's traffic: rank 0 sent 4.01 KB to rank 2, not a neighbour", traffic=TRAFFIC),
    ])


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("headless Chromium is needed to test the HTML feedback in a browser and is not installed: "
                    "apt-get install -y chromium (.ci/run installs it)")
    return path


def browse(page: str, *flags: str) -> subprocess.CompletedProcess:
    """Chromium, headless, on `page` written to a file: its stdout and stderr (log lines)."""
    with tempfile.TemporaryDirectory(prefix="gpugrade-browser-") as tmp:
        path = Path(tmp) / "feedback.html"
        path.write_text(page, encoding="utf-8")
        return subprocess.run(
            [chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-dev-shm-usage",
             "--disable-extensions", "--hide-scrollbars", f"--user-data-dir={tmp}/profile", "--enable-logging=stderr",
             "--v=0", *flags, path.as_uri()],
            capture_output=True, text=True, timeout=180, cwd=tmp)


PAGE_ERROR = re.compile(r"CONSOLE|Uncaught|net::ERR_|Failed to load resource")


def page_errors(log: str) -> list[str]:
    """The log lines about the page (see the module's docstring), not Chromium's own noise."""
    return [line for line in log.splitlines() if PAGE_ERROR.search(line)]


def screenshot(page: str, png: str | os.PathLike) -> subprocess.CompletedProcess:
    return browse(page, f"--screenshot={os.path.abspath(png)}", "--window-size=1200,1600",
                  "--force-device-scale-factor=1")


def test_the_browser_builds_every_card_and_picture_and_logs_no_error():
    page = html_page(sample())
    run = browse(page, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    for card in ("card-vector_add-1", "card-vector_add-2", "card-reduction-1", "card-transpose-2",
                 "card-allreduce-2", "card-matmul-2", "card-matmul-3"):
        assert f'id="{card}"' in dom, card
    # the ring, the time and counter bars, lanes to sectors, the wrong elements, lanes to banks
    assert dom.count("<svg") == page.count("<svg") == 5
    assert dom.count("</svg>") == 5 and "rank 3" in dom and "yours" in dom
    assert "32 lanes touch 32 sectors" in dom and "wrong elements (black) of the 70x50 output" in dom
    assert "32 passes (1 without bank conflicts)" in dom and "x32" in dom
    assert "▶" in dom and "partial[t] += partial[t + stride]" in dom and "syncthreads()" in dom
    assert "if i &lt; n:" in dom and "SECRET" not in dom and "hidden_sizes" not in dom
    assert "1 more test(s) are hidden" in dom
    assert not page_errors(run.stderr), page_errors(run.stderr)
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", page)  # nothing from the network


def test_the_error_filter_sees_a_pages_script_error():
    """The filter is not blind: a page whose script throws is caught (and the sample has no script)."""
    run = browse("<!doctype html><html><body><p>x</p><script>no_such_function()</script></body></html>",
                 "--dump-dom")
    assert any("no_such_function" in line for line in page_errors(run.stderr)), run.stderr[-2000:]
    assert "<script" not in html_page(sample())


def test_the_screenshot_of_the_sample_report_drew(tmp_path):
    from PIL import Image

    png = tmp_path / "feedback.png"
    run = screenshot(html_page(sample()), png)
    assert run.returncode == 0 and png.is_file(), run.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    with Image.open(png) as image:
        assert image.size == (1200, 1600)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50  # text, cards and pictures, not a blank page


if __name__ == "__main__":  # the screenshots kept in docs/: this sample, or a real report's JSON
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/feedback-sample.png")
    report = Results.load(sys.argv[2]) if len(sys.argv) > 2 else sample()
    done = screenshot(html_page(report), target)
    print(done.returncode, target, target.stat().st_size if target.is_file() else "missing")
