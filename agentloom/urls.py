"""Top-level URL routes: admin, console pages, REST API and its schema."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import JsonResponse
from django.urls import include, path

from agentloom.security import DocsView, SchemaView
from sessions_app.metrics import metrics_view


def healthz(request):
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", include("sessions_app.console.urls")),
    # Console users need not be staff, so they log in here rather than through the admin.
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("api/", include("agentloom.api_urls")),
    # Behind login when DEBUG is off (agentloom/security.py).
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    path("api/docs/", DocsView.as_view(url_name="api-schema"), name="api-docs"),
]
