"""A TCP proxy in front of the test server, to cut the link to the store
without touching the server: while `down`, each connection is accepted and
closed at once (and counted), and the connections being relayed are cut.
`sent` counts the bytes clients sent the server: every query is some."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Proxy:
    target_port: int
    down: bool = False
    refused: int = 0
    sent: int = 0
    accepted: int = 0  # connections relayed to the server
    port: int = 0
    _open: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _refused_event: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Down: relayed connections closed, new ones refused."""
        with self._lock:
            self.down = True
            for sock in self._open:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            self._open.clear()

    def mend(self) -> None:
        self.down = False

    def wait_refused(self, count: int, timeout: float) -> bool:
        with self._refused_event:
            return self._refused_event.wait_for(lambda: self.refused >= count, timeout)

    def close(self) -> None:
        self.cut()
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.down:
                client.close()
                with self._refused_event:
                    self.refused += 1
                    self._refused_event.notify_all()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._open += [client, upstream]
                self.accepted += 1
            for a, b, count in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(a, b, count), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, count: bool) -> None:
        _pump(source, sink, self._count if count else None)

    def _count(self, size: int) -> None:
        with self._lock:
            self.sent += size


def _pump(source: socket.socket, sink: socket.socket, count: Any = None) -> None:
    try:
        while data := source.recv(65536):
            if count is not None:
                count(len(data))
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            try:
                sock.close()
            except OSError:
                pass
