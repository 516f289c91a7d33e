"""Client for the sandbox broker channel (JSON-RPC 2.0, one message per line).

No dependencies. Inside `sandbox run`:

    import sandbox_ipc
    sandbox = sandbox_ipc.connect()
    text = sandbox.fs.read("README.md")
    sandbox.fs.write("dist/out.txt", "built")     # needs the action allowed or granted

A skill serves invocations:

    sandbox_ipc.connect().serve(lambda params: {"words": len(params["text"].split())})
"""
import base64
import itertools
import json
import os
import socket

__all__ = ["connect", "Client", "SandboxError"]

# Made once: json.dumps with any option builds a new encoder on every call,
# which cost more than the rest of a request's Python side.
_encode = json.JSONEncoder(separators=(",", ":")).encode


class SandboxError(Exception):
    """An error answer: code (JSON-RPC), message, and the rule that decided."""

    def __init__(self, code, message, data=None):
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message
        self.rule = (data or {}).get("rule")


class _Fs:
    def __init__(self, client):
        self._call = client.call

    def read(self, path, binary=False):
        result = self._call("fs.read", {"path": path})
        data = base64.b64decode(result["content"]) if result["encoding"] == "base64" else result["content"]
        if binary and isinstance(data, str):
            return data.encode()
        return data

    def write(self, path, content, append=False):
        if isinstance(content, (bytes, bytearray)):
            params = {"path": path, "content": base64.b64encode(content).decode(), "encoding": "base64"}
        else:
            params = {"path": path, "content": content}
        params["append"] = append
        return self._call("fs.write", params)

    def list(self, path="."):
        return self._call("fs.list", {"path": path})["entries"]

    def stat(self, path):
        return self._call("fs.stat", {"path": path})

    def mkdir(self, path):
        return self._call("fs.mkdir", {"path": path})

    def delete(self, path):
        return self._call("fs.delete", {"path": path})


class Client:
    """One connection to the broker; requests are answered in order."""

    def __init__(self, fd):
        self._sock = socket.socket(fileno=fd)
        # Buffered: an unbuffered readline asks the kernel for one byte at
        # a time, a system call per byte of every answer.
        self._reader = self._sock.makefile("rb")
        self._ids = itertools.count(1)
        self._requests = []
        self.fs = _Fs(self)

    def _send(self, message):
        self._sock.sendall(_encode(message).encode() + b"\n")

    def call(self, method, params=None):
        request_id = next(self._ids)
        # Formatted around the encoded parts: a quarter cheaper than encoding
        # the whole request as one object, on the path of every request.
        self._sock.sendall(b'{"jsonrpc":"2.0","id":%d,"method":%s,"params":%s}\n' % (
            request_id, _encode(method).encode(), _encode(params or {}).encode()))
        while True:
            line = self._reader.readline()
            if not line:
                raise SandboxError(-32603, "the broker closed the channel")
            answer = json.loads(line)
            if "method" in answer:
                self._requests.append(answer)  # an invocation, served later
                continue
            if answer.get("id") != request_id:
                continue  # an answer to something this client did not send
            if "error" in answer:
                error = answer["error"]
                raise SandboxError(error.get("code"), error.get("message"), error.get("data"))
            return answer.get("result")

    def notify(self, method, params=None):
        self._send({"jsonrpc": "2.0", "method": method, "params": params or {}})

    def serve(self, handler):
        """Answer skill.invoke requests with handler(params) until the
        supervisor closes the channel. An exception becomes an error answer."""
        while True:
            if self._requests:
                request = self._requests.pop(0)
            else:
                line = self._reader.readline()
                if not line:
                    return
                request = json.loads(line)
            if request.get("method") != "skill.invoke" or "id" not in request:
                continue
            try:
                answer = {"result": handler(request.get("params") or {})}
            except SandboxError as err:
                answer = {"error": {"code": err.code, "message": err.message}}
            except Exception as err:  # the skill's own failure, reported to the caller
                answer = {"error": {"code": -32000, "message": f"{type(err).__name__}: {err}"}}
            self._send({"jsonrpc": "2.0", "id": request["id"], **answer})

    def query(self, action):
        """What the broker would decide for `action`, without asking anyone."""
        return self.call("permission.query", {"action": action})

    def log(self, message, level="info"):
        self.notify("log", {"level": level, "message": message})


def connect():
    """The broker channel announced in SANDBOX_IPC_FD."""
    fd = os.environ.get("SANDBOX_IPC_FD")
    if fd is None:
        raise SandboxError(-32603, "SANDBOX_IPC_FD is not set: not running inside `sandbox run`")
    return Client(int(fd))
