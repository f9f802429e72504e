"""Handlers written on the SDK as its users write them: pyright (strict)
passes this file. It uses each part of the API once."""

import sys
from datetime import timedelta

import opkit_handler as opkit
from greeting import GreetContext, Greeting, GreetingSpec, GreetResult

GREETINGS = {"en": "Hello", "fr": "Bonjour"}

handlers = opkit.Handlers()


@handlers.on("create", "update")
def greet(ctx: GreetContext) -> GreetResult:
    spec = ctx["object"]["spec"]
    greeting = f'{GREETINGS[spec.get("language", "en")]}, {spec["name"]}!'
    print(f'{ctx["trigger"]} (attempt {ctx["attempt"]}) of {ctx["object"]["metadata"]["name"]}', file=sys.stderr)
    for change in ctx["diff"] or []:  # None in a run not about a change (resume, requeue...)
        print(f'  {change["op"]} {change["path"]}', file=sys.stderr)
    old = ctx["old"]
    if old is not None and old["name"] != spec["name"]:
        print(f'  renamed from {old["name"]}', file=sys.stderr)
    for child in ctx["children"].values():
        print(f'  child {child["kind"]} {child["metadata"]["name"]}', file=sys.stderr)
    return {
        "status": {"greeting": greeting},
        "events": [opkit.normal("Greeted", greeting), {"reason": "Counted", "message": "1"}],
        "requeueAfter": opkit.requeue_after(timedelta(hours=1)),
    }


@handlers.on("requeue")
async def check(ctx: opkit.Context[Greeting, GreetingSpec]) -> opkit.Result[dict[str, bool]]:
    if ctx["attempt"] > 3:
        raise opkit.PermanentError("the greeting service never answered")
    return {"status": {"checked": True}, "requeueAfter": timedelta(minutes=5), "skipped": True}


@handlers.on("delete")
def goodbye(ctx: GreetContext) -> None:
    if "deletionTimestamp" not in ctx["object"]["metadata"]:
        raise opkit.TemporaryError("not deleted yet")


@handlers.on()
def other(ctx: opkit.Context) -> opkit.Result:
    return {"events": [opkit.warning("Unexpected", f'trigger {ctx["trigger"]}')]}


# An operator-wide schedule's and a delivery's handlers: runs for no object.
operator_wide = opkit.Handlers()


@operator_wide.on("schedule", "manual")
def tick(ctx: opkit.ScheduleContext) -> opkit.Result:
    manual = ctx["schedule"].get("manual")
    by = manual["by"] if manual is not None else "the schedule"
    return {"events": [opkit.normal("Ticked", f'{ctx["schedule"]["slot"]} by {by}')]}


@operator_wide.on("event")
def deploy(ctx: opkit.EventContext) -> opkit.Result:
    delivery = ctx["event"]
    if delivery["headers"].get("x-github-event") != "issue_comment":
        return {"refuse": f'not a comment: {delivery.get("event", "?")}'}
    return {"skipped": True}


# An admission handler.
admission = opkit.Handlers()


@admission.on("validate")
def check_name(ctx: opkit.AdmissionContext[Greeting]) -> opkit.AdmissionResult:
    obj = ctx["object"]
    if obj is not None and obj["spec"]["name"] == "":
        return {"allowed": False, "message": "spec.name must not be empty"}
    return {"allowed": True, "warnings": [f'asked by {ctx["userInfo"].get("username", "?")}']}


@admission.on("mutate")
def default_language(ctx: opkit.AdmissionContext[Greeting]) -> opkit.AdmissionResult:
    return {"patch": {"spec": {"language": "en"}}}


def test_greet() -> None:
    ctx: GreetContext = {
        "operator": "greetings", "handler": "greet", "trigger": "create",
        "runId": "01jd5v3q8m2k4x7zab", "idempotencyKey": "u/1/greet", "attempt": 1,
        "object": {"apiVersion": "demo.example.com/v1", "kind": "Greeting",
                   "metadata": {"name": "world"}, "spec": {"name": "World"}},
        "old": None, "diff": [], "children": {},
    }
    result = handlers.call(ctx)
    assert result["status"] == {"greeting": "Hello, World!"}


if __name__ == "__main__":
    handlers.run()
