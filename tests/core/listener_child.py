"""A runtime process that follows the switch log, for the follower tests (test_listeners.py).

``python -m tests.core.listener_child NAME OUTPUT [FROM_SEQ]`` with the store's
URLs in the environment: registers a listener that appends every call as one
JSON line to OUTPUT (with this process's id), starts the follower ``NAME``
(polling every 0.1 s), prints ``ready`` and then reads commands from standard
input, one per line, answering each on standard output:

- ``reset KEY``: a reset of its own (``reset_session_key``), answered ``done NEW_ID``;
- ``stop``: stops the follower and exits.
"""

from __future__ import annotations

import json
import os
import sys


def main(name: str, output: str, from_seq: int | None) -> None:
    from sessions_admin import core

    def record(new_session_id, **kwargs):
        with open(output, "a", encoding="utf-8") as out:
            out.write(json.dumps({"new_session_id": new_session_id, "pid": os.getpid(), **kwargs}))
            out.write("\n")

    core.register_listener(record)
    follower = core.start_switch_follower(name=name, interval=0.1, from_seq=from_seq)
    print("ready", follower.last_seq, flush=True)
    for line in sys.stdin:
        command, *arguments = line.split()
        if command == "reset":
            print("done", core.reset_session_key(session_key=arguments[0]).new_session_id)
        elif command == "stop":
            follower.stop()
            print("stopped", follower.last_seq, flush=True)
            return
        sys.stdout.flush()


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sessions_admin.settings")
    import django

    django.setup()
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None)
