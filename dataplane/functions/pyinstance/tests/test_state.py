import http.server
import json
import threading

import pytest

from magnetar_instance import state


class FakeWorker(http.server.BaseHTTPRequestHandler):
    store = {}
    counters = {}
    seen = []

    def log_message(self, *a):
        pass

    def _key(self):
        # /magnetar/v1/functions/<t>/<ns>/<n>/<kind>/<key>, each escaped
        parts = self.path.split("/")
        assert parts[1:4] == ["magnetar", "v1", "functions"], self.path
        return parts[7], "/".join(parts[4:7]) + "/" + parts[8]

    def _send(self, code, body=b"", ctype="application/octet-stream"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self):
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_GET(self):
        kind, k = self._key()
        self.seen.append(("GET", self.path, self.headers.get("Authorization")))
        if kind == "state":
            if k in self.store:
                self._send(200, self.store[k])
            else:
                self._send(404, b"no such key")
        else:
            self._send(200, json.dumps({"value": self.counters.get(k, 0)}).encode(), "application/json")

    def do_PUT(self):
        kind, k = self._key()
        self.seen.append(("PUT", self.path, self.headers.get("Authorization")))
        self.store[k] = self._body()
        self._send(204)

    def do_DELETE(self):
        kind, k = self._key()
        self.store.pop(k, None)
        self.counters.pop(k, None)
        self._send(204)

    def do_POST(self):
        kind, k = self._key()
        if self.path.endswith("/boom"):
            return self._send(500, b"disk on fire")
        self.counters[k] = self.counters.get(k, 0) + json.loads(self._body())["delta"]
        self._send(200, json.dumps({"value": self.counters[k]}).encode(), "application/json")


@pytest.fixture
def worker():
    FakeWorker.store, FakeWorker.counters, FakeWorker.seen = {}, {}, []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeWorker)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_values_and_counters(worker):
    s = state.create(worker + "/", "public", "default", "wc")
    assert s.configured
    assert s.get("missing") is None
    s.put("k", "v1")
    assert s.get("k") == b"v1"
    s.put("bin", b"\x00\xff")
    assert s.get("bin") == b"\x00\xff"
    assert s.get_counter("c") == 0
    assert s.incr("c", 5) == 5
    assert s.incr("c", -2) == 3
    assert s.get_counter("c") == 3
    s.delete("k")
    assert s.get("k") is None
    s.delete("c")
    assert s.get_counter("c") == 0


def test_every_segment_is_escaped(worker):
    s = state.create(worker, "my tenant", "ns/x", "f")
    s.put("a/b c?d", "x")
    assert s.get("a/b c?d") == b"x"
    assert FakeWorker.seen[0][1] == "/magnetar/v1/functions/my%20tenant/ns%2Fx/f/state/a%2Fb%20c%3Fd"


def test_errors_carry_the_answer(worker):
    s = state.create(worker, "t", "n", "f")
    with pytest.raises(state.StateError, match="HTTP 500 disk on fire"):
        s.incr("boom", 1)
    with pytest.raises(TypeError):
        s.incr("c", 1.5)
    with pytest.raises(TypeError):
        s.put("k", 3)


def test_unreachable_worker():
    s = state.create("http://127.0.0.1:1", "t", "n", "f")
    with pytest.raises(state.StateError):
        s.get("k")


@pytest.mark.parametrize("url", ["", None, "bk://127.0.0.1:4181", "etcd:http://x"])
def test_not_configured_raises(url):
    s = state.create(url, "t", "n", "f")
    assert not s.configured
    for call in (lambda: s.get("k"), lambda: s.put("k", "v"), lambda: s.incr("k", 1),
                 lambda: s.get_counter("k"), lambda: s.delete("k")):
        with pytest.raises(RuntimeError, match="^state storage is not configured for this worker$"):
            call()


def test_bearer_token_forms(worker, tmp_path):
    tok_file = tmp_path / "token"
    tok_file.write_text("from-file\n")
    cases = [
        ("org.apache.pulsar.client.impl.auth.AuthenticationToken", "token:abc", "Bearer abc"),
        ("org.apache.pulsar.client.impl.auth.AuthenticationToken", "file://" + str(tok_file), "Bearer from-file"),
        ("org.apache.pulsar.client.impl.auth.AuthenticationToken", '{"token":"j"}', "Bearer j"),
        ("org.apache.pulsar.client.impl.auth.AuthenticationToken", "bare", "Bearer bare"),
        ("org.apache.pulsar.client.impl.auth.AuthenticationTls", "tlsCertFile:/a,tlsKeyFile:/b", None),
        (None, None, None),
    ]
    for plugin, params, want in cases:
        FakeWorker.seen = []
        s = state.create(worker, "t", "n", "f", state.token_source(plugin, params))
        s.get("k")
        assert FakeWorker.seen[0][2] == want, (plugin, params)
