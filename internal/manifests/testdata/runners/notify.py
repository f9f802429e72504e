import json, sys

from lib import helpers

ctx = json.load(sys.stdin)
print(json.dumps({"status": {"note": helpers.shout(ctx["object"]["spec"].get("text", ""))}}))
