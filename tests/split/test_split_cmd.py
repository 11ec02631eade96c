"""``gridctl split plan`` through the real entry point, ``gridctl.cli.main.main``."""

from __future__ import annotations

import json

import pytest

from gridctl.cli.main import main
from gridctl.cli.split_cmd import parse_size

# The 480B-class shape of builders.py, spelled as flags.
MODEL_480B = [
    "--layers", "62",
    "--weight-bytes", "272GiB",
    "--kv-bytes-per-token", "253952",
    "--native-context", "262144",
]  # fmt: skip


def nodes(count: int, size: str = "80GiB") -> list[str]:
    return [arg for i in range(count) for arg in ("--node", f"gpu-{i:02d}:{size}::4GiB")]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, object]]:
    code = main(["split", "plan", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_json_plan_for_5_x_80_gib(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = run_json(capsys, *MODEL_480B, *nodes(5))
    assert code == 0
    assert list(document) == [
        "context_length",
        "parallel_lanes",
        "stages",
        "estimated_decode_network_ms_per_token",
        "tpot_target_met",
    ]
    assert document["context_length"] == 262_144
    assert document["parallel_lanes"] == 4
    assert document["stages"] == [
        {"node_id": "gpu-00", "layer_start": 0, "layer_end": 13},
        {"node_id": "gpu-01", "layer_start": 13, "layer_end": 26},
        {"node_id": "gpu-02", "layer_start": 26, "layer_end": 38},
        {"node_id": "gpu-03", "layer_start": 38, "layer_end": 50},
        {"node_id": "gpu-04", "layer_start": 50, "layer_end": 62},
    ]
    assert document["estimated_decode_network_ms_per_token"] is None
    assert document["tpot_target_met"] is None


def test_json_plan_with_latency_and_target(capsys: pytest.CaptureFixture[str]) -> None:
    latencies = [arg for i in range(5) for arg in ("--stage-latency-ms", f"gpu-{i:02d}=2.5")]
    code, document = run_json(capsys, *MODEL_480B, *nodes(5), *latencies, "--target-tpot-ms", "10")
    assert code == 0
    # 4 stages at 65,536 (10 ms) beat 5 stages at native (12.5 ms).
    assert document["context_length"] == 65_536
    assert document["estimated_decode_network_ms_per_token"] == 10.0
    assert document["tpot_target_met"] is True


def test_json_no_valid_topology(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = run_json(capsys, *MODEL_480B, *nodes(4, "70GiB"))
    assert code == 1
    assert document["error"] == "no_valid_topology"
    assert document["contexts_tried"] == [262_144, 131_072, 65_536]
    assert document["placeable_layers"] == 56
    assert document["layer_count"] == 62


def test_json_context_exceeds_native(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = run_json(capsys, *MODEL_480B, *nodes(5), "--context", "524288")
    assert code == 1
    assert document["error"] == "context_exceeds_native"
    assert document["requested_context"] == 524_288
    assert document["native_context"] == 262_144


def test_json_context_below_minimum(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = run_json(capsys, *MODEL_480B, *nodes(5), "--context", "32768")
    assert code == 1
    assert document["error"] == "context_below_minimum"
    assert document["minimum_context"] == 65_536


def test_human_output_is_a_stage_table(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*MODEL_480B, *nodes(4), "--node", "gpu-capped:80GiB:72GiB:4GiB"]
    assert main(["split", "plan", *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Split plan: 5 stages, context 262,144 (native 262,144), 4 parallel lanes"
    header = lines.index("NODE        LAYERS    COUNT  MEMORY USED / USABLE")
    rows = lines[header + 1 :]
    assert rows == [
        "gpu-00      [0, 13)      13  70.0 GiB / 76.0 GiB",
        "gpu-01      [13, 26)     13  70.0 GiB / 76.0 GiB",
        "gpu-02      [26, 39)     13  70.0 GiB / 76.0 GiB",
        "gpu-03      [39, 51)     12  64.6 GiB / 76.0 GiB",
        "gpu-capped  [51, 62)     11  59.3 GiB / 68.0 GiB",
    ]


def test_human_output_reports_the_network_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*MODEL_480B, *nodes(5), "--stage-latency-ms", "gpu-00=3", "--target-tpot-ms", "5"]
    assert main(["split", "plan", *argv]) == 0
    out = capsys.readouterr().out
    assert "Estimated decode network time: 12 ms/token (target 5 ms: missed)" in out


def test_human_output_says_when_a_target_cannot_be_evaluated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["split", "plan", *MODEL_480B, *nodes(5), "--target-tpot-ms", "5"]) == 0
    assert "TPOT target not evaluated" in capsys.readouterr().out


def test_human_rejection_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["split", "plan", *MODEL_480B, *nodes(4, "70GiB")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("no valid topology: the 62 layers cannot be split")


@pytest.mark.parametrize(
    "node, complaint",
    [
        ("gpu-a", "expected ID:BYTES[:MAX_BYTES[:HEADROOM_BYTES]]"),
        ("gpu-a:1:2:3:4", "expected ID:BYTES[:MAX_BYTES[:HEADROOM_BYTES]]"),
        (":80GiB", "the node id is empty"),
        ("gpu-a:", "the detected memory (BYTES) is empty"),
        ("gpu-a:80GB", "unknown size suffix 'GB'"),
        ("gpu-a:-5", "expected bytes or a size like 80GiB"),
        ("gpu-a:lots", "expected bytes or a size like 80GiB"),
    ],
)
def test_malformed_node_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], node: str, complaint: str
) -> None:
    assert main(["split", "plan", *MODEL_480B, "--node", node]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"gridctl split plan: error: --node '{node}': ")
    assert complaint in err


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--layers", "-5"], "--layers"),
        (["--layers", "0"], "--layers"),
        (["--min-nodes", "two"], "--min-nodes"),
        (["--lanes", "0"], "--lanes"),
        (["--context", "1.5"], "--context"),
        (["--target-tpot-ms", "-1"], "--target-tpot-ms"),
        (["--target-tpot-ms", "nan"], "--target-tpot-ms"),
        (["--weight-bytes", "12XB"], "--weight-bytes"),
        (["--stage-latency-ms", "nobody=3"], "--stage-latency-ms"),
        (["--stage-latency-ms", "gpu-00"], "--stage-latency-ms"),
        (["--stage-latency-ms", "gpu-00=-2"], "--stage-latency-ms"),
        (
            ["--stage-latency-ms", "gpu-00=1", "--stage-latency-ms", "gpu-00=2"],
            "--stage-latency-ms",
        ),
        (["--node", "gpu-00:80GiB"], "--node"),  # duplicate id
    ],
)
def test_bad_values_name_their_flag(
    capsys: pytest.CaptureFixture[str], extra: list[str], flag: str
) -> None:
    argv = [*MODEL_480B, *nodes(5), *extra]
    assert main(["split", "plan", *argv]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"gridctl split plan: error: {flag}")


def test_missing_required_flag_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["split", "plan", *MODEL_480B])
    assert exit_info.value.code == 2
    assert "--node" in capsys.readouterr().err


def test_split_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["split"]) == 2
    assert "plan" in capsys.readouterr().out


def test_help_explains_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["split", "plan", "--help"])
    out = capsys.readouterr().out
    for flag in (
        "--layers", "--weight-bytes", "--kv-bytes-per-token", "--native-context",
        "--min-nodes", "--node", "--stage-latency-ms", "--target-tpot-ms",
        "--context", "--lanes", "--json",
    ):  # fmt: skip
        assert flag in out


@pytest.mark.parametrize(
    "text, round_up, expected",
    [
        ("123", False, 123),
        ("80GiB", False, 80 << 30),
        ("80gib", False, 80 << 30),
        ("512MiB", False, 512 << 20),
        ("1.5GiB", False, 3 << 29),
        ("4KiB", False, 4096),
        ("1TiB", False, 1 << 40),
        ("0.1KiB", False, 102),
        ("0.1KiB", True, 103),
    ],
)
def test_sizes(text: str, round_up: bool, expected: int) -> None:
    assert parse_size("--x", text, round_up=round_up) == expected
