#!/usr/bin/env python3
"""Announces a Database's state: its binding context on stdin, a line on stderr (the run's log)."""
import json
import sys

ctx = json.load(sys.stdin)
obj = ctx["object"]
state = obj.get("status", {}).get("state", {})
name = obj["metadata"]["name"]
if state.get("question"):
    print(f"{name} needs a person: {state['question']} (choose: {', '.join(state.get('choices', []))})", file=sys.stderr)
else:
    print(f"{name} is {state.get('name')} ({state.get('reason', '')}), running {obj['spec']['version']}", file=sys.stderr)
