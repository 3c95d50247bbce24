#!/usr/bin/env bash
# Builds the Debian package, bursar_<version>-1_<arch>.deb, with cargo-deb (scripts/setup.sh installs
# it). The man pages and shell completions are written by the binary being packaged (`bursar man`,
# `bursar completions`), so they cannot disagree with its --help. What goes where is in
# crates/cli/Cargo.toml, [package.metadata.deb]; the units and maintainer scripts in
# integrations/debian/; docs/operations.md says what the package installs.
#
#   scripts/build-deb.sh                  a release build, then the package in target/debian/
#   scripts/build-deb.sh --binary PATH    package this binary instead and compile nothing (the package
#                                         test packages the debug build the tests already made)
#   scripts/build-deb.sh --out DIR        where the .deb goes (default: <target folder>/debian)
#   scripts/build-deb.sh --fast           lighter compression (a test's package, made to be removed)
#   scripts/build-deb.sh --version V      the package's version (with revision) instead of the crate's
#                                         (the package test makes an "older" package to downgrade to)
#
# The binary in the package is stripped: its debug symbols go to bursar-dbgsym_<version>_<arch>.ddeb
# beside the .deb (cargo-deb's --dbgsym; install it next to the package to debug a core file).
#
# Prints the path of the .deb on stdout.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
binary=""
out=""
fast=()
version=()
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --fast) fast=(--fast); shift ;;
        --version) version=(--deb-version "$2"); shift 2 ;;
        *) echo "build-deb: unknown argument \`$1\` (--binary PATH, --out DIR, --fast, --version V)" >&2; exit 2 ;;
    esac
done
out="${out:-$target/debian}"
mkdir -p "$out"

if ! command -v cargo-deb >/dev/null; then
    echo "build-deb: cargo-deb is not installed (scripts/setup.sh installs it: cargo install --locked cargo-deb)" >&2
    exit 1
fi

cd "$root"
if [ -z "$binary" ]; then
    cargo build --release --locked -p bursar --bin bursar
    stage="$target"
else
    # cargo-deb packages `target/release/…` of its target folder: a folder of its own holding this
    # binary, so that a real release build is never packaged by mistake, nor overwritten.
    stage="$(mktemp -d "${TMPDIR:-/tmp}/bursar-deb.XXXXXX")"
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$stage/release"
    cp "$binary" "$stage/release/bursar"
    # A debug build is mostly debug information (about 500 MB); cargo-deb keeps what a package's
    # profile asks for, so the copy loses it here.
    strip --strip-debug "$stage/release/bursar"
fi

bin="$stage/release/bursar"
gen="$stage/release/deb"
rm -rf "$gen"
mkdir -p "$gen/man" "$gen/completions"
"$bin" man --out "$gen/man" >/dev/null
gzip -9n "$gen/man"/*.1
"$bin" completions bash > "$gen/completions/bursar.bash"
"$bin" completions zsh > "$gen/completions/_bursar"
"$bin" completions fish > "$gen/completions/bursar.fish"

CARGO_TARGET_DIR="$stage" cargo deb --quiet -p bursar --no-build --dbgsym "${fast[@]}" "${version[@]}" --output "$out" >&2
ls -t "$out"/bursar_*.deb | head -n 1
