#!/usr/bin/env bash
# Installs what bursar's build and tests need on a fresh Debian machine, and nothing that is already
# there. Idempotent; run by scripts/test.sh and scripts/run-example.sh.
#
#   rustup target wasm32-unknown-unknown   the example WebAssembly policies are built from source
#   chromium                               the HTML report test renders its charts headless
#   slurmctld slurmd slurm-client munge    the end-to-end test against a real one-node Slurm
#   prometheus                             bursar-prometheus's tests run it (Debian's 2.42, on loopback)
#   prometheus-alertmanager                the notification tests send through it (Debian's 0.25, on loopback)
#   nats-server                            `serve --cluster`'s tests run a 3-node JetStream cluster (2.9, loopback)
#   nodejs npm                             the JavaScript example policy (examples/js-policy/build.sh
#                                          installs its pinned npm packages itself)
#   lua5.1 lua-socket                      the Slurm hook's own tests (the Lua Debian's Slurm links), and the
#                                          hook's kept connection to serve's event socket (socket.unix)
#   apache2 libapache2-mod-auth-openidc    people in a browser: the single sign-on proxy in front of serve
#                                          (crates/cli/tests/people_sso.rs runs integrations/apache/)
#   dpkg-dev systemd                       the Debian package test: cargo-deb's dependency scan
#                                          (dpkg-shlibdeps) and `systemd-analyze verify` of the units
#   cargo-deb (crates.io, cargo install)   builds the Debian package (scripts/build-deb.sh)
#
# Set BURSAR_SETUP_MINIMAL=1 to install only what `cargo build` and the example need (the rustup target).
set -euo pipefail

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    echo "setup: rustup target add wasm32-unknown-unknown" >&2
    rustup target add wasm32-unknown-unknown
fi

[ "${BURSAR_SETUP_MINIMAL:-0}" = 1 ] && exit 0

if ! command -v cargo-deb >/dev/null; then
    # Pinned, so every machine packages with the same cargo-deb (the package test reads its output).
    echo "setup: cargo install --locked cargo-deb@3.8.0" >&2
    # Its own temporary target folder, not the workspace's (CARGO_TARGET_DIR would send it there).
    env -u CARGO_TARGET_DIR cargo install --quiet --locked cargo-deb@3.8.0
fi

need=()
command -v chromium >/dev/null || need+=(chromium)
command -v slurmctld >/dev/null || need+=(slurmctld)
command -v slurmd >/dev/null || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
command -v munged >/dev/null || need+=(munge)
command -v curl >/dev/null || need+=(curl)
[ -x /usr/bin/prometheus ] || need+=(prometheus)
[ -x /usr/bin/prometheus-alertmanager ] || need+=(prometheus-alertmanager)
[ -x /usr/sbin/nats-server ] || need+=(nats-server)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
command -v lua5.1 >/dev/null || need+=(lua5.1)
{ command -v lua5.1 >/dev/null && lua5.1 -e 'require("socket.unix")' 2>/dev/null; } || need+=(lua-socket)
[ -x /usr/sbin/apache2 ] || need+=(apache2)
[ -f /usr/lib/apache2/modules/mod_auth_openidc.so ] || need+=(libapache2-mod-auth-openidc)
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
command -v systemd-analyze >/dev/null || need+=(systemd)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "setup: missing ${need[*]}; run as root (or install them) to run every test" >&2
        exit 0
    fi
    echo "setup: apt-get install ${need[*]}" >&2
    # Keep the packages' init scripts from starting daemons on their default ports.
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
