"""The model page: pick a provider, fetch its models, and see where the window numbers came from.

The form validates through `models_app.services.connections.connection_validate` and saves through
`connection_create` / `connection_update` (their nested forms, within the page's transaction), so
the page and the API refuse the same input with the same messages.
`static/models_app/discover.js` does the fetching without a page reload.
"""

from __future__ import annotations

import datetime
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import widgets as admin_widgets
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from agentloom.errors import ApplicationError
from agentloom.providers import (
    MANIFEST_MAX_AGE_DAYS,
    price_in_force,
    punycode_url,
    retirement_of,
)
from agentloom.spaces.admin_scoping import ServiceForm, ServiceWritesAdmin
from agentloom.spaces.selectors import administered_spaces
from models_app import checks
from models_app.models import ModelConnection
from models_app.selectors import connection_usage
from models_app.services.connections import (
    CONNECTION_FIELDS,
    DEFAULT_SAFETY_MARGIN_TOKENS,
    WINDOW_VALUES,
    connection_create_nested,
    connection_delete,
    connection_delete_nested,
    connection_update_nested,
    connection_validate,
)

# Shown together and saved together: a window source vouches for the values next to it.
_WINDOW_GROUP = (*WINDOW_VALUES, "window_source", "source_url", "verified_on")

SOURCE_NOTES = {
    "provider": "from the provider's model list",
    "provider_loaded": "the context length the local server reports the model loaded with",
    "provider_maximum": "the model's MAXIMUM: not loaded now, the server may load it smaller",
    "num_ctx": "sent as num_ctx with every request, so the server runs with it",
    "official_manifest": "from the official model manifest",
    "platform_default": "32K platform fallback: check it against the provider's documentation",
    "manual": "entered by an administrator",
    "": "not set yet: filled in on save from the manifest or the 32K fallback",
}


KEY_AGAIN = (
    "Enter the API key again: the key you typed was not saved, and a key is never shown back."
)


class ModelIdWidget(admin_widgets.AdminTextInputWidget):
    """The model ID input with the "Fetch available models" button and the list it fills."""

    resource_id: int | None = None
    has_api_key = False

    def render(self, name, value, attrs=None, renderer=None):
        field = super().render(name, value, attrs, renderer)
        return format_html(
            '<div class="model-picker">{}'
            '<div class="model-discovery" id="model-discovery" data-discover-url="{}" '
            'data-resource-id="{}" data-has-api-key="{}">'
            '<button type="button" class="button" id="fetch-models">Fetch available models</button>'
            ' <span id="discover-status" class="discover-status" role="status" '
            'aria-live="polite"></span>'
            '<select id="discovered-models" class="discovered-models" size="8" hidden '
            'aria-label="Available models"></select>'
            '<div class="connection-test" data-test-url="{}">'
            '<button type="button" class="button" id="test-connection">Test connection</button>'
            ' <span id="test-status" class="discover-status" role="status" aria-live="polite">'
            "</span></div></div></div>",
            field,
            reverse("api-models-discover"),
            self.resource_id or "",
            "true" if self.has_api_key else "false",
            reverse("api-model-connections-test"),
        )


class WindowSourceWidget(forms.Select):
    """The window-source select, followed by a badge naming the source, its link and date."""

    source_url = ""
    verified_on = ""

    def render(self, name, value, attrs=None, renderer=None):
        select = super().render(name, value, attrs, renderer)
        source = value or ""
        link = (
            format_html('<a href="{}" target="_blank" rel="noopener noreferrer">source</a>', url)
            if (url := self.source_url) and url.startswith(("https://", "http://"))
            else ""
        )
        verified = f"verified {self.verified_on}" if self.verified_on else ""
        stale = ""
        if verified and source == "official_manifest":
            age = _age_days(self.verified_on)
            if age is not None and age > MANIFEST_MAX_AGE_DAYS:
                stale = f"(over {MANIFEST_MAX_AGE_DAYS} days ago: check it against the source)"
        return format_html(
            '<span class="window-badge-row">{}'
            ' <span id="window-source-badge" class="window-badge" data-source="{}">{}</span>'
            ' <span id="window-source-note" class="window-source-note">{}</span>'
            ' <span id="window-source-link" class="window-source-link">{}</span>'
            ' <span id="window-verified" class="window-verified">{}</span>'
            ' <span id="window-stale" class="window-stale">{}</span></span>',
            select,
            source,
            source or "not set",
            SOURCE_NOTES.get(source, ""),
            link,
            verified,
            stale,
        )


def _age_days(verified_on: Any) -> int | None:
    try:
        day = (
            verified_on
            if isinstance(verified_on, datetime.date)
            else datetime.date.fromisoformat(str(verified_on))
        )
    except ValueError:
        return None
    return (checks.today() - day).days


def _integer_field(help_text: str) -> forms.IntegerField:
    return forms.IntegerField(
        required=False, help_text=help_text, widget=admin_widgets.AdminIntegerFieldWidget
    )


class ModelConnectionForm(ServiceForm):
    base_url = forms.CharField(
        required=False,
        label="Base URL",
        max_length=500,
        widget=admin_widgets.AdminTextInputWidget,
        help_text="Required for OpenAI-compatible servers. Blank: the official URL for OpenAI "
        "and DeepSeek. Not used by the local demo model.",
    )
    # Write-only: the stored key is never rendered back.
    api_key = forms.CharField(
        required=False,
        label="API key",
        strip=True,
        widget=forms.PasswordInput(
            render_value=False, attrs={"autocomplete": "new-password", "class": "vTextField"}
        ),
        help_text="Write-only, stored encrypted. On edit, leave blank to keep the stored key "
        "(only while provider and base URL stay the same).",
    )
    model_id = forms.CharField(
        required=False,
        max_length=200,
        label="Model",
        widget=ModelIdWidget,
        help_text="Press “Fetch available models” and pick one, or type a model ID.",
    )
    window_source = forms.ChoiceField(
        required=False,
        choices=[("", "— derive on save —"), *ModelConnection.WindowSource.choices],
        widget=WindowSourceWidget,
        help_text="Where the window values come from. Editing a value by hand makes it manual.",
    )
    context_window = _integer_field("Blank: from the manifest or the 32K fallback.")
    max_output_tokens = _integer_field(
        "Output reserved for the answer and sent as the request's limit. Blank: 4,096, never "
        "above the output cap."
    )
    max_output_cap = _integer_field("The provider's own output cap, when known.")
    safety_margin_tokens = _integer_field("Kept free beside the output reservation. Blank: 1,024.")
    source_url = forms.CharField(
        required=False,
        label="Source URL",
        max_length=500,
        widget=admin_widgets.AdminTextInputWidget,
    )
    verified_on = forms.DateField(required=False, widget=admin_widgets.AdminDateWidget)
    estimator = forms.ChoiceField(
        required=False,
        choices=[("", "— automatic —"), *ModelConnection.Estimator.choices],
        help_text="Automatic: the model's own tokenizer when the manifest lists this exact model "
        "on its official endpoint, else UTF-8 bytes (conservative). The server's own tokenizer: "
        "a self-hosted server that tokenizes (the connection test says so). New versions "
        "freeze it at publish.",
    )

    prices = forms.JSONField(
        required=False,
        help_text='Custom endpoints only: {"input": "0.40", "cached_input": "0.10", "output": '
        '"1.60", "currency": "USD"} per million tokens. Blank: cost unknown.',
    )

    class Meta:
        model = ModelConnection
        # estimator_source follows from the estimator field: blank is automatic.
        fields = ["space", *(name for name in CONNECTION_FIELDS if name != "estimator_source")]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # The key is write-only: an untouched (blank) field means "unchanged".
        self.initial["api_key"] = ""
        instance = self.instance
        if instance.pk is None:
            # Untouched window fields stay blank, so the service fills them and names the source.
            for name in _WINDOW_GROUP:
                self.initial[name] = None
            self.initial.setdefault("safety_margin_tokens", DEFAULT_SAFETY_MARGIN_TOKENS)
        # A view-only page (a space member) has no form fields at all.
        if "space" in self.fields and self.user is not None:
            self.fields["space"].queryset = administered_spaces(self.user)
        if "model_id" in self.fields:
            widget = self.fields["model_id"].widget
            widget.resource_id = instance.pk
            widget.has_api_key = bool(instance.pk and instance.api_key)
        if "window_source" in self.fields:
            widget = self.fields["window_source"].widget
            widget.source_url = self.initial.get("source_url") or ""
            widget.verified_on = self.initial.get("verified_on") or ""
        if "provider" in self.fields:
            self.fields[
                "provider"
            ].help_text = "“Local demo model” is the built-in offline demo, not a real LLM."
        if instance.pk is not None and instance.estimator_source != "manual":
            self.initial["estimator"] = ""
        if instance.prices:
            # The entry date is the service's to set; the page shows it beside the prices.
            self.initial["prices"] = {
                key: value for key, value in instance.prices.items() if key != "entered_on"
            }

    def full_clean(self):
        super().full_clean()
        typed_key = str(self.data.get(self.add_prefix("api_key")) or "").strip()
        if self.errors and typed_key and "api_key" in self.fields:
            # Every other field keeps what was typed; a key is never sent back to the page.
            note = format_html('<span class="key-again" id="key-again">{}</span>', KEY_AGAIN)
            # The bound field copied the help text when the fields were cleaned.
            self.fields["api_key"].help_text = self["api_key"].help_text = note

    def service_fields(self) -> dict[str, Any]:
        """Return what the service gets: every filled field on add, the changed ones on edit."""
        data = self.cleaned_data
        if self.instance.pk is None:
            return {
                name: data[name] for name in CONNECTION_FIELDS if data.get(name) not in (None, "")
            }
        changed = set(self.changed_data) & set(CONNECTION_FIELDS)
        if "provider" in changed:
            # The base URL on the page is meant for the provider now chosen.
            changed.add("base_url")
        if changed & set(_WINDOW_GROUP):
            # The values on the page and the source shown beside them go together.
            changed |= set(_WINDOW_GROUP)
        fields = {name: data.get(name) for name in CONNECTION_FIELDS if name in changed}
        if not fields.get("api_key"):
            fields.pop("api_key", None)
        if "estimator" in fields and not fields["estimator"]:
            del fields["estimator"]
            fields["estimator_source"] = "auto"
        return fields

    def check(self, cleaned: dict[str, Any]) -> None:
        # The model's own validators are not run (ServiceForm): URLValidator would refuse base
        # URLs the provider layer accepts.
        if self.instance.pk is not None:
            connection_validate(
                user=self.user, connection=self.instance, fields=self.service_fields()
            )
        elif cleaned.get("space") is not None:
            connection_validate(
                user=self.user, space=cleaned["space"], fields=self.service_fields()
            )


@admin.register(ModelConnection)
class ModelConnectionAdmin(ServiceWritesAdmin):
    form = ModelConnectionForm
    list_display = [
        "name",
        "space",
        "provider",
        "model_id",
        "context_window",
        "window_source",
        "effective_input_budget",
        "estimator",
    ]
    list_filter = ["provider", "window_source"]
    ordering = ["-id"]
    search_fields = ["name", "model_id"]

    class Media:
        css = {"all": ["models_app/model_page.css"]}
        js = ["models_app/discover.js"]

    # --- what each caller sees -----------------------------------------------------------------

    # Staff see their spaces' connections, as in the API (SpaceScopedAdmin); superusers, the
    # platform's operators, see all of them, but change only those of spaces they administer
    # (ServiceWritesAdmin): the services check the caller's role.

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("space")

    def get_readonly_fields(self, request, obj=None):
        fields = [
            "effective_budget",
            "estimator_status",
            "price_status",
            "retired_status",
            "learned_window_status",
            "learned_reasoning_status",
        ]
        return ["space", "base_url_punycode", *fields, "used_by"] if obj is not None else fields

    def get_fieldsets(self, request, obj=None):
        # A view-only page shows every field as text, which must not include the key.
        key = "api_key" if self.has_change_permission(request, obj) else "api_key_status"
        # A host with letters of another script is shown in punycode too: it may pass for another.
        host = ["base_url_punycode"] if obj is not None and punycode_url(obj.base_url) else []
        fieldsets = [
            (None, {"fields": ["space", "name", "provider", "base_url", *host, key]}),
            ("Model", {"fields": ["model_id", "retired_status"]}),
            (
                "Context window",
                {
                    "fields": [
                        "window_source",
                        "context_window",
                        "max_output_tokens",
                        "max_output_cap",
                        "safety_margin_tokens",
                        "effective_budget",
                        "source_url",
                        "verified_on",
                        "learned_window_status",
                    ],
                    "description": "Filled in from the provider's list, the official manifest or "
                    "the 32K fallback; the badge shows which. The input budget is the window "
                    "minus the output reservation and the safety margin. A window learned from "
                    "the server's refusals replaces a larger one; editing the window overrides "
                    "it (the History page keeps what was learned).",
                },
            ),
        ]
        fieldsets.append(
            (
                "Prices",
                {
                    "fields": ["prices", "price_status"],
                    "description": "The official endpoints' prices come from the manifest; a "
                    "custom endpoint's only from what an operator enters here.",
                },
            )
        )
        fieldsets.append(
            (
                "Thinking (DeepSeek)",
                {
                    "fields": ["thinking", "reasoning_effort"],
                    "description": "Sent with every call of the versions published from now "
                    "on: their answers, summaries and verifications.",
                },
            )
        )
        fieldsets.append(
            (
                "Reasoning",
                {
                    "fields": ["reasoning_passback", "learned_reasoning_status"],
                    "description": "Whether a reply's reasoning goes back to the model in later "
                    "requests, frozen into each version published: learned (sent back once the "
                    "server refuses a request without it), never, or DeepSeek's tool-span rule.",
                },
            )
        )
        fieldsets.append(
            (
                "Estimator",
                {
                    "fields": ["estimator", "estimator_status"],
                    "description": "How requests are measured against the input budget.",
                },
            )
        )
        if obj is not None:
            fieldsets.append(("Used by", {"fields": ["used_by"]}))
        return fieldsets

    # --- read-only rows ------------------------------------------------------------------------

    @admin.display(description="Effective input budget")
    def effective_budget(self, obj):
        if obj is None or obj.pk is None:
            return format_html('<span id="effective-budget">{}</span>', "computed on save")
        return format_html(
            '<span id="effective-budget">{} tokens</span>', f"{obj.effective_input_budget:,}"
        )

    @admin.display(description="Prices per 1M tokens")
    def price_status(self, obj):
        if obj is None or obj.pk is None:
            return "from the official manifest on save, when it lists this model's prices"
        price = price_in_force(
            obj.provider,
            obj.base_url,
            obj.model_id,
            at=datetime.datetime.now(datetime.UTC),
            manual=obj.prices,
        )
        if price is None:
            return format_html(
                '<span id="model-prices">{}</span>',
                "unknown: no cost is computed for this connection's calls",
            )
        listed = price.prices
        cached = "—" if listed.cached_input is None else f"{listed.cached_input}"
        text = format_html(
            "{} input, {} cached input, {} output ({})",
            listed.input,
            cached,
            listed.output,
            listed.currency,
        )
        if price.band is not None:
            text = format_html("now {}: {}, by the provider's time of day", price.band, text)
        if price.source == "manual":
            return format_html(
                '<span id="model-prices">{}, source manual, entered {}</span>',
                text,
                price.verified_on,
            )
        return format_html(
            '<span id="model-prices">{}, verified {} '
            '<a href="{}" target="_blank" rel="noopener noreferrer">source</a></span>',
            text,
            price.verified_on,
            price.source_url,
        )

    @admin.display(description="Retired")
    def retired_status(self, obj):
        retirement = obj and retirement_of(obj.provider, obj.base_url, obj.model_id)
        if not retirement:
            return format_html('<span id="model-retired">{}</span>', "no")
        return format_html(
            '<span id="model-retired" class="errornote">{} New versions cannot be published '
            'on it. <a href="{}" target="_blank" rel="noopener noreferrer">source</a></span>',
            retirement.message(obj.get_provider_display()),
            retirement.source_url,
        )

    @admin.display(description="Learned from the server")
    def learned_window_status(self, obj):
        if obj is None or obj.learned_window is None:
            return "nothing learned"
        return format_html(
            '<span id="learned-window">{} tokens, on {}: “{}”</span>',
            f"{obj.learned_window:,}",
            obj.learned_window_at.date().isoformat() if obj.learned_window_at else "?",
            obj.learned_window_evidence,
        )

    @admin.display(description="Rule learned from the server")
    def learned_reasoning_status(self, obj):
        if obj is None or not obj.learned_reasoning:
            return "nothing learned"
        rule = ModelConnection.ReasoningPassback(obj.learned_reasoning).label
        note = "" if not obj.reasoning_passback else " (your setting above wins)"
        return format_html('<span id="learned-reasoning">{}{}</span>', rule, note)

    @admin.display(description="Measured with")
    def estimator_status(self, obj):
        if obj is None or obj.pk is None:
            return "chosen on save"
        return format_html(
            '{} <span class="badge estimator-source-{}">{}</span>',
            obj.get_estimator_display(),
            obj.estimator_source,
            obj.get_estimator_source_display(),
        )

    @admin.display(description="Base URL in punycode")
    def base_url_punycode(self, obj):
        return format_html(
            '<code id="base-url-punycode">{}</code> (the host has non-ASCII letters)',
            punycode_url(obj.base_url) if obj is not None else "",
        )

    @admin.display(description="API key")
    def api_key_status(self, obj):
        return "stored (write-only, never shown)" if obj is not None and obj.api_key else "none"

    @admin.display(description="Agents and published versions")
    def used_by(self, obj):
        agents, versions = connection_usage(obj)
        if not agents and not versions:
            return "No agent uses this connection."
        rows = [
            (reverse("admin:context_app_agent_change", args=[agent.pk]), f"{agent} (draft)")
            for agent in agents
        ] + [
            (
                reverse("admin:context_app_agentversion_change", args=[version.pk]),
                f"{version} (published)",
            )
            for version in versions
        ]
        return format_html(
            '<ul class="connection-usage">{}</ul>',
            format_html_join("", '<li><a href="{}">{}</a></li>', rows),
        )

    # --- writes go through the services --------------------------------------------------------

    def service_save(self, request, form, change):
        fields = form.service_fields()
        if change:
            return connection_update_nested(user=request.user, connection=form.instance, **fields)
        return connection_create_nested(
            user=request.user, space=form.cleaned_data["space"], **fields
        )

    def delete_model(self, request, obj):
        # The delete page already lists protected agents; this catches one added meanwhile.
        try:
            connection_delete_nested(user=request.user, connection=obj)
        except ApplicationError as error:
            self.message_user(request, error.detail, messages.ERROR)

    def delete_queryset(self, request, queryset):
        # The "delete selected" action runs outside any transaction: each deletion is its own.
        for connection in queryset:
            try:
                connection_delete(user=request.user, connection=connection)
            except ApplicationError as error:
                self.message_user(request, f"{connection}: {error.detail}", messages.ERROR)
