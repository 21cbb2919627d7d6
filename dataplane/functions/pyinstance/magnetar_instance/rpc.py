"""A small server for the worker's two channels into the instance: unary
gRPC over cleartext HTTP/2 (InstanceControl) and plain HTTP/1.1 GETs
(Prometheus metrics), both served by one thread.

Why not grpcio's server: importing and starting it costs about 20 MB of
resident memory per instance (its C core and threads), more than the whole
rest of an idle instance. InstanceControl needs only unary calls with tiny
messages from one client, so this server does just that, on the HTTP/2
state machine of the h2 package (flow control, settings, HPACK):

* a request is HEADERS (``:method POST``, ``:path /<service>/<method>``)
  then DATA holding one length-prefixed message (1 byte compressed flag,
  4 bytes big-endian length, the protobuf bytes), ending the stream;
* the answer is HEADERS (``:status 200``, ``content-type
  application/grpc``), one DATA with the length-prefixed reply, then
  trailers with ``grpc-status`` (0 OK, 12 UNIMPLEMENTED, 13 INTERNAL,
  3 INVALID_ARGUMENT) and ``grpc-message``.

Handlers run on the server thread and must not block. The listening
sockets are bound by ``listen_grpc``/``listen_http`` (no SO_REUSEPORT, so a
port in use fails loudly); ``start`` runs the loop, ``stop`` ends it.
"""

import logging
import selectors
import socket
import struct
import threading
from urllib.parse import unquote

log = logging.getLogger(__name__)

GRPC_OK = 0
GRPC_INVALID_ARGUMENT = 3
GRPC_UNIMPLEMENTED = 12
GRPC_INTERNAL = 13

_MAX_MESSAGE = 4 << 20
_MAX_HTTP_REQUEST = 16 << 10


class Server:
    def __init__(self):
        self._methods = {}  # b"/pkg.Service/Method" -> (request parser, handler)
        self._http_routes = {}  # path -> callable returning (content type, body bytes)
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._stopping = False
        self._thread = None
        self._listeners = []

    # --- configuration ---------------------------------------------------------

    def add_unary(self, path, parse_request, handler):
        """parse_request(bytes) -> request; handler(request) -> reply with
        SerializeToString()."""
        self._methods[path.encode("ascii")] = (parse_request, handler)

    def add_http(self, path, handler):
        """handler() -> (content type, body bytes), for GET path."""
        self._http_routes[path] = handler

    def listen_grpc(self, host, port):
        return self._listen(host, port, "grpc")

    def listen_http(self, host, port):
        return self._listen(host, port, "http")

    def _listen(self, host, port, kind):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        s = socket.socket(family, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            s.close()
            raise OSError(e.errno, "cannot listen on %s:%d for %s: %s" % (
                host, port, "InstanceControl" if kind == "grpc" else "metrics", e.strerror)) from None
        s.listen(16)
        s.setblocking(False)
        self._sel.register(s, selectors.EVENT_READ, ("listen", kind))
        self._listeners.append(s)
        return s.getsockname()[1]

    # --- running -------------------------------------------------------------------

    def start(self):
        self._thread = threading.Thread(target=self._loop, name="instance-control", daemon=True)
        self._thread.start()

    def stop(self, timeout=2.0):
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self):
        try:
            while not self._stopping:
                for key, _ in self._sel.select(timeout=1.0):
                    kind, arg = key.data
                    if kind == "wake":
                        continue
                    if kind == "listen":
                        self._accept(key.fileobj, arg)
                    else:
                        arg.on_readable()
        except Exception:
            log.exception("instance control server failed")
        finally:
            for key in list(self._sel.get_map().values()):
                try:
                    key.fileobj.close()
                except OSError:
                    pass
            self._sel.close()
            self._wake_w.close()

    def _accept(self, listener, kind):
        try:
            sock, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        sock.setblocking(True)
        sock.settimeout(5.0)  # a client that stops reading cannot hang the loop for long
        conn = _GrpcConn(self, sock) if kind == "grpc" else _HttpConn(self, sock)
        self._sel.register(sock, selectors.EVENT_READ, ("conn", conn))
        if kind == "grpc":
            conn.start()

    def _drop(self, sock):
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass
        try:
            sock.close()
        except OSError:
            pass


class _GrpcConn:
    def __init__(self, server, sock):
        import h2.config
        import h2.connection

        self._server = server
        self._sock = sock
        self._h2 = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding=None))
        self._streams = {}  # stream id -> [path, bytearray body]

    def start(self):
        self._h2.initiate_connection()
        self._flush()

    def on_readable(self):
        import h2.events
        import h2.exceptions

        try:
            data = self._sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._server._drop(self._sock)
            return
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            log.debug("HTTP/2 protocol error from the worker: %s", e)
            self._flush()
            self._server._drop(self._sock)
            return
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                headers = dict(ev.headers)
                self._streams[ev.stream_id] = [headers.get(b":path", b""), bytearray()]
            elif isinstance(ev, h2.events.DataReceived):
                st = self._streams.get(ev.stream_id)
                if st is not None and len(st[1]) + len(ev.data) <= _MAX_MESSAGE + 5:
                    st[1] += ev.data
                self._h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.StreamEnded):
                st = self._streams.pop(ev.stream_id, None)
                if st is not None:
                    self._answer(ev.stream_id, st[0], bytes(st[1]))
            elif isinstance(ev, h2.events.StreamReset):
                self._streams.pop(ev.stream_id, None)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self._flush()
                self._server._drop(self._sock)
                return
        self._flush()

    def _answer(self, stream_id, path, body):
        method = self._server._methods.get(path)
        if method is None:
            return self._trailers_only(stream_id, GRPC_UNIMPLEMENTED, "unknown method %s" % path.decode("ascii",
                                                                                                         "replace"))
        if len(body) < 5:
            return self._trailers_only(stream_id, GRPC_INVALID_ARGUMENT, "missing request message")
        compressed, length = struct.unpack(">BI", body[:5])
        if compressed:
            return self._trailers_only(stream_id, GRPC_UNIMPLEMENTED, "compressed requests are not supported")
        if length != len(body) - 5:
            return self._trailers_only(stream_id, GRPC_INVALID_ARGUMENT, "bad request framing")
        parse, handler = method
        try:
            reply = handler(parse(body[5:])).SerializeToString()
        except Exception as e:
            log.exception("InstanceControl %s failed", path.decode("ascii", "replace"))
            return self._trailers_only(stream_id, GRPC_INTERNAL, "%s: %s" % (type(e).__name__, e))
        self._h2.send_headers(stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        self._h2.send_data(stream_id, struct.pack(">BI", 0, len(reply)) + reply)
        self._h2.send_headers(stream_id, [(b"grpc-status", b"0")], end_stream=True)

    def _trailers_only(self, stream_id, code, message):
        self._h2.send_headers(stream_id, [
            (b":status", b"200"), (b"content-type", b"application/grpc"),
            (b"grpc-status", str(code).encode()), (b"grpc-message", _percent(message)),
        ], end_stream=True)

    def _flush(self):
        out = self._h2.data_to_send()
        if out:
            try:
                self._sock.sendall(out)
            except OSError:
                self._server._drop(self._sock)


class _HttpConn:
    """One HTTP/1.1 request, answered and closed."""

    def __init__(self, server, sock):
        self._server = server
        self._sock = sock
        self._buf = bytearray()

    def on_readable(self):
        try:
            data = self._sock.recv(8192)
        except OSError:
            data = b""
        if not data:
            self._server._drop(self._sock)
            return
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > _MAX_HTTP_REQUEST:
                self._reply(431, "text/plain", b"request header too large\n")
            return
        line = bytes(self._buf[:self._buf.find(b"\r\n")]).decode("latin-1")
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] not in ("GET", "HEAD"):
            return self._reply(405, "text/plain", b"only GET\n")
        path = unquote(parts[1].split("?", 1)[0])
        handler = self._server._http_routes.get(path) or self._server._http_routes.get("*")
        if handler is None:
            return self._reply(404, "text/plain", b"not found\n")
        try:
            ctype, body = handler()
        except Exception:
            log.exception("metrics handler failed")
            return self._reply(500, "text/plain", b"internal error\n")
        self._reply(200, ctype, b"" if parts[0] == "HEAD" else body, length=len(body))

    def _reply(self, status, ctype, body, length=None):
        reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large",
                  500: "Internal Server Error"}[status]
        head = ("HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                % (status, reason, ctype, len(body) if length is None else length)).encode("latin-1")
        try:
            self._sock.sendall(head + body)
        except OSError:
            pass
        self._server._drop(self._sock)


def _percent(message):
    """grpc-message is percent-encoded UTF-8 (printable ASCII except %)."""
    out = bytearray()
    for b in message.encode("utf-8"):
        if 0x20 <= b <= 0x7E and b != 0x25:
            out.append(b)
        else:
            out += b"%%%02X" % b
    return bytes(out)
