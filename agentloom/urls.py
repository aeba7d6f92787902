"""Top-level URL routes: admin, console pages, REST API and its schema."""

from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView


def healthz(request):
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", include("sessions_app.console_urls")),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("api/", include("agentloom.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]
