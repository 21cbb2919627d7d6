"""Function state over the Magnetar worker's HTTP state API.

Pulsar's Python instance talks to BookKeeper's table service; Magnetar's
worker offers a small HTTP API instead, rooted at --state_storage_serviceurl.
Every path segment is percent-escaped (slashes included):

    GET    {base}/magnetar/v1/functions/{t}/{ns}/{name}/state/{key}    200 raw bytes | 404
    PUT    {base}/magnetar/v1/functions/{t}/{ns}/{name}/state/{key}    body raw bytes -> 204
    DELETE {base}/magnetar/v1/functions/{t}/{ns}/{name}/state/{key}    204
    POST   {base}/magnetar/v1/functions/{t}/{ns}/{name}/counter/{key}  {"delta": N} -> 200 {"value": N}
    GET    {base}/magnetar/v1/functions/{t}/{ns}/{name}/counter/{key}  200 {"value": N} (0 when absent)

Requests carry ``Authorization: Bearer <token>`` when the instance's client
authentication parameters hold a token. Without a usable base URL every
call raises RuntimeError (Pulsar's Python instance silently drops state
instead). Calls are synchronous and safe from any thread.
"""

import json
import urllib.parse

# urllib.request (and with it ssl, about 4 MB resident) is imported only when
# the function has a state URL.

NOT_CONFIGURED = "state storage is not configured for this worker"

_TIMEOUT_SECONDS = 10


class StateError(RuntimeError):
    """A state request failed; the message has the method, the path and
    the worker's answer."""


class NullState:
    """State when the worker gave no http(s) state URL: every call fails."""

    configured = False

    def _fail(self, *_args, **_kwargs):
        raise RuntimeError(NOT_CONFIGURED)

    get = put = delete = incr = get_counter = _fail


class HttpState:
    """The worker's state API for one function."""

    configured = True

    def __init__(self, base_url, tenant, namespace, name, token_source=None, opener=None):
        self._base = base_url.rstrip("/") + "/magnetar/v1/functions/" + "/".join(
            _seg(s) for s in (tenant, namespace, name))
        self._token_source = token_source
        self._opener = opener

    def _urlopen(self):
        if self._opener is None:
            import urllib.request

            class NoRedirect(urllib.request.HTTPRedirectHandler):
                # the token must not follow a redirect to another host
                def redirect_request(self, *args, **kwargs):
                    return None

            # No proxies (the state API is the local worker) and no redirects.
            self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect)
        return self._opener.open

    def get(self, key):
        """The value stored under key as bytes, or None when there is none."""
        status, body = self._call("GET", "state", key, missing_ok=True)
        return None if status == 404 else body

    def put(self, key, value):
        """Stores value (bytes, or str encoded as UTF-8) under key."""
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError("state values are bytes or str, not %s" % type(value).__name__)
        self._call("PUT", "state", key, body=bytes(value), content_type="application/octet-stream")

    def delete(self, key):
        """Removes key (its state value or its counter)."""
        self._call("DELETE", "state", key)

    def incr(self, key, amount):
        """Adds amount to the counter key and returns the new value."""
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise TypeError("counter amounts are integers, not %s" % type(amount).__name__)
        _, body = self._call("POST", "counter", key, body=json.dumps({"delta": amount}).encode(),
                             content_type="application/json")
        return _value(body)

    def get_counter(self, key):
        """The counter's value (0 when it was never incremented)."""
        _, body = self._call("GET", "counter", key)
        return _value(body)

    def _call(self, method, kind, key, body=None, content_type=None, missing_ok=False):
        if not isinstance(key, str) or key == "":
            raise ValueError("state keys are non-empty strings")
        import urllib.error
        import urllib.request

        url = "%s/%s/%s" % (self._base, kind, _seg(key))
        req = urllib.request.Request(url, data=body, method=method)
        if content_type:
            req.add_header("Content-Type", content_type)
        token = self._token_source() if self._token_source else None
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with self._urlopen()(req, timeout=_TIMEOUT_SECONDS) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            if missing_ok and e.code == 404:
                return 404, None
            detail = e.read(512).decode("utf-8", "replace").strip()
            raise StateError("state %s %s: HTTP %d %s" % (method, urllib.parse.urlsplit(url).path, e.code,
                                                          detail or e.reason)) from None
        except urllib.error.URLError as e:
            raise StateError("state %s %s: %s" % (method, url, e.reason)) from None


def create(base_url, tenant, namespace, name, token_source=None):
    """HttpState for an http(s) base URL, else NullState."""
    scheme = urllib.parse.urlsplit(base_url or "").scheme.lower()
    if scheme not in ("http", "https"):
        return NullState()
    return HttpState(base_url, tenant, namespace, name, token_source)


def token_source(auth_plugin, auth_params):
    """A callable returning the bearer token carried by the client
    authentication parameters, or None when they carry none. Accepts the
    forms Pulsar's token authentication takes: ``token:<jwt>``,
    ``file:///path`` (read on every call, so a rotated file is picked up),
    and ``{"token": "..."}``; a bare value counts when the plugin is the
    token plugin."""
    params = (auth_params or "").strip()
    if not params:
        return None
    if params.startswith("token:"):
        tok = params[len("token:"):].strip()
        return lambda: tok
    if params.startswith("file:"):
        path = urllib.parse.urlsplit(params).path or params[len("file:"):]

        def read():
            with open(path, encoding="utf-8") as f:
                return f.read().strip()
        return read
    if params.startswith("{"):
        try:
            tok = json.loads(params).get("token")
        except (ValueError, AttributeError):
            tok = None
        if isinstance(tok, str) and tok:
            return token_source(auth_plugin, tok if tok.startswith(("token:", "file:")) else "token:" + tok)
        return None
    if "token" in (auth_plugin or "").lower():
        return lambda: params
    return None


def _seg(s):
    return urllib.parse.quote(str(s), safe="")


def _value(body):
    try:
        return int(json.loads(body)["value"])
    except (ValueError, KeyError, TypeError):
        raise StateError("state: unexpected counter answer %r" % (body[:200],)) from None
