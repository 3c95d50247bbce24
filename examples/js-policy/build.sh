#!/usr/bin/env bash
# Builds readiness.js into the bursar:policy component readiness.wasm, next to policy.toml.
#
# Installs the pinned componentize-js from package-lock.json (`npm ci`) when node_modules is missing,
# then compiles against the repository's WIT world with every WASI feature disabled, so the component
# imports only `bursar:policy/state` (and the `types` it uses), which is all the host links.
#
# Usage: examples/js-policy/build.sh          build when a source is newer than readiness.wasm
#        examples/js-policy/build.sh --force  build anyway
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$here/readiness.wasm"
cd "$here"

if [ "${1:-}" != --force ] && [ -f "$out" ]; then
    stale=0
    for src in readiness.js package-lock.json build.sh "$root/wit/policy.wit"; do
        if [ "$src" -nt "$out" ]; then stale=1; fi
    done
    if [ "$stale" = 0 ]; then
        echo "js-policy: readiness.wasm is up to date" >&2
        exit 0
    fi
fi

for tool in node npm; do
    if ! command -v "$tool" >/dev/null; then
        echo "js-policy: \`$tool\` is not installed; install Node.js 20 or later (with npm) to build this example" >&2
        exit 127
    fi
done

if [ ! -x node_modules/.bin/componentize-js ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    echo "js-policy: npm ci (componentize-js, pinned in package-lock.json)" >&2
    npm ci --no-audit --no-fund --loglevel=error
fi

echo "js-policy: componentize-js readiness.js -> readiness.wasm" >&2
# Write to a temporary file first so an interrupted build never leaves a truncated component behind.
node_modules/.bin/componentize-js readiness.js \
    --wit "$root/wit" --world-name policy \
    --disable stdio random clocks http fetch-event \
    --out "$out.tmp"
mv "$out.tmp" "$out"
echo "js-policy: $(wc -c < "$out") bytes" >&2
