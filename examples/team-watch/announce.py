#!/usr/bin/env python3
"""Announces what a team's Deployment runs, as an Event on the Deployment.

Input: binding contexts (JSON), one per line on stdin, with the watched
Deployment in object. Output: a result (JSON) on one line of stdout for
each, flushed; stderr is the run's log. The loop serves both modes: in
mode Serve it answers run after run until opkit closes stdin; in mode Run
its one line is its only one.
"""
import json
import sys

for line in sys.stdin:
    ctx = json.loads(line)
    deployment = ctx["object"]
    name = deployment["metadata"]["name"]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    image = ", ".join(c["image"] for c in containers)
    if ctx["trigger"] == "delete":
        reason, message = "Gone", f"{name} is gone; it ran {image}"
    else:
        reason, message = "Announced", f"{name} now runs {image}"
    print(f'{message} (run key {ctx["idempotencyKey"]})', file=sys.stderr, flush=True)
    print(json.dumps({"events": [{"reason": reason, "message": message}]}), flush=True)
