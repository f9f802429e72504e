#!/usr/bin/env python3
"""Sets status.greeting from spec.name and spec.language.

Input: the binding context (JSON) on stdin. Output: a result (JSON) on
stdout. Anything written to stderr is the run's log.
"""
import json
import sys

GREETINGS = {"en": "Hello", "fr": "Bonjour", "de": "Hallo"}

ctx = json.load(sys.stdin)
spec = ctx["object"]["spec"]
greeting = f'{GREETINGS[spec.get("language", "en")]}, {spec["name"]}!'
print(f'{ctx["trigger"]} (attempt {ctx["attempt"]}): {greeting}', file=sys.stderr)
for change in ctx["diff"]:
    print(f'  {change["op"]} {change["path"]}', file=sys.stderr)

json.dump({
    "status": {"greeting": greeting},
    "events": [{"reason": "Greeted", "message": greeting}],
}, sys.stdout)
