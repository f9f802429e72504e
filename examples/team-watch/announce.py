#!/usr/bin/env python3
"""Announces what a team's Deployment runs, as an Event on the Deployment.

Input: the binding context (JSON) on stdin, with the watched Deployment in
object. Output: a result (JSON) on stdout; stderr is the run's log.
"""
import json
import sys

ctx = json.load(sys.stdin)
deployment = ctx["object"]
name = deployment["metadata"]["name"]
containers = deployment["spec"]["template"]["spec"]["containers"]
image = ", ".join(c["image"] for c in containers)
if ctx["trigger"] == "delete":
    reason, message = "Gone", f"{name} is gone; it ran {image}"
else:
    reason, message = "Announced", f"{name} now runs {image}"
print(f'{message} (run key {ctx["idempotencyKey"]})', file=sys.stderr)
json.dump({"events": [{"reason": reason, "message": message}]}, sys.stdout)
