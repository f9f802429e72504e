"""A field the spec does not have: pyright must fail, naming "nmae"."""

import opkit_handler as opkit
from greeting import GreetContext, GreetResult

handlers = opkit.Handlers()


@handlers.on("create")
def greet(ctx: GreetContext) -> GreetResult:
    return {"status": {"greeting": f'Hello, {ctx["object"]["spec"]["nmae"]}!'}}


if __name__ == "__main__":
    handlers.run()
