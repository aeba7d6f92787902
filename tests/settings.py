"""Settings of the test suite: the application's settings, with fixed keys for test data.

DEBUG keeps its default (off), as in production; keys given in the environment win. Processes
that tests start (workers, `manage.py`) inherit these variables.
"""

import os

os.environ.setdefault("SECRET_KEY", "test-suite-secret-key-not-for-production-0123456789")
os.environ.setdefault(
    "FIELD_ENCRYPTION_KEY", "test-suite-field-encryption-key-not-for-production-01234"
)
# Django's test client, schemathesis's WSGI calls and the live server for the browser.
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost,127.0.0.1,[::1]")

from agentloom.settings import *  # noqa: F403
