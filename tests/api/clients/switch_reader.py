"""A switch subscriber in "another language": plain http.client, no import of the project.

    python -I switch_reader.py BASE_URL TOKEN MODE STOP_FILE

MODE ``stream`` reads ``GET /api/v1/switches/stream`` (Server-Sent Events): it keeps the last
``id:`` as its cursor and reconnects with ``Last-Event-ID`` whenever the stream ends (the
server bounds it), the connection breaks or the server is down (a restart), and on purpose
after every few events, mid-stream. MODE ``poll`` long-polls ``GET /api/v1/switches`` in
small pages with ``after=`` the cursor. Both start from the whole log (``after=0``).

It stops once STOP_FILE holds a seq and its cursor has reached it, then prints one JSON
document: every switch received (the data as sent), how often it reconnected and how often
the server could not be reached. A switch received twice or out of order, or an ``id:`` that
is not its data's seq, is an error: it exits non-zero.
"""

import http.client
import json
import sys
import time
import urllib.parse

DEADLINE_SECONDS = 400
RECONNECT_EVERY = 5  # events: then the reader drops the connection and resumes


class Reader:
    def __init__(self, base, token, stop_file):
        parsed = urllib.parse.urlsplit(base)
        self.host, self.port = parsed.hostname, parsed.port
        self.token = token
        self.stop_file = stop_file
        self.cursor = 0
        self.received = []
        self.errors = []
        self.connections = 0
        self.unreachable = 0
        self.heartbeats = 0
        self.retries_after_429 = 0

    def target(self):
        try:
            with open(self.stop_file) as f:
                text = f.read().strip()
        except OSError:
            return None
        return int(text) if text else None

    def done(self):
        target = self.target()
        return target is not None and self.cursor >= target

    def take(self, seq, data):
        if data["seq"] != seq:
            self.errors.append(f"id {seq} carries the switch {data['seq']}")
        if seq <= self.cursor:
            self.errors.append(
                f"switch {seq} received again or out of order (cursor {self.cursor})"
            )
        self.received.append(data)
        self.cursor = seq

    def connect(self, path, headers):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        sent = {"Authorization": "Bearer " + self.token}
        sent.update(headers)
        connection.request("GET", path, headers=sent)
        response = connection.getresponse()
        self.connections += 1
        return connection, response

    def throttled(self, response):
        """A 429 (the server's long-lived requests are capped, and a connection this reader
        dropped holds its place until the server notices): wait ``Retry-After``, then retry."""
        if response.status != 429:
            return False
        response.read()
        self.retries_after_429 += 1
        time.sleep(float(response.getheader("Retry-After", "1")))
        return True

    # --- Server-Sent Events ------------------------------------------------------------------

    def stream_once(self):
        """One connection: read blocks until the stream ends or the reader drops it."""
        headers = {"Accept": "text/event-stream"}
        if self.connections:
            headers["Last-Event-ID"] = str(self.cursor)
        connection, response = self.connect("/api/v1/switches/stream?after=0", headers)
        try:
            if self.throttled(response):
                return
            if response.status != 200:
                raise RuntimeError(f"stream answered {response.status}: {response.read()[:300]}")
            if not response.getheader("Content-Type", "").startswith("text/event-stream"):
                raise RuntimeError(f"stream is {response.getheader('Content-Type')}")
            taken = 0
            block = {}
            while True:
                raw = response.readline()
                if not raw:
                    return  # the server ended the stream: resume
                line = raw.decode("utf-8").rstrip("\r\n")
                if line:
                    if line.startswith(":"):
                        self.heartbeats += 1
                        continue
                    field, _, value = line.partition(":")
                    block[field] = value[1:] if value.startswith(" ") else value
                    continue
                if "data" in block:
                    if block.get("event") != "switch":
                        raise RuntimeError(f"unexpected event {block}")
                    self.take(int(block["id"]), json.loads(block["data"]))
                    taken += 1
                elif "id" in block:
                    seq = int(block["id"])
                    if seq < self.cursor:
                        self.errors.append(f"the cursor went back from {self.cursor} to {seq}")
                    self.cursor = seq  # past switches not delivered (history, tombstones)
                block = {}
                if self.done() or taken == RECONNECT_EVERY:
                    return  # drop the connection mid-stream, on purpose
        finally:
            connection.close()

    def await_heartbeat(self):
        """Once caught up, one more stream with nothing left to deliver: it must keep the
        connection alive with heartbeats (while switches flow, a stream has none to send)."""
        connection, response = self.connect(
            "/api/v1/switches/stream?after=0",
            {"Accept": "text/event-stream", "Last-Event-ID": str(self.cursor)},
        )
        try:
            if response.status != 200:
                raise RuntimeError(f"stream answered {response.status}: {response.read()[:300]}")
            while raw := response.readline():
                if raw.startswith(b":"):
                    self.heartbeats += 1
                    return
                if raw.startswith(b"data"):
                    self.errors.append(f"a switch after the last one: {raw[:200]!r}")
        finally:
            connection.close()

    # --- long polling ------------------------------------------------------------------------

    def poll_once(self):
        query = urllib.parse.urlencode({"after": self.cursor, "wait": 2, "limit": 7})
        connection, response = self.connect("/api/v1/switches?" + query, {})
        try:
            if self.throttled(response):
                return
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"poll answered {response.status}: {body[:300]}")
            page = json.loads(body)
        finally:
            connection.close()
        for data in page["events"]:
            self.take(data["seq"], data)
        if page["next_after"] < self.cursor:
            self.errors.append(f"next_after {page['next_after']} is before {self.cursor}")
        self.cursor = page["next_after"]

    def run(self, mode):
        once = self.stream_once if mode == "stream" else self.poll_once
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not self.done():
            if time.monotonic() > deadline:
                self.errors.append(f"not done after {DEADLINE_SECONDS} s at {self.cursor}")
                return
            try:
                once()
            except (OSError, http.client.HTTPException):
                self.unreachable += 1  # a restart: try again shortly
                time.sleep(0.2)
        if mode == "stream":
            self.await_heartbeat()


def main():
    base, token, mode, stop_file = sys.argv[1:5]
    reader = Reader(base, token, stop_file)
    try:
        reader.run(mode)
    except Exception as error:  # reported, and the exit status says so
        reader.errors.append(f"{type(error).__name__}: {error}")
    json.dump(
        {
            "received": reader.received,
            "connections": reader.connections,
            "unreachable": reader.unreachable,
            "heartbeats": reader.heartbeats,
            "retries_after_429": reader.retries_after_429,
            "errors": reader.errors,
        },
        sys.stdout,
    )
    sys.exit(1 if reader.errors else 0)


if __name__ == "__main__":
    main()
