"""Benchmark streamed model calls: CPU per call, and first byte to first delta read.

    python bench/streaming.py

1. CPU of the calling thread per call (`time.thread_time`), streamed against not streamed, for
   answers of 2,000 and 20,000 characters from the provider double on 127.0.0.1 (OpenAI's chunk
   size of a few characters: 4 here), the gateway's assembly and the engine's redacting relay
   with one secret included.
2. On the embedded defaults (the database channel, a scratch SQLite file): the time from the
   provider's first byte to the first delta an events feed reads, with the worker's publisher
   and the feed's 100 ms poll, over 20 calls (median and worst).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentloom.engine import CallStream, ModelRequest, Redactor, StreamRedactor
from agentloom.providers import CallOptions, ModelEndpoint, OpenAICompatibleChatGateway
from tests.support.provider_double import ProviderDouble

QUESTION = ModelRequest(purpose="action", messages=[{"role": "user", "content": "hi"}])
SECRET = "sk-bench-0123456789abcdef"


def relay():
    content, reasoning = StreamRedactor(Redactor([SECRET])), StreamRedactor(Redactor([SECRET]))
    return lambda text, thought, names: (content.feed(text), reasoning.feed(thought))


def cpu_per_call(double, *, stream: bool, chars: int, calls: int = 20) -> float:
    gateway = OpenAICompatibleChatGateway(
        ModelEndpoint(double.base_url, "k", "m"),
        calls=CallOptions(allow_private_hosts=True, stream=stream),
    )
    samples = []
    for _ in range(calls):
        double.reply_chat(content="word " * (chars // 5))
        started = time.thread_time()
        if stream:
            gateway.complete(QUESTION, stream=CallStream(relay()))
        else:
            gateway.complete(QUESTION)
        samples.append(time.thread_time() - started)
    return statistics.median(samples) * 1000


def first_delta_latency(double, calls: int = 20) -> list[float]:
    with tempfile.TemporaryDirectory() as scratch:
        os.environ["DATABASE_URL"] = f"sqlite:///{scratch}/bench.sqlite3"
        os.environ["LIVE_CHANNEL_URL"] = "database"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentloom.settings")
        os.environ.setdefault("SECRET_KEY", "bench-scratch-secret-key-0123456789abcdef")
        os.environ.setdefault("FIELD_ENCRYPTION_KEY", "bench-scratch-field-key-0123456789abcdef")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        return _latencies(double, calls)


def _latencies(double, calls: int) -> list[float]:
    from sessions_app.events import POLL_SECONDS
    from sessions_app.models import Run
    from sessions_app.services.live import DeltaPublisher, read_deltas
    from tests.factories import make_space, make_user

    user = make_user("bench")
    space = make_space(admin=user)
    run = _make_run(space, user)
    gateway = OpenAICompatibleChatGateway(
        ModelEndpoint(double.base_url, "k", "m"), calls=CallOptions(allow_private_hosts=True)
    )
    double.chunk_delay = 0.02
    found = []
    for _ in range(calls):
        double.first_bytes.clear()
        publisher = DeltaPublisher(run.pk)
        _, cursor = read_deltas(run.pk, None)
        seen: list[float] = []

        def feed(cursor=cursor, seen=seen):
            while not seen:
                deltas, cursor = read_deltas(run.pk, cursor)
                if deltas:
                    seen.append(time.time())
                    return
                time.sleep(POLL_SECONDS)

        reader = threading.Thread(target=feed)
        reader.start()
        double.reply_chat(content="word " * 40)
        stream = CallStream(
            lambda text, thought, names, publisher=publisher: publisher.publish(
                "main", {"content": text, "reasoning": thought, "tool_calls": names}
            )
        )
        gateway.complete(QUESTION, stream=stream)
        publisher.end_call("main", "action", failed=False)
        reader.join()
        found.append((seen[0] - double.first_bytes[0]) * 1000)
    Run.objects.filter(pk=run.pk).delete()
    return found


def _make_run(space, user):
    from context_app.services.agents import agent_create, agent_publish
    from sessions_app.services.runs import run_ask, session_create
    from tests.factories import make_connection

    connection = make_connection(space, provider="local")
    agent = agent_create(
        user=user,
        space=space,
        name="Bench",
        system_prompt="s",
        model_connection=connection.pk,
        tools=[],
        sub_agents=[],
        context_policy=None,
    )
    session = session_create(user=user, agent_version=agent_publish(user=user, agent=agent))
    from unittest import mock

    with mock.patch("sessions_app.tasks.execute_run.delay"):
        return run_ask(user=user, session=session, question="q")


def main() -> None:
    with ProviderDouble() as double:
        double.chunk_chars = 4
        print("CPU of the calling thread per call (median of 20), ms")
        print(f"{'answer chars':>12} {'not streamed':>13} {'streamed':>9} {'ratio':>6}")
        for chars in (2_000, 20_000):
            plain = cpu_per_call(double, stream=False, chars=chars)
            streamed = cpu_per_call(double, stream=True, chars=chars)
            print(f"{chars:>12,} {plain:>13.2f} {streamed:>9.2f} {streamed / plain:>6.1f}")
        found = first_delta_latency(double)
        print()
        print("provider first byte -> first delta read by an events feed (database channel), ms")
        print(f"median {statistics.median(found):.0f}, worst {max(found):.0f} of {len(found)}")


if __name__ == "__main__":
    main()
