"""`vidscale bench flow`: table and JSON structure, accuracy of the baseline, missing methods.

Speeds are measured but never asserted (they depend on the machine and its load).
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from vidscale.bench.data.flow import demo_video, translated_pair
from vidscale.cli import main

ROW_KEYS = {
    "method",
    "available",
    "flows_per_cpu_s",
    "ms_per_flow",
    "flows_per_wall_s",
    "ratio_to_dis",
    "epe_px",
    "note",
}


def _bench(tmp_path: Path, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "flow.json"
    argv = ["bench", "flow", "--pairs", "3", "--size", "96x72", "--out-json", str(out), *extra]
    assert main(argv) == 0
    return json.loads(out.read_text()), str(out)


def test_bench_flow_reports_every_method_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result, out = _bench(tmp_path)
    table = capsys.readouterr().out
    assert result["settings"]["size"] == [96, 72] and result["settings"]["pairs"] == 3
    assert result["settings"]["opencv_threads"] == 1
    rows = {r["method"]: r for r in result["rows"]}
    assert list(rows) == ["dis", "farneback", "tvl1"]
    for r in rows.values():
        assert set(r) == ROW_KEYS and r["available"]
        assert r["flows_per_cpu_s"] > 0 and r["flows_per_wall_s"] > 0
        assert r["ms_per_flow"] * r["flows_per_cpu_s"] == pytest.approx(1000.0)
        assert r["ratio_to_dis"] == pytest.approx(
            r["flows_per_cpu_s"] / rows["dis"]["flows_per_cpu_s"]
        )
    assert rows["dis"]["ratio_to_dis"] == 1.0
    assert rows["dis"]["epe_px"] < 0.5
    assert "flows/s/core" in table and "EPE px" in table and f"wrote {out}" in table
    for name in rows:
        assert any(line.startswith(name) for line in table.splitlines())


def test_a_method_this_opencv_lacks_is_a_row_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(cv2, "optflow")  # what the base opencv-python-headless build looks like
    result, _ = _bench(tmp_path, "--methods", "tvl1,dis")
    tvl1, dis = result["rows"]
    assert tvl1["method"] == "tvl1" and not tvl1["available"]
    assert tvl1["flows_per_cpu_s"] is None and "opencv-contrib" in tvl1["note"]
    assert dis["available"] and dis["ratio_to_dis"] == 1.0
    assert "tvl1       unavailable:" in capsys.readouterr().out


def test_bench_flow_reads_a_given_video_and_resizes_it(tmp_path: Path) -> None:
    video = demo_video(tmp_path / "v.mp4", frames=4, size=48)
    result, _ = _bench(tmp_path, "--video", str(video), "--methods", "farneback")
    assert result["settings"]["video"] == str(video)
    (row,) = result["rows"]
    assert row["method"] == "farneback" and row["ratio_to_dis"] is None


def test_a_video_too_short_for_the_pairs_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    video = demo_video(tmp_path / "v.mp4", frames=3, size=48)
    argv = ["bench", "flow", "--video", str(video), "--pairs", "3", "--size", "64x48"]
    assert main([*argv, "--out-json", str(tmp_path / "f.json")]) == 2
    assert "has 3 frames; 3 pairs need 4" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value"), [("--methods", "dis,raft"), ("--size", "340")])
def test_bad_flags_are_refused(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["bench", "flow", flag, value])
    assert stop.value.code == 2 and value in capsys.readouterr().err


def test_translated_pair_moves_content_by_the_shift() -> None:
    """The ground truth of every EPE: next[y + dy, x + dx] == prev[y, x] (OpenCV's convention)."""
    prev, nxt = translated_pair(50, 40, shift=(3.0, -2.0))
    np.testing.assert_array_equal(nxt[0:38, 3:50], prev[2:40, 0:47])
    assert not np.array_equal(nxt, prev)
