#!/usr/bin/env bash
# The README's test command: installs the package with its test dependencies (and Debian's headless Chromium for
# the browser test), then runs the whole suite. CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_browser.sh
python3 -m pip install -q -e ".[test]"
python3 -m pytest -q
