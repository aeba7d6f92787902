"""Benchmark what measuring and checking the payload as sent costs per request.

    python bench/payload.py

For views of 100 and 1,000 tool groups whose assistant messages carry reasoning (DeepSeek-made
history), it times one request's payload (`ModelGateway.payload`), the integrity gate and the
byte estimate of that payload, per provider, against the estimate of the stored view alone,
with a warm estimator (a run measures the same view again at every step).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentloom.engine import JsonBytesEstimator, ModelRequest, check_payload, sent_request
from agentloom.providers import DeepSeekChatGateway, ModelEndpoint, OpenAIChatGateway


def view(groups: int) -> list[dict]:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "question"}]
    for number in range(groups):
        call = {"id": f"c{number}", "type": "function"}
        call["function"] = {"name": "echo", "arguments": '{"text": "x"}'}
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "thinking " * 60,
                "tool_calls": [call],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"c{number}", "content": "r" * 2_000})
    return messages


def timed(action, repeat: int = 20) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    print(
        f"{'groups':>7} {'provider':<10} {'view only ms':>13} {'payload+gate ms':>16} {'ratio':>6}"
    )
    for groups in (100, 1_000):
        request = ModelRequest(purpose="action", messages=view(groups))
        for gateway in (
            DeepSeekChatGateway(ModelEndpoint("http://127.0.0.1:9/v1", "k", "m")),
            OpenAIChatGateway(ModelEndpoint("http://127.0.0.1:9/v1", "k", "m")),
        ):
            estimator = JsonBytesEstimator()
            estimator.estimate(request.messages, [])

            def sent(gateway=gateway, estimator=estimator, request=request):
                body = gateway.payload(request)
                check_payload(body, gateway.payload_rules, purpose="action", notes_placed=True)
                estimator.estimate(*sent_request(body))

            sent()
            alone = timed(lambda e=estimator, r=request: e.estimate(r.messages, []))
            both = timed(sent)
            print(
                f"{groups:>7} {gateway.provider:<10} {alone * 1000:>13.2f} {both * 1000:>16.2f} "
                f"{both / alone:>6.1f}"
            )


if __name__ == "__main__":
    main()
