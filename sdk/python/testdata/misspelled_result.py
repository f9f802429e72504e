"""A result field misspelled: pyright must fail, naming "statsu"."""

import opkit_handler as opkit
from greeting import GreetContext, GreetResult

handlers = opkit.Handlers()


@handlers.on("create")
def greet(ctx: GreetContext) -> GreetResult:
    return {"statsu": {"greeting": f'Hello, {ctx["object"]["spec"]["name"]}!'}}


if __name__ == "__main__":
    handlers.run()
