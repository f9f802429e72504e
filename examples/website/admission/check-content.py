#!/usr/bin/env python3
"""A validate handler: denies a Website whose content has a <script> tag.

Input: the admission binding context (JSON) on stdin: operation, object,
oldObject, userInfo, dryRun. Output: the answer (JSON) on stdout,
{"allowed": true} or {"allowed": false, "message": "..."}; kubectl prints
the message. Anything written to stderr is the call's log in the archive.
"""
import json
import sys

ctx = json.load(sys.stdin)
content = ctx["object"]["spec"].get("content", "")
user = ctx["userInfo"].get("username", "?")
print(f'{ctx["operation"]} of {ctx["request"]["name"]} by {user}', file=sys.stderr)

if "<script" in content.lower():
    json.dump({
        "allowed": False,
        "message": "spec.content must not contain <script>: a Website serves static pages only",
    }, sys.stdout)
else:
    json.dump({"allowed": True}, sys.stdout)
