//! Write budgets: how much each principal and each person may write per minute.
//!
//! Every input a caller sends is journaled, so whoever may send anything may grow the audit log.
//! Before budgets, one person with the `keepalive` power (every local user, through MUNGE, by
//! default) filled a 48 MiB disk in 13 requests. A budget bounds each caller's writes in bytes
//! and in events per minute; `serve` counts them ([`Budget`] is only the limit) and refuses a
//! request over it with 429.
//!
//! Declared principals and people have separate defaults (`[budget]` in the configuration): a
//! scheduler or a producer writes for a whole cluster, a person answers an approval now and then.
//! A principal may have its own (`budget = { events_per_minute = …, bytes_per_minute = … }` in its
//! `[[principal]]` table), and so may a person declared in a `[[person]]` table.

/// How much one caller may write per minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Inputs (event lines) per minute.
    pub events_per_minute: u64,
    /// Bytes of request bodies (or socket lines) per minute.
    pub bytes_per_minute: u64,
}

impl Budget {
    /// The default of a declared principal: 120,000 events and 128 MiB a minute (a scheduler
    /// admitting 2,000 jobs a second, a producer sampling 10,000 GPUs every 5 s).
    pub const PRINCIPAL: Budget = Budget { events_per_minute: 120_000, bytes_per_minute: 128 * 1024 * 1024 };
    /// The default of a person: 120 events and 256 KiB a minute (an approval, a rejection or a
    /// keepalive is a line of about 300 bytes).
    pub const PERSON: Budget = Budget { events_per_minute: 120, bytes_per_minute: 256 * 1024 };
}

/// `[budget]`: the defaults of principals and people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BudgetSettings {
    /// Each declared principal's, unless its table says otherwise.
    pub principal: Budget,
    /// Each person's, unless a `[[person]]` table says otherwise.
    pub person: Budget,
}

impl Default for BudgetSettings {
    fn default() -> BudgetSettings {
        BudgetSettings { principal: Budget::PRINCIPAL, person: Budget::PERSON }
    }
}
