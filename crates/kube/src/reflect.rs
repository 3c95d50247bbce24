//! List + watch, the API server's way of following a kind of object: a paged list gives the whole
//! set and a `resourceVersion`; a watch from that version gives every change after it. What this
//! loop does about each of the API's answers (docs: Kubernetes API concepts, "Efficient detection
//! of changes"):
//!
//! - a list is paged (`limit`, `continue`); a `410 Gone` on a continue token (it expired) restarts
//!   the list from the first page;
//! - a watch is opened with `allowWatchBookmarks=true` and a timeout; every event moves the resume
//!   point to its object's `resourceVersion`, and so does a `BOOKMARK` (which carries nothing else);
//! - a watch that ends or breaks (timeout, a proxy or the API server closing it, a network error) is
//!   reopened from the resume point, losing nothing;
//! - an `ERROR` event or an HTTP `410 Gone` (the version is older than the API server keeps:
//!   compaction, or an API server restart) means events were lost: the set is listed again, and
//!   the consumer gets the whole new set ([`Feed::Listed`]), so a deletion that happened in the gap
//!   is seen as an object missing from the list.
//!
//! Each kind runs in its own task and feeds one channel; the agent owns every decision made from
//! the objects.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::core::Resource;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

/// What a reflector tells its consumer.
#[derive(Debug, Clone)]
pub enum Feed<K> {
    /// The whole set (after the first list and after every relist): replaces what was known.
    Listed(Vec<K>),
    /// Added or modified.
    Applied(K),
    /// Deleted (the object as it was last).
    Deleted(K),
}

/// Counters of one reflector, for logs and tests.
#[derive(Debug, Default)]
pub struct Counters {
    /// Lists made (the first one included).
    pub lists: AtomicU64,
    /// Relists forced by `410 Gone`.
    pub gone: AtomicU64,
    /// Watches opened.
    pub watches: AtomicU64,
    /// Bookmarks received.
    pub bookmarks: AtomicU64,
    /// Watches that ended or broke and were reopened from the resume point.
    pub reconnects: AtomicU64,
}

impl Counters {
    /// A counter's value.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// Settings of a reflector.
#[derive(Debug, Clone)]
pub struct Settings {
    /// What is followed, for logs (`workloads`, `pods`).
    pub name: String,
    /// A label selector (`bursar.dev/job`), or none for every object.
    pub labels: Option<String>,
    /// Page size of a list.
    pub page: u32,
    /// Server-side timeout of a watch, seconds.
    pub watch_timeout: u32,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings { name: String::new(), labels: None, page: 500, watch_timeout: 290 }
    }
}

fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410 || s.reason == "Expired" || s.reason == "Gone")
}

async fn list_all<K>(api: &Api<K>, s: &Settings) -> Result<(Vec<K>, String), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    'restart: loop {
        let mut items = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default().limit(s.page);
            if let Some(l) = &s.labels {
                lp = lp.labels(l);
            }
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = match api.list(&lp).await {
                Ok(p) => p,
                Err(e) if token.is_some() && is_gone(&e) => {
                    tracing::info!("list continue token expired; listing again from the start");
                    continue 'restart;
                }
                Err(e) => return Err(e),
            };
            let rv = page.metadata.resource_version.clone().unwrap_or_default();
            items.extend(page.items);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(next) => token = Some(next),
                None => return Ok((items, rv)),
            }
        }
    }
}

/// Follows `api` forever, feeding `tx` with each [`Feed`] wrapped by `wrap` (so several kinds can
/// share one channel); returns when the consumer is gone.
pub async fn run<K, M, W>(api: Api<K>, settings: Settings, tx: mpsc::Sender<M>, wrap: W, counters: Arc<Counters>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    M: Send + 'static,
    W: Fn(Feed<K>) -> M + Send + 'static,
{
    let kind = settings.name.clone();
    let mut backoff = Duration::from_millis(200);
    loop {
        counters.lists.fetch_add(1, Ordering::Relaxed);
        let (items, mut rv) = match list_all(&api, &settings).await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(kind, error = %e, "list failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        tracing::debug!(kind, objects = items.len(), resource_version = %rv, "listed");
        if tx.send(wrap(Feed::Listed(items))).await.is_err() {
            return;
        }
        // Watch from `rv` until the API says the version is gone.
        loop {
            let mut wp = WatchParams::default().timeout(settings.watch_timeout);
            if let Some(l) = &settings.labels {
                wp = wp.labels(l);
            }
            counters.watches.fetch_add(1, Ordering::Relaxed);
            let stream = match api.watch(&wp, &rv).await {
                Ok(s) => s,
                Err(e) if is_gone(&e) => {
                    counters.gone.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(kind, resource_version = %rv, "watch: 410 Gone; listing again");
                    break;
                }
                Err(e) => {
                    tracing::warn!(kind, error = %e, "watch failed; retrying from the resume point");
                    counters.reconnects.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                    continue;
                }
            };
            let mut stream = std::pin::pin!(stream);
            let mut gone = false;
            while let Some(item) = stream.next().await {
                let feed = match item {
                    Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                        rv = o.meta().resource_version.clone().unwrap_or(rv);
                        Feed::Applied(o)
                    }
                    Ok(WatchEvent::Deleted(o)) => {
                        rv = o.meta().resource_version.clone().unwrap_or(rv);
                        Feed::Deleted(o)
                    }
                    Ok(WatchEvent::Bookmark(b)) => {
                        counters.bookmarks.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(kind, resource_version = %b.metadata.resource_version, "watch bookmark");
                        rv = b.metadata.resource_version;
                        continue;
                    }
                    Ok(WatchEvent::Error(s)) if s.code == 410 || s.reason == "Expired" || s.reason == "Gone" => {
                        counters.gone.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(kind, resource_version = %rv, message = %s.message, "watch: 410 Gone; listing again");
                        gone = true;
                        break;
                    }
                    Ok(WatchEvent::Error(s)) => {
                        tracing::warn!(kind, code = s.code, message = %s.message, "watch error event; reopening");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(kind, error = %e, "watch stream broke; reopening from the resume point");
                        break;
                    }
                };
                backoff = Duration::from_millis(200);
                if tx.send(wrap(feed)).await.is_err() {
                    return;
                }
            }
            if gone {
                break;
            }
            counters.reconnects.fetch_add(1, Ordering::Relaxed);
        }
    }
}
