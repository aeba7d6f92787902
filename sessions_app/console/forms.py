"""The console's query parameters and posted ids, read by Django forms.

A position (`after`) and a page size (`limit`) are read by the REST API's own fields
(`agentloom.api`) and an instance by the journal API's rule, so a console page takes what the API
takes. What a value that is not valid does is each view's: the chat's records answer 404, the
journal page shows the whole journal with a notice, its rows answer 400, a new session's agent
answers 404; `run`, which only places marks and run boundaries, is simply no run.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.http import QueryDict
from rest_framework import serializers

from agentloom.api import QueryIntegerField, QueryPositionField
from agentloom.engine import MAX_QUERY_CHARS
from sessions_app.selectors.journal import JOURNAL_LIMIT_MAX
from sessions_app.serializers import INSTANCE_PATTERN

JOURNAL_PAGE = 50
# What the chat says of a question of nothing but spaces, the plain form and the script alike
# (the API keeps its field-named refusal).
BLANK_QUESTION = "Type a question first."


class ApiField(forms.Field):
    """A parameter read by one of the REST API's fields; absent, it is `default`."""

    def __init__(self, api_field: serializers.Field, *, default: Any = None) -> None:
        super().__init__(required=False)
        self.api_field = api_field
        self.default = default

    def to_python(self, value: str | None) -> Any:
        if value is None:
            return self.default
        try:
            return self.api_field.run_validation(value)
        except serializers.ValidationError as error:
            raise forms.ValidationError([str(message) for message in error.detail]) from None


class InstanceField(forms.Field):
    """An instance of the journal: `main` or a child instance id such as `1.1`; absent or empty
    (the filter's "All instances"), None."""

    def __init__(self) -> None:
        super().__init__(required=False)

    def to_python(self, value: str | None) -> str | None:
        if not value:
            return None
        # Matched whole: the pattern's `$` would also match before a trailing newline.
        if re.fullmatch(INSTANCE_PATTERN, value):
            return value
        raise forms.ValidationError("Must be `main` or a child instance id such as 1.1.")


class RunField(forms.Field):
    """The id of a run the page already shows; anything but decimal digits is no run (None)."""

    def __init__(self) -> None:
        super().__init__(required=False)

    def to_python(self, value: str | None) -> int | None:
        return int(value) if value is not None and value.isdecimal() else None


class WholeNumberField(forms.Field):
    """A whole number as Python's `int` reads it."""

    def to_python(self, value: str | None) -> int:
        try:
            return int(value)
        except (TypeError, ValueError):
            raise forms.ValidationError("Enter a whole number.") from None


class ChatRecordsQuery(forms.Form):
    """The chat's request for new records: those after `after`, and the marks of `run` too."""

    after = ApiField(QueryPositionField(), default=0)
    run = RunField()


class JournalQuery(forms.Form):
    """The journal viewer's filters, and for its rows `run`, the run of the row shown last."""

    after = ApiField(QueryPositionField(), default=0)
    limit = ApiField(
        QueryIntegerField(min_value=1, max_value=JOURNAL_LIMIT_MAX), default=JOURNAL_PAGE
    )
    instance = InstanceField()
    run = RunField()
    # A search of the journal (the matching `search_history` uses); empty: the timeline.
    q = forms.CharField(required=False, max_length=MAX_QUERY_CHARS, strip=True)


class AskForm(forms.Form):
    """The plain form's question, stripped; the service checks the rest."""

    question = forms.CharField(error_messages={"required": BLANK_QUESTION})


class RetentionForm(forms.Form):
    """A retention rule's days, previewed or saved; the rule's service checks the range."""

    days = WholeNumberField()


class HoldForm(forms.Form):
    """Place a session on legal hold (`1`) or release it (`0`)."""

    hold = forms.TypedChoiceField(choices=[("1", "hold"), ("0", "release")], coerce=int)


class NewSessionForm(forms.Form):
    """The agent a new session is opened with."""

    agent = WholeNumberField()


def journal_filters(query: QueryDict) -> tuple[dict[str, Any], bool]:
    """Return the journal viewer's filters read from `query`, and whether one was not valid;
    then the filters are the defaults: the whole journal from its start.
    """
    form = JournalQuery(query)
    if form.is_valid():
        return form.cleaned_data, False
    return {"after": 0, "limit": JOURNAL_PAGE}, True
