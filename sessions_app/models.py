"""Sessions, runs and the encrypted, append-only session journal."""

from decimal import Decimal

from django.conf import settings
from django.db import models

from agentloom.engine import MAIN_INSTANCE as ENGINE_MAIN_INSTANCE
from agentloom.fields import (
    CompressedEncryptedJSONField,
    CompressedEncryptedTextField,
    EncryptedJSONField,
    EncryptedTextField,
)
from agentloom.providers import Prices, call_cost
from agentloom.spaces.models import Space
from context_app.models import Agent, AgentVersion

# The main instance's name, as the engine writes it into every record.
MAIN_INSTANCE = ENGINE_MAIN_INSTANCE


class Session(models.Model):
    space = models.ForeignKey(Space, on_delete=models.CASCADE, related_name="sessions")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="sessions")
    agent_version = models.ForeignKey(
        AgentVersion, on_delete=models.PROTECT, related_name="sessions"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_sessions"
    )
    # Content: made from the first question, so encrypted like the question (up to 200 chars).
    title = EncryptedTextField(blank=True, default="")
    # Set by `session_delete`: the session is hidden from everyone and takes no new run; who hid
    # it is recorded in a SessionDeletion row. Only `purge_deleted_sessions` removes it for good.
    deleted_at = models.DateTimeField(null=True, blank=True)
    # The next session seq to hand out; read and bumped under SELECT … FOR UPDATE.
    next_seq = models.PositiveBigIntegerField(default=1)
    # Where the session came from, when it was not opened empty: a fork (`{"kind": "fork",
    # "session", "seq", "at"}`, with `imported`: its original's import, `upto` its last copy of
    # an imported record) or an import (`{"kind": "import", "session", "exported_at",
    # "exported_by", "agentloom", "at", "upto"}`, `upto` the last imported record); empty for a
    # session opened here.
    origin = models.JSONField(default=dict, blank=True)
    # An imported session bound to no agent version of its space: it is read, never run.
    read_only = models.BooleanField(default=False)
    # While an import writes it: hidden from every selector until published in one step.
    staged = models.BooleanField(default=False)
    # Exempts the session from its space's retention rule (set by a space admin). Who last placed
    # or released it and when are kept beside it; each change is in the session's history too.
    legal_hold = models.BooleanField(default=False)
    legal_hold_set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    legal_hold_set_at = models.DateTimeField(null=True, blank=True)
    # Instructions its creator pinned: every run asked from now on carries them word for word
    # after the system prompt (`engine_adapter.pinned_prompt`). Content, so encrypted.
    pinned = CompressedEncryptedTextField(blank=True, default="")
    # Every finished run of the session has its records in the journal, so a new question need
    # not look for runs from before the journal existed (`services.legacy`). Sessions opened
    # since start true; an older one turns true at its next question or resume, after one look.
    runs_journaled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.title or f"Session {self.pk}"


class Run(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        # Stopped at a safe point until a person decides its tool calls (no worker, no lease).
        WAITING_APPROVAL = "waiting_approval", "Waiting for approval"
        # Stopped at a safe point until a person answers a tool server's questions (the same).
        WAITING_INPUT = "waiting_input", "Waiting for answers"

    ACTIVE_STATUSES = (
        Status.QUEUED,
        Status.RUNNING,
        Status.WAITING_APPROVAL,
        Status.WAITING_INPUT,
    )
    WAITING_STATUSES = (Status.WAITING_APPROVAL, Status.WAITING_INPUT)
    FINISHED_STATUSES = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="runs")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    question = CompressedEncryptedTextField()
    answer = CompressedEncryptedTextField(null=True, blank=True)
    checkpoint = CompressedEncryptedJSONField(null=True, blank=True)
    # Session seq of the last journal record this run's history was built from.
    inherited_watermark = models.PositiveBigIntegerField(default=0)
    attempt = models.PositiveIntegerField(default=1)
    lease_owner = models.CharField(max_length=64, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    # Set atomically when the engine's final drain finds the supplement queue empty.
    supplements_closed = models.BooleanField(default=False)
    # The position of the run's last accepted supplement (0: none), set by `supplement_add` under
    # the run's lock and returned by every save, so a worker reads the queue only when it grew.
    # Null on runs older than the column: their queue is read at every safe point.
    supplements_added = models.PositiveIntegerField(null=True, blank=True, default=0)
    error = models.TextField(blank=True, default="")
    # The trace of the run's latest execution (32 hex digits) when tracing is on, else empty.
    trace_id = models.CharField(max_length=32, blank=True, default="")
    # That execution's `invoke_agent` span (16 hex digits): its continuation after an approval
    # links to it.
    trace_span_id = models.CharField(max_length=16, blank=True, default="")
    # The session's pinned instructions when the run was asked: what it starts, resumes and
    # replays with, whatever is pinned later.
    pinned = CompressedEncryptedTextField(blank=True, default="")
    # While waiting for approval, and until the run continues: the calls awaiting a decision
    # (`[{call_id, tool, arguments}]`); and every decision made on the run's calls (`{call_id:
    # {approved, note, by, at}}`, kept so a replay decides as the run did). Encrypted: arguments
    # and notes are session content.
    pending_approvals = EncryptedJSONField(default=list, blank=True)
    approval_decisions = EncryptedJSONField(default=dict, blank=True)
    waiting_since = models.DateTimeField(null=True, blank=True)
    # A tool server's questions the run waits on (`waiting_input`), or asked during an open call
    # (`running`, with the call's `deadline`), until the run goes on: `[{key, call_id, tool,
    # server, mode, message, fields | url, unsupported, deadline}]`; and the person's answers by
    # question key (`{action, content, by, at}`). Encrypted: session content.
    pending_questions = EncryptedJSONField(default=list, blank=True)
    question_answers = EncryptedJSONField(default=dict, blank=True)
    # Every round of questions answered, in order, kept so a replay answers as the run did:
    # `[{call_id, tool, server, questions, answers (None: no one answered in time), open_call}]`.
    question_rounds = EncryptedJSONField(default=list, blank=True)
    # A clear copy of the checkpoint's turn and step counters, so listing runs decrypts nothing.
    counters = models.JSONField(default=dict, blank=True)
    # The run's number in the session it was copied from (a fork's or an import's runs): such a
    # run is history only, finished, and never resumed.
    origin_number = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["session", "number"], name="unique_run_number"),
            models.UniqueConstraint(
                fields=["session"],
                condition=models.Q(
                    status__in=["queued", "running", "waiting_approval", "waiting_input"]
                ),
                name="one_active_run_per_session",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    status__in=[
                        "queued",
                        "running",
                        "succeeded",
                        "failed",
                        "cancelled",
                        "waiting_approval",
                        "waiting_input",
                    ]
                ),
                name="run_status_valid",
            ),
        ]
        indexes = [
            # A new question's checks (an active run, expired leases, runs never journaled) and
            # the beat's lease sweep find their runs by status without reading the wide rows of
            # every run of the session: on SQLite the constraint's partial index serves no query
            # whose statuses are parameters.
            models.Index(fields=["status", "session"], name="run_status_session"),
        ]

    def __str__(self) -> str:
        return f"Run #{self.number} of session {self.session_id} ({self.status})"

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE_STATUSES


class SessionMessage(models.Model):
    """One journal record. Index fields stay in clear; only `message` is encrypted."""

    class Kind(models.TextChoices):
        USER_INPUT = "user_input"
        SUPPLEMENT = "supplement"
        ASSISTANT = "assistant"
        TOOL_RESULT = "tool_result"
        FEEDBACK = "feedback"
        STATUS = "status"

    # No index of their own: (session, seq) and (run, instance, entry_key) lead with them.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    seq = models.PositiveBigIntegerField()
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="messages", db_index=False)
    instance = models.CharField(max_length=32, default=MAIN_INSTANCE)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    entry_key = models.CharField(max_length=200)
    # The record's seq within its instance, for records an engine frame holds (by-reference
    # frames find their own records by it); null for rows written outside the engine.
    local_seq = models.PositiveIntegerField(null=True, blank=True)
    message = CompressedEncryptedJSONField()
    # A fork's copy of its original's record: the record's seq in the original session.
    origin_seq = models.PositiveBigIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["session_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="unique_session_seq"),
            models.UniqueConstraint(
                fields=["run", "instance", "entry_key"], name="unique_run_instance_entry"
            ),
        ]
        indexes = [
            models.Index(fields=["session", "instance", "seq"], name="journal_instance_seq"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.kind} ({self.instance})"


class CompactionSnapshot(models.Model):
    """A compaction snapshot of one of a run's instances, stored once, where its checkpoint
    points.

    A checkpoint names its snapshots (`context.compactions`) as pointers, `{"revision": r,
    "stored": true}`, so a save rewrites none of them and a run that masks again stores its
    snapshot once, not in every later checkpoint. `snapshot` holds the snapshot as the frame
    encodes it (`agentloom.engine._frame`: its view as entries, its counters, metrics and
    sources); encrypted, since the system prompt and notes are inline (a large summary is a
    marker of `StoredMessage`). Checkpoints saved before this table embed their snapshots; they
    still read, and `manage.py store_snapshots` moves their snapshots here.

    A row goes with its run (the only owner of the checkpoint that points to it). A reusable
    view saved from the snapshot refers to it too (`SessionView.snapshot`, RESTRICT): the row
    cannot be deleted while that view exists, except together with it (the session's purge).
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="snapshots", db_index=False)
    instance = models.CharField(max_length=32, default=MAIN_INSTANCE)
    revision = models.PositiveIntegerField()
    snapshot = CompressedEncryptedJSONField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "instance", "revision"], name="unique_snapshot_revision"
            ),
        ]

    def __str__(self) -> str:
        return f"Snapshot r{self.revision} of {self.instance} (run {self.run_id})"


class StoredMessage(models.Model):
    """A message no journal record holds (a handoff summary, mostly), stored once for its session.

    Compaction snapshots and reusable views hold such messages inline. A summary stays in every
    view of the session until the next summary, and each masking in between stores a snapshot
    and saves a view: so a large inline message is stored here once and those rows name it by a
    marker, `{"once": key}` (`services.stored_messages`; read back by `selectors.stored_messages`).
    `key` is the message's keyed digest (`encryption.message_digest`): the same message is found
    again without decrypting anything, and the key tells nothing of it. Rows are never changed;
    they go with their session (which is the only thing that deletes them: a row some snapshot or
    view of the session may name is never deleted alone).
    """

    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="stored_messages", db_index=False
    )
    key = models.CharField(max_length=32)
    message = CompressedEncryptedJSONField()

    class Meta:
        # Found by (session, key); an id of its own, as every encrypted row has (key rotation
        # rewrites rows by it).
        constraints = [
            models.UniqueConstraint(fields=["session", "key"], name="unique_stored_message"),
        ]

    def __str__(self) -> str:
        return f"Stored message {self.key[:8]} of session {self.session_id}"


class SessionView(models.Model):
    """A reusable compacted main-instance view, valid for the journal prefix up to `watermark`.

    Stored by reference: `entries` (clear) lists the view in order, each item either a reference
    to a journal record with how it is shown (`{"s": seq, "as": …}`, see `agentloom.engine._refs`)
    or `{"i": n}`, the n-th of the `messages` that exist nowhere else (the handoff summary,
    placeholders, notes), which alone are stored, encrypted; a large one (the summary) as a
    marker of the message its session stores once (`StoredMessage`). Views saved before references
    existed have no entries and hold every message in `messages`.
    """

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="views")
    revision = models.PositiveIntegerField()
    watermark = models.PositiveBigIntegerField()
    messages = CompressedEncryptedJSONField()
    entries = models.JSONField(default=list, blank=True)
    user_turns = models.PositiveIntegerField(default=0)
    model_steps = models.PositiveIntegerField(default=0)
    baseline_user_turns = models.PositiveIntegerField(default=0)
    baseline_model_steps = models.PositiveIntegerField(default=0)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="views")
    # The revision of the run's compaction snapshot this view was saved from.
    snapshot_revision = models.PositiveIntegerField(default=0)
    # That snapshot's stored row (null for views saved before snapshots were stored apart).
    snapshot = models.ForeignKey(
        CompactionSnapshot,
        null=True,
        blank=True,
        on_delete=models.RESTRICT,
        related_name="views",
    )
    # Policy, budget and estimator the view was made under; reused only under an equal binding.
    binding = models.JSONField(default=dict)
    # A digest of `binding`, so a new run finds its views by index without reading any other.
    binding_key = models.CharField(max_length=64, blank=True, default="")
    # The view this one's summary was made from: the run's own previous view, else the view
    # the run inherited. A view whose chain holds a revoked view is never chosen either.
    derived_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.RESTRICT, related_name="derived_views"
    )
    # A revoked view is never chosen again; the row and who revoked it stay on record.
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="revoked_views",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session_id", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["session", "revision"], name="unique_view_revision"),
        ]
        indexes = [
            models.Index(
                fields=["session", "binding_key", "watermark"], name="view_binding_watermark"
            ),
            # Whether a session has a revoked view, without reading its others.
            models.Index(
                fields=["session"],
                condition=models.Q(revoked_at__isnull=False),
                name="view_revoked",
            ),
        ]

    def __str__(self) -> str:
        return f"View r{self.revision} @ {self.watermark}"


class ProjectionPoint(models.Model):
    """Where projecting a session's main records for new runs stopped: the projector's state.

    A new run that inherits the history `binding_key` names, after `view` (None: from the
    start), resumes projecting from here instead of from the view: it reads only the records
    after `watermark` (see `ProjectionPoint` in `agentloom.engine._projection`). `state` holds
    the stored form of that state: every message made from a record as a reference to it (its
    seq and how it is shown, as a view's entries do), the messages projection made itself
    (placeholders, run notes), the open tool group, the notes waiting for it and the calls shown
    so far; no journal text. It is encrypted (notes quote run errors) and compressed.

    A point is used only when it extends the view the reusable-view rule chooses for the run,
    so a revoked view (or one revoked by derivation) takes its points out of use with it; the
    session's deletion removes them (cascade). One row per (session, binding, view), moved
    forward as the session grows.
    """

    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="projection_points", db_index=False
    )
    binding_key = models.CharField(max_length=64)
    view = models.ForeignKey(
        SessionView,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="projection_points",
    )
    watermark = models.PositiveBigIntegerField()
    state = CompressedEncryptedJSONField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["session", "binding_key", "watermark"], name="point_binding_watermark"
            ),
        ]

    def __str__(self) -> str:
        return f"Projection point @ {self.watermark}"


class RunSupplement(models.Model):
    """The persistent supplement queue of a run; `consumed_at` is set once it is journaled."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="supplements")
    position = models.PositiveIntegerField()
    text = CompressedEncryptedTextField()
    consumed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="unique_supplement_position"),
        ]

    def __str__(self) -> str:
        return f"Supplement {self.position} of run #{self.run.number}"


class ModelCall(models.Model):
    """Every gateway call of a run, so runs can be replayed and estimates compared with usage."""

    class Purpose(models.TextChoices):
        ACTION = "action"
        COMPACTION = "compaction"
        VERIFICATION = "verification"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="model_calls")
    instance = models.CharField(max_length=32, default=MAIN_INSTANCE)
    purpose = models.CharField(max_length=16, choices=Purpose.choices)
    request_estimate = models.PositiveIntegerField(default=0)
    # What measured the request (`bytes`, `o200k`, `deepseek`, `server`), and what the provider
    # reported.
    estimator = models.CharField(max_length=16, blank=True, default="")
    reported_prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveIntegerField(null=True, blank=True)
    reported_completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    # The prices in force when the call was made, per million tokens, copied so that a later
    # manifest never changes what a past call cost. Empty currency: prices unknown.
    price_currency = models.CharField(max_length=3, blank=True, default="")
    price_input = models.DecimalField(max_digits=18, decimal_places=8, null=True, blank=True)
    price_cached_input = models.DecimalField(max_digits=18, decimal_places=8, null=True, blank=True)
    price_output = models.DecimalField(max_digits=18, decimal_places=8, null=True, blank=True)
    price_max_prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    price_source_url = models.URLField(max_length=500, blank=True, default="")
    price_verified_on = models.DateField(null=True, blank=True)
    # `manifest` (read from price_source_url on price_verified_on) or `manual` (entered by an
    # operator on price_verified_on); the band (`peak`, `off_peak`) of prices of a time of day.
    price_source = models.CharField(max_length=16, blank=True, default="")
    price_band = models.CharField(max_length=16, blank=True, default="")
    # (estimate - reported) / reported; positive when the estimate was too high.
    estimate_error = models.FloatField(null=True, blank=True)
    # For a calibrated estimator: {ratio, base_tokens, raw} the estimate was made with.
    calibration = models.JSONField(null=True, blank=True)
    # What the hard check counted the request with (the server's exact count, its fallback and
    # the upper bound), so a replay never asks the server again; null for other estimators.
    counts = models.JSONField(null=True, blank=True)
    # What a failed call's refusal said beside its kind (`{window, requested, evidence}`, fixed
    # text and numbers), so a replay rebuilds the same refusal; null otherwise.
    refusal = models.JSONField(null=True, blank=True)
    # The gateway's answer (`{message, usage, finish_reason, model}`). When its message is the
    # assistant record the run journaled, the message is not copied: `response_seq` names that
    # record (its session seq) and `response` keeps the rest. Read it with `call_response`.
    response = CompressedEncryptedJSONField(null=True, blank=True)
    response_seq = models.PositiveBigIntegerField(null=True, blank=True)
    usage = models.JSONField(null=True, blank=True)
    latency_ms = models.FloatField(default=0)
    error = models.TextField(blank=True, default="")
    # True when the answer arrived after the worker had lost the run's lease: it was billed,
    # but the run never used it (another worker may be running the run by now).
    discarded = models.BooleanField(default=False)
    # True when the usage (and so the cost) is not all known: a streamed call stopped by a
    # cancel was billed for what it generated, but usage arrives only at the end of a stream.
    cost_incomplete = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run_id", "id"]

    def __str__(self) -> str:
        return f"{self.purpose} call of run #{self.run.number}"

    # How a call answered without usage is shown (never as zero tokens).
    NO_USAGE = "no usage reported"

    @property
    def usage_unreported(self) -> bool:
        """Return whether the call was answered without usage (a stream that carried none): its
        tokens and cost are unknown, never zero."""
        answered = self.response is not None or self.response_seq is not None
        return self.usage is None and not self.error and answered

    @property
    def prices(self) -> Prices | None:
        """Return the prices copied at call time, or None when they were unknown."""
        if not self.price_currency or self.price_input is None or self.price_output is None:
            return None
        return Prices(
            currency=self.price_currency,
            input=self.price_input,
            cached_input=self.price_cached_input,
            output=self.price_output,
            max_prompt_tokens=self.price_max_prompt_tokens,
        )

    @property
    def cost(self) -> Decimal | None:
        """Return what the call cost in `price_currency` (None when it cannot be known)."""
        return call_cost(
            self.prices,
            prompt_tokens=self.reported_prompt_tokens,
            cached_tokens=self.cached_tokens,
            completion_tokens=self.reported_completion_tokens,
        )


class JournalReference(models.Model):
    """Journal records that a compaction snapshot refers to, so the database keeps them.

    One row per run of consecutive session seqs, `message` to `last` (the same record for a run
    of one), that a run's compaction snapshot refers to (`run`, `snapshot_revision`). A reusable
    view saved from that snapshot writes no rows of its own: it is kept by its run's (a view goes
    with its run). Rows written before ranges hold one record each (`last` null), and views saved
    then have rows of their own (`view`); both still hold, and `manage.py migrate_references`
    turns them into ranges under the snapshot.

    `RESTRICT` on both ends makes deleting the first or last record of a range fail unless its
    referrer goes in the same deletion (a whole session); a record inside a range is kept by the
    journal's append-only rule: no path deletes a journal record except with its whole session
    (`services.deletion.session_purge`).
    """

    message = models.ForeignKey(
        SessionMessage, on_delete=models.RESTRICT, related_name="references"
    )
    # The last record of the range; null on a row written before ranges (one record).
    last = models.ForeignKey(
        SessionMessage,
        null=True,
        blank=True,
        on_delete=models.RESTRICT,
        related_name="range_ends",
    )
    view = models.ForeignKey(
        SessionView, null=True, blank=True, on_delete=models.CASCADE, related_name="references"
    )
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.CASCADE, related_name="references"
    )
    snapshot_revision = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(view__isnull=False, run__isnull=True)
                | models.Q(view__isnull=True, run__isnull=False, snapshot_revision__isnull=False),
                name="reference_has_one_referrer",
            ),
        ]

    def __str__(self) -> str:
        return f"reference to #{self.message_id}..#{self.last_id or self.message_id}"


class TermDigestsField(models.Field):
    """A block's search-term digests (`encryption.term_digests`): signed 32-bit integers.

    On PostgreSQL an `integer[]` under a GIN index (`journal_terms_gin`), so a search finds the
    blocks holding a digest without reading the others. On SQLite a blob of 4-byte big-endian
    digests, which `instr` finds (a scan of the session's rows; a match across two digests only
    adds a candidate, which the search then reads and drops). Rows written before the blob held
    text, each digest as eight hex digits between spaces: they are read as such until
    `index_journal` rewrites them, and a search matches both forms.
    """

    def db_type(self, connection) -> str:
        return "integer[]" if connection.vendor == "postgresql" else "blob"

    def get_db_prep_value(self, value, connection, prepared: bool = False):
        if value is None or connection.vendor == "postgresql":
            return value
        return digest_blob(value)

    def from_db_value(self, value, expression, connection):
        if value is None or isinstance(value, list):
            return value
        if isinstance(value, str):
            return [int.from_bytes(bytes.fromhex(part), signed=True) for part in value.split()]
        data = bytes(value)
        return [int.from_bytes(data[i : i + 4], signed=True) for i in range(0, len(data), 4)]


def digest_blob(digests) -> bytes:
    """Return digests as SQLite's column holds them: 4 bytes each, big-endian, signed."""
    return b"".join(d.to_bytes(4, "big", signed=True) for d in digests)


def digest_text(digests) -> str:
    """Return digests as SQLite's column held them before the blob: ` 0a1b2c3d 9f8e7d6c `."""
    parts = "".join(f"{(d & 0xFFFFFFFF):08x} " for d in digests)
    return f" {parts}"


class JournalTerms(models.Model):
    """The keyed search index of the journal: a block of records' terms as digests, never text.

    A block is up to `MAX_BLOCK_RECORDS` searchable records of one run, all of the main instance
    or all of its sub-agents, from `seq` to `last_seq` (NULL: the row stands for its one record),
    holding the distinct digests of all their terms, each once: a record joins its run's open
    block when it is journaled (`services.search_index`). A search reads a matching block's
    records and keeps those that match. `kind` is the
    records' kind when they share one, else "" (`MIXED_KINDS`); every kind but `status` is
    indexed. `key_id` names the field key the digests were made under, and key rotation
    rebuilds the rows of a retired key. Goes with its session. Keyed by (session, seq) itself:
    no id column and no second index.
    """

    MAX_BLOCK_RECORDS = 8
    MIXED_KINDS = ""

    pk = models.CompositePrimaryKey("session", "seq")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+", db_index=False)
    seq = models.PositiveBigIntegerField()
    last_seq = models.PositiveBigIntegerField(null=True)
    # The run's number (not a key: the row goes with its session, never alone with a run).
    run_number = models.PositiveIntegerField()
    main = models.BooleanField()
    kind = models.CharField(max_length=16, blank=True)
    key_id = models.IntegerField()
    digests = TermDigestsField()

    def __str__(self) -> str:
        return f"terms of #{self.seq}" + (f"..#{self.last_seq}" if self.last_seq else "")


class SessionDeletion(models.Model):
    """The audit row of a soft-deleted session: who hid it, when, and when it was purged.

    It refers to the session by number only, never by foreign key, so it outlives the purge that
    removes the session with its runs, journal, views and model calls.
    """

    session_number = models.PositiveBigIntegerField(unique=True)
    # The title as it was, encrypted like the title itself: it outlives the purge.
    session_title = EncryptedTextField(blank=True, default="")
    space = models.ForeignKey(
        Space, null=True, on_delete=models.SET_NULL, related_name="session_deletions"
    )
    deleted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="session_deletions",
    )
    # Kept in clear beside the foreign key, so the record survives the user's removal.
    deleted_by_username = models.CharField(max_length=150)
    deleted_at = models.DateTimeField()
    purged_at = models.DateTimeField(null=True, blank=True)
    # The superuser named to `manage.py purge_deleted_sessions --by`, or the retention rule.
    purged_by_username = models.CharField(max_length=150, blank=True, default="")
    # Hidden by the space's retention rule (the beat purges it after `RETENTION_PURGE_DAYS`),
    # not by a person.
    by_retention = models.BooleanField(default=False)

    class Meta:
        ordering = ["-deleted_at"]

    def __str__(self) -> str:
        return f"Session {self.session_number} deleted by {self.deleted_by_username}"


class RunDelta(models.Model):
    """A piece of a running model call's output, on its way to the events stream (embedded).

    The database channel of `sessions_app.services.live`: encrypted, and deleted once older
    than `LIVE_DELTA_SECONDS`; the journal record, not this, is what is kept.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="deltas")
    data = EncryptedJSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["run_id", "id"]

    def __str__(self) -> str:
        return f"Delta {self.pk} of run {self.run_id}"


class UsageDay(models.Model):
    """The spend record: a space's model calls and runs summed by day, agent, member, model and
    price currency (`sessions_app.services.usage`).

    Written in the transaction that records the calls, so it agrees with them, and never
    deleted with the sessions it counts: agent, member and model are plain values, not keys.
    `day` is the day in the space's time zone when the calls were recorded.
    """

    space = models.ForeignKey(Space, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    agent_id = models.PositiveBigIntegerField()
    member_id = models.PositiveBigIntegerField()
    model = models.CharField(max_length=200, blank=True, default="")
    # Empty: the calls' prices were unknown (and runs' outcomes, which have no currency).
    currency = models.CharField(max_length=3, blank=True, default="")
    calls = models.PositiveBigIntegerField(default=0)
    failed_calls = models.PositiveBigIntegerField(default=0)
    compaction_calls = models.PositiveBigIntegerField(default=0)
    # Calls answered without usage: their tokens are unknown, not zero.
    unreported_calls = models.PositiveBigIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    reasoning_tokens = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=24, decimal_places=8, default=Decimal(0))
    # Calls whose cost is unknown (no prices, or usage missing): `cost` is then a lower bound.
    unpriced_calls = models.PositiveBigIntegerField(default=0)
    runs_succeeded = models.PositiveBigIntegerField(default=0)
    runs_failed = models.PositiveBigIntegerField(default=0)
    runs_cancelled = models.PositiveBigIntegerField(default=0)
    # Compaction stages that changed the context (a summary, a masking) and attempts that failed.
    summaries = models.PositiveBigIntegerField(default=0)
    maskings = models.PositiveBigIntegerField(default=0)
    compactions_failed = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["space_id", "day"]
        constraints = [
            models.UniqueConstraint(
                fields=["space", "day", "agent_id", "member_id", "model", "currency"],
                name="unique_usage_day",
            ),
        ]

    def __str__(self) -> str:
        return f"Usage of space {self.space_id} on {self.day}"


class SessionExport(models.Model):
    """The audit row of an export: who took a session's content out, in which format, when.

    Written for every export (the creator's, and a superuser's through `manage.py
    export_session`); it refers to the session by number only, so it outlives a purge.
    """

    session_number = models.PositiveBigIntegerField(db_index=True)
    space = models.ForeignKey(
        Space, null=True, on_delete=models.SET_NULL, related_name="session_exports"
    )
    exported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="session_exports",
    )
    exported_by_username = models.CharField(max_length=150)
    # `jsonl` (the signed journal) or `openai` (the main conversation as chat messages).
    format = models.CharField(max_length=16)
    # True for an operator's export of a session that is not theirs.
    by_operator = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Export of session {self.session_number} by {self.exported_by_username}"
