#!/usr/bin/env bash
# Makes the audit-log fixtures of this folder: for each earlier schema version N, the bursar of the
# last commit on main that wrote it is built from a git worktree and run once, and what it wrote is
# kept as vN.db. Run once per schema bump (the fixtures are committed; the test that reads them,
# crates/cli/tests/audit_upgrade.rs, never runs this). Slow: each version is a debug build of the
# whole binary (about 10-25 minutes on 2 cores; the versions share one target folder, so the later
# ones build only what changed).
#
#   tests/data/audit-schemas/make-fixtures.sh            every version
#   tests/data/audit-schemas/make-fixtures.sh 3 5        only these
#   WORK=/tmp/x KEEP=1 tests/data/audit-schemas/...      where to work; KEEP=1 keeps the target folder
#   TREE=DIR TARGET=DIR                                  the worktree and target folder (default WORK/tree, WORK/target)
# Needs git, cargo, curl and sqlite3.
#
# What one run writes (every version had engine snapshots, so each file holds one):
#   1. bursar eval --policies P --events E --audit vN.db, with E the first 20 lines of
#      examples/events.jsonl and P that commit's policies/*.toml without the two WebAssembly
#      manifests (fair-share.toml, trial-before-scale.toml: they need guests built for that commit);
#   2. bursar serve --policies P --audit vN.db on loopback: one POST /v1/admit (job fx-1, dated now),
#      POST /v1/snapshot, then one POST /v1/events after the snapshot (fx-1 started), then kill -9,
#      so the file ends with a snapshot and an input after it, as a crash leaves it;
#   3. that commit's bursar audit verify --db vN.db must pass, and sqlite3 folds the WAL back in.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
work="${WORK:-/tmp/bursar-audit-fixtures}"

# The last commit on main's first-parent history whose crates/audit/src/schema.rs has each
# SCHEMA_VERSION and whose bursar builds (see README.md beside this script for how they were found).
declare -A COMMIT=(
    [1]=171b2fbf3829b24eee95b1792a67032b786b5dbe
    [2]=0c8b0b60331fbcdb8f5b36c6edbc77e3573f1ee5
    [3]=1a094bc199ac305a64b304984426b85a608f9a59
    [4]=8316a9dfd7ac6a1142aee46f8ee49b30b3f546ad
    [5]=60c15309ff779b22761457dce9d269cb7e0f1640
    # Not the last, a7fb41a: it and 62a2b41 before it are the first two of the issue-36 series,
    # committed split on main, and bursar-serve does not compile there (Incoming gained `sender`,
    # serve's socket and utilisation sources set it only in d771e32, which is schema 7).
    [6]=d039d6494eb74051c0462202b6fa535acdce0d94
)
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(1 2 3 4 5 6)

tree="${TREE:-$work/tree}"
target="${TARGET:-$work/target}"
mkdir -p "$work"
serve_pid=
cleanup() {
    if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then kill -9 "$serve_pid" 2>/dev/null || true; fi
    git -C "$root" worktree remove --force "$tree" 2>/dev/null || true
    [ "${KEEP:-0}" = 1 ] || rm -rf "$target"
}
trap cleanup EXIT

[ -d "$tree" ] || git -C "$root" worktree add --detach "$tree" "${COMMIT[${versions[0]}]}" >/dev/null

for n in "${versions[@]}"; do
    commit="${COMMIT[$n]:?no commit for schema version $n}"
    echo "make-fixtures: schema $n from $(git -C "$root" log -1 --format='%h %s' "$commit")" >&2
    git -C "$tree" checkout --quiet --detach "$commit"
    found=$(sed -n 's/^pub const SCHEMA_VERSION: i64 = \([0-9]*\);/\1/p' "$tree/crates/audit/src/schema.rs")
    [ "$found" = "$n" ] || { echo "make-fixtures: $commit writes schema $found, not $n" >&2; exit 1; }
    (cd "$tree" && CARGO_TARGET_DIR="$target" cargo build --quiet -p bursar --bin bursar)
    bin="$target/debug/bursar"

    run="$work/v$n"
    rm -rf "$run"
    mkdir -p "$run/policies"
    for f in "$tree"/policies/*.toml; do
        case "$(basename "$f")" in
            *.test.toml | fair-share.toml | trial-before-scale.toml) ;;
            *) cp "$f" "$run/policies/" ;;
        esac
    done
    head -n 20 "$tree/examples/events.jsonl" > "$run/events.jsonl"
    db="$run/v$n.db"

    "$bin" eval --policies "$run/policies" --events "$run/events.jsonl" --audit "$db" > "$run/decisions.jsonl" 2> "$run/eval.err"

    "$bin" serve --policies "$run/policies" --audit "$db" --listen 127.0.0.1:0 --port-file "$run/port" \
        --snapshot-every 1h --no-watch > "$run/serve.log" 2>&1 &
    serve_pid=$!
    for _ in $(seq 1 100); do [ -s "$run/port" ] && break; sleep 0.1; done
    [ -s "$run/port" ] || { cat "$run/serve.log" >&2; exit 1; }
    url="http://127.0.0.1:$(cat "$run/port")"
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    curl -sf "$url/v1/admit" -H 'content-type: application/json' -d '{"id":"fx-sub-1","time":"'"$now"'","type":"job.submitted","job":{"id":"fx-1","project":"nlp","user":"alice","queue":"batch","gpus":2,"gpu_type":"H200","gpu_mem_gb":141,"nodes":1,"requested_hours":1.0,"stage":"finetune","model_params_b":7.0,"image":"registry/llm:1.4","dataset":"ds-42","script_hash":"sha256:ab12","ready":{"image":true,"data":true,"script":true},"deferrable":false}}' > "$run/admit.json"
    curl -sf -X POST "$url/v1/snapshot" > "$run/snapshot.json"
    curl -sf "$url/v1/events" -d '{"id":"fx-start-1","time":"'"$now"'","type":"job.started","job_id":"fx-1"}' > "$run/events.json"
    kill -9 "$serve_pid"
    wait "$serve_pid" 2>/dev/null || true
    serve_pid=

    # The last connection to close folds the WAL back into the file: one file to commit.
    sqlite3 "$db" 'PRAGMA user_version;' > "$run/user_version"
    [ "$(cat "$run/user_version")" = "$n" ] || { echo "make-fixtures: v$n.db says user_version $(cat "$run/user_version")" >&2; exit 1; }
    "$bin" audit verify --db "$db" > "$run/verify.txt"
    rm -f "$db-wal" "$db-shm"
    cp "$db" "$here/v$n.db"
    echo "make-fixtures: v$n.db $(stat -c %s "$here/v$n.db") bytes; admit: $(cut -c1-120 "$run/admit.json")" >&2
done
