"""Browser hardening shared by every page: the Content-Security-Policy, no caching of what a
signed-in user sees, login throttling that works for every login form, and the API docs gate.

The policy admits scripts and styles from our own origin only: no inline script, no inline
style attribute, no `eval`, nothing from another host. Templates therefore keep code in static
files (static/console/console.js, static/api/…) and pass data through `data-*` attributes or
`<script type="application/json">` blocks, which are data, not code.
"""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib.auth.mixins import AccessMixin
from django.utils.cache import add_never_cache_headers
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import BasePermission

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class SecurityHeadersMiddleware:
    """Add the Content-Security-Policy to every answer, and `no-store` for signed-in users.

    Pages and API answers of a signed-in user carry decrypted journal content, so no browser or
    proxy cache may keep them. `request.user` is read after the view, when DRF has put the
    token's user there as well.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            add_never_cache_headers(response)
        return response


class LoginThrottleBackend(AxesStandaloneBackend):
    """django-axes' lockout check, for logins that come with a web request.

    Every login form (console and admin) passes its request, so failures are counted per user
    name and address and a locked-out caller is refused before the password is checked. A call
    without a request (the test client, a shell) has no caller to count and is left to the next
    backend.
    """

    def authenticate(self, request=None, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


class AuthenticatedUnlessDebug(BasePermission):
    """Outside DEBUG, only authenticated callers (token or session) read the schema."""

    def has_permission(self, request, view) -> bool:
        return settings.DEBUG or bool(request.user and request.user.is_authenticated)


class SchemaView(SpectacularAPIView):
    """The OpenAPI schema: 401 to anonymous callers when DEBUG is off."""

    permission_classes = [AuthenticatedUnlessDebug]


class DocsView(AccessMixin, SpectacularSwaggerSplitView):
    """Swagger UI, its start-up script served as a file (no inline script, for the CSP).

    Outside DEBUG an anonymous browser is sent to the login page first.
    """

    template_name = "api/swagger_ui.html"

    def dispatch(self, request, *args, **kwargs):
        if not settings.DEBUG and not request.user.is_authenticated:
            return self.handle_no_permission()
        return super().dispatch(request, *args, **kwargs)
