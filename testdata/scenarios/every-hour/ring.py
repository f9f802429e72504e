#!/usr/bin/env python3
"""Records the hour (since the Chime's creation) of the slot it runs for.

A scheduled run's idempotency key ends with its slot's Unix time; the
slots of every: 1h are the Chime's creation plus whole hours. The status
is merged (a JSON merge patch), so each run adds its hour to status.rang.
"""
import datetime
import json
import sys

ctx = json.load(sys.stdin)
chime = ctx["object"]
slot = int(ctx["idempotencyKey"].rsplit("/", 1)[1])
created = datetime.datetime.fromisoformat(chime["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
hour = round((slot - created.timestamp()) / 3600)
at = datetime.datetime.fromtimestamp(slot, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
print(f'{ctx["trigger"]} run for hour {hour} ({at}), attempt {ctx["attempt"]}: {chime["spec"].get("sound", "ding")}', file=sys.stderr)
json.dump({"status": {"rang": {str(hour): at}}}, sys.stdout)
