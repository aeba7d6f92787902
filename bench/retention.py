"""Retention: what a long compacting session keeps of its facts, and what `search_history` finds.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test .venv/bin/python bench/retention.py
    .venv/bin/python bench/retention.py --part recall --shares 0.3,1.0 --compactions 5   # smoke

Runs in a scratch PostgreSQL database (`agentloom_retention`, dropped afterwards).

Part `recall`: one session per share, on a small window (16,384 tokens in bytes, output 512,
margin 256), of an agent with `echo` and `search_history`. Each question states one fact — an
identifier bound to a name ("The code of alpha-east is KX-0412-9f3a.") — and the model calls echo
with 1,500 characters before answering, so the session compacts every few questions. Names come
in near-duplicate pairs (alpha-east, alpha-west); every fifth fact is stated in Chinese
("项目 beta-east 的代码是 …"); from the 13th question on, each question updates an earlier fact
("now …") and the latest value must win. The summariser is scripted: it keeps each fact it reads
with probability `share` (fixed per name, so a kept fact stays kept) and writes them as one line;
the compactor adds what it adds (the identifiers it finds missing, within its bound, and
citations).

After 5, 10 and 20 compactions, every fact stated so far is probed the way an agent would
answer it, without running the model: the view a new question would get is searched for
statements of the name; one value there is the answer (`in view`); none, or several that
disagree, and the agent calls `search_history` with the name (in Chinese for the Chinese facts),
through the run's own record store and the tool's own ranking and rendering at the run's
watermark; if the best hit's snippet lacks the value, it reads the record with `read_record`. The
answer is `correct` (the latest value), `stale` (an earlier one) or `lost`. Printed per share and
checkpoint: facts, in view, recovered by search, stale, lost, tool calls per recovered fact and
the characters the tool results cost.

Part `latency`: sessions of 1,000, 10,000 and 100,000 journal records (questions, tool calls and
2,000-character results holding facts), indexed as the application indexes them; 30 searches
each (a rare identifier, a name, a common word, a three-word phrase, Chinese), timed through the
function the engine's record store calls. Printed: p50 / p95 ms, and the index's bytes against
the journal table's. Target: p95 <= 500 ms on 100,000 records.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _scratch import scratch_postgres

from agentloom.engine import ModelGateway

SCRATCH_DB = "agentloom_retention"
WINDOW, OUTPUT, MARGIN = 16_384, 512, 256
ECHO_CHARS = 1_500
CHECKPOINTS = (5, 10, 20)
# Twelve names: from the 13th question on, every question updates an earlier fact.
PAIRS = ("alpha", "beta", "gamma", "delta", "omega", "sigma")
SIDES = ("east", "west")
VALUE = r"[A-Z]{2}-\d{4}-[0-9a-f]{4}"
_NAME = r"(?P<name>[a-z]+-(?:east|west))"
_STATED = re.compile(rf"code of {_NAME} is (?:now )?(?P<value>{VALUE})")
_STATED_ZH = re.compile(rf"项目 {_NAME} 的代码(?:现在)?是 (?P<value>{VALUE})")
_KEPT = re.compile(rf"{_NAME}: (?P<value>{VALUE})")


def _names() -> list[str]:
    return [f"{pair}-{side}" for pair in PAIRS for side in SIDES]


def _value(name: str, version: int) -> str:
    digest = hashlib.sha256(f"{name}/{version}".encode()).hexdigest()
    return f"K{chr(65 + int(digest[0], 16))}-{int(digest[1:5], 16) % 10_000:04d}-{digest[5:9]}"


def _statement(turn: int, name: str, value: str, update: bool) -> str:
    if turn % 5 == 0:
        return f"项目 {name} 的代码{'现在' if update else ''}是 {value}。请记住。"
    return (
        f"{'Update: the' if update else 'The'} code of {name} is {'now ' if update else ''}{value}."
    )


def _facts_in(text: str) -> list[tuple[str, str]]:
    """Return the (name, value) statements of `text`, in the order they are written."""
    found = [m for pattern in (_STATED_ZH, _STATED, _KEPT) for m in pattern.finditer(text)]
    return [(m["name"], m["value"]) for m in sorted(found, key=lambda m: m.start())]


class RetentionModel(ModelGateway):
    """Echo 1,500 characters per question, answer briefly; summaries keep a share of facts."""

    provider, model_id = "bench", "retention"

    def __init__(self, share: float):
        self.share = share

    def keeps(self, name: str) -> bool:
        return int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < self.share

    def complete(self, request):
        from agentloom.engine import message_text
        from agentloom.engine.testing import text_response, tool_call_response

        last = request.messages[-1] if request.messages else {}
        if request.purpose == "compaction":
            latest: dict[str, str] = {}
            for message in request.messages:
                for name, value in _facts_in(message_text(message)):
                    latest[name] = value
            kept = [f"{name}: {value}" for name, value in latest.items() if self.keeps(name)]
            return text_response(
                "Goals and constraints: remember the codes the user states.\n"
                f"Artifacts: {'; '.join(kept) or 'none kept'}.\nNext step: wait for questions."
            )
        if request.purpose == "verification":
            return text_response("PASS")
        if last.get("role") == "tool":
            return text_response("Noted.")
        filler = ("log line ok " * (ECHO_CHARS // 12 + 1))[:ECHO_CHARS]
        return tool_call_response(("echo", {"text": filler}))


def _session(tag: str, tools: list[str]):
    from django.contrib.auth import get_user_model

    from context_app.services.agents import agent_create, agent_publish
    from models_app.models import ModelConnection
    from sessions_app.services.runs import session_create
    from tests.factories import make_space

    user, _ = get_user_model().objects.get_or_create(username=f"bench-{tag}")
    space = make_space(name=f"bench {tag}", admin=user)
    connection = ModelConnection.objects.create(
        space=space,
        name="retention",
        provider="local",
        model_id="local-demo",
        context_window=WINDOW,
        max_output_tokens=OUTPUT,
        safety_margin_tokens=MARGIN,
    )
    agent = agent_create(
        user=user,
        space=space,
        name=f"retention {tag}",
        system_prompt="You remember the codes the user states.",
        model_connection=connection.pk,
        tools=tools,
    )
    return user, session_create(user=user, agent_version=agent_publish(user=user, agent=agent))


def _compactions(session) -> int:
    from sessions_app.models import Run

    total = 0
    for checkpoint in Run.objects.filter(session=session).values_list("checkpoint", flat=True):
        log = ((checkpoint or {}).get("state") or {}).get("compaction_log") or []
        total += sum(1 for row in log if row.get("outcome") == "succeeded")
    return total


def _probe(session, facts: dict[str, list[str]], zh: set[str], policy: str) -> dict[str, float]:
    """Answer every fact as an agent would from a new question's view and the tools.

    `policy` is what the agent searches for: `question`, the question's own words (in Chinese
    for a fact stated in Chinese), or `name`, the fact's name alone.
    """
    from agentloom.engine import LargeRecords, ModelBudget, SearchQuery, message_text, rank
    from agentloom.engine._search import render_hits
    from context_app.engine_adapter import version_binding
    from sessions_app.models import Run
    from sessions_app.selectors.checkpoints import JournalStore
    from sessions_app.selectors.history import history_for_new_run

    binding = version_binding(session.agent_version)
    history = history_for_new_run(session, binding)
    view = "\n".join(message_text(m) for m in history.messages)
    store = JournalStore(Run.objects.filter(session=session).order_by("-number").first())
    # The tool's result is cut to the large-record limit (bytes here: the version's estimator).
    limit = LargeRecords.from_config(binding.get("large_records")).limit(
        ModelBudget.from_dict(binding["budget"])
    )
    counts = dict.fromkeys(
        ("facts", "in view", "search", "stale view", "stale search", "lost", "calls", "chars"), 0
    )
    for name, values in facts.items():
        counts["facts"] += 1
        seen = {value for found, value in _facts_in(view) if found == name}
        answer = next(iter(seen)) if len(seen) == 1 else None
        if answer is not None:
            counts["in view"] += 1
            counts["stale view"] += answer != values[-1]
            continue
        question = f"{name} 代码" if name in zh else f"code of {name}"
        text = name if policy == "name" else question
        query = SearchQuery.from_arguments({"query": text, "limit": 5})
        hits = rank(query, store.search(query, up_to=history.watermark))
        result = render_hits(query, hits, lambda t: len(json.dumps(t).encode()) <= limit)
        counts["calls"] += 1
        counts["chars"] += len(result)
        answer = next((v for found, v in _facts_in(result) if found == name), None)
        if answer is None and hits:
            # The snippet was cut before the value: the agent reads the best hit whole.
            counts["calls"] += 1
            counts["chars"] += len(hits[0].text)
            answer = next((v for found, v in _facts_in(hits[0].text) if found == name), None)
        if answer is None:
            counts["lost"] += 1
        elif answer == values[-1]:
            counts["search"] += 1
        else:
            counts["stale search"] += 1
    return counts


def part_recall(shares: list[float], checkpoints: tuple[int, ...]) -> None:
    from context_app import engine_adapter
    from sessions_app.services import runs
    from tests.factories import ask

    runs._enqueue = lambda run: None
    print("\nrecall: facts stated, then probed after N compactions (window 16,384)")
    print(
        f"{'share':>5} | {'compactions':>11} | {'query':>8} | {'facts':>5} | {'in view':>7} | "
        f"{'by search':>9} | {'stale (view/search)':>19} | {'lost':>4} | "
        f"{'calls/searched':>14} | {'result chars':>12}"
    )
    for share in shares:
        engine_adapter.set_gateway_factory(lambda version, connection, s=share: RetentionModel(s))
        user, session = _session(f"recall{share}", ["echo", "search_history"])
        names = _names()
        facts: dict[str, list[str]] = {}
        zh: set[str] = set()
        turn = 0
        for target in checkpoints:
            while _compactions(session) < target:
                turn += 1
                name = names[(turn - 1) % len(names)]
                update = name in facts
                value = _value(name, len(facts.get(name, [])))
                run = ask(session, user, _statement(turn, name, value, update))
                if run.status != "succeeded":
                    raise SystemExit(f"turn {turn} {run.status}: {run.error}")
                facts.setdefault(name, []).append(value)
                if turn % 5 == 0:
                    zh.add(name)
                if turn > 400:
                    raise SystemExit("no compaction after 400 turns: the window is too large")
            for policy in ("question", "name"):
                c = _probe(session, facts, zh, policy)
                searched = c["search"] + c["stale search"] + c["lost"]
                stale = f"{c['stale view']}/{c['stale search']}"
                print(
                    f"{share:>5.1f} | {_compactions(session):>11} | {policy:>8} | "
                    f"{c['facts']:>5} | {c['in view']:>7} | {c['search']:>9} | {stale:>19} | "
                    f"{c['lost']:>4} | {c['calls'] / (searched or 1):>14.2f} | {c['chars']:>12,}"
                )


def _fill(session, records: int) -> None:
    """Journal `records` main records in groups of four (question, call, result, answer)."""
    from django.utils import timezone

    from sessions_app.models import Run, SessionMessage
    from sessions_app.services.search_index import index_records

    now = timezone.now()
    names = _names()
    groups = records // 4
    runs = Run.objects.bulk_create(
        [
            Run(session=session, number=n + 1, status="succeeded", question="q", attempt=1)
            for n in range(groups)
        ],
        batch_size=2_000,
    )
    batch, seq = [], 0
    words = "the service restarted after the cache warmed and the queue drained " * 30
    for n, run in enumerate(runs):
        name = names[n % len(names)]
        value = _value(name, n // len(names))
        call = f"c{n}"
        group = [
            ("user_input", {"role": "user", "content": _statement(n + 1, name, value, n > 24)}),
            (
                "assistant",
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call,
                            "type": "function",
                            "function": {"name": "echo", "arguments": json.dumps({"text": name})},
                        }
                    ],
                },
            ),
            (
                "tool_result",
                {
                    "role": "tool",
                    "tool_call_id": call,
                    "content": f"/var/log/app/{name}.log build-{n} {words[:2_000]}",
                },
            ),
            ("assistant", {"role": "assistant", "content": f"Noted {name}."}),
        ]
        for kind, message in group:
            seq += 1
            batch.append(
                SessionMessage(
                    session=session,
                    seq=seq,
                    run=run,
                    instance="main",
                    kind=kind,
                    entry_key=f"{kind}:{seq}",
                    message=message,
                    created_at=now,
                )
            )
        if len(batch) >= 4_000:
            SessionMessage.objects.bulk_create(batch)
            index_records(batch)
            batch = []
    SessionMessage.objects.bulk_create(batch)
    index_records(batch)
    type(session).objects.filter(pk=session.pk).update(next_seq=seq + 1)


def part_latency(sizes: list[int]) -> None:
    from django.db import connection

    from agentloom.engine import SearchQuery
    from sessions_app.selectors.search import search_journal

    print("\nlatency: search_journal (what search_history's store calls), 30 searches per size")
    print(
        f"{'records':>8} | {'p50 ms':>7} | {'p95 ms':>7} | {'max ms':>7} | {'index MB':>8} | "
        f"{'journal MB':>10} | {'index/journal':>13}"
    )
    for size in sizes:
        _, session = _session(f"latency{size}", ["echo", "search_history"])
        _fill(session, size)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        queries = []
        for n in range(6):
            name = _names()[n * 3 % len(_names())]
            queries += [
                _value(name, 0),  # a rare identifier
                f"code of {name}",  # a name among near-duplicates
                "restarted",  # a word in every tool result
                "cache warmed queue",  # three common words
                f"{name} 代码",  # Chinese
            ]
        samples = []
        for text in queries:
            query = SearchQuery.from_arguments({"query": text, "limit": 5})
            started = time.perf_counter()
            search_journal(session.pk, query, up_to=size)
            samples.append((time.perf_counter() - started) * 1000)
        samples.sort()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_total_relation_size('sessions_app_journalterms'), "
                "pg_total_relation_size('sessions_app_sessionmessage')"
            )
            index_bytes, journal_bytes = cursor.fetchone()
        print(
            f"{size:>8,} | {statistics.median(samples):>7.1f} | "
            f"{samples[int(len(samples) * 0.95) - 1]:>7.1f} | {samples[-1]:>7.1f} | "
            f"{index_bytes / 2**20:>8.2f} | {journal_bytes / 2**20:>10.2f} | "
            f"{index_bytes / journal_bytes:>12.2f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["recall", "latency", "both"], default="both")
    parser.add_argument("--shares", default="0.3,0.5,0.8,1.0")
    parser.add_argument("--compactions", default=",".join(map(str, CHECKPOINTS)))
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args()
    with scratch_postgres(SCRATCH_DB):
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        if args.part in ("recall", "both"):
            part_recall(
                [float(s) for s in args.shares.split(",")],
                tuple(int(c) for c in args.compactions.split(",")),
            )
        if args.part in ("latency", "both"):
            part_latency([int(s) for s in args.sizes.split(",")])


if __name__ == "__main__":
    main()
