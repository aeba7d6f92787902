from django.apps import AppConfig


class ContextAppConfig(AppConfig):
    name = "context_app"
    verbose_name = "Agents"
