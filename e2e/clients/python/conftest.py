"""Shared fixtures for the Python client tests.

The tests start nothing: they connect to the broker named by the
MAGNETAR_SERVICE_URL environment variable (e.g. pulsar://127.0.0.1:6650)
and call its admin REST API at MAGNETAR_ADMIN_URL (e.g.
http://127.0.0.1:8080), which the Go test TestPythonClient in
dataplane/standalone sets after starting an in-process standalone (its
largest message 1 MiB, which the chunking tests rely on). Without them the
tests are skipped.
"""

import os
import signal

import pytest

pulsar = pytest.importorskip("pulsar")

from clientutil import Admin, unique  # noqa: E402


@pytest.fixture(scope="session")
def service_url():
    url = os.environ.get("MAGNETAR_SERVICE_URL")
    if not url:
        pytest.skip("MAGNETAR_SERVICE_URL is not set")
    return url


@pytest.fixture(scope="session")
def admin_url():
    url = os.environ.get("MAGNETAR_ADMIN_URL")
    if not url:
        pytest.skip("MAGNETAR_ADMIN_URL is not set")
    return url.rstrip("/")


@pytest.fixture(scope="session")
def admin(admin_url):
    return Admin(admin_url)


@pytest.fixture
def client(service_url):
    c = pulsar.Client(service_url, operation_timeout_seconds=30)
    yield c
    c.close()


@pytest.fixture
def topic():
    return "persistent://public/default/" + unique()


@pytest.fixture
def namespace(admin):
    """A fresh namespace in tenant public."""
    ns = "public/" + unique("ns")
    admin.create_namespace(ns)
    return ns


# Every test is bounded: SIGALRM fails one still running after this long
# (each blocking call of the client has a shorter timeout of its own).
TEST_TIMEOUT_S = 60


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout_s(n): bound the test to n seconds instead of %d" % TEST_TIMEOUT_S)


@pytest.fixture(autouse=True)
def _bounded(request):
    mark = request.node.get_closest_marker("timeout_s")
    limit = mark.args[0] if mark else TEST_TIMEOUT_S

    def expired(signum, frame):
        pytest.fail("test still running after %ds" % limit)

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(limit)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
