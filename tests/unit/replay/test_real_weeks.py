"""bench/traces/convert.py and bench/real_weeks.py: public production traces turned into the replay's demand trace
(requests -> GPUs busy, jobs -> GPUs requested), and the real-weeks bench that skips, saying why, without them."""
from __future__ import annotations

import gzip
import io
import os

import pytest

from autoscaler.replay.trace import load_trace
from bench.real_weeks import TRACES, main
from bench.traces.convert import EPOCH, ConvertError, jobs, nodes, per_minute, requests, write

MONDAY = EPOCH  # 2025-01-06T00:00:00Z

REQUESTS = """gmt_create,predict_type,exec_time_seconds
2025-01-06 00:00:30,TXT_2_IMG,90
2025-01-06 00:01:00,TXT_2_IMG,30
2025-01-06 00:02:45,IMG_2_IMG,30
"""

PODS = """name,role,num_gpu,gpu_milli,creation_time,deletion_time
pod-a,HN,2,1000,,90
pod-b,HN,1,500,120,
pod-c,CN,4,1000,0,240
pod-d,HN,0,0,0,240
"""


def test_requests_are_gpus_busy_a_minute() -> None:
    busy = per_minute(requests(io.StringIO(REQUESTS), "lora.csv"), MONDAY, 4)
    # 00:00:30 for 90 s: 30 s of minute 0, all of minute 1; 00:01:00 for 30 s: half of minute 1;
    # 00:02:45 for 30 s: 15 s of minute 2 and of minute 3
    assert busy == [0.5, 1.5, 0.25, 0.25]


def test_jobs_are_gpus_requested_a_minute_from_creation_to_deletion() -> None:
    asked = jobs(io.StringIO(PODS), "pods.csv", ("num_gpu", "gpu_milli"), keep={"role": "HN"}, scale=1 / 1000)
    # pod-a: 2 GPUs from before the start to 90 s; pod-b: half a GPU from 120 s to past the end;
    # pod-c is another role, pod-d asks for no GPU
    assert per_minute(asked, MONDAY, 4) == [2.0, 1.0, 0.5, 0.5]
    assert nodes([8.0, 4.0, 1.0, 0.0]) == [1.0, 0.5, 0.125, 0.0]


def test_a_malformed_row_is_refused_with_its_line() -> None:
    bad = REQUESTS + "2025-01-06 00:03:00,TXT_2_IMG,soon\n"
    with pytest.raises(ConvertError, match=r"lora.csv line 5: exec_time_seconds 'soon' is not a number"):
        requests(io.StringIO(bad), "lora.csv")
    with pytest.raises(ConvertError, match=r"lora.csv line 3: gmt_create 'yesterday' is not a time"):
        requests(io.StringIO(REQUESTS.replace("2025-01-06 00:01:00", "yesterday")), "lora.csv")
    with pytest.raises(ConvertError, match=r"pods.csv line 4: 5 columns, the header has 6"):
        jobs(io.StringIO(PODS.replace("pod-c,CN,4,1000,0,240", "pod-c,CN,4,0,240")), "pods.csv", ("num_gpu",))
    with pytest.raises(ConvertError, match=r"pods.csv line 2: deletion_time '-5' must be a finite number >= 0"):
        jobs(io.StringIO(PODS.replace(",,90", ",,-5")), "pods.csv", ("num_gpu",))
    with pytest.raises(ConvertError, match=r"pods.csv line 1: header lacks gpu_request"):
        jobs(io.StringIO(PODS), "pods.csv", ("gpu_request",))


def test_the_written_trace_is_one_the_replay_reads(tmp_path) -> None:
    path = str(tmp_path / "week.csv.gz")
    write(path, MONDAY, [0.0, 0.188, 1.5])
    plain = str(tmp_path / "week.csv")
    write(plain, MONDAY, [0.0, 0.188, 1.5])
    trace = load_trace(plain)
    assert trace.demand == (0.0, 0.188, 1.5) and trace.start == MONDAY
    with gzip.open(path, "rt", encoding="utf-8") as zipped, open(plain, encoding="utf-8") as fh:
        assert zipped.read() == fh.read() == ("timestamp,demand\n2025-01-06T00:00:00Z,0\n"
                                             "2025-01-06T00:01:00Z,0.188\n2025-01-06T00:02:00Z,1.5\n")


def test_without_the_raw_data_each_trace_is_skipped_saying_what_is_missing(tmp_path, capsys) -> None:
    assert main(["--raw", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for trace in TRACES:
        assert f"{trace.name}: skipped: {os.path.join(str(tmp_path), trace.raw)} is absent" in out
