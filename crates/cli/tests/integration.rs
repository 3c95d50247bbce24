//! The integration tests of `bursar` (crates/cli), in one test binary (as ripgrep's `tests/tests.rs`): each file
//! of this folder is a module of it, so the workspace is linked once for this crate's tests, not
//! once per file. One file's tests: `cargo test -p bursar --test integration <file>::`.
//!
//! Shared set-up is in `kube_support`, `serve_support`, declared once here.

mod kube_support;
mod serve_support;

mod audit_anchors;
mod audit_backup;
mod audit_derived;
mod audit_eval;
mod audit_kill;
mod audit_snapshot;
mod audit_trust;
mod audit_upgrade;
mod audit_witness;
mod auth_token;
mod cluster;
mod config_file;
mod debian_package;
mod docs_walk;
mod doctor;
mod estimate;
mod hardening;
mod help_and_man;
mod import;
mod kube_e2e;
mod kube_inventory;
mod kube_webhook;
mod notify_alertmanager;
mod notify_links;
mod notify_restart;
mod one_road;
mod people_sso;
mod policytest_coverage;
mod policytest_fmt;
mod policytest_replay;
mod policytest_test;
mod pool_browser;
mod prometheus_alerts;
mod queue;
mod report_bill;
mod report_browser;
mod report_cli;
mod report_cost;
mod report_philly;
mod report_pool;
mod report_savings;
mod report_serve;
mod security;
mod security_credentials;
mod serve_actions;
mod serve_admission;
mod serve_bind;
mod serve_idle;
mod serve_maintenance;
mod serve_reload;
mod serve_restart;
mod serve_socket;
mod serve_stream;
mod serve_tls;
mod serve_utilisation;
mod slurm_agents;
mod slurm_hook;
mod wasm_poisoning;
mod wasm_policies;
