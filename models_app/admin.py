from django import forms
from django.contrib import admin

from models_app.models import ModelConnection


class ModelConnectionForm(forms.ModelForm):
    # The stored key is never rendered back; a blank field keeps it (see clean_api_key).
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only. Leave blank to keep the stored key.",
    )

    class Meta:
        model = ModelConnection
        fields = [
            "space",
            "name",
            "provider",
            "base_url",
            "api_key",
            "model_id",
            "context_window",
            "max_output_tokens",
            "max_output_cap",
            "safety_margin_tokens",
            "window_source",
            "source_url",
            "verified_on",
        ]

    def clean_api_key(self):
        value = self.cleaned_data.get("api_key", "")
        if not value and self.instance.pk:
            return self.instance.api_key
        return value


@admin.register(ModelConnection)
class ModelConnectionAdmin(admin.ModelAdmin):
    form = ModelConnectionForm
    list_display = ["name", "space", "provider", "model_id", "context_window", "window_source"]
    list_filter = ["provider", "window_source"]
    search_fields = ["name", "model_id"]
