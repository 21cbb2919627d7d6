"""The Python counterpart of io.magnetar.e2e.JavaClient, for the e2e tests.

pulsar-client for Python (3.13, on the C++ client) has no ControlledClusterFailover: it takes a
ServiceInfoProvider written in Python instead. EndpointProvider below is one that polls a failover
endpoint serving the Java client's JSON ({"serviceUrl", "tlsTrustCertsFilePath",
"authPluginClassName", "authParamsString"}) with a bearer header and, as ControlledClusterFailover
does, switches the client to the serviceUrl it names, with the trust file and the authentication it
names when it names them, else those of the command line.

Same command line and output lines as JavaClient (see its class comment), except that MSG's last
field is "?": the Python client does not tell which cluster a message was replicated from.

    python3 failover_client.py produce|consume --service-url URL [--provider-url URL
        --provider-token KEY --check-interval-ms N] [--auth-plugin CLASS --auth-params PARAMS]
        [--tls-trust-certs-file PEM] --topic T [--name P --key K --count N --rate R]
        [--subscription S --type Shared]

--auth-plugin and --auth-params take the Java client's names and parameters:
org.apache.pulsar.client.impl.auth.AuthenticationToken with "token:<jwt>" or "file:///path" (read
again at each connection and challenge), org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2
with its JSON ({"issuerUrl", "privateKey", "audience", "scope"}), and the other plugins the C++
client knows by their Java names (AuthenticationTls, AuthenticationBasic, AuthenticationAthenz).
"""

import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

import pulsar

_out_lock = threading.Lock()

# The C++ client logs to standard output unless given a logger: its lines go
# to standard error, which the harness keeps apart from the event lines.
_log = pulsar.FileLogger(pulsar.LoggerLevel.Info, "/dev/stderr")


def emit(line):
    with _out_lock:
        sys.stdout.write(line.replace("\n", " ") + "\n")
        sys.stdout.flush()


# The plugins the C++ client has, by the names it knows them: the Java class names and its own.
_KNOWN_PLUGINS = {"org.apache.pulsar.client.impl.auth." + c for c in (
    "AuthenticationToken", "oauth2.AuthenticationOAuth2", "AuthenticationTls", "AuthenticationBasic",
    "AuthenticationAthenz")} | {"token", "oauth2", "tls", "basic", "athenz"}

# The plugins whose JSON parameters the C++ client spells otherwise than the Java one: for each,
# the Java name of a parameter and the C++ name.
_OAUTH2_NAMES = {"issuerUrl": "issuer_url", "privateKey": "private_key"}
_BASIC_NAMES = {"userId": "username"}
_RENAMED_PARAMS = {
    "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2": _OAUTH2_NAMES,
    "oauth2": _OAUTH2_NAMES,
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": _BASIC_NAMES,
    "basic": _BASIC_NAMES,
}


def make_authentication(plugin, params):
    """The pulsar.Authentication for a Java plugin class name and its parameter string (None
    without a plugin). The C++ client knows its plugins by their Java names and takes the Java
    parameter strings, except some JSON keys, renamed here."""
    if not plugin:
        return None
    # Any other name is taken by the C++ client for the path of a plugin library; one it cannot
    # load leaves the client without authentication, and it only logs that.
    if plugin not in _KNOWN_PLUGINS and not os.path.isfile(plugin):
        raise ValueError("authentication plugin %s: not one the C++ client has, nor a library" % plugin)
    names = _RENAMED_PARAMS.get(plugin)
    if names and params.lstrip().startswith("{"):
        try:
            given = json.loads(params)
        except ValueError as e:
            raise ValueError("%s: parameters are not JSON: %s" % (plugin, e))
        params = json.dumps({names.get(k, k): v for k, v in given.items()})
    return pulsar.Authentication(plugin, params)


class Target:
    """What the client connects with: a service URL, a trust file (None: the system's roots) and
    an authentication (plugin and parameters; None: none)."""

    def __init__(self, url, trust, plugin, params, auth=None):
        self.url, self.trust, self.plugin, self.params = url, trust or None, plugin or None, params
        self.auth = auth if auth is not None else make_authentication(self.plugin, params)

    def key(self):
        return (self.url, self.trust, self.plugin, self.params)

    def service_info(self):
        return pulsar.ServiceInfo(self.url, self.auth, self.trust)


class EndpointProvider(pulsar.ServiceInfoProvider):
    """Polls the failover endpoint every interval and switches the client when what the endpoint
    names differs from what it uses. As with ControlledClusterFailover, a tlsTrustCertsFilePath in
    the answer replaces the trust file, and authPluginClassName with authParamsString (both set)
    the authentication; without them the client keeps what it has, from its arguments or an
    earlier answer. default_url, tls_trust_certs_file and the authentication (a Java plugin class
    name and its parameters, see make_authentication) are what it starts with; token is the key
    sent as "Authorization: Bearer <token>" to the endpoint."""

    def __init__(self, default_url, endpoint, token, interval_s, tls_trust_certs_file=None,
                 auth_plugin=None, auth_params=""):
        self._target = Target(default_url, tls_trust_certs_file, auth_plugin, auth_params)
        self._endpoint = endpoint
        self._token = token
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = None

    def initial_service_info(self):
        return self._target.service_info()

    def initialize(self, on_service_info_update):
        self._thread = threading.Thread(target=self._run, args=(on_service_info_update,), daemon=True)
        self._thread.start()

    def current(self):
        return self._target.url

    def _fetch(self):
        req = urllib.request.Request(self._endpoint, headers={"Accept": "application/json"})
        if self._token:
            req.add_header("Authorization", "Bearer " + self._token)
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                doc = json.load(resp)
        except (urllib.error.URLError, OSError, ValueError) as e:
            print("failover endpoint: %s" % e, file=sys.stderr, flush=True)
            return None
        if not isinstance(doc, dict):
            print("failover endpoint: answer is not a JSON object", file=sys.stderr, flush=True)
            return None
        field = lambda name: doc.get(name) if isinstance(doc.get(name), str) else ""
        url = field("serviceUrl")
        if not url:
            return None
        cur = self._target
        trust = field("tlsTrustCertsFilePath") or cur.trust
        plugin, params = field("authPluginClassName"), field("authParamsString")
        if not (plugin and params) or (plugin, params) == (cur.plugin, cur.params):
            plugin, params, auth = cur.plugin, cur.params, cur.auth
        else:
            auth = None
        if (url, trust or None, plugin or None, params) == cur.key():
            return None
        try:
            return Target(url, trust, plugin, params, auth)
        except Exception as e:  # an authentication the client cannot make: stay
            print("failover endpoint: %s: %s" % (url, e), file=sys.stderr, flush=True)
            return None

    def _run(self, update):
        while not self._stop.wait(self._interval):
            nxt = self._fetch()
            if nxt is not None:
                print("failover endpoint: switch to %s (trust file %s, authentication %s)"
                      % (nxt.url, nxt.trust, nxt.plugin), file=sys.stderr, flush=True)
                update(nxt.service_info())
                self._target = nxt

    def close(self):
        self._stop.set()


def parse_flags(argv):
    flags = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("--"):
            raise ValueError("unexpected argument " + a)
        name = a[2:]
        if "=" in name:
            name, value = name.split("=", 1)
        elif i + 1 < len(argv):
            i += 1
            value = argv[i]
        else:
            raise ValueError("flag --%s needs a value" % name)
        flags[name] = value
        i += 1
    return flags


def build_client(flags, stopping):
    url = flags.get("service-url", "")
    if not url:
        raise ValueError("flag --service-url is required")
    trust, plugin, params = (flags.get("tls-trust-certs-file", ""), flags.get("auth-plugin", ""),
                             flags.get("auth-params", ""))
    endpoint = flags.get("provider-url", "")
    if endpoint:
        # A client on a provider takes its URL, trust file and authentication from the provider's
        # ServiceInfo, never from its own arguments.
        provider = EndpointProvider(url, endpoint, flags.get("provider-token", ""),
                                    int(flags.get("check-interval-ms", "1000")) / 1000.0,
                                    trust, plugin, params)
        client = pulsar.Client(provider, operation_timeout_seconds=30, logger=_log)
        current = provider.current
    else:
        target = Target(url, trust, plugin, params)
        kwargs = {}
        if target.trust:
            kwargs["tls_trust_certs_file_path"] = target.trust
        if target.auth:
            kwargs["authentication"] = target.auth
        client = pulsar.Client(url, operation_timeout_seconds=30, logger=_log, **kwargs)
        current = lambda: url

    def watch():
        last = None
        while not stopping.is_set():
            now = current()
            if now != last:
                emit("URL %d %s" % (int(time.time() * 1000), now))
                last = now
            stopping.wait(0.01)

    threading.Thread(target=watch, daemon=True).start()
    return client


def close_client(client, flags):
    """Closes the client, except one built on a ServiceInfoProvider: in
    pulsar-client 3.13, Client.close() then aborts the process now and then
    ("PyThreadState_Get: the function must be called with the GIL held"), the
    C++ client releasing the Python provider without the GIL. Its producers
    and consumers are closed already; main exits without running finalizers."""
    if not flags.get("provider-url"):
        client.close()


def produce(flags, stopping):
    topic = flags["topic"]
    name = flags.get("name", "p")
    key = flags.get("key", "")
    count = int(flags.get("count", "0"))
    rate = int(flags.get("rate", "100"))
    if rate <= 0:
        raise ValueError("flag --rate must be above 0")
    client = build_client(flags, stopping)
    producer = client.create_producer(topic, batching_enabled=flags.get("batching", "true") == "true",
                                      send_timeout_millis=30000, block_if_queue_full=True)
    emit("READY")
    done = {"acked": 0, "failed": 0}
    lock = threading.Lock()

    def callback(seq):
        def cb(res, msg_id):
            with lock:
                if res == pulsar.Result.Ok:
                    done["acked"] += 1
                    emit("ACK %d %s" % (seq, msg_id))
                else:
                    done["failed"] += 1
                    emit("ERR %d %s" % (seq, res))
        return cb

    sent = 0
    period = 1.0 / rate
    nxt = time.monotonic()
    while not stopping.is_set() and (count == 0 or sent < count):
        payload = ("%s-%06d" % (name, sent)).encode()
        kwargs = {"partition_key": key} if key else {}
        producer.send_async(payload, callback(sent), **kwargs)
        sent += 1
        nxt += period
        wait = nxt - time.monotonic()
        if wait > 0:
            stopping.wait(wait)
    producer.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if done["acked"] + done["failed"] >= sent:
                break
        time.sleep(0.005)
    emit("DONE %d %d %d" % (sent, done["acked"], done["failed"]))
    producer.close()
    close_client(client, flags)


def consume(flags, stopping):
    types = {"Exclusive": pulsar.ConsumerType.Exclusive, "Shared": pulsar.ConsumerType.Shared,
             "Failover": pulsar.ConsumerType.Failover, "Key_Shared": pulsar.ConsumerType.KeyShared}
    kind = flags.get("type", "Shared")
    if kind not in types:
        raise ValueError("flag --type: not a subscription type: " + kind)
    sub = flags.get("subscription", "")
    if not sub:
        raise ValueError("flag --subscription is required")
    client = build_client(flags, stopping)
    consumer = client.subscribe(flags["topic"], sub, consumer_type=types[kind],
                                initial_position=pulsar.InitialPosition.Earliest,
                                replicate_subscription_state_enabled=True)
    emit("READY")
    received = 0
    while not stopping.is_set():
        try:
            m = consumer.receive(timeout_millis=100)
        except pulsar.Timeout:
            continue
        emit("MSG %s %s ?" % (m.data().decode(errors="replace"), m.message_id()))
        consumer.acknowledge(m)
        received += 1
    emit("DONE %d %d %d" % (received, received, received))
    consumer.close()
    close_client(client, flags)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("produce", "consume"):
        print("usage: failover_client.py produce|consume --service-url URL --topic T [flags]", file=sys.stderr)
        return 2
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())

    def watch_stdin():
        while os.read(0, 256):
            pass
        stopping.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    try:
        flags = parse_flags(sys.argv[2:])
        if "topic" not in flags:
            raise ValueError("flag --topic is required")
        (produce if sys.argv[1] == "produce" else consume)(flags, stopping)
    except Exception as e:  # reported to the harness as one line
        emit("FATAL %r" % (e,))
        return 1
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
