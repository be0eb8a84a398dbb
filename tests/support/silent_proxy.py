"""A TCP proxy on loopback that can go silent: connections stay open, nothing is forwarded.

What a client sees when the network path to its server breaks without a reset (a partition, a
node whose route went away, a server frozen by a long pause): its requests are written, its
connections stay up, no answer and no close ever come. ``silence()`` stops forwarding on every
connection, open and new (accepted, never connected onwards); nothing is closed until ``stop()``.
TLS passes through untouched, so the client still talks to the real server's certificate.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class SilentProxy:
    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._silent = threading.Event()
        self._stopped = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        self._guard = threading.Lock()
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def silence(self) -> None:
        """From now on nothing passes, in either direction, and nothing is closed."""
        self._silent.set()

    def stop(self) -> None:
        self._stopped.set()
        with self._guard:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _keep(self, sock: socket.socket) -> None:
        with self._guard:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._keep(client)
            if self._silent.is_set():
                continue  # accepted and held open: a connect that never gets an answer
            try:
                server = socket.create_connection(self._upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self._keep(server)
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                data = source.recv(65536)
            except OSError:
                return
            if self._silent.is_set():
                # Swallow what arrives and keep both ends open until the proxy stops.
                if not data:
                    self._stopped.wait()
                    return
                continue
            if not data:
                with contextlib.suppress(OSError):
                    target.shutdown(socket.SHUT_WR)
                return
            try:
                target.sendall(data)
            except OSError:
                return
