"""The engine's exception root: everything the engine raises on purpose derives from EngineError."""


class EngineError(Exception):
    """Base class of every error the context engine raises deliberately."""


class ConfigurationError(EngineError):
    """A budget, policy or tool configuration is invalid; `field` names what is wrong."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class GatewayError(EngineError):
    """A model call failed.

    `kind` is one of: "auth", "rate_limit", "context_length", "bad_request", "upstream",
    "network", "timeout", "protocol", and "output_limit" (the reply was cut by the output limit
    before any text: a run error, never an empty answer or an empty summary); the provider layer
    adds its own (`agentloom.providers` KINDS: "quota", "model_unknown", "reasoning_missing", …).
    The message is fixed text chosen by the gateway; it never carries a provider's response body,
    headers or credentials.
    """

    def __init__(self, kind: str, message: str, *, status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status


class ToolError(EngineError):
    """A tool could not do what it was asked; the message is shown to the model."""


class FrameError(EngineError):
    """A checkpoint frame cannot be read: wrong format or a malformed field."""


class ContextBudgetExceeded(EngineError):
    """A request is larger than the effective input budget, so it was not sent."""


class ModelCallLimitReached(EngineError):
    """The execution has used every model call its limits allow."""


class LeaseLostError(EngineError):
    """The application no longer holds the run's lease: the engine stops without writing."""


class ToolCancelled(EngineError):
    """A tool stopped because the run was cancelled while it ran."""


class PayloadRuleBroken(EngineError):
    """A finished payload breaks a rule of its provider's API (see `_gate`); it was not sent."""

    def __init__(self, rule: str, detail: str):
        self.rule = rule
        self.detail = detail
        super().__init__(f"payload_rule_broken: {rule}: {detail}")
