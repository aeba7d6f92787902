"""How the console answers an application error: one decorator on every view.

`NotFound` is Django's 404 (a missing object and someone else's look alike), `PermissionDenied`
Django's 403. Any other `ApplicationError` raised by an action is shown as a message on the page
the action returns to; a page or fragment lets it through.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib import messages
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from django.shortcuts import redirect

from agentloom.errors import ApplicationError, NotFound, PermissionDenied


def console_errors(*, back: Callable[..., str] | None = None, prefix: str = "") -> Callable:
    """Return a decorator that maps a view's application errors to Django's answers.

    `back(request, **url_kwargs)` returns the address an action goes to when a service refuses
    it, with the refusal's detail (after `prefix`) as an error message there.
    """

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            try:
                return view(request, *args, **kwargs)
            except NotFound:
                raise Http404("Not found.") from None
            except PermissionDenied as error:
                raise DjangoPermissionDenied(error.detail) from None
            except ApplicationError as error:
                if back is None:
                    raise
                messages.error(request, f"{prefix}{error.detail}")
                return redirect(back(request, **kwargs))

        return wrapped

    return decorate
