"""A bare watcher of the benchmark namespace's Leases, in a process of its own: when each Lease
was first seen held by a thief (``holderIdentity`` starting with ``thief-``).

``python -m tools.benchmarks._watch_stamps KUBECONFIG`` prints ``ready``, then one JSON line
``{"name": ..., "seen": CLOCK_MONOTONIC}`` per Lease taken over, until stdin closes. Blocking
socket, no parsing beyond one regular expression per line: its delay is the server's and the
kernel's, so :mod:`._loss_at_scale` can split a holder's watch delay into the server's part and
the holder process's own.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
from urllib.parse import urlsplit

from ._ours import kube_server

_THIEF = re.compile(rb'"name":\s*"([^"]+)".*?"holderIdentity":\s*"thief-')


def main() -> None:
    url = urlsplit(kube_server(sys.argv[1]))
    sock = socket.create_connection((url.hostname or "127.0.0.1", url.port or 80))
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases?watch=1&timeoutSeconds=3600"
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode())
    seen: set[bytes] = set()
    print("ready", flush=True)

    def close_when_told() -> None:
        sys.stdin.read()
        sock.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=close_when_told, daemon=True).start()
    buffer = b""
    while True:
        try:
            data = sock.recv(1 << 16)
        except OSError:
            return
        if not data:
            return
        stamp = time.monotonic()
        buffer += data
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            found = _THIEF.search(line)
            if found is not None and found.group(1) not in seen:
                seen.add(found.group(1))
                print(json.dumps({"name": found.group(1).decode(), "seen": stamp}), flush=True)


if __name__ == "__main__":
    main()
