"""A TCP proxy in front of PostgreSQL that relays every message, and can cut one connection at its
COMMIT: a real network fault at an exact point, which killing a backend can only hit by luck.

`cut_commit_after(text, answered=True)`: the next COMMIT of a transaction that sent a statement
containing `text` reaches the server, which commits; then both sides are closed before the answer
gets back (the client never learns that it committed). With `answered=False` the COMMIT never
reaches the server: the server sees the client go and rolls the transaction back.

Clients must not ask for TLS (`sslmode=disable`, `gssencmode=disable`): the proxy reads the
protocol's messages, never a TLS stream.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy.engine import make_url


class _Link:
    """One client's connection and the proxy's connection to the server for it."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.primed = False  # sent the statement the cut waits for
        self.swallowing = False  # the COMMIT went through: drop its answer, then cut

    def close(self) -> None:
        for sock in (self.client, self.server):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _message(sock: socket.socket) -> tuple[bytes, bytes]:
    """A typed message: its type byte and all of its bytes (type, length, body)."""
    kind = _read(sock, 1)
    length = _read(sock, 4)
    return kind, kind + length + _read(sock, struct.unpack("!i", length)[0] - 4)


def _query(kind: bytes, raw: bytes) -> bytes:
    """The SQL text of a simple query ('Q') or of a statement being parsed ('P'), else b""."""
    if kind == b"Q":
        return raw[5:].rstrip(b"\0")
    if kind == b"P":
        return raw[5:].split(b"\0", 2)[1]
    return b""


class Wire:
    """The proxy, listening on 127.0.0.1 at `port` until stopped."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.armed: tuple[bytes, bool] | None = None
        self.cuts: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_commit_after(self, text: str, *, answered: bool = True) -> None:
        with self.lock:
            self.armed = (text.encode(), answered)

    def stop(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            link = _Link(client, socket.create_connection(self.target))
            threading.Thread(target=self._upstream, args=(link,), daemon=True).start()
            threading.Thread(target=self._downstream, args=(link,), daemon=True).start()

    def _upstream(self, link: _Link) -> None:
        """Client to server: the startup message (untyped), then typed messages."""
        try:
            length = _read(link.client, 4)
            link.server.sendall(length + _read(link.client, struct.unpack("!i", length)[0] - 4))
            while True:
                kind, raw = _message(link.client)
                sql = _query(kind, raw).strip().upper()
                with self.lock:
                    armed = self.armed
                    if sql == b"ROLLBACK":
                        link.primed = False
                    elif armed and armed[0].upper() in sql:
                        link.primed = True
                    elif armed and link.primed and sql == b"COMMIT":
                        self.armed = None
                        self.cuts.append("after the server committed" if armed[1] else
                                         "before the COMMIT reached the server")  # fmt: skip
                        if not armed[1]:
                            link.close()
                            return
                        link.swallowing = True
                link.server.sendall(raw)
        except (OSError, ConnectionError):
            link.close()

    def _downstream(self, link: _Link) -> None:
        """Server to client: relayed, except the answer to a COMMIT being cut."""
        try:
            while True:
                kind, raw = _message(link.server)
                if not link.swallowing:
                    link.client.sendall(raw)
                elif kind == b"Z":  # ready for the next query: the COMMIT is done, its answer held
                    link.close()
                    return
        except (OSError, ConnectionError):
            link.close()


@contextmanager
def wire_to(url: str) -> Iterator[tuple[Wire, str]]:
    """A proxy to the server of the SQLAlchemy `url`, and the URL that goes through it."""
    parsed = make_url(url)
    proxy = Wire(parsed.host or "127.0.0.1", parsed.port or 5432)
    through = parsed.set(host="127.0.0.1", port=proxy.port).update_query_dict(
        {"sslmode": "disable", "gssencmode": "disable"}
    )
    try:
        yield proxy, through.render_as_string(hide_password=False)
    finally:
        proxy.stop()
