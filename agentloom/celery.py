"""The Celery application: `celery -A agentloom.celery worker` (and `beat`)."""

import os
from pathlib import Path

from celery import Celery
from celery.signals import worker_ready

from agentloom.startup import freeze_loaded_objects

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentloom.settings")

app = Celery("agentloom")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The filesystem transport's folders, made once the app reads its configuration (before its
# first message is sent or received), so that importing the settings creates nothing.
_BROKER_FOLDERS = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")


@app.on_after_configure.connect
def make_broker_folders(sender: Celery, **kwargs) -> None:
    if not str(sender.conf.broker_url or "").startswith("filesystem://"):
        return
    options = sender.conf.broker_transport_options or {}
    for key in _BROKER_FOLDERS:
        if options.get(key):
            Path(options[key]).mkdir(parents=True, exist_ok=True)


@worker_ready.connect
def freeze_on_ready(**kwargs) -> None:
    """A worker that has started and loaded its tasks keeps what it loaded out of the garbage
    collector's full collections (`agentloom.startup`)."""
    freeze_loaded_objects()
