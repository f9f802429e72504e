#!/usr/bin/env python3
"""A mutate handler: records who created a Website, a default no schema
can express, in the annotation demo.example.com/created-by.

Its answer's patch is a JSON merge patch of the object; opkit turns it
into the JSONPatch the API server applies.
"""
import json
import sys

ctx = json.load(sys.stdin)
annotations = ctx["object"]["metadata"].get("annotations") or {}
if "demo.example.com/created-by" in annotations:
    json.dump({"allowed": True}, sys.stdout)
else:
    user = ctx["userInfo"].get("username", "unknown")
    print(f"created by {user}", file=sys.stderr)
    json.dump({
        "allowed": True,
        "patch": {"metadata": {"annotations": {"demo.example.com/created-by": user}}},
    }, sys.stdout)
