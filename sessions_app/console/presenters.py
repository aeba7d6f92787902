"""What the console shows of the rows and dicts the views have read: records, the meter, costs.

Presenters take what the selectors returned and give back the dicts and strings the templates
print; they decide no access and write nothing. Formatting done in the templates themselves
(markdown, units, thousands) is in `sessions_app/templatetags/console_text.py`.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.utils import timezone
from django.utils.dateformat import format as format_date

from agentloom.engine import FEEDBACK_PREFIX, REASONING_KEY, message_text
from models_app.models import ModelConnection
from sessions_app.console.usage import stacked_bars
from sessions_app.models import ModelCall, Session, SessionMessage
from sessions_app.templatetags.console_text import unit_name

# Amounts of money a compaction spent and saved are shown to the prices' precision.
MONEY_PLACES = Decimal("1e-8")
# The cached-share table under its chart lists this many of the latest runs (the chart: all).
CACHE_TABLE_RUNS = 100
# View messages longer than this are shown collapsed on the context page.
LONG_MESSAGE_CHARS = 800
# A moment as the engine writes it into a note (ISO 8601 with its offset, microseconds and all).
ISO_MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
# Why a byte estimate's error against the provider's tokens is large, and no fault.
BYTES_ERROR_NOTE = (
    "expected, as the estimate counts bytes and a byte count runs several times a token count"
)


def pretty_arguments(raw: Any) -> str:
    """Return a tool call's arguments as indented JSON, or as the model wrote them."""
    if not isinstance(raw, str):
        return json.dumps(raw, indent=2, ensure_ascii=False)
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return raw  # shown as the model wrote it: malformed or absurdly deep arguments too


def present_record(item: dict[str, Any], call_names: dict[str, str]) -> dict[str, Any]:
    """Return what the pages show of one journal item; remember tool call names in `call_names`."""
    message = item.get("message") or {}
    shown = {**item, "text": message_text(message), "tool_calls": []}
    # The model's reasoning (DeepSeek's thinking mode), shown folded as "Thinking".
    reasoning = message.get(REASONING_KEY)
    shown["reasoning"] = reasoning if isinstance(reasoning, str) else ""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        name = str(function.get("name") or "?")
        call_names[str(call.get("id"))] = name
        shown["tool_calls"].append(
            {
                "id": call.get("id"),
                "name": name,
                "arguments": pretty_arguments(function.get("arguments")),
            }
        )
    if message.get("role") == "tool":
        call_id = str(message.get("tool_call_id"))
        shown["tool_call_id"] = call_id
        shown["tool_name"] = call_names.get(call_id, "tool")
        shown["identity"] = identity_text(message.get("detail"))
    if item["kind"] == SessionMessage.Kind.FEEDBACK:
        # The engine's note to the model; the pages show it as a notice, without its marker, and
        # the moment it names (an approval's) in the site's time zone.
        shown["text"] = local_moment(shown["text"].removeprefix(FEEDBACK_PREFIX))
    if item["kind"] == SessionMessage.Kind.STATUS:
        shown["status"] = message.get("status")
        shown["error"] = message.get("error") or ""
    shown["chars"] = len(shown["text"])
    return shown


def identity_text(detail: Any) -> str:
    """Return whose OAuth account a tool-server call acted as, from its result's detail ("" when
    the server takes no OAuth): the space's shared account is always said as such."""
    identity = detail.get("identity") if isinstance(detail, dict) else None
    if not isinstance(identity, dict):
        return ""
    if identity.get("kind") == "space":
        return f"as the space's shared account (connected by {identity.get('connected_by', '?')})"
    return f"as {identity.get('member', '?')}'s own account"


def journal_row(shown: dict[str, Any]) -> dict[str, Any]:
    """Return a presented record with its moment as the journal's timeline prints it, in the
    site's time zone: ISO 8601 (`moment_iso`) and to the second (`moment_text`).

    Written once here rather than by two `date` filters per row: a page holds up to 200 rows.
    """
    moment = timezone.localtime(shown["created_at"])
    shown["moment_iso"] = moment.isoformat()
    shown["moment_text"] = moment.strftime("%Y-%m-%d %H:%M:%S")
    return shown


def local_moment(text: str) -> str:
    """Return `text` with its first ISO 8601 moment in the site's time zone, to the second
    (2026-12-02 04:54:32 CET); the model reads the note as it was written."""

    def readable(match: re.Match) -> str:
        moment = timezone.localtime(datetime.fromisoformat(match[0]))
        return format_date(moment, "Y-m-d H:i:s T")

    return ISO_MOMENT.sub(readable, text, count=1)


def view_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Return the messages of a run's view as the context page lists them: numbered, long ones
    marked to be shown collapsed.
    """
    call_names: dict[str, str] = {}
    view = []
    for index, message in enumerate(messages, start=1):
        shown = present_record({"kind": "view", "message": message}, call_names)
        shown.update(
            index=index,
            role=message.get("role", ""),
            tool_call_id=message.get("tool_call_id"),
            long=shown["chars"] > LONG_MESSAGE_CHARS,
        )
        view.append(shown)
    return view


def with_marks(records: list[dict], marks: list[dict]) -> list[dict]:
    """Return the run's chat records with its compactions placed after the record each saw.

    One that saw no shown record (none yet, or only the question, which heads the block) comes
    first. Records fetched live get theirs from `chat_records`, placed by the same rule.
    """
    seqs = {record["seq"] for record in records}
    placed = [{"kind": "compaction", **mark} for mark in marks if mark["journal_seq"] not in seqs]
    for record in records:
        placed.append(record)
        placed.extend(
            {"kind": "compaction", **mark} for mark in marks if mark["journal_seq"] == record["seq"]
        )
    return placed


def tools_text(records: list[dict], *, waiting: str = "") -> str:
    """Return the run's tool call count, and which one runs (or waits, on `waiting`: approval
    or answers) now or ran last."""
    calls = [call for record in records for call in record.get("tool_calls") or []]
    if not calls:
        return "0"
    answered = sum(1 for record in records if record["kind"] == SessionMessage.Kind.TOOL_RESULT)
    if answered >= len(calls):
        state = "last:"
    else:
        state = f"waiting for {waiting}:" if waiting else "running"
    return f"{len(calls)} ({state} {calls[-1]['name']})"


def meter(context: dict[str, Any]) -> dict[str, Any]:
    """Return the context meter's numbers: sizes and their positions on one common scale.

    Every number is the run context's (`measure_context`), in one unit: the meter fills against
    the ceiling, which is the effective budget, or the character threshold of a legacy version.
    """
    ceiling = context["ceiling"]
    scale = max(ceiling, context["estimate"], context["trigger_at"], 1)

    def percent(value: int) -> float:
        return round(100 * value / scale, 2)

    estimate = context["estimate"]
    return {
        **context,
        "fill": percent(estimate),
        "trigger_pos": percent(context["trigger_at"]),
        "target_pos": percent(context["target_at"]),
        "budget_pos": percent(ceiling),
        "share": share_text(estimate, ceiling),
        "level": "over"
        if estimate > ceiling
        else "high"
        if estimate >= context["trigger_at"]
        else "ok",
        "compaction_count": len(context["compactions"]),
        # The last answered call reported no usage: said so, not shown as an older call's.
        "last_unreported": bool(context.get("last_call_unreported")),
        "last_reported": (
            None
            if context.get("last_call_unreported")
            else _last_reported(context.get("last_reported"))
        ),
    }


def share_text(estimate: int, ceiling: int) -> str:
    """Return the estimate's share of the ceiling in whole percent; "<1" for a visible sliver,
    so the meter never says 0% beside a fill.
    """
    share = 100 * estimate / max(ceiling, 1)
    return "<1" if 0 < share < 1 else str(round(share))


def _last_reported(reported: dict[str, Any] | None) -> dict | None:
    """Return the last reported call: its own estimate and error, side by side."""
    if reported is None:
        return None
    unit = unit_name(
        calibrated=reported.get("calibrated", False), estimator=reported.get("estimator") or ""
    )
    return {
        **reported,
        "error_percent": signed_percent(reported["estimate_error"]),
        "error_note": estimate_error_note(unit),
        "unit": unit,
    }


def estimate_error_note(unit: str) -> str:
    """Return what an estimate's error means when it is no fault (bytes against tokens), or ""."""
    return BYTES_ERROR_NOTE if unit == "bytes" else ""


def signed_percent(fraction: float | None) -> str | None:
    """Return a fraction as a signed percentage with one decimal (+12.5), None for none."""
    return None if fraction is None else f"{100 * fraction:+,.1f}"


def binding(session: Session) -> dict[str, Any]:
    """Return the agent version the session is bound to and the model it froze."""
    version = session.agent_version
    budget = version.snapshot.get("budget") or {}
    connection = version.model_connection
    return {
        "agent": session.agent,
        "version": version,
        "connection": connection,
        "provider": budget.get("provider") or (connection.provider if connection else ""),
        "model_id": budget.get("model_id") or (connection.model_id if connection else ""),
        "context_window": budget.get("context_window"),
        "is_demo": (budget.get("provider") or "") == ModelConnection.Provider.LOCAL,
        "legacy_policy": version.snapshot.get("context_policy") is None,
    }


# --- model calls and costs -----------------------------------------------------------------------


def model_call(call) -> dict[str, Any]:
    """Return one model call as the context page's table shows it."""
    unreported = call.usage_unreported
    return {
        "call": call,
        "unreported": unreported,
        "usage": call.NO_USAGE if unreported else usage_text(call.usage),
        "error": signed_percent(call.estimate_error),
        "error_note": estimate_error_note(
            unit_name(calibrated=bool(call.calibration), estimator=call.estimator)
        ),
        "cached": cached_text(call),
        "cost": "unknown (no usage reported)" if unreported else call_cost_text(call),
    }


def usage_text(usage: Any) -> str:
    """Return the token usage a provider reported, as `prompt / completion / total` if it can."""
    if not isinstance(usage, dict) or not usage:
        return "–"
    names = ("prompt_tokens", "completion_tokens", "total_tokens")
    if all(isinstance(usage.get(name), int) for name in names):
        return " / ".join(f"{usage[name]:,}" for name in names)
    # Other shapes are shown as reported, minus nested details.
    return ", ".join(
        f"{key} {value}" for key, value in usage.items() if isinstance(value, int | float | str)
    )


def cached_text(call) -> str | None:
    """Return the provider tokens a call read from the prompt cache, with their share."""
    if not call.cached_tokens or not call.reported_prompt_tokens:
        return None
    share = round(100 * call.cached_tokens / call.reported_prompt_tokens)
    return f"{call.cached_tokens:,} provider tokens ({share}%)"


def cached_share(calls) -> int | None:
    """Return the share of the run's reported input tokens that came from the prompt cache."""
    reported = sum(call.reported_prompt_tokens or 0 for call in calls)
    if not reported:
        return None
    return round(100 * sum(call.cached_tokens or 0 for call in calls) / reported)


def cost_text(amount, currency: str) -> str | None:
    """Return `amount currency` written out in full, or None when the cost is unknown."""
    if amount is None:
        return None
    return f"{format(amount.normalize(), 'f')} {currency}"


def call_cost_text(call) -> str | None:
    """Return a call's cost, with the band of a time-of-day price or `manual` prices named."""
    text = cost_text(call.cost, call.price_currency)
    if text is None:
        return None
    notes = [call.price_band.replace("_", "-")] if call.price_band else []
    if call.price_source == "manual":
        notes.append("manual prices")
    return f"{text} ({', '.join(notes)})" if notes else text


def cost_summary_text(summary: dict | None) -> dict | None:
    """Return a cost summary as the Context page shows it (None: no cost is known)."""
    if summary is None:
        return None
    return {
        "text": cost_text(summary["amount"], summary["currency"]),
        "dates": ", ".join(day.isoformat() for day in summary["price_date"]),
        "complete": summary["complete"],
        "unpriced": summary["unpriced_calls"],
    }


def compaction_money(items: list[dict[str, Any]], unit: str) -> list[dict[str, Any]]:
    """Return the compaction items with what each spent, saved and netted written out.

    Money where the calls' prices are known (`at least` where some call's is not), else the
    tokens; a call without usage is said so, never counted as zero. `unit` names the unit of
    `saved` (the policy's).
    """
    for item in items:
        item["spent_text"] = _spent_text(item)
        item["saved_text"] = _saved_text(item, unit)
        net = item.get("net")
        item["net_text"] = _money_text(net) if net else None
        runs = item.get("saved_runs")
        item["saved_runs_text"] = (
            None
            if not runs
            else f"run #{runs[0]}"
            if runs[0] == runs[1]
            else f"runs #{runs[0]}–#{runs[1]}"
        )
    return items


def _spent_text(item: dict[str, Any]) -> str:
    spent, money = item.get("spent"), item.get("spent_cost")
    if not item.get("calls"):
        return "no call"
    if money is not None:
        return ("" if money["complete"] else "at least ") + _money_text(money)
    if not spent:
        return "–"
    if spent.get("unreported") == item["calls"]:
        return ModelCall.NO_USAGE
    text = f"{spent['prompt_tokens']:,} tokens in ({spent['cached_tokens']:,} cached)"
    unreported = spent.get("unreported")
    if unreported:
        text += f", {unreported} call{'s' if unreported > 1 else ''} without usage"
    return text


def _saved_text(item: dict[str, Any], unit: str) -> str:
    saved, money = item.get("saved"), item.get("saved_cost")
    if saved is None:
        return "–"
    units = f"{saved:,} {unit}"
    if money is None:
        return units
    return ("" if money["complete"] else "at least ") + f"{_money_text(money)} ({units})"


def _money_text(money: dict[str, Any]) -> str:
    """Return an amount to the prices' own precision (8 decimal places): a saving valued per
    unit of a request's size has as many digits as a division gives."""
    return cost_text(money["amount"].quantize(MONEY_PLACES), money["currency"])


def cached_share_chart(series: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the Context page's chart of the session's cached share, one bar per run (the
    usage page's SVG bars, on a fixed scale of 100%); a run without reported usage is drawn
    as unknown, not zero."""
    items = [
        {
            **row,
            "percent": None if row["share"] is None else round(100 * row["share"], 1),
            "compaction_percent": None
            if row["compaction_share"] is None
            else round(100 * row["compaction_share"], 1),
        }
        for row in series
    ]
    chart = stacked_bars(
        items,
        ("percent",),
        label=lambda item: f"Run #{item['number']}",
        title=lambda label, part, value: f"{label}: {value}% of prompt tokens cached",
        top=100,
    )
    # The table lists the latest runs only: a row costs the page far more than a bar does.
    return {**chart, "runs": items[-CACHE_TABLE_RUNS:], "run_count": len(items)}
