//! Write budgets: every caller's writes counted per wall-clock minute, against the budget of its
//! principal or person ([`bursar_auth::Budget`], `[budget]` in the configuration).
//!
//! Each request that sends inputs (`POST /v1/events`, `/v1/admit`, an answer or a keepalive, a
//! read on the event socket) is charged its bytes and its lines before it reaches the engine; one
//! that would go over is refused whole with 429 and `Retry-After` (nothing of it is applied, so
//! resending it later is safe), and a caller already over is refused before its body is read
//! ([`crate::listen::read_body`]). The first refusal of each caller in each minute is journaled in
//! the audit log's `refused` table with the caller as its sender, so who hit a budget and when is
//! on record without the refusals themselves growing the log: at most one row per caller per
//! minute. `bursar_write_budget_refused_total{kind="principal"|"person"}` counts every refusal,
//! and the `BursarWriteBudgetExceeded` alert fires on it.
//!
//! Callers of a server without principals (loopback) and bursar's own sources (the ticker, the
//! utilisation source, the notifier) are not budgeted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bursar_auth::Caller;

use crate::respond::Refusal;

/// One caller's use of the current minute.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    minute: i64,
    events: u64,
    bytes: u64,
    /// The first refusal of this minute was journaled.
    journaled: bool,
}

/// Every caller's use, and the refusals, for `/metrics`.
#[derive(Debug, Default)]
pub struct Budgets {
    windows: Mutex<HashMap<(bool, String), Window>>,
    /// Requests refused over a principal's budget.
    pub refused_principal: AtomicU64,
    /// Requests refused over a person's budget.
    pub refused_person: AtomicU64,
}

/// A request over its caller's budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Over {
    /// The sentence for the caller.
    pub message: String,
    /// Seconds until the next minute.
    pub retry_after: u64,
    /// The first refusal of this caller this minute: journal it.
    pub journal: bool,
}

impl From<Over> for Refusal {
    fn from(over: Over) -> Refusal {
        Refusal::OverBudget { message: over.message, retry_after: over.retry_after }
    }
}

/// How many windows are kept before the old ones are dropped.
const KEEP: usize = 4096;

impl Budgets {
    /// Charges `caller` `events` inputs and `bytes` bytes in the minute of `now_ms`, or refuses (and
    /// charges nothing). With `dry`, only says whether the caller is over already.
    fn at(&self, caller: &Caller, events: u64, bytes: u64, now_ms: i64, dry: bool) -> Result<(), Over> {
        if caller.is_open() {
            return Ok(());
        }
        let p = &caller.principal;
        let minute = now_ms.div_euclid(60_000);
        let Ok(mut windows) = self.windows.lock() else { return Ok(()) };
        if windows.len() > KEEP {
            windows.retain(|_, w| w.minute == minute);
        }
        let w = windows.entry((p.declared, p.name.to_string())).or_default();
        if w.minute != minute {
            *w = Window { minute, ..Window::default() };
        }
        let b = p.budget;
        // Refused before its body is read only once a refusal of this minute is on record (the one
        // that went over was read, so it could be journaled).
        let fits = if dry {
            !w.journaled || (w.events < b.events_per_minute && w.bytes < b.bytes_per_minute)
        } else {
            w.events + events <= b.events_per_minute && w.bytes + bytes <= b.bytes_per_minute
        };
        if fits {
            if !dry {
                w.events += events;
                w.bytes += bytes;
            }
            return Ok(());
        }
        let journal = !w.journaled;
        w.journaled = true;
        let kind = if p.declared { "principal" } else { "person" };
        if p.declared { &self.refused_principal } else { &self.refused_person }.fetch_add(1, Ordering::Relaxed);
        let retry_after = u64::try_from(60 - now_ms.rem_euclid(60_000) / 1000).unwrap_or(60).max(1);
        let this = if dry { String::new() } else { format!(" ({events} events, {bytes} bytes)") };
        Err(Over {
            message: format!(
                "write budget spent: the {kind} `{}` may write {} events and {} bytes a minute, and has written {} events and {} bytes this minute; this request{this} is refused whole, nothing of it was applied: resend it in {retry_after} s (ids make that safe)\n  help: if this much is expected, raise the budget (`[budget]`, or `events_per_minute` and `bytes_per_minute` in the {kind}'s table; docs/security.md)",
                p.name, b.events_per_minute, b.bytes_per_minute, w.events, w.bytes
            ),
            retry_after,
            journal,
        })
    }

    /// Charges `caller` `events` inputs and `bytes` bytes in the minute of `now_ms`, or refuses the
    /// whole request (charging nothing).
    pub fn charge_at(&self, caller: &Caller, events: u64, bytes: u64, now_ms: i64) -> Result<(), Over> {
        self.at(caller, events, bytes, now_ms, false)
    }

    /// [`Budgets::charge_at`] now.
    pub fn charge(&self, caller: &Caller, events: u64, bytes: u64) -> Result<(), Over> {
        self.charge_at(caller, events, bytes, bursar_model::Timestamp::wall_clock().millis())
    }

    /// Refuses a caller whose budget this minute is already spent, before its body is read.
    pub fn precheck(&self, caller: &Caller) -> Result<(), Over> {
        self.at(caller, 0, 0, bursar_model::Timestamp::wall_clock().millis(), true)
    }

    /// The `/metrics` lines.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(
            out,
            "# HELP bursar_write_budget_refused_total Requests refused because their caller's write budget (events or bytes a minute) was spent, by kind of caller.\n\
             # TYPE bursar_write_budget_refused_total counter\n\
             bursar_write_budget_refused_total{{kind=\"principal\"}} {}\n\
             bursar_write_budget_refused_total{{kind=\"person\"}} {}\n",
            self.refused_principal.load(Ordering::Relaxed),
            self.refused_person.load(Ordering::Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bursar_auth::{Budget, Principal, Proof, Roles};
    use std::sync::Arc;

    fn caller(name: &str, declared: bool, budget: Budget) -> Caller {
        Caller {
            principal: Arc::new(Principal {
                name: Arc::from(name),
                roles: Roles::all(),
                jobs: Vec::new(),
                declared,
                named: true,
                budget,
            }),
            proof: Proof::Token { label: "x".into() },
        }
    }

    #[test]
    fn a_caller_writes_its_budget_a_minute_and_no_more() {
        let b = Budgets::default();
        let alice = caller("alice", false, Budget { events_per_minute: 3, bytes_per_minute: 1000 });
        let t = 1_800_000_000_000;
        assert!(b.charge_at(&alice, 2, 500, t).is_ok());
        let over = b.charge_at(&alice, 2, 10, t + 1000).unwrap_err();
        assert!(over.journal && over.message.contains("person `alice` may write 3 events"), "{}", over.message);
        // Refused whole: nothing of it was counted, a smaller one still fits, the next refusal is not journaled.
        assert!(b.charge_at(&alice, 1, 10, t + 2000).is_ok());
        assert!(!b.charge_at(&alice, 0, 600, t + 3000).unwrap_err().journal);
        assert!(b.at(&alice, 0, 0, t + 4000, true).is_err(), "spent: refused before a body is read");
        // A principal of the same name is another caller; the next minute starts afresh.
        let svc = caller("alice", true, Budget::PRINCIPAL);
        assert!(b.charge_at(&svc, 1000, 1 << 20, t).is_ok());
        assert!(b.charge_at(&alice, 3, 1000, t + 60_000).is_ok());
        assert_eq!((b.refused_person.load(Ordering::Relaxed), b.refused_principal.load(Ordering::Relaxed)), (3, 0));
    }
}
