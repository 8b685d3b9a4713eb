"""Verifies one webhook request with the official Python Standard Webhooks library.

Reads {"secret": ..., "body": ..., "headers": {...}} as JSON on stdin; prints "verified" and exits
0 when the library accepts the request for that secret, else prints the library's error and exits
1. Called by rotation.test.mjs (tools/test.sh installs the pinned library into a venv).
"""

import json
import sys

from standardwebhooks.webhooks import Webhook, WebhookVerificationError


def main() -> int:
    request = json.load(sys.stdin)
    try:
        Webhook(request["secret"]).verify(request["body"], request["headers"])
    except WebhookVerificationError as error:
        print(f"refused: {error}")
        return 1
    print("verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
