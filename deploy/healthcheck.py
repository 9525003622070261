"""The container's health check: exit 0 when the relay's /healthz answers 200, else 1.

It asks http://127.0.0.1:$RUNWIRE_PORT/healthz (8787 by default); RUNWIRE_HEALTH_URL
names another URL. Standard library only, so it runs in the slim image as it is.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request


def main() -> int:
    port = os.environ.get("RUNWIRE_PORT", "8787")
    url = os.environ.get("RUNWIRE_HEALTH_URL", f"http://127.0.0.1:{port}/healthz")
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            ok = response.status == 200
    except (OSError, urllib.error.URLError) as exc:
        print(f"runwire-healthcheck: {url}: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
