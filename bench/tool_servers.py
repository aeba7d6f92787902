"""Benchmark tool-server calls on loopback and print a table.

    python bench/tool_servers.py [--calls 30]

Runs the SDK test server (tests/support/mcp_servers.py) on 127.0.0.1 in both protocol eras and
times, per era: `list_tools` (one MCP session: negotiation and `tools/list`), `call_tool` of a
text tool (a session, the schema check's `tools/list`, then `tools/call`) and of the
40,000-character tool. Each operation opens its own session, as a run's call does, so these are
the fixed costs a tool-server call adds to a run beside the tool's own time. The ratio is a call's
median over a listing's median: the share the schema check and the call add to the session.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentloom.toolservers import ServerAddress, call_tool, list_tools
from tests.support.mcp_servers import Calls, mcp_app, serve


def _times(operation, count: int) -> list[float]:
    operation()  # warm up: imports, the first connection
    times = []
    for _ in range(count):
        started = time.perf_counter()
        operation()
        times.append((time.perf_counter() - started) * 1000)
    return times


def _row(name: str, times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return f"| {name} | {statistics.median(times):.1f} | {p95:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=30)
    count = parser.parse_args().calls
    print(f"tool-server operations on loopback, {count} of each (milliseconds)\n")
    for era in ("2026", "2025"):
        with serve(mcp_app(Calls(), era=era)) as base:
            address = ServerAddress(base + "/mcp", allow_private_hosts=True)
            schemas = {tool.name: tool.input_schema for tool in list_tools(address).tools}
            listing = _times(lambda address=address: list_tools(address), count)

            def call(name, arguments, address=address, schemas=schemas):
                return call_tool(
                    address, name, arguments, expected_schema=schemas[name], timeout=30
                )

            text = _times(lambda: call("greet", {"who": "Ada"}), count)
            big = _times(lambda: call("big", {}), count)
        print(f"era {era}")
        print("| operation | median | p95 |\n|---|---|---|")
        print(_row("list_tools", listing))
        print(_row("call_tool text", text))
        print(_row("call_tool 40,000 chars", big))
        ratio = statistics.median(text) / statistics.median(listing)
        print(f"call / list median ratio: {ratio:.2f}\n")


if __name__ == "__main__":
    main()
