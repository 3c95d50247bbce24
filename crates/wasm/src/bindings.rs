//! Rust types and glue generated from the `bursar:policy` WIT package in `wit/`.
//!
//! `Policy` is the world (its exports `init` and `evaluate`), `PolicyPre` its pre-instantiated form;
//! `bursar::policy::types` holds the records and `bursar::policy::state::Host` the imports the host
//! implements.

#![allow(missing_docs, clippy::all)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "policy",
    // The event handed to `evaluate` borrows the engine's strings instead of copying each into an
    // owned record first; the canonical ABI copies them into guest memory either way.
    ownership: Borrowing { duplicate_if_necessary: true },
});
