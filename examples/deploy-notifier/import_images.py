#!/usr/bin/env python3
"""Imports the newest images of an environment: the seeds' import-images
CronJobs, as an operator-wide schedule.

This one logs what it would do, and does nothing: the real import is
`oc import-image <stream> -n <namespace>` (an ImageStreamImport), which needs
OpenShift. To make it real, give the handler exec.serviceAccount with
`create` on imagestreamimports in NAMESPACE, and POST an ImageStreamImport
for each stream to the API server named by $KUBECONFIG (see deploy.py for a
client of that kubeconfig).

Input: the binding context on stdin (object null, schedule.slot the time the
run is for). Environment: NAMESPACE, IMAGE_STREAMS (comma-separated).
"""
import json
import os
import re
import sys

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

ctx = json.load(sys.stdin)
namespace = os.environ.get("NAMESPACE", "")
streams = [s.strip() for s in os.environ.get("IMAGE_STREAMS", "").split(",") if s.strip()]
bad = [s for s in [namespace, *streams] if not NAME_RE.match(s)]
if bad or not streams:
    json.dump({"error": {"message": f"NAMESPACE and IMAGE_STREAMS must be names, got {bad or 'no stream'}", "permanent": True}}, sys.stdout)
    sys.exit(1)
print(f'{ctx["handler"]} for the slot {ctx["schedule"]["slot"]} (key {ctx["idempotencyKey"]})', file=sys.stderr)
for s in streams:
    print(f"would import the image stream {namespace}/{s} (oc import-image {s} -n {namespace})", file=sys.stderr)
