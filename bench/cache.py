"""Benchmark how much of a session's prompt a provider could serve from its prompt cache.

    .venv/bin/python bench/cache.py
    .venv/bin/python bench/cache.py --turns 10 --windows 16000 --versions 3   # smoke run
    .venv/bin/python bench/cache.py --versions 3 --renderings 4,5   # before and after rendering 5
    .venv/bin/python bench/cache.py --versions 4,5 --provider local  # masking in batches

One session of the peer workload (`bench/peer.py`: each turn a question, one `echo` call with a
2,000-character result, then a 300-character answer; a compaction request gets a ~1,500-character
summary) runs for `--turns` questions on SQLite, once per compaction version and window, on a
connection of `--provider` (`openai`: gpt-4.1, its budget measured in o200k tokens; `local`: the
demo's JSON bytes, where a "16,000" window holds about a quarter as much text). The model
is the peer model behind a prompt-cache double with OpenAI's rule: a request's prompt is its tool
schemas, then its messages, as sent (the gateway's payload); the cached part is the longest
prefix shared with any earlier request of the session, counted in o200k tokens, in whole blocks of
128 tokens from 1,024 (shorter shared prefixes are not cached). The provider's cache is never
evicted here, so the figures are the ceiling the requests allow, not what a provider guarantees.

Per combination (window, compaction version, rendering version) it prints the prompt tokens and
the cached share of all calls, of compaction calls and of each run's first call, the compaction
calls (and how many summaries were made on the conversation's prefix), the maskings applied
(masking stages kept, alone or before a summary), at the run boundaries the
share where the next run's first request starts, byte for byte, with the last request of the run
before it (`extends`) and the share where the view rule forbade starting from the previous run's
final view (`forbade`: the run's last compaction made a summary, or from compaction version 5 a
masking, that was not saved as a reusable view, so the next run projects the journal instead), and
per compaction call the share that was cached.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peer import PeerGateway, _peer_session, _setup_django

from agentloom.engine import ModelGateway

BLOCK = 128
MINIMUM = 1_024


def _shared(a: str, b: str) -> int:
    """Return the length of the longest common prefix of two strings (compared in C)."""
    return len(os.path.commonprefix([a, b]))  # noqa: RUF071 - strings, not paths


class PrefixCacheDouble(ModelGateway):
    """The peer model behind OpenAI's prefix rule: records each call's prompt and cached tokens."""

    provider, model_id = "bench", "cache-double"

    def __init__(self):
        from agentloom.engine._estimators import _o200k_counter

        self.model = PeerGateway()
        self.count = _o200k_counter()
        self.prompts: list[str] = []
        self.calls: list[dict] = []

    def complete(self, request):
        body = self.payload(request)
        prompt = json.dumps(body.get("tools") or [], ensure_ascii=False) + "".join(
            json.dumps(message, ensure_ascii=False, sort_keys=True) for message in body["messages"]
        )
        shared = max((_shared(prompt, seen) for seen in self.prompts), default=0)
        total = self.count(prompt)
        matched = self.count(prompt[:shared]) if shared else 0
        cached = matched // BLOCK * BLOCK if matched >= MINIMUM else 0
        self.prompts.append(prompt)
        last = body["messages"][-1] if body["messages"] else {}
        self.calls.append(
            {
                "purpose": request.purpose,
                "prompt": total,
                "cached": min(cached, total),
                "first_of_run": request.purpose == "action" and last.get("role") == "user",
                "text": prompt if request.purpose == "action" else None,
            }
        )
        return self.model.complete(request)


def boundaries(calls: list[dict]) -> tuple[int, int]:
    """Return (run boundaries, those where the next run's first request starts with the last
    action request of the run before it, tools included)."""
    runs: list[list[dict]] = []
    for call in calls:
        if call["first_of_run"]:
            runs.append([])
        if runs and call["text"] is not None:
            runs[-1].append(call)
    pairs = list(itertools.pairwise(runs))
    return len(pairs), sum(1 for a, b in pairs if b[0]["text"].startswith(a[-1]["text"]))


def run_combination(
    url: str, window: int, version: int, rendering: int, turns: int, provider: str, results
) -> None:
    """Drive one session of `turns` runs under compaction `version` and `rendering`; put its
    figures on `results`."""
    _setup_django(url)
    from django.core.management import call_command

    import agentloom.engine._compaction_versions as versions
    import agentloom.engine._rendering as renderings
    from context_app import engine_adapter
    from sessions_app.models import Run, SessionView
    from sessions_app.services import runs
    from sessions_app.services.execution import run_execute
    from sessions_app.services.runs import run_ask

    call_command("migrate", verbosity=0)
    versions.CURRENT_COMPACTION = version
    renderings.CURRENT_RENDERING = rendering
    runs._enqueue = lambda run: None
    double = PrefixCacheDouble()
    engine_adapter.set_gateway_factory(lambda version, connection: double)
    model, measure = {"local": ("local-demo", "bytes"), "openai": ("gpt-4.1", "o200k")}[provider]
    user, session = _peer_session(window, provider=provider, model_id=model, estimator=measure)
    estimator = session.agent_version.snapshot.get("estimator")
    forms: list[str] = []
    forbade = maskings = 0
    for turn in range(1, turns + 1):
        run = run_ask(user=user, session=session, question=f"Q{turn:05d}: echo, then answer.")
        run_execute(run_id=run.pk)
        run = Run.objects.get(pk=run.pk)
        assert run.status == "succeeded", (turn, run.error)
        assert run.checkpoint["binding"].get("rendering", 1) == rendering
        log = (run.checkpoint or {}).get("state", {}).get("compaction_log") or []
        forms += [row.get("form") or "segmented" for row in log if row.get("stage") == "summary"]
        maskings += sum(
            1
            for row in log
            if row.get("stage") == "masking" and row.get("outcome") in ("succeeded", "applied")
        )
        # A compaction the run made last that no view was saved from (a masking saves none
        # before compaction version 5).
        done = [row for row in log if row.get("outcome") == "succeeded"]
        saves = (
            {"summary", "masking"}
            if versions.compaction_named(version).keeps_masks
            else {"summary"}
        )
        if turn < turns and done and done[-1].get("stage") in saves:
            saved = SessionView.objects.filter(run=run, snapshot_revision=done[-1]["revision"])
            forbade += not saved.exists()
    for call in double.calls:
        call.setdefault("text", None)
    results.put(
        {
            "window": window,
            "version": version,
            "rendering": rendering,
            "calls": double.calls,
            "forms": forms,
            "forbade": forbade,
            "maskings": maskings,
            "estimator": estimator,
        }
    )


def _share(calls: list[dict]) -> str:
    prompt = sum(call["prompt"] for call in calls)
    cached = sum(call["cached"] for call in calls)
    return f"{cached / prompt:6.1%}" if prompt else "     –"


def report(row: dict) -> None:
    calls = row["calls"]
    compactions = [call for call in calls if call["purpose"] == "compaction"]
    firsts = [call for call in calls if call["first_of_run"]]
    prefix = sum(1 for form in row["forms"] if form == "prefix")
    pairs, extended = boundaries(calls)
    print(
        f"{row['window']:>7,} | {row['version']:>7} | {row['rendering']:>9} | {len(calls):>5} | "
        f"{sum(call['prompt'] for call in calls):>9,} | {_share(calls)} | "
        f"{len(compactions):>11} | {prefix:>6} | {row['maskings']:>8} | {_share(compactions)} | "
        f"{_share(firsts)} | "
        f"{extended / max(pairs, 1):>7.1%} | {row['forbade'] / max(pairs, 1):>7.1%} | "
        + ", ".join(f"{c['cached'] / c['prompt']:.0%}" for c in compactions[:8])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--windows", default="16000,128000")
    parser.add_argument("--versions", default="2,3")
    parser.add_argument(
        "--renderings", default=None, help="rendering versions (default: the current one)"
    )
    parser.add_argument(
        "--provider",
        choices=("local", "openai"),
        default="openai",
        help="the connection's provider, for the estimator its budget is measured with: `openai` "
        "(gpt-4.1, o200k tokens) or `local` (the demo's JSON bytes)",
    )
    options = parser.parse_args()
    from agentloom.engine._rendering import CURRENT_RENDERING

    renderings = [int(r) for r in (options.renderings or str(CURRENT_RENDERING)).split(",")]
    context = multiprocessing.get_context("spawn")
    print(
        f"{'window':>7} | {'version':>7} | {'rendering':>9} | {'calls':>5} | {'prompt tk':>9} | "
        f"{'cached':>6} | {'compactions':>11} | {'prefix':>6} | {'maskings':>8} | {'compac.':>6} | "
        f"{'1st/run':>6} | {'extends':>7} | {'forbade':>7} | cached share of each compaction call"
    )
    for window in (int(w) for w in options.windows.split(",")):
        for version in (int(v) for v in options.versions.split(",")):
            for rendering in renderings:
                with tempfile.TemporaryDirectory() as scratch:
                    url = f"sqlite:///{scratch}/cache.sqlite3"
                    results = context.Queue()
                    process = context.Process(
                        target=run_combination,
                        args=(
                            url,
                            window,
                            version,
                            rendering,
                            options.turns,
                            options.provider,
                            results,
                        ),
                    )
                    process.start()
                    row = results.get()
                    process.join()
                    report(row)
    print(f"estimator: {json.dumps(row['estimator'])[:120]}")


if __name__ == "__main__":
    main()
