"""The Celery application: `celery -A agentloom.celery worker` (and `beat`)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentloom.settings")

app = Celery("agentloom")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
