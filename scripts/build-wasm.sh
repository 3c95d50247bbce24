#!/usr/bin/env bash
# Builds every example WebAssembly policy under policies/wasm/*/ from source and copies each core
# module next to its manifest as policies/wasm/<name>.wasm. The host wraps a core module into a component
# when it loads it (see docs/wasm-policies.md), so no other tool is needed.
#
# Usage: scripts/build-wasm.sh            build all guests
#        BURSAR_GUEST_TARGET=dir ...      where the guests' cargo output goes (default: target/wasm-guests)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="wasm32-unknown-unknown"
out_dir="${BURSAR_GUEST_TARGET:-$root/target/wasm-guests}"

if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    echo "build-wasm: installing the $target target with rustup" >&2
    rustup target add "$target"
fi

shopt -s nullglob
built=0
for manifest in "$root"/policies/wasm/*/Cargo.toml; do
    dir="$(dirname "$manifest")"
    name="$(basename "$dir")"
    # Guests are their own workspace roots; CARGO_TARGET_DIR is shared so wit-bindgen compiles once.
    CARGO_TARGET_DIR="$out_dir" cargo build --quiet --release --target "$target" --manifest-path "$manifest"
    crate="$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -n1 | tr '-' '_')"
    cp "$out_dir/$target/release/$crate.wasm" "$root/policies/wasm/$name.wasm"
    echo "build-wasm: policies/wasm/$name.wasm" >&2
    built=$((built + 1))
done
echo "build-wasm: built $built guest(s)" >&2
