#!/usr/bin/env python3
"""Announces a Deployment's new image as an Event on the Rollout.

Input: the binding context (JSON) on stdin, with the Deployment in
related.app. Output: a result (JSON) on stdout; stderr is the run's log.
"""
import json
import sys

ctx = json.load(sys.stdin)
rollout = ctx["object"]
app = ctx.get("related", {}).get("app")
if app is None:
    # The Deployment is gone: nothing to announce.
    json.dump({"skipped": True}, sys.stdout)
    sys.exit(0)
image = app["spec"]["template"]["spec"]["containers"][0]["image"]
environment = rollout["spec"].get("environment", "staging")
message = f'{app["metadata"]["name"]} runs {image} in {environment}'
print(f'{message} (run key {ctx["idempotencyKey"]})', file=sys.stderr)
json.dump({"events": [{"reason": "Announced", "message": message}]}, sys.stdout)
