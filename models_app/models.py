"""Model connections: a provider endpoint, its encrypted key and the model budget."""

from django.conf import settings
from django.db import models

from agentloom.fields import EncryptedJSONField, EncryptedTextField
from agentloom.spaces.models import Space


class ModelConnection(models.Model):
    class Provider(models.TextChoices):
        OPENAI = "openai", "OpenAI"
        DEEPSEEK = "deepseek", "DeepSeek"
        OPENAI_COMPATIBLE = "openai_compatible", "OpenAI-compatible"
        OLLAMA = "ollama", "Ollama (local server)"
        LMSTUDIO = "lmstudio", "LM Studio (local server)"
        LOCAL = "local", "Local demo model (offline, not a real LLM)"

    class WindowSource(models.TextChoices):
        PROVIDER = "provider", "Provider response"
        PROVIDER_LOADED = "provider_loaded", "Loaded context length (server report)"
        PROVIDER_MAXIMUM = "provider_maximum", "Model maximum, not loaded (server report)"
        NUM_CTX = "num_ctx", "num_ctx sent with every request"
        SERVER_PROPS = "server_props", "Server's own properties (server report)"
        LEARNED = "learned", "Learned from the server's refusal"
        OFFICIAL_MANIFEST = "official_manifest", "Official manifest"
        PLATFORM_DEFAULT = "platform_default", "Platform default (32K fallback)"
        MANUAL = "manual", "Manual"

    class Estimator(models.TextChoices):
        BYTES = "bytes", "UTF-8 bytes (conservative)"
        O200K = "o200k", "OpenAI o200k tokenizer"
        DEEPSEEK = "deepseek", "DeepSeek tokenizer"
        SERVER = "server", "The server's own tokenizer"

    class EstimatorSource(models.TextChoices):
        AUTO = "auto", "Automatic"
        MANUAL = "manual", "Manual"

    class Thinking(models.TextChoices):
        DEFAULT = "", "Provider default"
        ENABLED = "enabled", "Enabled"
        DISABLED = "disabled", "Disabled"

    class ReasoningEffort(models.TextChoices):
        DEFAULT = "", "Provider default"
        LOW = "low", "Low"
        HIGH = "high", "High"
        MAX = "max", "Max"

    class ReasoningPassback(models.TextChoices):
        LEARNED = "", "Learned (sent back once the server asks for it)"
        NEVER = "never", "Never"
        TOOL_SPANS = "tool_spans", "Tool spans (DeepSeek's rule)"

    space = models.ForeignKey(Space, on_delete=models.CASCADE, related_name="model_connections")
    name = models.CharField(max_length=120)
    provider = models.CharField(max_length=32, choices=Provider.choices)
    base_url = models.URLField(max_length=500, blank=True)
    api_key = EncryptedTextField(blank=True, default="")
    # Keys this connection used before, newest first: `[{"key", "retired_at"}]`, kept only to
    # redact them (models_app.services.redaction: how many and how long), never sent anywhere.
    previous_api_keys = EncryptedJSONField(blank=True, default=list)
    model_id = models.CharField(max_length=200)
    context_window = models.PositiveIntegerField(default=32_768)
    max_output_tokens = models.PositiveIntegerField(default=4_096)
    max_output_cap = models.PositiveIntegerField(null=True, blank=True)
    safety_margin_tokens = models.PositiveIntegerField(default=1_024)
    # Ollama only: the context length sent as `options.num_ctx` with every request (its native
    # API), which is then the window; null leaves Ollama's server default in force.
    num_ctx = models.PositiveIntegerField(null=True, blank=True)
    window_source = models.CharField(
        max_length=32, choices=WindowSource.choices, default=WindowSource.PLATFORM_DEFAULT
    )
    source_url = models.URLField(max_length=500, blank=True)
    verified_on = models.DateField(null=True, blank=True)
    # How requests are measured against the budget: `bytes` (conservative) unless the manifest
    # names the exact model's tokenizer on its official endpoint, or an admin picks one.
    estimator = models.CharField(max_length=16, choices=Estimator.choices, default="bytes")
    estimator_source = models.CharField(
        max_length=16, choices=EstimatorSource.choices, default="auto"
    )
    # DeepSeek only: thinking mode and its effort, sent with every call of a version published
    # with them (frozen in the snapshot); blank sends nothing and leaves DeepSeek's default.
    thinking = models.CharField(max_length=16, choices=Thinking.choices, blank=True, default="")
    reasoning_effort = models.CharField(
        max_length=8, choices=ReasoningEffort.choices, blank=True, default=""
    )
    # Whether a reply's reasoning goes back to the model in later requests, frozen into each
    # version published: blank learns it from a refusal that says reasoning is missing (DeepSeek's
    # official endpoint keeps its own rule while blank).
    reasoning_passback = models.CharField(
        max_length=16, choices=ReasoningPassback.choices, blank=True, default=""
    )
    # What runs learned from the server's refusals, with the server's words (rebuilt from fixed
    # text and its numbers) and when; a person's edit of the window clears the learned window.
    learned_window = models.PositiveIntegerField(null=True, blank=True)
    learned_window_evidence = models.CharField(max_length=200, blank=True, default="")
    learned_window_at = models.DateTimeField(null=True, blank=True)
    learned_reasoning = models.CharField(max_length=16, blank=True, default="")
    # Custom endpoints only: prices entered by an operator, per million tokens, as decimal
    # strings {currency, input, cached_input, output, entered_on}; null: cost unknown.
    prices = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["space", "name"], name="unique_connection_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.provider}:{self.model_id})"

    @property
    def effective_input_budget(self) -> int:
        return self.context_window - self.max_output_tokens - self.safety_margin_tokens


class ToolServer(models.Model):
    """An MCP server over Streamable HTTP whose tools a space's agents may be given.

    `headers` (sent with every request, such as an `Authorization` header) are encrypted like API
    keys and never shown; `tools` is the server's listing as last refreshed; `approval` is the
    default of its tools: `always` (a person approves each call) or `never`. `declares_resources`
    and `resources` are what the server said of its resources at that refresh;
    `listing_stale_since` is set when a call saw the server's tools differ from the stored listing
    (or the server said they changed), and cleared by the next refresh.
    """

    class Approval(models.TextChoices):
        NEVER = "never", "Never"
        ALWAYS = "always", "Always (a person approves each call)"

    class OAuth(models.TextChoices):
        NONE = "", "No OAuth (headers only)"
        MEMBER = "member", "OAuth: each member connects their own account"
        SPACE = "space", "OAuth: one shared connection for the whole space"

    space = models.ForeignKey(Space, on_delete=models.CASCADE, related_name="tool_servers")
    name = models.CharField(max_length=30)
    approval = models.CharField(max_length=8, choices=Approval.choices, default=Approval.NEVER)
    url = models.URLField(max_length=500)
    headers = EncryptedJSONField(blank=True, default=dict)
    # Whose account the tools act as when the server uses OAuth (`OAuthConnection`), and the
    # client registered beforehand at its authorization server, if any (first in preference).
    oauth = models.CharField(max_length=8, choices=OAuth.choices, blank=True, default="")
    oauth_client_id = models.CharField(max_length=500, blank=True, default="")
    oauth_client_secret = EncryptedTextField(blank=True, default="")
    tools = models.JSONField(blank=True, default=list)
    declares_resources = models.BooleanField(default=False)
    resources = models.JSONField(blank=True, default=list)
    protocol_version = models.CharField(max_length=20, blank=True)
    listed_at = models.DateTimeField(null=True, blank=True)
    listing_stale_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["space", "name"], name="unique_tool_server_name"),
        ]

    def __str__(self) -> str:
        return self.name


class OAuthRegistration(models.Model):
    """The client this deployment is at a tool server's authorization server, and what
    discovery found there (`metadata`: `agentloom.toolservers.AuthorizationServer`).

    `kind` says how the client came to be, in the specification's order of preference: a client
    id registered beforehand, this deployment's Client ID Metadata Document, or dynamic
    registration. A secret, when the server issued one, is encrypted like keys.
    """

    class Kind(models.TextChoices):
        PREREGISTERED = "preregistered", "Registered beforehand"
        METADATA_DOCUMENT = "document", "Client ID Metadata Document"
        DYNAMIC = "dynamic", "Dynamic registration"

    server = models.OneToOneField(
        ToolServer, on_delete=models.CASCADE, related_name="oauth_registration"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    issuer = models.CharField(max_length=500)
    client_id = models.CharField(max_length=500)
    client_secret = EncryptedTextField(blank=True, default="")
    auth_method = models.CharField(max_length=32, default="none")
    redirect_uri = models.CharField(max_length=500)
    metadata = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.server} at {self.issuer}"


class OAuthConnection(models.Model):
    """An account connected to a tool server by OAuth: a member's own (`member`), or the space's
    shared one (`member` empty), which every run of the space acts as and says so.

    The tokens are encrypted like keys, never shown or returned, redacted from what runs write;
    a refresh takes the row's lock first (`models_app.services.tool_server_oauth`).
    """

    server = models.ForeignKey(
        ToolServer, on_delete=models.CASCADE, related_name="oauth_connections"
    )
    member = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="oauth_connections",
    )
    connected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    access_token = EncryptedTextField()
    refresh_token = EncryptedTextField(blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    scope = models.CharField(max_length=1000, blank=True, default="")
    refreshed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["server", "member"], name="unique_oauth_connection_member"
            ),
            models.UniqueConstraint(
                fields=["server"],
                condition=models.Q(member__isnull=True),
                name="unique_oauth_connection_shared",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.server}: {self.member or 'shared'}"


class OAuthAuthorization(models.Model):
    """An authorization in progress: a person left for the authorization server and comes back
    with `state`, which only the same browser session (`session_digest`), user and space end.

    `state` and the session key are kept as SHA-256 digests, the PKCE verifier encrypted; the
    row is removed when the person comes back, or after `AUTHORIZATION_MINUTES`.
    """

    state_digest = models.CharField(max_length=64, unique=True)
    session_digest = models.CharField(max_length=64)
    space = models.ForeignKey(Space, on_delete=models.CASCADE, related_name="+")
    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    shared = models.BooleanField(default=False)
    verifier = EncryptedTextField()
    redirect_uri = models.CharField(max_length=500)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"authorization of {self.server} started {self.created_at:%Y-%m-%d %H:%M}"


class SpendLimit(models.Model):
    """How much a space may spend on models in a calendar month of its time zone, in one
    currency: the whole space's, one agent's (`agent_id`) or one member's, or both.

    A question past the limit is refused; one past `warn_share` of it is taken with a warning.
    The spend is read from the record of usage (`sessions_app.services.usage`).
    """

    space = models.ForeignKey(Space, on_delete=models.CASCADE, related_name="spend_limits")
    # 0: every agent of the space (an agent's id otherwise; agents live above this app).
    agent_id = models.PositiveBigIntegerField(default=0)
    member = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="spend_limits",
        help_text="Empty: every member.",
    )
    currency = models.CharField(max_length=3)
    amount = models.DecimalField(max_digits=18, decimal_places=4)
    warn_share = models.FloatField(default=0.8)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="spend_limit_amount"),
            models.CheckConstraint(
                condition=models.Q(warn_share__gt=0, warn_share__lte=1),
                name="spend_limit_warn_share",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.amount} {self.currency} a month in {self.space}"
