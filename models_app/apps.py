from django.apps import AppConfig


class ModelsAppConfig(AppConfig):
    name = "models_app"
    verbose_name = "Model connections"
