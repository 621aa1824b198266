"""A C load generator for benchmarks/api_speed.py: wrk (Debian package ``wrk``) with a Lua script for POST bodies.

Why: on 2 cores, 32 Python client threads (httpx, one connection each) spend about as much CPU building requests and
parsing JSON as the server spends answering them, so the issue-16 API figures measured the client as much as the
server. wrk's one event-loop thread drives all connections from C and costs a few per cent of a core; the client's
own CPU (user + system seconds of the wrk process, from ``wait4``) is reported beside every row so that a reader
can see what the load generator took from the shared cores.

The Lua script reads the request bodies (one JSON document a line) from a file named after ``--`` and cycles
through them; ``done`` prints one machine-readable line with wrk's exact percentiles (microseconds), the request
count and the errors. wrk is closed-loop, like the thread client: each connection sends its next request when the
previous answer arrived, so at 32 connections there are at most 32 requests in flight.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LUA = r"""
local bodies = {}
local next_body = 1

function init(args)
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = line
  end
  next_body = 1 + (tonumber(args[2]) or 0) % #bodies
end

function request()
  local body = bodies[next_body]
  next_body = next_body % #bodies + 1
  return wrk.format("POST", nil, nil, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_RESULT {\"requests\": %d, \"duration_us\": %d, \"p50_us\": %d, \"p99_us\": %d, \"mean_us\": %.1f, " ..
    "\"status_errors\": %d, \"socket_errors\": %d}\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.mean,
    e.status, e.connect + e.read + e.write + e.timeout))
end
"""


def available() -> bool:
    return shutil.which("wrk") is not None


def _run(
    url: str, headers: dict[str, str], bodies_file: Path, script: Path, connections: int, seconds: float
) -> dict[str, Any]:
    command = ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds:g}s", "--timeout", "60s"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    command += ["-s", str(script), url, "--", str(bodies_file), str(connections)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"wrk failed ({process.returncode}): {output[-2000:]}")
    line = next((line for line in output.splitlines() if line.startswith("WRK_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no result: {output[-2000:]}")
    result: dict[str, Any] = json.loads(line.removeprefix("WRK_RESULT "))
    result["client_cpu_s"] = usage.ru_utime + usage.ru_stime
    return result


def measure_wrk(
    url: str,
    headers: dict[str, str],
    bodies: Sequence[dict[str, Any]],
    connections: int,
    seconds: float,
    *,
    warmup_s: float = 3.0,
) -> dict[str, Any]:
    """A row in the shape of ``speed_support.Latency`` plus the client's CPU, from ``seconds`` of wrk after a warm-up.

    Any non-2xx answer or socket error fails the row: a benchmark of failures is no benchmark.
    """
    with tempfile.TemporaryDirectory(prefix="ferret-wrk-") as folder:
        bodies_file, script = Path(folder) / "bodies.jsonl", Path(folder) / "bodies.lua"
        bodies_file.write_text("\n".join(json.dumps(body) for body in bodies) + "\n")
        script.write_text(LUA)
        headers = {"Content-Type": "application/json", **headers}
        if warmup_s > 0:
            _run(url, headers, bodies_file, script, connections, warmup_s)
        started = time.perf_counter()
        raw = _run(url, headers, bodies_file, script, connections, seconds)
        wall = time.perf_counter() - started
    if raw["requests"] == 0 or raw["status_errors"] or raw["socket_errors"]:
        raise RuntimeError(f"wrk at {connections} connections: {raw}")
    duration_s = raw["duration_us"] / 1e6
    return {
        "path": "HTTP API POST .../search (wrk)",
        "concurrency": connections,
        "requests": raw["requests"],
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "mean_ms": raw["mean_us"] / 1000,
        "qps": raw["requests"] / duration_s,
        "client_cpu_cores": raw["client_cpu_s"] / wall,
    }
