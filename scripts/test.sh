#!/usr/bin/env bash
# Installs the package with its test dependencies and runs the whole suite (the README's test command).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q -e ".[test]"
python3 -m pytest -q
