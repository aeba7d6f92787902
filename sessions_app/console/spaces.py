"""The console's page of a space: its retention rule, stated for every member, set by its admins;
its OAuth tool servers, whose account each acts as, and the buttons that connect one
(`sessions_app.console.oauth`).

Any member sees the rule in force: sessions deleted N days after their last run, or kept (0),
who set it and when. A space admin also sees what the rule removes now, previews another rule
(`?days=N`: what `manage.py apply_retention --dry-run --space --days` computes, `retention_due`)
and saves the rule previewed (`retention_set`, the service the API and the admin call). Outside
the space the page is 404; a member's post is 403.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agentloom.errors import InvalidInput
from agentloom.spaces.models import Membership
from agentloom.spaces.selectors import space_role
from agentloom.spaces.services.retention import (
    MAX_RETENTION_DAYS,
    retention_days_validate,
    retention_set,
)
from context_app.selectors import space_get
from models_app.selectors import oauth_identities
from sessions_app.console.errors import console_errors
from sessions_app.console.forms import RetentionForm
from sessions_app.services.retention import retention_due


def _space_page(request, *, space_id: int, **url_kwargs) -> str:
    return reverse("console-space", args=[space_id])


def _proposed(query: QueryDict) -> tuple[int | None, str]:
    """Return the days of the rule `query` previews (None: no preview), or why they are not one."""
    if "days" not in query:
        return None, ""
    form = RetentionForm(query)
    if not form.is_valid():
        return None, form.errors["days"][0]
    try:
        return retention_days_validate(form.cleaned_data["days"]), ""
    except InvalidInput as error:
        return None, error.detail


@require_GET
@login_required
@console_errors()
def space(request, space_id: int):
    """Show the space's retention rule; a space admin previews and sets another."""
    space = space_get(user=request.user, space_id=space_id)
    role = space_role(request.user, space)
    context = {
        "space": space,
        "role": role,
        "max_days": MAX_RETENTION_DAYS,
        "oauth_servers": oauth_identities(request.user, space.pk),
        "is_admin": role == Membership.Role.ADMIN,
    }
    if role == Membership.Role.ADMIN:
        days, invalid = _proposed(request.GET)
        context.update(
            is_admin=True,
            removes_now=retention_due(space).count(),
            proposed=days,
            would_remove=retention_due(space, days=days).count() if days is not None else None,
            invalid_days=invalid,
        )
    return render(request, "console/space.html", context)


@require_POST
@login_required
@console_errors(back=_space_page, prefix="Rule not saved: ")
def retention(request, space_id: int):
    """Save the space's retention rule (a space admin only), then return to its page."""
    space = space_get(user=request.user, space_id=space_id)
    form = RetentionForm(request.POST)
    if not form.is_valid():
        raise InvalidInput(form.errors["days"][0], field="retention_days")
    space = retention_set(user=request.user, space=space, days=form.cleaned_data["days"])
    days = space.retention_days
    messages.success(
        request,
        f"Rule saved: sessions are deleted {days} day{'s' if days != 1 else ''} after their last "
        "run."
        if days
        else "Rule saved: sessions are kept.",
    )
    return redirect("console-space", space_id=space.pk)
