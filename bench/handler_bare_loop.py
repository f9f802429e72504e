"""The handlers drain's handler in exec.mode Serve written as a bare loop,
the loop docs/handlers.md shows (bench/python_handlers.go writes it into
the bench's work directory): each binding context, one per line of stdin,
is read as JSON, and answered with the result given as the first argument
(what the workload's /bin/echo prints), on a line, flushed. The same
handler on opkit's SDK is handler_sdk.py; the two are measured side by
side, on the same python3.
"""

import json
import sys

RESULT = sys.argv[1]

for line in sys.stdin:  # ends when opkit closes stdin
    json.loads(line)
    print(RESULT, flush=True)
