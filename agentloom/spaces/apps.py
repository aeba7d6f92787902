from django.apps import AppConfig


class SpacesConfig(AppConfig):
    name = "agentloom.spaces"
    label = "spaces"
    verbose_name = "Spaces"
