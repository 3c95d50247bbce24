// Readiness as a JavaScript WebAssembly policy: a `job.submitted` is denied unless what `require` lists
// (image, data, script) is declared ready. It is the twin of the TOML `readiness` family and of the Rust
// guest in policies/wasm/readiness, line for line, including its reasons, so that
// crates/wasm/tests/js.rs can require identical decisions from all of them.
//
// Built into a component by build.sh (componentize-js against wit/policy.wit, world `policy`).
// What the JavaScript sees (the WIT types as JavaScript values, see docs/wasm-policies.md):
//   - records are objects with camelCase fields (`gpu-type` -> `gpuType`);
//   - `option<T>` is the value or `undefined`;
//   - a variant is `{ tag: "job-submitted", val: { ... } }` (no `val` for cases without a payload);
//   - an enum is its case name as a string; `s64` is a BigInt; `list<T>` an array;
//   - `result<T, string>` as a return: return the value for `ok`, throw a string for `err`.
// Config: `require` (a list among "image", "data", "script"; default all three).

const ITEMS = ["image", "data", "script"];

// The only state: what `init` builds from the config. `evaluate` never writes it, so reusing the
// instance across calls cannot change a decision.
let require = ITEMS;

export function init(config) {
  const parsed = JSON.parse(config);
  const v = parsed.require;
  if (v === undefined) {
    require = ITEMS;
    return;
  }
  if (!Array.isArray(v) || !v.every((x) => typeof x === "string")) {
    throw `config \`require\` must be a list of names, got \`${JSON.stringify(v)}\``;
  }
  const bad = v.find((x) => !ITEMS.includes(x));
  if (bad !== undefined) {
    throw `config \`require\`: \`${bad}\` is not one of image, data, script`;
  }
  require = v;
}

export function evaluate(event) {
  if (event.kind.tag !== "job-submitted") {
    return [];
  }
  const job = event.kind.val;
  const missing = ITEMS.filter((item) => require.includes(item) && job.ready[item] !== true);
  if (missing.length === 0) {
    return [{ kind: { tag: "allow", val: {} }, reason: "" }];
  }
  return [
    {
      kind: { tag: "deny" },
      reason:
        `job ${job.id} is not ready: ${missing.join(", ")} not declared ready; ` +
        `GPUs are granted only when ${require.join(", ")} are ready`,
    },
  ];
}
