"""The scripted server's `--write-whole` (benchmarks/workers.py's default): each streamed response in
one write must carry exactly the bytes the per-token writes carry, or the benchmark would compare
the client on different streams."""

from __future__ import annotations

import json
import re
import socket

from tests.support.procs import scripted


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _exchange(port: int, body: dict[str, object]) -> bytes:
    """One POST on a fresh connection; the whole response (the server closes nothing: read to the last chunk)."""
    payload = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        got = b""
        while not got.endswith(b"\r\n0\r\n\r\n"):
            part = s.recv(65536)
            assert part, "connection closed before the last chunk"
            got += part
    return re.sub(rb"x-request-id: \d+", b"x-request-id: N", got)


def test_write_whole_sends_the_per_token_bytes() -> None:
    plain = scripted("--ttft-ms", "0", "--itl-ms", "0")
    whole = scripted("--ttft-ms", "0", "--itl-ms", "0", "--write-whole")
    try:
        for n in (1, 7, 128, 7):  # the second 7: the body the whole-write server reuses
            body = {"model": "m", "prompt": "hello", "max_tokens": n, "stream": True}
            a, b = _exchange(_port(plain.url), body), _exchange(_port(whole.url), body)
            assert a == b
            assert a.count(b"data: ") == n + 3  # n token chunks, the finish chunk, the usage chunk, [DONE]
    finally:
        plain.stop()
        whole.stop()
