"""Form fields shared by the admin and the console."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput

from agentloom.validation import MAX_JSON_DEPTH, json_depth_exceeds


class JSONFormField(forms.JSONField):
    """Django's JSON form field, refusing JSON nested more than MAX_JSON_DEPTH levels.

    Django's own field lets the parser's RecursionError through (a 500) for a body of about
    1,000 nested brackets, both when it cleans the value and when it shows the form again.
    """

    def to_python(self, value):
        try:
            converted = super().to_python(value)
        except RecursionError:
            converted = None
            too_deep = True
        else:
            too_deep = json_depth_exceeds(converted, MAX_JSON_DEPTH)
        if too_deep:
            raise ValidationError(
                f"Nested more than {MAX_JSON_DEPTH} levels deep.", code="invalid", params={}
            )
        return converted

    def bound_data(self, data, initial):
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)
