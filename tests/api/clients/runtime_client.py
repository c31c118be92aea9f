"""A runtime in "another language": plain http.client, no import of the project.

    python -I runtime_client.py BASE_URL TOKEN CHATS TURNS SEED

Drives CHATS conversations at once (a thread each) through the API's runtime routes: appends
(some sent twice with the same Idempotency-Key, as a runtime retrying after a lost answer
does), usage, compressions, resets, resumes, undo and redo, stale writes to a rotated session
(which must answer 409 naming the live one). Every message it stores carries a unique nonce.
It prints one JSON document: every acknowledged message (nonce, id, session, role) and the ids
an undo made inactive or a redo brought back, for the test to compare with the store. Any
answer a runtime would not expect exits non-zero with the reason.
"""

import http.client
import json
import random
import sys
import threading
import urllib.parse


class Refused(Exception):
    pass


class Api:
    def __init__(self, base, token):
        parsed = urllib.parse.urlsplit(base)
        self.host, self.port = parsed.hostname, parsed.port
        self.token = token
        self.connection = None

    def call(self, method, path, body=None, headers=None):
        payload = None if body is None else json.dumps(body).encode()
        sent = {"Authorization": "Bearer " + self.token, "Accept": "application/json"}
        if payload is not None:
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        once_only = not (method == "GET" or "Idempotency-Key" in sent)
        if once_only and self.connection is not None:
            # Sent on a fresh connection: one the server closed while idle cannot eat it.
            self.connection.close()
            self.connection = None
        for attempt in range(3):
            if self.connection is None:
                self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                self.connection.request(method, "/api/v1" + path, body=payload, headers=sent)
                response = self.connection.getresponse()
                raw = response.read()
                break
            except (http.client.HTTPException, OSError):
                # A kept-alive connection the server closed: send again on a new one, but only
                # what may be sent twice (a read, an append carrying its idempotency key).
                self.connection.close()
                self.connection = None
                if attempt == 2 or once_only:
                    raise
        data = json.loads(raw) if raw else None
        return response.status, data, dict(response.getheaders())

    def expect(self, status, method, path, body=None, headers=None):
        got, data, answer_headers = self.call(method, path, body, headers)
        if got != status:
            raise Refused(f"{method} {path}: expected {status}, got {got}: {data}")
        return data, answer_headers


class Chat:
    def __init__(self, api, number, seed, turns, log):
        self.api = api
        self.key = f"proc:{number}"
        self.random = random.Random(seed * 1000 + number)
        self.turns = turns
        self.log = log
        self.number = number
        self.nonces = 0
        self.session = None
        self.previous = []  # sessions this chat left, to resume one later

    def nonce(self):
        self.nonces += 1
        return f"proc-{self.number}-{self.nonces}"

    def append(self, messages, *, retry=False):
        key = self.nonce() + "-key"
        path = f"/runtime/sessions/{self.session}/messages"
        body = {"messages": messages}
        first, headers = self.api.expect(201, "POST", path, body, {"Idempotency-Key": key})
        if headers.get("Idempotent-Replayed") != "false":
            raise Refused(f"first send of {key} was a replay")
        if retry:
            again, headers = self.api.expect(201, "POST", path, body, {"Idempotency-Key": key})
            if again != first or headers.get("Idempotent-Replayed") != "true":
                raise Refused(f"retry of {key} answered {again} {headers}")
        for message, message_id in zip(messages, first["message_ids"], strict=True):
            self.log["acked"].append(
                {
                    "nonce": message["content"],
                    "id": message_id,
                    "session_id": self.session,
                    "role": message["role"],
                }
            )

    def turn(self):
        self.append([{"role": "user", "content": self.nonce()}], retry=self.random.random() < 0.4)
        reply = [{"role": "assistant", "content": self.nonce()}]
        if self.random.random() < 0.3:
            reply = [
                {
                    "role": "assistant",
                    "content": self.nonce(),
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}],
                },
                {"role": "tool", "content": self.nonce(), "tool_call_id": "c1"},
                *reply,
            ]
        self.append(reply, retry=self.random.random() < 0.4)
        self.api.expect(
            200,
            "POST",
            f"/runtime/sessions/{self.session}/usage",
            {"input_tokens": 10, "output_tokens": 5},
        )

    def compress(self):
        old = self.session
        rotated, _ = self.api.expect(
            201, "POST", f"/runtime/sessions/{old}/rotate", {"summary": "the story so far"}
        )
        self.session = rotated["new_session_id"]
        # A stale write to the rotated session: refused, naming where to write.
        status, problem, headers = self.api.call(
            "POST",
            f"/runtime/sessions/{old}/messages",
            {"messages": [{"role": "user", "content": "stale"}]},
        )
        if status != 409 or problem.get("live_session_id") != self.session:
            raise Refused(f"stale write answered {status} {problem}")
        if headers.get("Content-Type") != "application/problem+json":
            raise Refused(f"stale write answered {headers.get('Content-Type')}")

    def undo(self):
        undone, _ = self.api.expect(200, "POST", f"/runtime/sessions/{self.session}/undo")
        self.log["inactive"].extend(undone["message_ids"])
        if self.random.random() < 0.5:
            redone, _ = self.api.expect(200, "POST", f"/runtime/sessions/{self.session}/redo")
            back = set(redone["message_ids"])
            self.log["inactive"] = [i for i in self.log["inactive"] if i not in back]

    def reset(self):
        reset, _ = self.api.expect(200, "POST", "/runtime/reset", {"session_key": self.key})
        self.previous.append(self.session)
        self.session = reset["new_session_id"]

    def resume(self):
        target = self.random.choice(self.previous)
        resumed, _ = self.api.expect(200, "POST", "/runtime/resume", {"ref": target})
        self.previous.append(self.session)
        self.session = resumed["session_id"]

    def run(self):
        started, _ = self.api.expect(
            201, "POST", "/runtime/sessions", {"source": "proc", "session_key": self.key}
        )
        self.session = started["session_id"]
        for n in range(1, self.turns + 1):
            self.turn()
            roll = self.random.random()
            if n % 5 == 0:
                self.compress()
            elif roll < 0.15:
                self.undo()
            elif roll < 0.25:
                self.reset()
            elif roll < 0.32 and self.previous:
                self.resume()
        live, _ = self.api.expect(
            200, "GET", "/runtime/live?" + urllib.parse.urlencode({"session_key": self.key})
        )
        if live["session_id"] != self.session:
            raise Refused(f"{self.key}: live is {live['session_id']}, expected {self.session}")
        self.log["live"][self.key] = self.session
        # Reads the whole active transcript back in pages, as a runtime loading history does.
        after, seen = 0, []
        while True:
            page, _ = self.api.expect(
                200, "GET", f"/runtime/sessions/{self.session}/messages?after={after}&limit=7"
            )
            seen += [m["id"] for m in page["messages"]]
            if page["next_after"] is None:
                break
            after = page["next_after"]
        self.log["read"][self.session] = seen


def main():
    base, token, chats, turns, seed = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    log = {"acked": [], "inactive": [], "live": {}, "read": {}, "errors": []}
    lock = threading.Lock()

    def run(number):
        chat_log = {"acked": [], "inactive": [], "live": {}, "read": {}}
        try:
            Chat(Api(base, token), number, seed, turns, chat_log).run()
        except Exception as error:  # reported, and the exit status says so
            chat_log["errors"] = [f"chat {number}: {type(error).__name__}: {error}"]
        with lock:
            for name in ("acked", "inactive", "errors"):
                log[name].extend(chat_log.get(name, []))
            log["live"].update(chat_log["live"])
            log["read"].update(chat_log["read"])

    threads = [threading.Thread(target=run, args=(n,)) for n in range(chats)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    json.dump(log, sys.stdout)
    sys.exit(1 if log["errors"] else 0)


if __name__ == "__main__":
    main()
