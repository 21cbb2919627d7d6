"""Shared fixtures for the Python client tests.

The tests start nothing: they connect to the broker named by the
MAGNETAR_SERVICE_URL environment variable (e.g. pulsar://127.0.0.1:6650),
which the Go test TestPythonClient in dataplane/standalone sets after
starting an in-process standalone. Without it they are skipped.
"""

import os
import uuid

import pytest

pulsar = pytest.importorskip("pulsar")


@pytest.fixture(scope="session")
def service_url():
    url = os.environ.get("MAGNETAR_SERVICE_URL")
    if not url:
        pytest.skip("MAGNETAR_SERVICE_URL is not set")
    return url


@pytest.fixture
def client(service_url):
    c = pulsar.Client(service_url, operation_timeout_seconds=30)
    yield c
    c.close()


@pytest.fixture
def topic():
    return "persistent://public/default/py-" + uuid.uuid4().hex[:12]
