"""A trigger misspelled: pyright must fail, naming "crate"."""

import opkit_handler as opkit
from greeting import GreetContext, GreetResult

handlers = opkit.Handlers()


@handlers.on("crate")
def greet(ctx: GreetContext) -> GreetResult:
    return {"status": {"greeting": f'Hello, {ctx["object"]["spec"]["name"]}!'}}


if __name__ == "__main__":
    handlers.run()
