"""diff is None in runs that are not about a change (resume, requeue...):
pyright must fail a handler that iterates it without a None check."""

import sys

import opkit_handler as opkit
from greeting import GreetContext

handlers = opkit.Handlers()


@handlers.on("update", "resume")
def greet(ctx: GreetContext) -> None:
    for change in ctx["diff"]:
        print(f'{change["op"]} {change["path"]}', file=sys.stderr)


if __name__ == "__main__":
    handlers.run()
