"""One MCP scenario against a stdio server, driven by the official Python SDK.

    python driver.py SCENARIO --mode legacy|auto|2026-07-28 --cwd DIR \
        [--env NAME=VALUE ...] [--spec JSON] -- COMMAND [ARG ...]

starts COMMAND the way an agent host does (the SDK's stdio client, an
explicit environment and working directory), runs SCENARIO and prints ONE
JSON object with what it observed on stdout; tests/mcp_python.rs asserts on
it. The server's stderr passes through to ours. An exception the scenario did
not expect ends up in the object's "error" (with the traceback), so the
calling test shows it rather than a bare exit status.

Scenarios (their parameters come in --spec):
  list    the tools as listed on the wire.
  calls   {"calls": [{"tool", "arguments", "progress"?: bool, "timeout"?: s}],
           "elicit"?: "once"|"run"|"always"|"deny"|"decline"|"cancel"}
          each call's result (or the exception it raised), the progress
          notifications it got, and every elicitation the server sent. Without
          "elicit" the client has no elicitation callback, so it does not
          declare the capability.
  cancel  {"slow": CALL, "started_file": path, "next": CALL,
           "finished_file": path, "linger": s}
          starts the slow call, waits until the skill wrote started_file,
          abandons the call (the SDK sends notifications/cancelled), makes the
          next call and reports it, then keeps the session open for linger
          seconds and says whether finished_file was written.
  reload  {"add_from": dir, "add_to": dir, "expect": tool name}
          lists, renames add_from to add_to (a new skill appears), then waits
          for the change the way the negotiated revision announces it:
          notifications/tools/list_changed (2025-11-25), subscriptions/listen
          or the listing's cache lifetime (2026-07-28); lists again.
"""

import argparse
import json
import os
import sys
import time
import traceback

import anyio
import mcp_types as types
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError

# A scenario that has not finished by then has hung; the test then fails with
# whatever the object holds instead of waiting for the test harness's own limit.
SCENARIO_DEADLINE_S = 90

# Every limit below is multiplied by --limit-scale (the test's factor for the
# machine's load, tests/support/wait.rs): a limit ends a hung scenario, it
# never measures one.
LIMIT_SCALE = 1.0


def limit(seconds):
    return seconds * LIMIT_SCALE


def dump(model):
    """A model as it looks on the wire (camelCase, unset fields left out)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def text_of(result):
    return "\n".join(block.text for block in result.content if getattr(block, "type", None) == "text")


def call_report(result):
    return {
        "isError": result.is_error,
        "structuredContent": result.structured_content,
        "text": text_of(result),
        "content": [dump(block) for block in result.content],
    }


def exception_report(exc):
    report = {"exception": f"{type(exc).__name__}: {exc}"}
    if isinstance(exc, MCPError):
        report["code"] = exc.code
    return report


class Observer:
    """What arrives from the server outside of answers."""

    def __init__(self):
        self.notifications = []
        self.list_changed = anyio.Event()
        self.elicitations = []

    async def on_message(self, message):
        if isinstance(message, Exception):
            self.notifications.append({"transport_error": repr(message)})
            return
        root = getattr(message, "root", message)
        method = getattr(root, "method", type(root).__name__)
        self.notifications.append({"method": method})
        if method == "notifications/tools/list_changed":
            self.list_changed.set()

    def elicitation_callback(self, decision):
        async def answer(_context, params):
            self.elicitations.append(dump(params))
            if decision in ("decline", "cancel"):
                return types.ElicitResult(action=decision)
            return types.ElicitResult(action="accept", content={"decision": decision})

        return answer


async def one_call(client, call, default_timeout=None):
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    started = time.monotonic()
    try:
        result = await client.call_tool(
            call["tool"],
            call.get("arguments", {}),
            read_timeout_seconds=call.get("timeout", default_timeout or limit(60)),
            progress_callback=on_progress if call.get("progress") else None,
        )
        report = call_report(result)
    except Exception as exc:  # the test asserts on which one
        report = exception_report(exc)
    report["progress"] = progress
    report["seconds"] = round(time.monotonic() - started, 3)
    return report


async def scenario_list(client, _spec, _observer, out):
    listed = await client.list_tools()
    out["tools"] = [dump(tool) for tool in listed.tools]
    out["ttlMs"] = listed.ttl_ms


async def scenario_calls(client, spec, _observer, out):
    out["calls"] = [await one_call(client, call) for call in spec["calls"]]


async def scenario_cancel(client, spec, _observer, out):
    started_file = spec["started_file"]
    slow = {"outcome": "still running when cancelled"}

    async def run_slow(scope_holder, task_status):
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            try:
                result = await client.call_tool(spec["slow"]["tool"], spec["slow"].get("arguments", {}))
                slow.update(outcome="answered before the cancellation", **call_report(result))
            except Exception as exc:
                slow.update(outcome="raised", **exception_report(exc))

    async with anyio.create_task_group() as group:
        scope = await group.start(run_slow, None)
        with anyio.move_on_after(limit(30)) as waiting:
            while not os.path.exists(started_file):
                await anyio.sleep(0.02)
        out["started"] = not waiting.cancelled_caught
        scope.cancel()
    out["slow"] = slow
    out["next"] = await one_call(client, spec["next"], default_timeout=limit(spec.get("next_timeout", 20)))
    # The session stays open past the moment the slow skill would have
    # finished: closing it ends the server, which would kill the skill anyway.
    await anyio.sleep(spec.get("linger", 0))
    finished_file = spec.get("finished_file")
    out["finished_file_written"] = finished_file is not None and os.path.exists(finished_file)


async def scenario_reload(client, spec, observer, out):
    before = await client.list_tools()
    out["before"] = sorted(tool.name for tool in before.tools)
    out["ttlMs"] = before.ttl_ms
    expect = spec["expect"]

    def add_skill():
        os.rename(spec["add_from"], spec["add_to"])

    if client.protocol_version != "2026-07-28":
        add_skill()
        with anyio.move_on_after(limit(30)):
            await observer.list_changed.wait()
        out["mechanism"] = "notifications/tools/list_changed"
        out["notified"] = observer.list_changed.is_set()
        after = await client.list_tools()
        out["after"] = sorted(tool.name for tool in after.tools)
        return

    # 2026-07-28 has no unsolicited notifications: a client either listens
    # for changes or re-lists once the listing's ttlMs has run out.
    try:
        async with client.listen(tools_list_changed=True) as subscription:
            out["listen"] = "acknowledged"
            add_skill()
            out["notified"] = False
            with anyio.move_on_after(limit(30)):
                async for _event in subscription:
                    out["notified"] = True
                    break
            out["mechanism"] = "subscriptions/listen"
    except Exception as exc:
        out["listen"] = exception_report(exc)
        if not os.path.exists(spec["add_to"]):
            add_skill()
        out["mechanism"] = "ttlMs"
    # Through the client's own response cache, as a host would: the new tool
    # shows up only once the cached listing expired or was evicted.
    lists = 0
    with anyio.move_on_after(limit(30)):
        while True:
            lists += 1
            after = await client.list_tools()
            if expect in (tool.name for tool in after.tools):
                break
            await anyio.sleep(0.1)
    out["lists_until_seen"] = lists
    out["after"] = sorted(tool.name for tool in after.tools)


SCENARIOS = {
    "list": scenario_list,
    "calls": scenario_calls,
    "cancel": scenario_cancel,
    "reload": scenario_reload,
}


async def main(args):
    spec = json.loads(args.spec)
    observer = Observer()
    env = dict(pair.split("=", 1) for pair in args.env)
    server = StdioServerParameters(command=args.command[0], args=args.command[1:], env=env, cwd=args.cwd)
    elicit = spec.get("elicit")
    out = {"scenario": args.scenario, "mode": args.mode}
    try:
        with anyio.fail_after(limit(SCENARIO_DEADLINE_S)):
            async with Client(
                server,
                mode=args.mode,
                message_handler=observer.on_message,
                elicitation_callback=observer.elicitation_callback(elicit) if elicit else None,
                read_timeout_seconds=limit(60),
            ) as client:
                out["protocol_version"] = client.protocol_version
                info = client.server_info
                out["server_info"] = dump(info) if info else None
                out["capabilities"] = dump(client.server_capabilities)
                await SCENARIOS[args.scenario](client, spec, observer, out)
    except BaseException as exc:  # noqa: BLE001 - reported, not swallowed
        out["error"] = "".join(traceback.format_exception(exc))
    out["notifications"] = observer.notifications
    out["elicitations"] = observer.elicitations
    return out


def parse_args(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--mode", required=True)
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--spec", default="{}")
    parser.add_argument("--limit-scale", type=float, default=1.0)
    parser.add_argument("command", nargs="+")
    return parser.parse_args(argv)


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    LIMIT_SCALE = max(1.0, args.limit_scale)
    result = anyio.run(main, args)
    print(json.dumps(result), flush=True)
    sys.exit(1 if "error" in result else 0)
