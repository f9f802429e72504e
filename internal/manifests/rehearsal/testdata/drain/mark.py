#!/usr/bin/env python3
"""Takes half a second, and says the Item was handled, by whom (its
idempotency key): a run in flight long enough to be interrupted."""
import json
import os
import sys
import time

json.load(sys.stdin)
time.sleep(0.5)
print(json.dumps({"status": {"handled": True, "key": os.environ.get("OPKIT_IDEMPOTENCY_KEY", "")}}))
