"""The handlers drain's handler on opkit's Python SDK (opkit_handler, which
bench/python_handlers.go writes beside it from the sdk package): the
default function answers every binding context with the result given as
the first argument (what the workload's /bin/echo prints), parsed once.
Run by opkit in exec.mode Serve (OPKIT_MODE=Serve), handlers.run() reads a
context per line and writes a line per result. The same handler as a bare
loop is handler_bare_loop.py.
"""

import json
import sys

import opkit_handler as opkit

RESULT: opkit.Result | None = json.loads(sys.argv[1]) if sys.argv[1] else None

handlers = opkit.Handlers()


@handlers.on()
def touch(ctx: opkit.Context) -> opkit.Result | None:
    return RESULT


if __name__ == "__main__":
    handlers.run()
