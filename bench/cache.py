"""Benchmark how much of a session's prompt a provider could serve from its prompt cache.

    .venv/bin/python bench/cache.py
    .venv/bin/python bench/cache.py --turns 10 --windows 16000 --versions 3   # smoke run
    .venv/bin/python bench/cache.py --versions 3 --renderings 4,5   # before and after rendering 5
    .venv/bin/python bench/cache.py --versions 4,5 --provider local  # masking in batches
    .venv/bin/python bench/cache.py --provider deepseek --turns 40,200 --versions 5
    .venv/bin/python bench/cache.py --windows 16000 --versions 5 --breakdown \
        --policies 0.8/0.6,0.8/0.4,0.9/0.5                          # the policy sweep

One session of the peer workload (`bench/peer.py`: each turn a question, one `echo` call with a
2,000-character result, then a 300-character answer; a compaction request gets a ~1,500-character
summary) runs for each of `--turns` questions on SQLite, once per compaction version, window and
policy, on a connection of `--provider`:

- `openai`: gpt-4.1, its budget measured in o200k tokens, behind a prompt-cache double with
  OpenAI's rule (the longest prefix shared with any earlier request, in whole blocks of 128
  tokens from 1,024);
- `deepseek`: deepseek-v4-flash in thinking mode (every reply carries 200 characters of
  `reasoning_content`, passed back on tool spans as the DeepSeek gateway sends it), measured in
  DeepSeek V4 tokens, behind a double with DeepSeek's unit rule (a hit is a whole "cache prefix
  unit"; units at the end of each request's input and output, at prefixes common to earlier
  requests, and every `--interval` tokens: the interval is an assumption, DeepSeek's guide gives
  no number);
- `local`: the demo's JSON bytes, where a "16,000" window holds about a quarter as much text, on
  OpenAI's rule.

Both rules, what DeepSeek's guide states and what the double assumes, are in
`tests/support/prompt_cache.py`. A request's prompt is its tool schemas, then its messages, as
the provider's gateway sends them (its `payload`); tokens are counted with the connection's
tokenizer. Nothing is evicted, so the figures are the ceiling the requests allow, not what a
provider guarantees.

Per combination (turns, window, compaction version, rendering version, policy) it prints the
prompt tokens and the cached share of all calls, of compaction calls and of each run's first call,
the compaction calls (and how many summaries were made on the conversation's prefix), the
maskings applied (masking stages kept, alone or before a summary), at the run boundaries the
share where the next run's first request starts, byte for byte, with the last request of the run
before it (`extends`) and the share where the view rule forbade starting from the previous run's
final view (`forbade`: the run's last compaction made a summary, or from compaction version 5 a
masking, that was not saved as a reusable view, so the next run projects the journal instead),
and per compaction call the share that was cached. Then the cost per turn at the manifest's
prices of each model of the provider measured with the same tokenizer (cached input at its
cached price; DeepSeek's at peak and off-peak), and with `--breakdown` where the uncached tokens
go: each action request against the one before it (it extends it, it is the first after a
summary, or it rewrites it: a masking or a changed rendering), and the compaction calls.

`--policies` sweeps the context policy: `trigger/target[/batch]` sets `context_ratio`,
`target_ratio` and optionally `mask_batch_ratio` of the agent's policy (`default`: as published).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import multiprocessing
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peer import PeerGateway, _exact, _peer_session, _setup_django

from agentloom.engine import ModelGateway
from tests.support.prompt_cache import DeepSeekUnitCache, OpenAIPrefixCache

# Characters of reasoning on every DeepSeek reply (thinking mode is DeepSeek's default).
REASONING_CHARS = 200
# Each provider's connection: model, estimator, and the official endpoint its gateway body is
# built for (never called: the double answers).
CONNECTIONS = {
    "local": ("local-demo", "bytes", ""),
    "openai": ("gpt-4.1", "o200k", "https://api.openai.com/v1"),
    "deepseek": ("deepseek-v4-flash", "deepseek", "https://api.deepseek.com"),
}


def _counter(estimator: str):
    from agentloom.engine import _estimators

    if estimator == "deepseek":
        return _estimators._deepseek_counter()
    if estimator == "o200k":
        return _estimators._o200k_counter()
    return lambda text: len(text.encode())


def _part(value) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _shared_tokens(cache, a: list[str], b: list[str]) -> int:
    """Return the tokens of the longest common prefix of two prompts (lists of parts)."""
    whole = 0
    while whole < min(len(a), len(b)) and a[whole] == b[whole]:
        whole += 1
    tail = ""
    if whole < min(len(a), len(b)):
        tail = a[whole][: len(os.path.commonprefix([a[whole], b[whole]]))]  # noqa: RUF071
    return cache.prompts.tokens(a, whole, tail)


class CacheDouble(ModelGateway):
    """The peer model behind a provider's gateway body and a prompt-cache rule: records each
    call's prompt, cached and output tokens and how its prompt relates to the one before."""

    provider, model_id = "bench", "cache-double"

    def __init__(self, gateway: ModelGateway, cache, count, reasoning: bool):
        self.gateway = gateway
        self.payload_rules = gateway.payload_rules
        self.cache = cache
        self.count = count
        self.reasoning = reasoning
        self.model = PeerGateway()
        self.calls: list[dict] = []
        self.last_action: list[str] | None = None
        self.last_compaction: list[str] | None = None

    def payload(self, request):
        return self.gateway.payload(request)

    def _reply(self, request):
        reply = self.model.complete(request)
        if not self.reasoning:
            return reply
        thought = _exact(f"Thinking about {request.purpose}.", REASONING_CHARS)
        return dataclasses.replace(reply, message={**reply.message, "reasoning_content": thought})

    def _output_tokens(self, message: dict) -> int:
        calls = message.get("tool_calls") or []
        texts = [message.get("content") or "", message.get("reasoning_content") or ""]
        texts += [c["function"]["name"] + c["function"]["arguments"] for c in calls]
        return sum(self.count(text) for text in texts if text)

    def complete(self, request):
        body = self.payload(request)
        parts = [_part(body.get("tools") or [])] + [_part(m) for m in body["messages"]]
        reply = self._reply(request)
        # The reply as later requests send it back: the last message of the next body.
        later = dataclasses.replace(request, messages=[*request.messages, reply.message])
        output = _part(self.payload(later)["messages"][-1])
        served = self.cache.serve(parts, output)
        last = body["messages"][-1] if body["messages"] else {}
        call = {
            "purpose": request.purpose,
            "prompt": served.prompt,
            "cached": served.cached,
            "output": self._output_tokens(reply.message),
            "first_of_run": request.purpose == "action" and last.get("role") == "user",
        }
        if request.purpose == "compaction":
            self.last_compaction = parts
        elif request.purpose == "action":
            call.update(self._relation(parts))
            self.last_action, self.last_compaction = parts, None
        self.calls.append(call)
        return reply

    def _relation(self, parts: list[str]) -> dict:
        """Return how an action prompt relates to the action request before it, and the keys
        that tell whether a later prompt starts with it."""
        keys = self.cache.prompts.keys(parts)
        before = self.last_action
        if before is None:
            kind = "first"
        elif parts[: len(before)] == before:
            kind = "extends"
        elif self.last_compaction is not None:
            kind = "after summary"
        else:
            kind = "rewrites"
        relation = {"kind": kind, "keys": keys}
        if kind == "after summary":
            relation["summary_shared"] = _shared_tokens(self.cache, parts, self.last_compaction)
        return relation


def boundaries(calls: list[dict]) -> tuple[int, int]:
    """Return (run boundaries, those where the next run's first request starts with the last
    action request of the run before it, tools included)."""
    runs: list[list[dict]] = []
    for call in calls:
        if call["first_of_run"]:
            runs.append([])
        if runs and "keys" in call:
            runs[-1].append(call)
    pairs = list(itertools.pairwise(runs))

    def starts_with(b: list[int], a: list[int]) -> bool:
        return len(b) >= len(a) and b[len(a) - 1] == a[-1]

    return len(pairs), sum(1 for a, b in pairs if starts_with(b[0]["keys"], a[-1]["keys"]))


def _policy(text: str) -> dict:
    """Return the policy changes `trigger/target[/batch]` names (`default`: none)."""
    if text == "default":
        return {}
    names = ("context_ratio", "target_ratio", "mask_batch_ratio")
    values = text.split("/")
    if not 2 <= len(values) <= 3:
        raise argparse.ArgumentTypeError(f"--policies: {text!r} is not trigger/target[/batch]")
    from agentloom.engine import ConfigurationError, ContextPolicy

    try:
        changes = {name: float(value) for name, value in zip(names, values, strict=False)}
        ContextPolicy.from_dict(changes)
    except ValueError:
        problem = f"--policies: {text!r} holds a value that is no number"
        raise argparse.ArgumentTypeError(problem) from None
    except ConfigurationError as error:
        problem = f"--policies: {text!r}: {error.field} {error.message}"
        raise argparse.ArgumentTypeError(problem) from None
    return changes


def _session(window: int, provider: str, policy: dict):
    from context_app.services.agents import agent_publish, agent_update
    from sessions_app.services.runs import session_create

    model, estimator, _ = CONNECTIONS[provider]
    user, session = _peer_session(window, provider=provider, model_id=model, estimator=estimator)
    if policy:
        agent = session.agent_version.agent
        agent_update(user=user, agent=agent, context_policy={**agent.context_policy, **policy})
        session = session_create(user=user, agent_version=agent_publish(user=user, agent=agent))
    return user, session


def run_combination(url: str, combination: dict, options: dict, results) -> None:
    """Drive one session of `combination` (turns, window, version, rendering, policy); put its
    figures on `results`."""
    _setup_django(url)
    from django.core.management import call_command

    import agentloom.engine._compaction_versions as versions
    import agentloom.engine._rendering as renderings
    from agentloom.providers import ModelEndpoint, gateway_for_provider
    from context_app import engine_adapter
    from sessions_app.models import Run, SessionView
    from sessions_app.services import runs
    from sessions_app.services.execution import run_execute
    from sessions_app.services.runs import run_ask

    call_command("migrate", verbosity=0)
    version, rendering = combination["version"], combination["rendering"]
    versions.CURRENT_COMPACTION = version
    renderings.CURRENT_RENDERING = rendering
    runs._enqueue = lambda run: None
    provider = options["provider"]
    model, estimator_name, base_url = CONNECTIONS[provider]
    count = _counter(estimator_name)
    if provider == "deepseek":
        cache = DeepSeekUnitCache(count, options["interval"])
    else:
        cache = OpenAIPrefixCache(count)
    if provider == "local":
        gateway = PeerGateway()
    else:
        gateway = gateway_for_provider(provider, ModelEndpoint(base_url, None, model))
    double = CacheDouble(gateway, cache, count, reasoning=provider == "deepseek")
    engine_adapter.set_gateway_factory(lambda version, connection: double)
    user, session = _session(combination["window"], provider, combination["policy"])
    estimator = session.agent_version.snapshot.get("estimator")
    forms: list[str] = []
    forbade = maskings = 0
    turns = combination["turns"]
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
    results.put(
        {
            **combination,
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


def _label(row: dict) -> str:
    policy = "/".join(f"{value:g}" for value in row["policy"].values()) or "default"
    return (
        f"{row['turns']:>5} | {row['window']:>7,} | {row['version']:>7} | "
        f"{row['rendering']:>9} | {policy:>11}"
    )


def report(row: dict) -> None:
    calls = row["calls"]
    compactions = [call for call in calls if call["purpose"] == "compaction"]
    firsts = [call for call in calls if call["first_of_run"]]
    prefix = sum(1 for form in row["forms"] if form == "prefix")
    pairs, extended = boundaries(calls)
    print(
        f"{_label(row)} | {len(calls):>5} | "
        f"{sum(call['prompt'] for call in calls):>10,} | {_share(calls)} | "
        f"{len(compactions):>11} | {prefix:>6} | {row['maskings']:>8} | {_share(compactions)} | "
        f"{_share(firsts)} | "
        f"{extended / max(pairs, 1):>7.1%} | {row['forbade'] / max(pairs, 1):>7.1%} | "
        + ", ".join(f"{c['cached'] / c['prompt']:.0%}" for c in compactions[:8])
    )


def priced_models(provider: str) -> list[tuple[str, object]]:
    """Return (label, prices) of each manifest model of `provider` counted with the session's
    tokenizer: its listed prices, or its latest peak and off-peak prices."""
    from agentloom.providers.manifest import load_manifest

    tokenizer = CONNECTIONS[provider][1]
    found = []
    for (listed, model), entry in sorted(load_manifest().entries.items()):
        if listed != provider or entry.tokenizer != tokenizer or not entry.chat:
            continue
        if entry.prices is not None and entry.prices.cached_input is not None:
            found.append((model, entry.prices))
        elif entry.price_periods:
            period = entry.price_periods[-1]
            found += [(f"{model} peak", period.peak), (f"{model} off-peak", period.off_peak)]
    return found


def cost_per_turn(row: dict, prices) -> float | None:
    """Return the session's cost per question at `prices` (cached input at its cached price),
    or None when a call has none (a prompt above the prices' `max_prompt_tokens`)."""
    from agentloom.providers.pricing import call_cost

    costs = [
        call_cost(
            prices,
            prompt_tokens=call["prompt"],
            cached_tokens=call["cached"],
            completion_tokens=call["output"],
        )
        for call in row["calls"]
    ]
    if any(cost is None for cost in costs):
        return None
    return float(sum(costs)) / row["turns"]


def _money(cost: float | None) -> str:
    return f"{cost:>22.6f}" if cost is not None else f"{'– (no price)':>22}"


def report_costs(rows: list[dict], provider: str) -> None:
    models = priced_models(provider)
    if not models:
        print(f"\nno manifest prices for a {provider} model counted with this tokenizer")
        return
    print(
        f"\ncost per turn, USD (manifest prices; cached input at its cached price; "
        f"tokens of the session's tokenizer; no price: a prompt above the prices' limit)\n"
        f"{'turns':>5} | {'window':>7} | {'version':>7} | {'rendering':>9} | {'policy':>11} | "
        f"{'compactions':>11} | " + " | ".join(f"{label:>22}" for label, _ in models)
    )
    for row in rows:
        compactions = sum(1 for call in row["calls"] if call["purpose"] == "compaction")
        print(
            f"{_label(row)} | {compactions:>11} | "
            + " | ".join(_money(cost_per_turn(row, prices)) for _, prices in models)
        )


def report_breakdown(rows: list[dict]) -> None:
    """Print where each session's uncached prompt tokens go."""
    kinds = ("first", "extends", "rewrites", "after summary", "compaction")
    print(
        "\nuncached prompt tokens by request (each action request against the one before it)\n"
        f"{'turns':>5} | {'window':>7} | {'version':>7} | {'rendering':>9} | {'policy':>11} | "
        + " | ".join(f"{kind:>24}" for kind in kinds)
        + " | after summary: shared with its summary call / its prompt"
    )
    for row in rows:
        calls, uncached = Counter(), Counter()
        total = sum(call["prompt"] - call["cached"] for call in row["calls"])
        for call in row["calls"]:
            kind = call.get("kind", call["purpose"])
            calls[kind] += 1
            uncached[kind] += call["prompt"] - call["cached"]
        after = [call for call in row["calls"] if call.get("kind") == "after summary"]
        shared = sum(call["summary_shared"] for call in after)
        prompt = sum(call["prompt"] for call in after)
        print(
            f"{_label(row)} | "
            + " | ".join(
                f"{calls[kind]:>4} {uncached[kind]:>8,} ({uncached[kind] / max(total, 1):>5.1%})"
                for kind in kinds
            )
            + f" | {shared:,} / {prompt:,} tokens"
        )


def _int_list(text: str) -> list[int]:
    return [int(value) for value in text.split(",")]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=_int_list, default=[40], help="e.g. 40,200")
    parser.add_argument("--windows", type=_int_list, default=[16_000, 128_000])
    parser.add_argument("--versions", type=_int_list, default=[2, 3])
    parser.add_argument(
        "--renderings", type=_int_list, default=None, help="rendering versions (default: current)"
    )
    parser.add_argument(
        "--provider",
        choices=tuple(CONNECTIONS),
        default="openai",
        help="the connection's provider: `openai` (gpt-4.1, o200k tokens, OpenAI's prefix rule), "
        "`deepseek` (deepseek-v4-flash, DeepSeek tokens, DeepSeek's unit rule) or `local` (the "
        "demo's JSON bytes, OpenAI's rule)",
    )
    parser.add_argument(
        "--interval",
        type=int,
        default=1_024,
        help="tokens between the units DeepSeek persists inside long inputs (assumed)",
    )
    parser.add_argument(
        "--policies",
        type=lambda text: [_policy(item) for item in text.split(",")],
        default=[{}],
        help="context policies to sweep, each trigger/target[/batch] or `default`",
    )
    parser.add_argument(
        "--breakdown", action="store_true", help="print where the uncached tokens go"
    )
    options = parser.parse_args()
    if options.interval < 1:
        parser.error("--interval: must be a positive number of tokens")
    return options


def main() -> None:
    options = _arguments()
    from agentloom.engine._rendering import CURRENT_RENDERING

    renderings = options.renderings or [CURRENT_RENDERING]
    context = multiprocessing.get_context("spawn")
    print(
        f"{'turns':>5} | {'window':>7} | {'version':>7} | {'rendering':>9} | {'policy':>11} | "
        f"{'calls':>5} | {'prompt tk':>10} | {'cached':>6} | {'compactions':>11} | "
        f"{'prefix':>6} | {'maskings':>8} | {'compac.':>6} | {'1st/run':>6} | {'extends':>7} | "
        f"{'forbade':>7} | cached share of each compaction call"
    )
    rows = []
    combinations = itertools.product(
        options.turns, options.windows, options.versions, renderings, options.policies
    )
    settings = {"provider": options.provider, "interval": options.interval}
    for turns, window, version, rendering, policy in combinations:
        combination = {
            "turns": turns,
            "window": window,
            "version": version,
            "rendering": rendering,
            "policy": policy,
        }
        with tempfile.TemporaryDirectory() as scratch:
            results = context.Queue()
            process = context.Process(
                target=run_combination,
                args=(f"sqlite:///{scratch}/cache.sqlite3", combination, settings, results),
            )
            process.start()
            row = results.get()
            process.join()
        report(row)
        rows.append(row)
    report_costs(rows, options.provider)
    if options.breakdown:
        report_breakdown(rows)
    print(f"estimator: {json.dumps(rows[-1]['estimator'])[:120]}")


if __name__ == "__main__":
    main()
