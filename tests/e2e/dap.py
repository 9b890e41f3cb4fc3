"""A minimal Debug Adapter Protocol client: what VS Code does to attach, set a breakpoint on a
source file, see it hit and read the locals, then continue. Loopback only, bounded in time."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path


class DapClient:
    def __init__(self, port: int, timeout: float = 60, alive=lambda: True):
        """Connect within `timeout` seconds, while `alive()` (the debugged run has not ended)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or not alive():
                    raise
                time.sleep(0.2)
        self.sock.settimeout(timeout)
        self.buffer = b""
        self.seq = 0
        self.events: list[dict] = []
        self.responses: dict[int, dict] = {}

    def close(self) -> None:
        self.sock.close()

    def send(self, command: str, **arguments) -> int:
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command,
                           "arguments": arguments}).encode()
        self.sock.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        return self.seq

    def _read(self) -> dict:
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        header, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        length = int(header.split(b":")[1])
        while len(self.buffer) < length:
            self._fill()
        message, self.buffer = self.buffer[:length], self.buffer[length:]
        return json.loads(message)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("the debug adapter closed the connection")
        self.buffer += chunk

    def _pump_until(self, done, timeout: float):
        deadline = time.monotonic() + timeout
        while (found := done()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from the debug adapter")
            message = self._read()
            if message["type"] == "event":
                self.events.append(message)
            elif message["type"] == "response":
                self.responses[message["request_seq"]] = message
        return found

    def response(self, seq: int, timeout: float = 60) -> dict:
        answer = self._pump_until(lambda: self.responses.get(seq), timeout)
        assert answer["success"], answer
        return answer.get("body") or {}

    def request(self, command: str, timeout: float = 60, **arguments) -> dict:
        return self.response(self.send(command, **arguments), timeout)

    def event(self, name: str, timeout: float = 120) -> dict:
        def found():
            for index, event in enumerate(self.events):
                if event["event"] == name:
                    return self.events.pop(index)
            return None

        return self._pump_until(found, timeout)

    def attach_and_break(self, source: Path, line: int) -> int:
        """Attach as VS Code does, with one breakpoint; the attach request's sequence."""
        self.request("initialize", adapterID="debugpy", clientID="tests", pathFormat="path",
                     linesStartAt1=True, columnsStartAt1=True)
        attach = self.send("attach", justMyCode=False)
        self.event("initialized")
        placed = self.request("setBreakpoints", source={"path": str(source)},
                              breakpoints=[{"line": line}])
        assert placed["breakpoints"][0]["verified"] is not False, placed
        self.source = source
        self.request("configurationDone")
        return attach

    def stopped_locals(self, timeout: float = 120) -> tuple[str, int, dict[str, str]]:
        """Wait for the breakpoint: the file and line it stopped at, and the locals."""
        thread = self.event("stopped", timeout)["body"]["threadId"]
        frame = self.request("stackTrace", threadId=thread, levels=1)["stackFrames"][0]
        scopes = self.request("scopes", frameId=frame["id"])["scopes"]
        local = next(s for s in scopes if s["name"].lower().startswith("local"))
        variables = self.request("variables", variablesReference=local["variablesReference"])
        self.thread = thread
        return frame["source"]["path"], frame["line"], \
            {v["name"]: v["value"] for v in variables["variables"]}

    def resume(self) -> None:
        """Clear the breakpoint (a loop would stop again) and continue to the end."""
        self.request("setBreakpoints", source={"path": str(self.source)}, breakpoints=[])
        self.request("continue", threadId=self.thread)
