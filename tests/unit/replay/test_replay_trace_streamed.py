"""The replay's trace is read row by row (issue 45, item 7): the first bad row is refused at once, naming its line,
without reading the rest of the file; a line longer than ``MAX_LINE`` is refused once that much is read."""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.__main__ import main
from autoscaler.replay.trace import MAX_LINE, MAX_MINUTES, ReplayError, load_trace, parse_trace
from tests.support.fifo import refused_while_open

HEADER = "timestamp,demand\n"
ROW = "2025-01-06T00:{:02d}:00Z,{}\n"


class ReadTooFar(Exception):
    """The reader asked for a line after the bad one."""


def _rows_then_trap(rows: list[str]) -> Iterator[str]:
    yield from rows
    raise ReadTooFar("read past the bad row")


def test_a_bad_row_is_refused_before_the_rest_is_read() -> None:
    with pytest.raises(ReplayError, match=r"^t\.csv line 2: demand 'nan' must be a finite number"):
        parse_trace(_rows_then_trap([HEADER, ROW.format(0, "nan")]), "t.csv")
    with pytest.raises(ReplayError, match=r"^t\.csv line 4: timestamp .* is not 60 s after"):
        parse_trace(_rows_then_trap([HEADER, ROW.format(0, 1), ROW.format(1, 1), ROW.format(5, 1)]), "t.csv")


def test_a_bad_row_early_in_a_file_that_never_ends_is_found(tmp_path: Path) -> None:
    """A FIFO whose writer sends the header and a bad line 2, then keeps the pipe open: a reader that wants the
    whole file first never returns."""
    fifo = tmp_path / "trace.csv"
    said = refused_while_open(fifo, HEADER + ROW.format(0, "nan") + ROW.format(1, 2), load_trace)
    assert said is not None and said.startswith(f"{fifo} line 2: demand 'nan'")


@pytest.mark.parametrize("length", [MAX_LINE + 1, 50_000_000])
def test_a_line_over_the_bound_is_refused_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   length: int) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + ROW.format(0, 1) + "2025-01-06T00:01:00Z," + "1" * length + "\n" + ROW.format(2, 1))
    config = tmp_path / "c.yaml"
    config.write_text('{"server": {"auth": {"disabled": true}}, "pools": [{"name": "gpu", "provider": "simulated", '
                      '"min": 1, "max": 4}], "replay": {"rules": [{"alert": "High", "above": 80, "for": "2m", '
                      '"pool": "gpu", "action": "scale_out"}]}}')
    started = time.monotonic()
    assert main(["replay", "--config", str(config), "--trace", str(path), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"{path} line 3: longer than {MAX_LINE} bytes (a row is a timestamp and a number)"]
    assert time.monotonic() - started < 5


def test_a_line_at_the_bound_is_read(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    pad = " " * (MAX_LINE - len(ROW.format(1, 3)))
    path.write_text(HEADER + ROW.format(0, 1) + ROW.format(1, 3).replace(",", "," + pad) + ROW.format(2, 2))
    assert load_trace(str(path)).demand == (1.0, 3.0, 2.0)


@pytest.mark.parametrize(("text", "said"), [
    ("", " line 1: expected the header timestamp,demand, got 'an empty file'"),
    ("time,value\n", " line 1: expected the header timestamp,demand, got 'time,value'"),
    (HEADER, ": no rows after the header"),
    (HEADER + "\n" + ROW.format(0, 1) + "\n" + "\xff\n", " line 5: not UTF-8 text"),
])
def test_other_bad_files_still_name_the_place(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(text.encode().replace("\xff".encode(), b"\xff"))
    with pytest.raises(ReplayError) as caught:
        load_trace(str(path))
    assert str(caught.value).startswith(f"{path}{said}"), str(caught.value)


def _minutes(count: int) -> Iterator[str]:
    """A valid trace of ``count`` rows, one a minute, written as it is read."""
    yield HEADER
    t0 = 1736121600  # 2025-01-06T00:00:00Z
    for i in range(count):
        yield time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + 60 * i)) + ",1\n"


def test_a_trace_longer_than_the_row_cap_is_refused_at_the_first_row_over_it() -> None:
    """A trace holds at most MAX_MINUTES rows (a leap year of minutes): the row after them is refused, naming its
    line and the cap, without reading further (a file that never ends is refused too); exactly the cap is read."""
    def rows(count: int) -> Iterator[str]:
        yield from _minutes(count)
        raise ReadTooFar("read past the first row over the cap")

    with pytest.raises(ReplayError, match=rf"^t\.csv line {MAX_MINUTES + 2}: more than {MAX_MINUTES:,} rows "
                                          r"\(366 days of minutes\)"):
        parse_trace(rows(MAX_MINUTES + 1), "t.csv")
    assert len(parse_trace(_minutes(MAX_MINUTES), "t.csv").demand) == MAX_MINUTES
