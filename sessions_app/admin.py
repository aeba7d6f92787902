from django.contrib import admin

from agentloom.spaces.admin_encrypted import EncryptedPayloadAdmin
from sessions_app.models import (
    ModelCall,
    Run,
    RunSupplement,
    Session,
    SessionMessage,
    SessionView,
)


@admin.register(Session)
class SessionAdmin(EncryptedPayloadAdmin):
    list_display = ["id", "title", "space", "agent", "agent_version", "created_by", "created_at"]
    list_filter = ["space"]


@admin.register(Run)
class RunAdmin(EncryptedPayloadAdmin):
    encrypted_fields = ("question", "answer", "checkpoint")
    list_display = ["id", "session", "number", "status", "attempt", "error", "created_at"]
    list_filter = ["status"]


@admin.register(SessionMessage)
class SessionMessageAdmin(EncryptedPayloadAdmin):
    encrypted_fields = ("message",)
    list_display = ["session", "seq", "run", "instance", "kind", "entry_key", "created_at"]
    list_filter = ["kind", "instance"]


@admin.register(SessionView)
class SessionViewAdmin(EncryptedPayloadAdmin):
    encrypted_fields = ("messages",)
    list_display = ["session", "revision", "watermark", "run", "user_turns", "model_steps"]


@admin.register(RunSupplement)
class RunSupplementAdmin(EncryptedPayloadAdmin):
    encrypted_fields = ("text",)
    list_display = ["run", "position", "consumed_at", "created_at"]


@admin.register(ModelCall)
class ModelCallAdmin(EncryptedPayloadAdmin):
    encrypted_fields = ("response",)
    list_display = ["run", "instance", "purpose", "request_estimate", "latency_ms", "error"]
    list_filter = ["purpose"]
