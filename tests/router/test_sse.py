"""The SSE usage parser: any chunking of a real stream yields the same usage."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.router.sse import UsageParser
from tests.router.engines import sse_events

REAL = (Path(__file__).parent / "fixtures" / "llama_stream.sse").read_bytes()  # llama-server
SYNTHETIC_CRLF = b"".join(sse_events("m", 7)).replace(b"\n", b"\r\n")


def parse(chunks: list[bytes], limit: int = 64 * 1024) -> UsageParser:
    parser = UsageParser(limit)
    for chunk in chunks:
        parser.feed(chunk)
    parser.close()
    return parser


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def test_the_recorded_stream_reports_its_usage() -> None:
    assert parse([REAL]).completion_tokens == 12
    assert parse([SYNTHETIC_CRLF]).completion_tokens == 7


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**6), max_size=60))
def test_usage_is_found_wherever_the_stream_is_split(cuts: list[int]) -> None:
    assert parse(split(REAL, cuts)).completion_tokens == 12
    assert parse(split(SYNTHETIC_CRLF, cuts)).completion_tokens == 7


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=10**6), max_size=30))
def test_byte_by_byte_and_random_splits_agree(cuts: list[int]) -> None:
    whole = parse([REAL])
    assert parse([bytes([b]) for b in REAL[:4000]] + [REAL[4000:]]).completion_tokens == 12
    assert parse(split(REAL, cuts)).ignored == whole.ignored


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000), st.lists(st.integers(min_value=0, max_value=10**4)))
def test_garbage_never_raises(noise: bytes, cuts: list[int]) -> None:
    parse(split(noise + REAL, cuts))  # usage may or may not survive; no exception either way


def test_oversized_and_malformed_events_are_ignored() -> None:
    usage = {"usage": {"completion_tokens": 5}}
    huge = b"data: " + json.dumps({"pad": "x" * 5000, **usage}).encode() + b"\n\n"
    bad = (
        b"data: {not json\n\n"
        + b"data: [1, 2\n\n"
        + b'data: {"usage": {"completion_tokens": -3}}\n\n'
    )
    good = b"data: " + json.dumps({"usage": {"completion_tokens": 2}}).encode() + b"\n\n"
    parser = parse([huge, bad, good], limit=1024)
    assert parser.completion_tokens == 2
    assert parser.ignored >= 3
    only_huge = parse([huge, b"data: [DONE]\n\n"], limit=1024)
    assert only_huge.completion_tokens is None
    # an endless line without newlines stays bounded
    endless = UsageParser(1024)
    for _ in range(1000):
        endless.feed(b"x" * 1000)
    assert len(endless._line) <= 1024
    endless.feed(b"\n\n" + good)
    assert endless.completion_tokens == 2


def test_multi_line_data_events_are_joined() -> None:
    event = b'data: {"usage":\ndata:  {"completion_tokens": 9}}\n\n'
    assert parse([event]).completion_tokens == 9
