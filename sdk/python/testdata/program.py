"""A handler program on the SDK, run as a process by sdk/python_test.go in
both modes. spec.name chooses what greet does: "temporary" and
"permanent" raise those errors, "bug" has one, "child" runs a child
process that prints, "stdin" one that reads its stdin to the end; any
other name is greeted. Each run logs a line on stderr and prints one with
print(), which must not reach stdout."""

import subprocess
import sys

import opkit_handler as opkit
from greeting import GreetContext, GreetResult

GREETINGS = {"en": "Hello", "fr": "Bonjour"}

handlers = opkit.Handlers()


@handlers.on("create", "update")
def greet(ctx: GreetContext) -> GreetResult:
    spec = ctx["object"]["spec"]
    name = spec["name"]
    print(f'log: {ctx["trigger"]} of {name} (attempt {ctx["attempt"]})', file=sys.stderr)
    print(f"print: greeting {name}")
    if name == "temporary":
        raise opkit.TemporaryError("the greeting service is down")
    if name == "permanent":
        raise opkit.PermanentError("no greeting for permanent")
    if name == "bug":
        return {"status": {"greeting": str(int(name))}}
    if name == "child":
        subprocess.run([sys.executable, "-c", "print('child: printed by a child process')"], check=True)
    if name == "stdin":
        # A child without stdin=, as cat: it reads fd 0 to its end.
        child = "import sys; print(f'child: read {len(sys.stdin.read())} characters of stdin')"
        subprocess.run([sys.executable, "-c", child], check=True)
    greeting = f'{GREETINGS[spec.get("language", "en")]}, {name}!'
    return {"status": {"greeting": greeting}, "events": [opkit.normal("Greeted", greeting)]}


if __name__ == "__main__":
    handlers.run()
