#!/bin/bash
# Posts an Event naming the trigger. The binding context is on stdin; this
# handler does not need it (jq would read it: jq -r .object.spec.name).
set -euo pipefail
cat > /dev/null
echo "audit: $OPKIT_TRIGGER, key $OPKIT_IDEMPOTENCY_KEY" >&2
printf '{"events": [{"reason": "Audited", "message": "%s"}]}\n' "$OPKIT_TRIGGER"
