"""Console pages (server-rendered): home, chat, session viewer, run context."""

from django.urls import path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False), name="home"),
]
