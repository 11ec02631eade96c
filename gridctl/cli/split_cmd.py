"""``gridctl split plan``: run the split-topology planner from the command line.

The command is a thin shell around ``gridctl.split.plan_topology``: it parses
sizes and node descriptions, builds a ``PlanRequest``, and prints the plan as
a table or as JSON. Every flag is parsed here rather than by argparse types,
so a bad value yields one line naming the flag and exit code 1 (argparse
keeps exit code 2 for syntax errors such as a missing required flag).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from fractions import Fraction

from gridctl.split import (
    ModelShape,
    PlannerNode,
    PlanRejection,
    PlanRequest,
    RejectionReason,
    TopologyPlan,
    plan_topology,
)

_UNITS = {"": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_SIZE = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]*)\s*$")
_GIB = float(1 << 30)

_DESCRIPTION = """\
Plan how to split a model's layers over several nodes. Contexts are tried from
the native context down to the 64k floor, node counts from --min-nodes upward
and parallel lanes from 4 down to 1; the first fit wins, so fewer nodes beat
more lanes. With --stage-latency-ms or --target-tpot-ms every feasible
candidate is scored by target met, then stage_count * max(latency), then
context, lanes and memory margin.

Sizes are bytes, or a number with a KiB, MiB, GiB or TiB suffix (80GiB).
"""

_EPILOG = """\
example:
  gridctl split plan --layers 62 --weight-bytes 272GiB --kv-bytes-per-token 253952 \\
      --native-context 262144 --node a:80GiB::4GiB --node b:80GiB::4GiB \\
      --node c:80GiB:72GiB:4GiB --node d:80GiB::4GiB --node e:80GiB::4GiB
"""


class BadArgument(ValueError):
    """A flag's value could not be used; the message names the flag."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``split`` and its ``plan`` subcommand to the ``gridctl`` parser."""
    split = subparsers.add_parser(
        "split",
        help="plan split topologies for models too large for one node",
        description="Split a model's layers over several nodes.",
    )
    split.set_defaults(func=lambda _args: _print_help(split))
    commands = split.add_subparsers(dest="split_command", metavar="SUBCOMMAND")
    plan = commands.add_parser(
        "plan",
        help="choose context, nodes, layer ranges and lanes for one model",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_plan_arguments(plan)
    plan.set_defaults(func=run)


def _add_plan_arguments(plan: argparse.ArgumentParser) -> None:
    model = plan.add_argument_group("model shape")
    model.add_argument("--layers", required=True, metavar="N", help="model layer count")
    model.add_argument(
        "--weight-bytes", required=True, metavar="B", help="total model weight size (e.g. 272GiB)"
    )
    model.add_argument(
        "--kv-bytes-per-token",
        required=True,
        metavar="K",
        help="KV cache bytes per token over all layers, for the chosen KV cache type",
    )
    model.add_argument(
        "--native-context", required=True, metavar="C", help="native GGUF context length"
    )
    fleet = plan.add_argument_group("nodes")
    fleet.add_argument(
        "--node",
        action="append",
        required=True,
        metavar="ID:BYTES[:MAX_BYTES[:HEADROOM_BYTES]]",
        help=(
            "a candidate stage node (repeat per node): detected memory, optional cap "
            "(leave empty to skip, e.g. a:80GiB::4GiB) and runtime headroom; "
            "usable memory is min(detected, cap) - headroom"
        ),
    )
    fleet.add_argument(
        "--min-nodes", default="1", metavar="M", help="smallest node count to try (default 1)"
    )
    fleet.add_argument(
        "--stage-latency-ms",
        action="append",
        default=[],
        metavar="ID=MS",
        help="stage-transfer latency of a node in milliseconds (repeatable); enables scoring",
    )
    choice = plan.add_argument_group("overrides and targets")
    choice.add_argument(
        "--target-tpot-ms",
        metavar="T",
        help="decode time-per-output-token budget in ms; plans meeting it win",
    )
    choice.add_argument(
        "--context",
        metavar="C",
        help="use exactly this context length (must be between the 64k floor and native)",
    )
    choice.add_argument("--lanes", metavar="L", help="use exactly this many parallel lanes")
    plan.add_argument("--json", action="store_true", help="print the plan or error as JSON")


def run(args: argparse.Namespace) -> int:
    """Plan, print, and return 0 for a plan or 1 for a rejection or bad argument."""
    try:
        request = request_from_args(args)
    except BadArgument as exc:
        print(f"gridctl split plan: error: {exc}", file=sys.stderr)
        return 1
    result = plan_topology(request)
    if isinstance(result, PlanRejection):
        if args.json:
            print(json.dumps(rejection_json(result), indent=2))
        else:
            print(f"{result.reason.replace('_', ' ')}: {result.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(plan_json(result), indent=2))
    else:
        print(render_plan(result, request))
    return 0


def request_from_args(args: argparse.Namespace) -> PlanRequest:
    """Build the planner request, or raise ``BadArgument`` naming the flag."""
    nodes = [parse_node(text) for text in args.node]
    ids = [node.node_id for node in nodes]
    for node_id in ids:
        if ids.count(node_id) > 1:
            raise BadArgument(f"--node: node id {node_id!r} is given more than once")
    latencies = parse_latencies(args.stage_latency_ms, set(ids))
    nodes = [
        PlannerNode(
            node.node_id,
            node.detected_bytes,
            node.max_bytes,
            node.headroom_bytes,
            latencies.get(node.node_id),
        )
        for node in nodes
    ]
    model = ModelShape(
        layer_count=parse_count("--layers", args.layers),
        weight_bytes=parse_size("--weight-bytes", args.weight_bytes, round_up=True),
        kv_bytes_per_token=parse_size(
            "--kv-bytes-per-token", args.kv_bytes_per_token, round_up=True
        ),
        native_context=parse_count("--native-context", args.native_context),
    )
    return PlanRequest(
        model=model,
        nodes=tuple(nodes),
        min_nodes=parse_count("--min-nodes", args.min_nodes),
        context_override=None if args.context is None else parse_count("--context", args.context),
        lanes_override=None if args.lanes is None else parse_count("--lanes", args.lanes),
        target_tpot_ms=(
            None
            if args.target_tpot_ms is None
            else parse_milliseconds("--target-tpot-ms", args.target_tpot_ms)
        ),
    )


def parse_count(flag: str, text: str) -> int:
    """A positive integer."""
    if not re.fullmatch(r"\s*\d+\s*", text) or int(text) < 1:
        raise BadArgument(f"{flag}: expected a positive whole number, got {text!r}")
    return int(text)


def parse_size(flag: str, text: str, *, round_up: bool) -> int:
    """Bytes from ``123``, ``80GiB`` or ``1.5MiB``.

    Fractional bytes round towards the conservative side: up for what the
    model needs and for headroom, down for what a node offers.
    """
    match = _SIZE.match(text)
    if match is None:
        raise BadArgument(f"{flag}: expected bytes or a size like 80GiB, got {text!r}")
    unit = match["unit"].lower()
    if unit not in _UNITS:
        raise BadArgument(
            f"{flag}: unknown size suffix {match['unit']!r} in {text!r} "
            "(use plain bytes, KiB, MiB, GiB or TiB)"
        )
    exact = Fraction(match["number"]) * _UNITS[unit]
    return math.ceil(exact) if round_up else math.floor(exact)


def parse_milliseconds(flag: str, text: str) -> float:
    """A finite, non-negative number of milliseconds."""
    try:
        value = float(text)
    except ValueError:
        raise BadArgument(f"{flag}: expected milliseconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise BadArgument(f"{flag}: expected a non-negative number of ms, got {text!r}")
    return value


def parse_node(text: str) -> PlannerNode:
    """A node from ``ID:BYTES[:MAX_BYTES[:HEADROOM_BYTES]]``; empty fields are skipped."""
    parts = text.split(":")
    flag = f"--node {text!r}"
    if not 2 <= len(parts) <= 4:
        raise BadArgument(f"{flag}: expected ID:BYTES[:MAX_BYTES[:HEADROOM_BYTES]]")
    node_id, detected, cap, headroom = (*parts, "", "")[:4]
    if not node_id.strip():
        raise BadArgument(f"{flag}: the node id is empty")
    if not detected.strip():
        raise BadArgument(f"{flag}: the detected memory (BYTES) is empty")
    return PlannerNode(
        node_id=node_id.strip(),
        detected_bytes=parse_size(flag, detected, round_up=False),
        max_bytes=parse_size(flag, cap, round_up=False) if cap.strip() else None,
        headroom_bytes=parse_size(flag, headroom, round_up=True) if headroom.strip() else 0,
    )


def parse_latencies(items: Sequence[str], known_ids: set[str]) -> dict[str, float]:
    """``ID=MS`` pairs for nodes given with ``--node``."""
    latencies: dict[str, float] = {}
    for item in items:
        flag = f"--stage-latency-ms {item!r}"
        node_id, sep, value = item.partition("=")
        node_id = node_id.strip()
        if not sep or not node_id:
            raise BadArgument(f"{flag}: expected ID=MS")
        if node_id not in known_ids:
            raise BadArgument(f"{flag}: no --node has the id {node_id!r}")
        if node_id in latencies:
            raise BadArgument(f"{flag}: latency for {node_id!r} is given more than once")
        latencies[node_id] = parse_milliseconds(flag, value)
    return latencies


def plan_json(plan: TopologyPlan) -> dict[str, object]:
    """The documented JSON shape of a plan; layer ranges are half-open."""
    return {
        "context_length": plan.context_length,
        "parallel_lanes": plan.parallel_lanes,
        "stages": [
            {"node_id": s.node_id, "layer_start": s.layer_start, "layer_end": s.layer_end}
            for s in plan.stages
        ],
        "estimated_decode_network_ms_per_token": plan.estimated_decode_network_ms_per_token,
        "tpot_target_met": plan.tpot_target_met,
    }


def rejection_json(rejection: PlanRejection) -> dict[str, object]:
    """``{"error": code, ...details}`` with only the details that explain this code."""
    document: dict[str, object] = {
        "error": str(rejection.reason),
        "message": rejection.message,
        "native_context": rejection.native_context,
        "minimum_context": rejection.minimum_context,
    }
    if rejection.requested_context is not None:
        document["requested_context"] = rejection.requested_context
    if rejection.reason is RejectionReason.NO_VALID_TOPOLOGY:
        document["contexts_tried"] = list(rejection.contexts_tried)
        document["layer_count"] = rejection.layer_count
        document["placeable_layers"] = rejection.placeable_layers
    return document


def render_plan(plan: TopologyPlan, request: PlanRequest) -> str:
    """A short summary and one table row per stage."""
    native = request.model.native_context
    lines = [
        f"Split plan: {plan.stage_count} stage{'s' if plan.stage_count != 1 else ''}, "
        f"context {plan.context_length:,} (native {native:,}), "
        f"{plan.parallel_lanes} parallel lane{'s' if plan.parallel_lanes != 1 else ''}",
        f"Estimated memory per layer: {_gib(plan.bytes_per_layer)} "
        "(weights plus KV cache at this context; lanes share one KV cache)",
        "",
    ]
    rows = [("NODE", "LAYERS", "COUNT", "MEMORY USED / USABLE")]
    rows += [
        (
            stage.node_id,
            f"[{stage.layer_start}, {stage.layer_end})",
            str(stage.layer_count),
            f"{_gib(stage.used_bytes)} / {_gib(stage.usable_bytes)}",
        )
        for stage in plan.stages
    ]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for node, layers, count, memory in rows:
        lines.append(
            f"{node:<{widths[0]}}  {layers:<{widths[1]}}  {count:>{widths[2]}}  {memory}".rstrip()
        )
    if plan.estimated_decode_network_ms_per_token is not None:
        estimate = f"{plan.estimated_decode_network_ms_per_token:g} ms/token"
        target = request.target_tpot_ms
        if target is not None:
            verdict = "met" if plan.tpot_target_met else "missed"
            estimate += f" (target {target:g} ms: {verdict})"
        lines += ["", f"Estimated decode network time: {estimate}"]
    elif request.target_tpot_ms is not None:
        lines += ["", "TPOT target not evaluated: no --stage-latency-ms was given"]
    return "\n".join(lines)


def _gib(size: int) -> str:
    return f"{size / _GIB:.1f} GiB"


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2
