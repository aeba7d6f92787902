"""Shapes of sessions, runs, the journal, views, model calls and run context in the REST API."""

from __future__ import annotations

import json
import re
from decimal import Decimal

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agentloom.api import (
    MAX_ID,
    FlagField,
    QueryIntegerField,
    QueryPositionField,
    StrictSerializer,
    TextField,
    WholeNumberField,
    id_field,
)
from agentloom.engine import ANSWER_ACTIONS
from agentloom.spaces.services.retention import MAX_RETENTION_DAYS
from sessions_app.models import ModelCall, Run, SessionMessage
from sessions_app.selectors.approvals import undecided
from sessions_app.selectors.costs import call_cost_of, run_cost, session_cost
from sessions_app.selectors.journal import JOURNAL_LIMIT_DEFAULT, JOURNAL_LIMIT_MAX
from sessions_app.selectors.questions import unanswered
from sessions_app.selectors.runs import model_call_in_flight, run_counters
from sessions_app.selectors.views import Derivation
from sessions_app.services.approvals import MAX_NOTE_CHARS
from sessions_app.services.export import EXPORT_FORMATS
from sessions_app.services.runs import MAX_QUESTION_CHARS, MAX_SUPPLEMENT_CHARS

# `main`, or a child instance id such as `1.1` (ASCII digits only).
INSTANCE_PATTERN = r"^(main|[0-9]+\.[0-9]+)$"


class AmountField(serializers.Field):
    """A decimal amount written out in full as a string (never a float, never an exponent)."""

    def to_representation(self, value: Decimal) -> str:
        return format(value.normalize(), "f")


extend_schema_field({"type": "string", "format": "decimal", "example": "0.00123"})(AmountField)


class CallCostSerializer(serializers.Serializer):
    amount = AmountField(help_text="What the call cost, from its reported usage.")
    currency = serializers.CharField(help_text="ISO 4217 code, such as `USD`.")
    price_date = serializers.DateField(
        help_text="When the prices the call was billed at were read from their source."
    )
    price_source = serializers.CharField(
        allow_null=True,
        help_text="Where the prices were read (the official price page), or `manual` for "
        "prices an operator entered on the connection (then `price_date` is when).",
    )
    price_band = serializers.CharField(
        allow_null=True,
        help_text="`peak` or `off_peak` for prices that depend on the time of the call's start.",
    )


class CostSummarySerializer(serializers.Serializer):
    amount = AmountField(help_text="The sum of the known call costs.")
    currency = serializers.CharField(help_text="ISO 4217 code, such as `USD`.")
    price_date = serializers.ListField(
        child=serializers.DateField(), help_text="The source dates of the prices used."
    )
    calls = serializers.IntegerField(help_text="Model calls counted, discarded ones included.")
    unpriced_calls = serializers.IntegerField(
        help_text="Calls without a known cost (no price or no usage); not in `amount`."
    )
    complete = serializers.BooleanField(
        help_text="False when some calls have no known cost: `amount` is then a lower bound."
    )


_COST_HELP = "Null when no call has a known cost (prices unknown): never an estimate."


class SessionSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    space = serializers.IntegerField(source="space_id")
    agent = serializers.IntegerField(source="agent_id")
    agent_version = serializers.IntegerField(source="agent_version_id")
    title = serializers.CharField()
    pinned = serializers.CharField(
        help_text="Instructions pinned to the session: every run asked since carries them word "
        "for word after the system prompt (empty: none)."
    )
    created_at = serializers.DateTimeField()
    cost = serializers.SerializerMethodField(help_text=_COST_HELP)

    @extend_schema_field(CostSummarySerializer(allow_null=True))
    def get_cost(self, session) -> dict | None:
        cost = session_cost(session)
        return CostSummarySerializer(cost).data if cost is not None else None


class SessionCreateSerializer(StrictSerializer):
    agent_version = id_field(required=False, help_text="A published version to talk to.")
    agent = id_field(required=False, help_text="An agent: its latest published version is used.")
    title = TextField(max_length=200, required=False, allow_blank=True, single_line=True)

    required_any_of = (("agent_version",), ("agent",))

    def validate(self, attrs):
        if "agent_version" not in attrs and "agent" not in attrs:
            raise serializers.ValidationError(
                {"agent_version": ["Give agent_version, or agent for its latest version."]}
            )
        return attrs


class CountersSerializer(serializers.Serializer):
    user_turns = serializers.IntegerField()
    model_steps = serializers.IntegerField()
    baseline_user_turns = serializers.IntegerField()
    baseline_model_steps = serializers.IntegerField()


class PendingApprovalSerializer(serializers.Serializer):
    call_id = serializers.CharField()
    tool = serializers.CharField()
    arguments = serializers.CharField(help_text="The call's arguments as the model sent them.")


class QuestionFieldSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.ChoiceField(choices=["string", "number", "integer", "boolean", "enum"])
    title = serializers.CharField(allow_blank=True)
    description = serializers.CharField(allow_blank=True)
    required = serializers.BooleanField()
    options = serializers.ListField(child=serializers.CharField(), required=False)
    default = serializers.JSONField(required=False)


class PendingQuestionSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="The server's key of the question: answer by it.")
    call_id = serializers.CharField()
    tool = serializers.CharField()
    server = serializers.CharField(help_text="The tool server that asks.")
    mode = serializers.ChoiceField(
        choices=["form", "url"],
        help_text="`form`: answer with `content` of its `fields`; `url`: accept only after "
        "confirming the URL, shown whole.",
    )
    message = serializers.CharField(help_text="The server's own text: show it escaped.")
    fields = QuestionFieldSerializer(many=True, required=False)
    url = serializers.CharField(required=False)
    unsupported = serializers.CharField(
        allow_blank=True,
        help_text="Why the question cannot be answered here (it can be declined or cancelled).",
    )
    deadline = serializers.DateTimeField(
        required=False,
        help_text="Asked during an open call (2025 revisions): the answer must come before "
        "it, or the question is declined.",
    )


class RunSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    session = serializers.IntegerField(source="session_id")
    number = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Run.Status.choices)
    question = serializers.CharField()
    answer = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_blank=True)
    cancel_requested = serializers.BooleanField(
        help_text="True once cancelling was asked for; a running run stays `running` until its "
        "next safe point, then ends `cancelled`."
    )
    attempt = serializers.IntegerField()
    trace_id = serializers.CharField(
        allow_blank=True,
        help_text="The OpenTelemetry trace of the run's latest execution (32 hex digits) when "
        "tracing is on; empty otherwise.",
    )
    counters = serializers.SerializerMethodField()
    model_call_in_flight = serializers.SerializerMethodField(
        help_text="True while the run is running and its next step is a model call: its latest "
        "record is not yet answered by the model."
    )
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    cost = serializers.SerializerMethodField(help_text=_COST_HELP)
    pending_approvals = serializers.SerializerMethodField(
        help_text="While `waiting_approval`: each tool call still waiting for the session "
        "creator's decision."
    )

    pending_questions = serializers.SerializerMethodField(
        help_text="While `waiting_input`, or while a call of the running run asks: each "
        "question of a tool server still waiting for the session creator's answer."
    )

    @extend_schema_field(PendingQuestionSerializer(many=True))
    def get_pending_questions(self, run: Run) -> list[dict]:
        return PendingQuestionSerializer(unanswered(run), many=True).data

    @extend_schema_field(PendingApprovalSerializer(many=True))
    def get_pending_approvals(self, run: Run) -> list[dict]:
        if run.status != Run.Status.WAITING_APPROVAL:
            return []
        return PendingApprovalSerializer(undecided(run), many=True).data

    @extend_schema_field(CountersSerializer)
    def get_counters(self, run: Run) -> dict[str, int]:
        return run_counters(run)

    def get_model_call_in_flight(self, run: Run) -> bool:
        return model_call_in_flight(run)

    @extend_schema_field(CostSummarySerializer(allow_null=True))
    def get_cost(self, run: Run) -> dict | None:
        if self.context.get("just_asked"):
            # A run this request created has made no call yet: nothing to read.
            return None
        cost = run_cost(run)
        return CostSummarySerializer(cost).data if cost is not None else None


class ApprovalDecisionSerializer(StrictSerializer):
    call_id = TextField(max_length=200)
    decision = serializers.ChoiceField(choices=["approve", "deny"])
    note = TextField(max_length=MAX_NOTE_CHARS, required=False, allow_blank=True)


class AnswerSerializer(StrictSerializer):
    key = TextField(max_length=200)
    action = serializers.ChoiceField(choices=list(ANSWER_ACTIONS))
    content = serializers.DictField(
        required=False,
        help_text="With `accept` of a form: its fields' values (strings, numbers, booleans, "
        "one of an enum's options).",
    )
    url_confirmed = serializers.BooleanField(
        required=False,
        default=False,
        help_text="With `accept` of a URL question: the person confirmed the URL, shown whole.",
    )


class QuestionSerializer(StrictSerializer):
    question = TextField(max_length=MAX_QUESTION_CHARS)


class SupplementCreateSerializer(StrictSerializer):
    text = TextField(max_length=MAX_SUPPLEMENT_CHARS)


class PinSerializer(StrictSerializer):
    text = TextField(
        max_length=8_000,
        allow_blank=True,
        help_text="The instructions to pin (blank unpins).",
    )


class ForkSerializer(StrictSerializer):
    seq = serializers.IntegerField(
        min_value=1, max_value=2**62, help_text="The journal record the fork's copy ends with."
    )


class RetentionSerializer(serializers.Serializer):
    space = serializers.IntegerField()
    retention_days = serializers.IntegerField(
        help_text="Sessions are deleted this many days after their last run; 0: kept."
    )
    set_by = serializers.CharField(
        allow_null=True, help_text="The username of the admin who set the rule (null: never set)."
    )
    set_at = serializers.DateTimeField(allow_null=True)
    would_remove = serializers.IntegerField(
        allow_null=True,
        help_text="How many sessions the rule removes now: those the next hourly pass deletes "
        "(for a dry run, those the proposed rule would delete). Space admins only; null for a "
        "member.",
    )
    dry_run = serializers.BooleanField(
        help_text="True when nothing was saved: `retention_days` is the proposed rule."
    )


class RetentionSetSerializer(StrictSerializer):
    retention_days = WholeNumberField(
        min_value=0,
        max_value=MAX_RETENTION_DAYS,
        help_text="Delete the space's sessions this many days after their last run; 0 keeps them.",
    )
    dry_run = FlagField(
        required=False,
        default=False,
        help_text="Only count what the rule would remove now; save nothing.",
    )


class LegalHoldSerializer(serializers.Serializer):
    session = serializers.IntegerField(source="pk")
    legal_hold = serializers.BooleanField(
        help_text="True while the session is on legal hold: retention does not delete it."
    )
    set_by = serializers.SerializerMethodField(
        help_text="The username of the admin who last placed or released the hold (null: never)."
    )
    set_at = serializers.DateTimeField(source="legal_hold_set_at", allow_null=True)

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_set_by(self, session) -> str | None:
        user = session.legal_hold_set_by
        return user.get_username() if user is not None else None


class LegalHoldSetSerializer(StrictSerializer):
    hold = FlagField(help_text="true places the session on legal hold, false releases it.")


class ImportSerializer(StrictSerializer):
    file = serializers.FileField(
        help_text="A session export (JSON Lines, `output=jsonl`) that this deployment signed."
    )
    # Form fields arrive as text: ids are read from their digits.
    space = serializers.IntegerField(
        min_value=1,
        max_value=MAX_ID,
        help_text="A space of the caller's: the new session goes there.",
    )
    agent_version = serializers.IntegerField(
        min_value=1,
        max_value=MAX_ID,
        required=False,
        help_text="A version of an agent of that space, which the session runs with; without "
        "it the session is read only.",
    )


class SupplementSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    position = serializers.IntegerField()


class JournalQuerySerializer(serializers.Serializer):
    after = QueryPositionField(
        default=0,
        help_text="Return records with seq > after; beyond the last seq, an empty page.",
    )
    limit = QueryIntegerField(
        min_value=1, max_value=JOURNAL_LIMIT_MAX, default=JOURNAL_LIMIT_DEFAULT
    )
    instance = serializers.RegexField(
        INSTANCE_PATTERN,
        required=False,
        trim_whitespace=False,
        help_text="`main` or a child instance id such as `1.1`; omitted: every instance.",
        error_messages={"invalid": "Must be `main` or a child instance id such as 1.1."},
    )

    def validate_instance(self, value: str) -> str:
        # The validator searches, and `$` also matches before a trailing newline.
        if not re.fullmatch(INSTANCE_PATTERN, value):
            raise serializers.ValidationError("Must be `main` or a child instance id such as 1.1.")
        return value


class ExportQuerySerializer(serializers.Serializer):
    output = serializers.ChoiceField(
        choices=EXPORT_FORMATS,
        default="jsonl",
        help_text="`jsonl`: the whole session, signed (importable); `openai`: the main "
        "conversation as OpenAI chat messages.",
    )
    bodies = serializers.BooleanField(
        default=False, help_text="Add each model call's response (`jsonl` only)."
    )


class JournalItemSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    run_id = serializers.IntegerField()
    instance = serializers.CharField()
    kind = serializers.ChoiceField(choices=SessionMessage.Kind.choices)
    message = serializers.DictField(help_text="The decrypted record.")
    created_at = serializers.DateTimeField()


class JournalPageSerializer(serializers.Serializer):
    items = JournalItemSerializer(many=True)
    next_after = serializers.IntegerField(
        help_text="Pass as `after` for the next page; equals `after` when the page is empty."
    )


def _moment():
    """Return how `DateTimeField` formats a moment, with the request's time zone looked up once
    instead of at every record (what that lookup cost was a quarter of a page's CPU)."""
    zone = timezone.get_current_timezone() if settings.USE_TZ else None
    return serializers.DateTimeField(default_timezone=zone).to_representation


def journal_page_data(page: dict) -> dict:
    """Return what `JournalPageSerializer(page).data` gives, without a serializer per record.

    A page holds up to 200 records, and passing each through the item serializer's six fields
    cost more CPU than reading and decrypting it; the values are already what the fields give
    (the record a dict of JSON, numbers and strings), but for the moment, formatted here as
    `DateTimeField` formats it.
    """
    moment = _moment()
    return {
        "items": [{**item, "created_at": moment(item["created_at"])} for item in page["items"]],
        "next_after": page["next_after"],
    }


def journal_page_json(page: dict) -> bytes:
    """Return the JSON body DRF's `JSONRenderer` writes for `journal_page_data(page)`, from a page
    read with `message_text`: each record's message is copied as stored (its compact JSON text,
    decrypted) instead of being parsed and encoded again.

    The rest is written as the renderer writes it: compact, not ASCII-escaped, U+2028 and U+2029
    escaped. A message whose text is not plain UTF-8 JSON (a lone surrogate, or a number JSON
    has no word for) is parsed and written as the renderer would: a lone surrogate escaped (the
    renderer could not encode it), a NaN refused as the renderer refuses it.
    """
    moment = _moment()
    strings: dict[str, bytes] = {}

    def string(value: str) -> bytes:
        # An instance or a kind: a few distinct values a page.
        if value not in strings:
            strings[value] = _compact_json(value).encode()
        return strings[value]

    items = [
        b'{"seq":%d,"run_id":%s,"instance":%s,"kind":%s,"message":%s,"created_at":%s}'
        % (
            item["seq"],
            b"null" if item["run_id"] is None else b"%d" % item["run_id"],
            string(item["instance"]),
            string(item["kind"]),
            _message_json(item["message"]),
            _compact_json(moment(item["created_at"])).encode(),
        )
        for item in page["items"]
    ]
    body = b'{"items":[' + b",".join(items) + b'],"next_after":%d}' % page["next_after"]
    return body.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")


def _compact_json(value, *, ascii: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ascii, allow_nan=False, separators=(",", ":"))


def _message_json(text: bytes) -> bytes:
    """Return a message's stored JSON text as the page writes it."""
    if not text.isascii():
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            value = json.loads(text.decode("utf-8", "surrogatepass"))
            return _compact_json(value, ascii=True).encode()
    if b"NaN" in text or b"Infinity" in text:
        return _compact_json(json.loads(text)).encode()
    return text


class ViewBaselinesSerializer(serializers.Serializer):
    user_turns = serializers.IntegerField(source="baseline_user_turns")
    model_steps = serializers.IntegerField(source="baseline_model_steps")


class SessionViewSerializer(serializers.Serializer):
    revision = serializers.IntegerField()
    watermark = serializers.IntegerField()
    run = serializers.IntegerField(source="run_id")
    user_turns = serializers.IntegerField()
    model_steps = serializers.IntegerField()
    baselines = ViewBaselinesSerializer(source="*")
    created_at = serializers.DateTimeField()
    revoked = serializers.SerializerMethodField(
        help_text="True when revoked, directly or by derivation: a revoked view is never chosen."
    )
    revoked_by = serializers.CharField(source="revoked_by.username", allow_null=True, default=None)
    revoked_at = serializers.DateTimeField(allow_null=True)
    derived_from = serializers.SerializerMethodField(
        help_text="The revision of the view its summary was made from (its run's previous view, "
        "else the view its run inherited); null when made from the journal alone."
    )
    revoked_by_derivation = serializers.SerializerMethodField(
        help_text="The revision of the nearest revoked view in its chain of `derived_from`; "
        "null when the chain is clean."
    )

    def _derivation(self, view) -> Derivation:
        # The API passes every view's derivation of the session (one query per answer).
        return (self.context.get("derivations") or {}).get(view.revision, Derivation())

    def get_revoked(self, view) -> bool:
        return view.revoked_at is not None or self.get_revoked_by_derivation(view) is not None

    def get_derived_from(self, view) -> int | None:
        return self._derivation(view).derived_from

    def get_revoked_by_derivation(self, view) -> int | None:
        return self._derivation(view).revoked_ancestor


class IdentifierCountsSerializer(serializers.Serializer):
    found = serializers.IntegerField(help_text="Identifiers in the records summarised.")
    kept = serializers.IntegerField(help_text="Of those, already in the summary as written.")
    added = serializers.IntegerField(
        help_text="Appended verbatim with their record references (the rest did not fit and "
        "are named by reference)."
    )


class SpentSerializer(serializers.Serializer):
    prompt_tokens = serializers.IntegerField(help_text="Prompt tokens its calls were billed.")
    cached_tokens = serializers.IntegerField(help_text="Of those, served from the prompt cache.")
    completion_tokens = serializers.IntegerField()
    unreported = serializers.IntegerField(help_text="Its calls whose provider reported no usage.")


class MoneySerializer(serializers.Serializer):
    amount = serializers.DecimalField(max_digits=24, decimal_places=12, coerce_to_string=True)
    currency = serializers.CharField()


class SpentCostSerializer(MoneySerializer):
    complete = serializers.BooleanField(
        help_text="False when some of its calls has no known cost: `amount` is a lower bound."
    )
    unpriced_calls = serializers.IntegerField()


class SavedCostSerializer(MoneySerializer):
    requests = serializers.IntegerField(help_text="The action requests it was in force for.")
    unpriced = serializers.IntegerField(
        help_text="Of those, requests without usage or prices, left out of `amount`."
    )
    complete = serializers.BooleanField(help_text="False when `unpriced`: a lower bound.")


class CompactionSerializer(serializers.Serializer):
    revision = serializers.IntegerField(
        allow_null=True, help_text="The view revision it produced; null unless it succeeded."
    )
    covered_seq = serializers.IntegerField(allow_null=True)
    journal_seq = serializers.IntegerField(
        allow_null=True,
        help_text="Journal seq of the last record the attempt saw (it came after it); null when "
        "it came before the run's first record.",
    )
    before = serializers.IntegerField(allow_null=True)
    after = serializers.IntegerField(allow_null=True)
    target_reached = serializers.BooleanField(allow_null=True)
    calls = serializers.IntegerField(allow_null=True)
    outcome = serializers.CharField(
        allow_null=True, help_text="`succeeded`, `skipped` or `failed`."
    )
    reason = serializers.CharField(allow_null=True, allow_blank=True)

    stage = serializers.CharField(
        allow_null=True,
        help_text=(
            "`masking` (older tool results replaced by one-line references, no model call) or "
            "`summary` (older records summarised); null when nothing was replaced."
        ),
    )
    summarised_ranges = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text="Journal seq ranges `[from_seq, to_seq]` whose records the summary replaced.",
    )
    masked_ranges = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        help_text=(
            "Journal seq ranges of tool results this compaction masked to one-line references "
            "(read back with `read_record`)."
        ),
    )
    form = serializers.CharField(
        allow_null=True,
        help_text="How the summary was asked for: `prefix` (the conversation as last sent, "
        "instruction last, so that its prefix is cached) or `segmented` (the material in "
        "segments, where the conversation did not fit); null before compaction version 3.",
    )
    spent = SpentSerializer(
        allow_null=True,
        help_text="What this attempt's own calls cost as reported; null without a call.",
    )
    saved = serializers.IntegerField(
        allow_null=True,
        help_text="What the stage saved so far, computed when read: the units (`before` − "
        "`after`) it removed times the action requests sent since, until the next compaction "
        "(in the following runs that kept its view too). "
        "Null for attempts that replaced nothing.",
    )
    spent_cost = SpentCostSerializer(
        allow_null=True,
        help_text="What its own calls cost at the prices each call copied; null without a call, "
        "when no call's cost is known (see `spent`) or in more than one currency.",
    )
    saved_cost = SavedCostSerializer(
        allow_null=True,
        help_text="What `saved` was worth, computed when read: each removed unit at what each "
        "request it was in force for paid per unit of its measured size (cached tokens at the "
        "cached price), at the prices that request copied; null when none of them has a known "
        "value, or in more than one currency.",
    )
    saved_requests = serializers.IntegerField(
        allow_null=True, help_text="The action requests `saved_cost` counts."
    )
    saved_runs = serializers.ListField(
        child=serializers.IntegerField(),
        allow_null=True,
        min_length=2,
        max_length=2,
        help_text="The first and last run numbers whose requests it counts: the run's last "
        "stage goes on in the following runs that started from its view and did not compact.",
    )
    net = MoneySerializer(
        allow_null=True,
        help_text="`saved_cost` − `spent_cost` when both are known whole in one currency.",
    )
    identifiers = IdentifierCountsSerializer(
        allow_null=True,
        help_text="What a summary kept of the identifiers of the records it replaced "
        "(compaction version 2 on; null before, and for masking and attempts that failed).",
    )


class LastReportedSerializer(serializers.Serializer):
    tokens = serializers.IntegerField(help_text="Prompt tokens the provider reported.")
    estimate = serializers.IntegerField(help_text="What the estimator said of that request.")
    estimate_error = serializers.FloatField(allow_null=True)
    estimator = serializers.CharField()


class ToolsPartSerializer(serializers.Serializer):
    size = serializers.IntegerField(
        help_text="The tool schemas' part of the request's hard-check bound, in `unit`."
    )
    unit = serializers.ChoiceField(choices=["tokens", "bytes"])
    share = serializers.IntegerField(help_text="Whole percent of the request's bound.")


class RunContextSerializer(serializers.Serializer):
    messages = serializers.ListField(
        child=serializers.DictField(), help_text="The model-visible view of the main instance."
    )
    estimate = serializers.IntegerField(
        help_text=(
            "Size of the next action request (view plus the tool schemas it is offered) in the "
            "policy's unit (`unit`), as the engine measures it for its triggers."
        )
    )
    unit = serializers.ChoiceField(
        choices=["estimate", "characters"],
        help_text="`estimate` (the estimator's units, tokens) or `characters` (legacy versions).",
    )
    ceiling = serializers.IntegerField(
        help_text=(
            "The most the view may measure in `unit`: the effective budget, or the character "
            "threshold of a legacy version."
        )
    )
    effective_budget = serializers.IntegerField(
        help_text="context_window - max_output_tokens - safety_margin_tokens."
    )
    trigger_at = serializers.IntegerField(
        help_text="Size at which compaction starts (characters for legacy versions)."
    )
    target_at = serializers.IntegerField(help_text="Size compaction aims at.")
    compactions = CompactionSerializer(many=True)
    estimator = serializers.CharField(help_text="What measures the run's requests.")
    last_reported = LastReportedSerializer(
        allow_null=True, help_text="The input size the provider last reported for this run."
    )
    last_call_unreported = serializers.BooleanField(
        help_text="The run's last answered call came without usage (a stream that carried "
        "none): its tokens and cost are unknown, not zero."
    )
    cost = CostSummarySerializer(allow_null=True, help_text="The run's cost. " + _COST_HELP)
    plan = serializers.CharField(
        allow_null=True,
        help_text="The main instance's plan as set by the `update_plan` tool (kept verbatim "
        "through compaction); null when none was set.",
    )
    tools = ToolsPartSerializer(
        allow_null=True,
        help_text="How much of the next request the offered tool schemas take; null without tools.",
    )


class ModelCallSerializer(serializers.Serializer):
    purpose = serializers.ChoiceField(choices=ModelCall.Purpose.choices)
    instance = serializers.CharField()
    request_estimate = serializers.IntegerField(
        help_text="The request's size as the estimator measured it before it was sent."
    )
    estimator = serializers.CharField(help_text="`bytes`, `o200k`, `deepseek` or `server`.")
    reported_prompt_tokens = serializers.IntegerField(
        allow_null=True, help_text="Input tokens the provider reported for the call."
    )
    estimate_error = serializers.FloatField(
        allow_null=True,
        help_text="(request_estimate - reported_prompt_tokens) / reported_prompt_tokens.",
    )
    cached_tokens = serializers.IntegerField(
        allow_null=True, help_text="Input tokens the provider served from its prompt cache."
    )
    reported_completion_tokens = serializers.IntegerField(
        allow_null=True, help_text="Output tokens (reasoning included) the provider reported."
    )
    cost = serializers.SerializerMethodField(
        help_text="The call's cost at the prices in force when it was made (cached input "
        "priced apart). " + _COST_HELP
    )
    calibration = serializers.DictField(
        allow_null=True,
        help_text="For a calibrated byte estimator: the ratio, the reported base and the raw "
        "size the estimate was made with (the budget check used the raw size).",
    )
    usage = serializers.DictField(
        allow_null=True,
        help_text="Usage as the provider reported; null when it reported none (a stream without "
        "usage): then the cost is unknown, never zero.",
    )
    counts = serializers.DictField(
        allow_null=True,
        help_text="What the hard check counted the request with (the server tokenizer's count, "
        "its fallback and the upper bound), for the `server` estimator; null otherwise.",
    )
    latency_ms = serializers.FloatField(help_text="Wall time of the call, in milliseconds.")
    error = serializers.CharField(allow_blank=True)
    discarded = serializers.BooleanField(
        help_text="Billed, not used: the answer came after the worker had lost the run's lease, "
        "or a cancel stopped the call's stream."
    )
    cost_incomplete = serializers.BooleanField(
        help_text="The usage, so the cost, is not all known: a streamed call stopped by a cancel "
        "was billed for what it generated, and usage arrives only at a stream's end."
    )
    created_at = serializers.DateTimeField()

    @extend_schema_field(CallCostSerializer(allow_null=True))
    def get_cost(self, call: ModelCall) -> dict | None:
        cost = call_cost_of(call)
        return CallCostSerializer(cost).data if cost is not None else None
