"""A handler program on the types generated from ../everything.yaml
(widget_types.py beside it when typecheck_test.go checks it): pyright must
pass it, and fail it once a field is misspelt."""

import sys

import opkit_handler as opkit
from widget_types import (
    CheckContext,
    CheckResult,
    CleanupContext,
    CleanupResult,
    HookContext,
    HookResult,
    ReconcileAllContext,
    ReconcileAllResult,
    WidgetSpec,
    widget_children,
    widget_related,
)

handlers = opkit.Handlers()


def describe(spec: WidgetSpec) -> str:
    size: int = spec["size"]
    owner = spec.get("owner")
    contact = owner.get("contact") if owner else None
    email = contact.get("email", "") if contact else ""
    udp = [p["name"] for p in spec["ports"] if p.get("protocol") == "UDP"]
    return f"{size} {spec['mode']} {email} {udp} {spec.get('files', {}).get('index.html')}"


@handlers.on("create", "update")
def reconcile(ctx: ReconcileAllContext) -> ReconcileAllResult:
    spec = ctx["object"]["spec"]
    related = widget_related(ctx)
    app = related.get("app")
    pods = related["pods"]
    config = widget_children(ctx).get("config")
    old = ctx["old"]
    if old is not None and old["size"] != spec["size"]:
        print(f"resized from {old['size']}", file=sys.stderr)
    last = f"{describe(spec)} {len(pods)} {app is not None} {config is not None}"
    return {"status": {"phase": "Ready", "lastRun": last, "counts": {"ports": len(spec["ports"])}}}


@handlers.on("delete")
def cleanup(ctx: CleanupContext) -> CleanupResult:
    return {"status": {"phase": "Pending"}, "events": [opkit.normal("Cleaned", ctx["object"]["metadata"]["name"])]}


@handlers.on("event")
def hook(ctx: HookContext) -> HookResult | None:
    if ctx["event"]["source"] != "hook":
        return {"refuse": "not from the hook"}
    return None


@handlers.on("validate")
def check(ctx: CheckContext) -> CheckResult:
    obj = ctx["object"]
    if obj is not None and obj["spec"]["mode"] == "slow":
        return {"allowed": False, "message": "slow widgets are not allowed"}
    return {"allowed": True}


if __name__ == "__main__":
    handlers.run()
