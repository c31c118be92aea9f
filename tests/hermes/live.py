"""hermes-agent's ResponseStore and SessionDB held open in a process of their own, like a gateway.

``driver.py --serve`` keeps both stores open across ops (one connection each,
as the API server holds them), so the console's poller and pages run beside a
runtime that is really running rather than one reopened per call.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from tests.hermes.conftest import DRIVER, Hermes, HermesError


class LiveHermes:
    def __init__(self, hermes: Hermes):
        self.hermes = hermes
        self.process = subprocess.Popen(
            [hermes.python, str(DRIVER), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "HERMES_HOME": str(hermes.home)},
        )
        header = {
            "home": str(hermes.home),
            "state": str(hermes.state),
            "responses": str(hermes.responses),
            "max_responses": hermes.max_responses,
        }
        self._send(header)
        self.run([{"sql": "SELECT 1", "on": "responses"}])  # both files open and created

    def _send(self, value: Any) -> None:
        self.process.stdin.write(json.dumps(value) + "\n")
        self.process.stdin.flush()

    def run(self, ops: list[dict]) -> list[Any]:
        self._send(ops)
        line = self.process.stdout.readline()
        if not line:
            raise HermesError(f"hermes driver died:\n{self.process.stderr.read()[-4000:]}")
        results = json.loads(line)["results"]
        for op, result in zip(ops, results, strict=True):
            if isinstance(result, dict) and set(result) == {"error"}:
                raise HermesError(f"{op} -> {result['error']}")
        return results

    def one(self, op: dict) -> Any:
        return self.run([op])[0]

    def turn(self, conversation: str, user_input: str, reply: str) -> dict:
        """One ``POST /v1/responses`` turn with ``conversation``, as the API server runs it."""
        op = {"api_turn": {"conversation": conversation, "input": user_input, "reply": reply}}
        return self.one(op)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            stream.close()
