"""A TCP proxy in front of a ``redis-server`` that can lose one reply (not a test module).

Everything is forwarded both ways, except that once :meth:`ReplyCutter.arm` is called, the next
command holding the armed marker (a script's SHA, say) reaches the server, and when the
server's reply comes back the proxy closes the client's connection instead of forwarding it:
the write happened, the client never hears of it.  That is what a network cut, a failover or a
client-side timeout does between a command and its reply, made to happen at a chosen command.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["ReplyCutter"]

_CHUNK = 65536


class ReplyCutter:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._marker: bytes | None = None
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.cuts = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, marker: str) -> None:
        """Lose the reply to the next command that holds ``marker``."""
        with self._lock:
            self._marker = marker.encode()

    def close(self) -> None:
        self._closed = True
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in [self._listener, *sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._sockets += [client, server]
            cut = threading.Event()
            threading.Thread(target=self._requests, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._replies, args=(server, client, cut), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket, cut: threading.Event) -> None:
        try:
            while data := client.recv(_CHUNK):
                with self._lock:
                    if self._marker is not None and self._marker in data:
                        self._marker = None
                        cut.set()  # this connection's next reply is the one to lose
                server.sendall(data)
        except OSError:
            pass
        finally:
            _shut(server)

    def _replies(self, server: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        try:
            while data := server.recv(_CHUNK):
                if cut.is_set():
                    self.cuts += 1
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            _shut(client)
            _shut(server)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
