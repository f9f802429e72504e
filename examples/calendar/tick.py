#!/usr/bin/env python3
"""Lists the files beside it and logs them, for one slot of a schedule.

Input: the binding context (JSON) on stdin: object is null (a schedule of
the operator's own has no object) and schedule.slot is the time the run is
for. No output: nothing to write, no Event. stderr is the run's log.
"""
import json
import os
import sys

ctx = json.load(sys.stdin)
slot = ctx["schedule"]["slot"]
files = sorted(os.listdir("."))  # the working directory: the definition's
print(f'{ctx["handler"]} for the slot {slot} (attempt {ctx["attempt"]}, key {ctx["idempotencyKey"]})', file=sys.stderr)
print(f'{len(files)} files here: {", ".join(files)}', file=sys.stderr)
