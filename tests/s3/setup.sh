#!/bin/bash
# Install s3rver (a local S3-compatible server on Node.js) for the s3 test suite
# into tests/s3/node_modules (or $PCRFS_S3RVER_DIR/node_modules), once. Not
# committed: the test command runs this (scripts/test.sh, and test_s3.py itself
# when s3rver is missing). Needs node and npm (scripts/deps.sh) and the npm
# registry; concurrent runs (several builds testing at once) take turns.
set -euo pipefail
VERSION=3.7.1
dir=${PCRFS_S3RVER_DIR:-$(cd "$(dirname "$0")" && pwd)}
bin=$dir/node_modules/.bin/s3rver
mkdir -p "$dir"
exec 9>"$dir/.setup.lock"
flock -w 600 9
if [ -x "$bin" ] && [ "$(node -p "require('$dir/node_modules/s3rver/package.json').version" 2>/dev/null)" = "$VERSION" ]; then
    echo "s3rver $VERSION: $bin"
    exit 0
fi
for p in node npm; do
    command -v $p >/dev/null || { echo "setup.sh: $p not found (run scripts/deps.sh)" >&2; exit 1; }
done
cd "$dir"
[ -f package.json ] || echo '{"name": "pcrfs-s3-tests", "private": true}' > package.json
npm install --no-audit --no-fund --no-save --loglevel=error "s3rver@$VERSION" >&2
[ -x "$bin" ] || { echo "setup.sh: npm did not install $bin" >&2; exit 1; }
echo "s3rver $VERSION: $bin"
