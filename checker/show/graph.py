"""`batchproof check --dot FILE / --graphml FILE`: the explorer's state graph for one check.

Nodes are numbered in discovery order and labelled with their depth and canonical key;
edges say whether a held request that fits max_model_len was in the step (lasso search)."""

from __future__ import annotations

import argparse
from pathlib import Path

import networkx as nx

from checker.methods import explore
from checker.methods.symbolic import Bounds, Family
from model.core.errors import InputError
from properties import catalogue

MAX_EXPORTED_STATES = 20_000


def numbered(graph: nx.DiGraph) -> nx.DiGraph:
    """The graph with integer nodes (discovery order) and string attributes only."""
    index = {key: i for i, key in enumerate(graph.nodes)}
    out = nx.DiGraph()
    for key, data in graph.nodes(data=True):
        depth = data.get("depth", -1)
        out.add_node(index[key], depth=depth, key=repr(key))
    for a, b, data in graph.edges(data=True):
        out.add_edge(index[a], index[b], stuck=bool(data.get("stuck", False)))
    return out


def to_dot(graph: nx.DiGraph) -> str:
    """Graphviz DOT text of a numbered graph (no pydot needed)."""
    lines = ["digraph explored {", "  node [shape=box, fontsize=9];"]
    for n, data in graph.nodes(data=True):
        label = f"{n} (depth {data['depth']})"
        lines.append(f'  {n} [label="{label}", tooltip="{_escape(data["key"])}"];')
    for a, b, data in graph.edges(data=True):
        style = ' [color="red"]' if data["stuck"] else ""
        lines.append(f"  {a} -> {b}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def export_graph(args: argparse.Namespace, rows: list) -> int:
    """Explore the single selected check and write its graph; InputError otherwise."""
    if len(rows) != 1:
        raise InputError(f"--dot/--graphml export one check, but {len(rows)} are selected; "
                         "pick one with --property and --config")
    if args.method != "explore":
        raise InputError("--dot/--graphml export the explorer's graph; add --method explore")
    _, nc, prop_name, params = rows[0]
    prop = catalogue.get(prop_name, **dict(params))
    family = Family(nc.config, nc.ranges, nc.validated, nc.engine)
    result = explore.check(prop, family, Bounds(**dict(nc.bounds)), args.timeout,
                           keep_graph=True)
    assert result.graph is not None
    if result.graph.number_of_nodes() > MAX_EXPORTED_STATES:
        raise InputError(f"the explored graph has {result.graph.number_of_nodes()} states, "
                         f"more than {MAX_EXPORTED_STATES}; lower --depth or --slots")
    graph = numbered(result.graph)
    if args.dot:
        Path(args.dot).write_text(to_dot(graph))
    if args.graphml:
        nx.write_graphml(graph, args.graphml)
    stats = result.stats
    print(f"{prop_name} on {nc.name}: {result.status} at depth {result.depth}; "
          f"{stats.states} states, {stats.transitions} transitions, "
          f"{stats.states_per_second:.0f} states/s, {stats.seconds:.1f} s")
    full = explore.check(prop, family, Bounds(**dict(nc.bounds)), args.timeout,
                         symmetric=False)
    if full.status != "unknown" and stats.states:
        print(f"symmetry reduction: {full.stats.states} states without it, {stats.states} "
              f"with it ({full.stats.states / stats.states:.2f}x); same verdict: "
              f"{(full.status, full.depth) == (result.status, result.depth)}")
    return 0
