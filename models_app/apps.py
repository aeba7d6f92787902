from django.apps import AppConfig


class ModelsAppConfig(AppConfig):
    name = "models_app"
    verbose_name = "Model connections"

    def ready(self) -> None:
        from models_app import (
            checks,  # noqa: F401  (registers the manifest freshness check)
            signals,  # noqa: F401  (connections end with a server or a member)
        )
