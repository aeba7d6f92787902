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

# Rate limits are off unless a test turns one on (tests/api/test_rate_limits.py): the suite asks
# many questions of one session in a second.
for _limit in ("DISCOVERY", "RUNS_PER_USER", "RUNS_PER_SESSION", "SUPPLEMENTS_PER_USER"):
    os.environ.setdefault(f"RATE_LIMIT_{_limit}", "off")
os.environ.setdefault("RATE_LIMIT_SUPPLEMENTS_PER_SESSION", "off")
# The same for open events streams (tests/api/test_run_events.py sets a bound): the live server
# notices a page that stopped following a stream only at its next write.
os.environ.setdefault("EVENT_STREAMS_PER_USER", "1000")

from agentloom.settings import *  # noqa: E402, F403

# Most tests make users with passwords (the named users, logins). The default hasher costs about
# half a second a password by design, which made user setup most of many tests' time; no test is
# about the hasher's cost. Processes the tests start with these settings hash the same way.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
