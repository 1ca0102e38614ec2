"""Progress that tells the time: the ETA arithmetic, the plain reporter's 10 % lines, and the counts read from
child processes' output and files (llama.cpp's quantizer lines, a file as it grows)."""

from __future__ import annotations

import io
import re
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from edgekit.backends.child import run_logged
from edgekit.backends.gguf.counting import QUANTIZED_TENSOR
from edgekit.cli.common import console_options
from edgekit.observe.eta import duration, progress_line, remaining, step
from edgekit.observe.progress import PlainProgressReporter, RichProgressReporter
from edgekit.observe.tally import RunningCount, growth

STAMP = re.compile(r"^\d\d:\d\d:\d\d ")


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Counted:
    """A Task that remembers what it was advanced by."""

    def __init__(self) -> None:
        self.done = 0.0
        self.lock = threading.Lock()

    def advance(self, amount: float = 1) -> None:
        with self.lock:
            self.done += amount

    def update(self, description: str) -> None:
        pass


def plain(clock: Clock) -> tuple[PlainProgressReporter, io.StringIO]:
    stream = io.StringIO()
    return PlainProgressReporter(Console(file=stream, soft_wrap=True, **console_options(stream)), clock), stream


def lines_of(stream: io.StringIO) -> list[str]:
    lines = stream.getvalue().splitlines()
    assert all(STAMP.match(line) for line in lines), lines
    return [STAMP.sub("", line) for line in lines]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.4, "0s"), (41.6, "42s"), (59.4, "59s"), (59.6, "1m00s"), (62, "1m02s"), (93, "1m33s"),
     (3599.4, "59m59s"), (3600, "1h00m"), (3900, "1h05m"), (-3, "0s")],
)  # fmt: skip
def test_durations_read_as_seconds_minutes_or_hours(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_the_eta_is_the_rest_at_the_average_rate_so_far() -> None:
    assert remaining(4, 10, 62) == pytest.approx(93)  # 15.5 s a window, 6 windows left
    assert remaining(1, 3, 10) == pytest.approx(20)
    assert remaining(10, 10, 80) == 0
    assert remaining(0, 10, 5) is None  # nothing done: no rate to go by
    assert remaining(3, 0, 5) is None
    assert [step(d, 10) for d in (0, 0.99, 1, 3.5, 9.99, 10, 12)] == [0, 0, 1, 3, 9, 10, 10]
    assert step(1, 3) == 3 and step(2, 3) == 6  # thirds: 33 %, 66 %


def test_a_progress_line_says_percent_done_of_total_elapsed_and_eta() -> None:
    assert progress_line("reference  10 windows", 4, 10, "windows", 62, final=False) == (
        "reference  10 windows  40% (4/10 windows)  elapsed 1m02s  ETA 1m33s"
    )
    assert progress_line("bench", 0, 7, "jobs", 0.2, final=False) == "bench  0% (0/7 jobs)  elapsed 0s"
    assert progress_line("bench", 7, 7, "jobs", 125, final=True) == "bench  100% (7/7 jobs)  elapsed 2m05s  done"
    assert progress_line("x", 2.5, 10, "", 10, final=False) == "x  25% (2.5/10)  elapsed 10s  ETA 30s"


def test_plain_progress_writes_a_line_at_start_at_each_tenth_and_at_the_end() -> None:
    clock = Clock()
    reporter, stream = plain(clock)
    with reporter.task("reference  10 windows × 512 tokens", total=10, unit="windows") as t:
        for _ in range(10):
            clock.now += 15.5
            t.advance()
    lines = lines_of(stream)
    assert len(lines) == 11, lines  # start, 10 % … 90 %, the end
    assert lines[0] == "reference  10 windows × 512 tokens  0% (0/10 windows)  elapsed 0s"
    assert lines[4] == "reference  10 windows × 512 tokens  40% (4/10 windows)  elapsed 1m02s  ETA 1m33s"
    assert lines[9] == "reference  10 windows × 512 tokens  90% (9/10 windows)  elapsed 2m20s  ETA 16s"
    assert lines[10] == "reference  10 windows × 512 tokens  100% (10/10 windows)  elapsed 2m35s  done"


def test_plain_progress_does_not_flood_many_small_steps_or_repeat_a_tenth() -> None:
    clock = Clock()
    reporter, stream = plain(clock)
    with reporter.task("quantize  GGUF Q8_0", total=272, unit="tensors") as t:
        for _ in range(272):
            clock.now += 0.25
            t.advance()
    lines = lines_of(stream)
    assert len(lines) == 11, lines
    assert [re.search(r" (\d+)% ", line).group(1) for line in lines] == [str(p) for p in range(0, 101, 10)]
    assert lines[3] == "quantize  GGUF Q8_0  30% (82/272 tensors)  elapsed 21s  ETA 48s"  # 20.5 s, 47.5 s left


def test_plain_progress_writes_one_line_for_a_jump_over_several_tenths_and_follows_the_description() -> None:
    clock = Clock()
    reporter, stream = plain(clock)
    with reporter.task("bench  2 artifacts", total=20, unit="jobs") as t:
        clock.now += 30
        t.advance(7)  # 0 % → 35 %: one line, not three
        t.update("bench  gguf-Q8_0: thread sweep")
        clock.now += 30
        t.advance(1)
    lines = lines_of(stream)
    assert lines == [
        "bench  2 artifacts  0% (0/20 jobs)  elapsed 0s",
        "bench  2 artifacts  35% (7/20 jobs)  elapsed 30s  ETA 56s",
        "bench  gguf-Q8_0: thread sweep  40% (8/20 jobs)  elapsed 1m00s  ETA 1m30s",
        "bench  gguf-Q8_0: thread sweep  40% (8/20 jobs)  elapsed 1m00s  done",  # it stopped early (sequential looks)
    ]


def test_plain_progress_of_a_step_without_a_total_or_that_fails_writes_no_progress_line() -> None:
    clock = Clock()
    reporter, stream = plain(clock)
    with reporter.task("reference  load checkpoint") as t:
        t.advance()
    with pytest.raises(RuntimeError), reporter.task("validate  gguf-Q8_0: 8 windows", total=8, unit="windows") as t:
        t.advance()
        raise RuntimeError("the engine crashed")
    assert lines_of(stream) == [
        "validate  gguf-Q8_0: 8 windows  0% (0/8 windows)  elapsed 0s",
        "validate  gguf-Q8_0: 8 windows  12% (1/8 windows)  elapsed 0s  ETA 0s",
    ]  # the error says where it stopped: no "done" line


def test_rich_progress_shows_done_of_total_with_its_unit_and_the_time_left() -> None:
    stream = io.StringIO()
    console = Console(file=stream, width=160, force_terminal=True, color_system=None)
    with RichProgressReporter(console) as reporter:
        with reporter.task("reference  load checkpoint"):
            pass
        with reporter.task("reference  8 windows", total=8, unit="windows") as t:
            t.advance(8)
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    rows = [line.strip() for line in re.split(r"[\r\n]+", drawn) if line.strip()][-2:]  # the frame drawn at the stop
    assert re.fullmatch(r"reference  load checkpoint .* \d+:\d\d:\d\d", rows[0]) and "/" not in rows[0], (
        rows
    )  # no count, no ETA
    assert re.fullmatch(r"reference  8 windows .* 8/8 windows \d+:\d\d:\d\d 0:00:00", rows[1]), rows


def test_quantizer_lines_count_tensors_as_they_stream_from_a_real_child_process(tmp_path: Path) -> None:
    # What llama.cpp's quantizer prints per tensor (the line is finished when the tensor is), and lines around it.
    script = (
        "import sys, time\n"
        "print('llama_model_quantize_impl: model size = 256 MiB', flush=True)\n"
        "for i in range(1, 273):\n"
        "    sys.stdout.write(f'[{i:4d}/ 272]  blk.{i}.attn_q.weight - [  576,   576,     1,     1], ')\n"
        "    sys.stdout.write('type =    f16, ')\n"
        "    sys.stdout.write('converting to q8_0 .. size =     0.63 MiB ->     0.33 MiB\\n')\n"
        "print('main: quantize time =  1234.56 ms', flush=True)\n"
    )
    shown = Counted()
    log = run_logged(["python", "-c", script], tmp_path / "quantize.log", "quantize",
                     on_line=RunningCount(shown, QUANTIZED_TENSOR))  # fmt: skip
    assert shown.done == 272
    assert log.count("converting to q8_0") == 272 and (tmp_path / "quantize.log").read_text() == log  # all in the log


def test_growth_counts_the_mib_a_file_has_grown_to_and_never_past_the_total(tmp_path: Path) -> None:
    target = tmp_path / "out.gguf"
    shown = Counted()
    with growth(target, shown, total_mib=3, every_s=0.01):
        time.sleep(0.05)  # not created yet: nothing counted, nothing raised
        assert shown.done == 0
        with open(target, "wb") as f:
            f.write(b"\0" * (2 * 2**20 + 5))
            f.flush()
            deadline = time.monotonic() + 5
            while shown.done < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert shown.done == 2
            f.write(b"\0" * (4 * 2**20))  # past what was expected
            f.flush()
            deadline = time.monotonic() + 5
            while shown.done < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
    assert shown.done == 3
