//! How the agents follow a kind of object: kube-runtime's [`watcher`](kube::runtime::watcher()),
//! the API server's list + watch (docs: Kubernetes API concepts, "Efficient detection of changes"):
//!
//! - a paged list (`limit` 500, `continue`; an expired continue token lists again from the start)
//!   gives the whole set and a `resourceVersion`;
//! - a watch from that version with `allowWatchBookmarks=true` and a server-side timeout gives every
//!   change after it; each event and each bookmark moves the resume point, and a watch that ends or
//!   breaks is reopened from it;
//! - `410 Gone` (an `ERROR` event or the status: the version was compacted away, or the API server
//!   restarted) means changes were lost: the set is listed again, and a store fed by the watcher
//!   (a [`reflector`](kube::runtime::reflector())) swaps to the new list in one step when it is
//!   complete, so an object deleted in the gap is simply missing from it.
//!
//! Every error comes out of the stream and the watcher goes on, after kube-runtime's default
//! back-off (which the agents add with `default_backoff`). This module holds what the agents share
//! about it: the watcher's settings and what is logged of its errors.

use kube::runtime::watcher;

/// The watcher's settings: the server-side timeout of each watch (seconds) and a label selector.
pub fn config(watch_timeout: u32, labels: Option<&str>) -> watcher::Config {
    let wc = watcher::Config::default().timeout(watch_timeout);
    match labels {
        Some(l) => wc.labels(l),
        None => wc,
    }
}

/// Whether the error is the API server's `410 Gone`: the watcher lists again.
pub fn is_gone(e: &watcher::Error) -> bool {
    let gone = |s: &kube::core::Status| s.code == 410 || s.reason == "Expired" || s.reason == "Gone";
    match e {
        watcher::Error::WatchError(s) => gone(s),
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => gone(s),
        _ => false,
    }
}

/// Logs an error of the watcher of `kind` (`workloads`, `pods`); the watcher goes on by itself.
pub fn log_error(kind: &str, e: &watcher::Error) {
    if is_gone(e) {
        tracing::info!(kind, error = %e, "watch: 410 Gone; listing again");
    } else {
        tracing::warn!(kind, error = %e, "watch failed; retrying after a back-off");
    }
}
