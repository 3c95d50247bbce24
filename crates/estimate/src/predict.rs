//! A job's runtime, predicted from its owner's history.
//!
//! Users ask for far more time than they use: a limit is a ceiling chosen from a short list (an
//! hour, four, a day), and most jobs end well before it. What they will use is best told by what
//! they used before. [`History`] keeps each finished run's runtime against its limit, and
//! [`History::predict`] answers from the closest history it has, in this order (the fallback):
//!
//! | basis | when | runtime | short end of the range |
//! |---|---|---|---|
//! | [`Basis::SameRequest`] | the same user and configuration ran with this same limit | the mean of their last runs' runtimes (at most [`RECENT`]) | the shortest of them |
//! | [`Basis::SameConfig`] | the same user and configuration ran with other limits | limit × the median of their runs' runtime ÷ limit | limit × the smallest ratio |
//! | [`Basis::SameUser`] | the same user ran anything | the same, over the user's runs | the same |
//! | [`Basis::Pool`] | anyone ran anything | the same, over the pool's last [`RECENT_POOL`] runs | the same |
//! | [`Basis::Limit`] | no history at all | the limit | the limit |
//!
//! A prediction never exceeds the limit (the scheduler ends the job there). Memory is bounded by
//! the number of (user, configuration, limit) triples seen, [`RECENT`] runs each.

use std::collections::{HashMap, VecDeque};

use crate::{Job, Millis};

/// How many of a key's most recent runs count.
pub const RECENT: usize = 5;

/// How many of the pool's most recent runs count for [`Basis::Pool`].
pub const RECENT_POOL: usize = 50;

/// What a prediction was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The same user's and configuration's runs with the same limit (how many).
    SameRequest(usize),
    /// The same user's and configuration's runs, other limits (how many).
    SameConfig(usize),
    /// The same user's runs (how many).
    SameUser(usize),
    /// Anyone's recent runs (how many).
    Pool(usize),
    /// No history: the limit itself.
    Limit,
}

impl Basis {
    /// A phrase for people: `the same user and configuration's last 3 runs with this limit`.
    pub fn describe(self) -> String {
        let runs = |n: usize| if n == 1 { "run".to_owned() } else { format!("{n} runs") };
        match self {
            Basis::SameRequest(n) => format!("the same user and configuration's last {} with this limit", runs(n)),
            Basis::SameConfig(n) => format!("the same user and configuration's last {}", runs(n)),
            Basis::SameUser(n) => format!("the same user's last {}", runs(n)),
            Basis::Pool(n) => format!("the pool's last {}", runs(n)),
            Basis::Limit => "the requested limit (no history)".to_owned(),
        }
    }

    /// A short name for answers: `same_request`, `same_config`, `same_user`, `pool`, `limit`.
    pub fn name(self) -> &'static str {
        match self {
            Basis::SameRequest(_) => "same_request",
            Basis::SameConfig(_) => "same_config",
            Basis::SameUser(_) => "same_user",
            Basis::Pool(_) => "pool",
            Basis::Limit => "limit",
        }
    }
}

/// A predicted runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prediction {
    /// The expected runtime (ms), at most the limit.
    pub runtime: Millis,
    /// The short end: as short as the shortest recent run.
    pub low: Millis,
    /// The requested limit: the long end.
    pub limit: Millis,
    /// What it was predicted from.
    pub basis: Basis,
}

#[derive(Debug, Clone, Default)]
struct Recent {
    runs: VecDeque<(Millis, Millis)>,
}

impl Recent {
    fn push(&mut self, runtime: Millis, limit: Millis, cap: usize) {
        if self.runs.len() == cap {
            self.runs.pop_front();
        }
        self.runs.push_back((runtime, limit));
    }

    fn ratios(&self) -> Vec<f64> {
        let mut r: Vec<f64> =
            self.runs.iter().filter(|(_, l)| *l > 0).map(|&(rt, l)| (rt as f64 / l as f64).clamp(0.0, 1.0)).collect();
        r.sort_unstable_by(f64::total_cmp);
        r
    }
}

#[derive(Debug, Clone, Default)]
struct ConfigHistory {
    all: Recent,
    by_limit: HashMap<Millis, Recent>,
}

#[derive(Debug, Clone, Default)]
struct UserHistory {
    all: Recent,
    by_config: HashMap<String, ConfigHistory>,
}

/// One rung of the fallback: the runs it reads and the basis it names.
type Tier<'a> = (Option<&'a Recent>, fn(usize) -> Basis);

/// Finished runs' runtimes against their limits, by user, configuration and limit.
#[derive(Debug, Clone, Default)]
pub struct History {
    users: HashMap<String, UserHistory>,
    pool: Recent,
}

impl History {
    /// No history.
    pub fn new() -> History {
        History::default()
    }

    /// A run of `user`'s job with `config` (none: `None`) and `limit` ran for `runtime`.
    pub fn record(&mut self, user: &str, config: Option<&str>, limit: Millis, runtime: Millis) {
        let runtime = runtime.max(0);
        let u = self.users.entry(user.to_owned()).or_default();
        u.all.push(runtime, limit, RECENT);
        let c = u.by_config.entry(config.unwrap_or_default().to_owned()).or_default();
        c.all.push(runtime, limit, RECENT);
        c.by_limit.entry(limit).or_default().push(runtime, limit, RECENT);
        self.pool.push(runtime, limit, RECENT_POOL);
    }

    /// The predicted runtime of `job` (see the module's table).
    pub fn predict(&self, job: &Job) -> Prediction {
        let limit = job.limit.max(0);
        let user = self.users.get(&job.user);
        let config = user.and_then(|u| u.by_config.get(job.config.as_deref().unwrap_or_default()));
        if let Some(same) = config.and_then(|c| c.by_limit.get(&limit)).filter(|r| !r.runs.is_empty()) {
            let n = same.runs.len();
            let sum: i128 = same.runs.iter().map(|&(rt, _)| i128::from(rt)).sum();
            let mean = Millis::try_from(sum / n as i128).unwrap_or(limit);
            let low = same.runs.iter().map(|&(rt, _)| rt).min().unwrap_or(mean);
            return Prediction { runtime: mean.min(limit), low: low.min(limit), limit, basis: Basis::SameRequest(n) };
        }
        let tiers: [Tier<'_>; 3] = [
            (config.map(|c| &c.all), Basis::SameConfig),
            (user.map(|u| &u.all), Basis::SameUser),
            (Some(&self.pool), Basis::Pool),
        ];
        for (recent, basis) in tiers {
            let Some(recent) = recent else { continue };
            let ratios = recent.ratios();
            let (Some(&smallest), Some(&median)) = (ratios.first(), ratios.get(ratios.len() / 2)) else { continue };
            let median = if ratios.len() % 2 == 0 {
                let below = ratios.get(ratios.len() / 2 - 1).copied().unwrap_or(median);
                (below + median) / 2.0
            } else {
                median
            };
            let scale = |r: f64| ((limit as f64) * r).round() as Millis;
            return Prediction { runtime: scale(median), low: scale(smallest), limit, basis: basis(recent.runs.len()) };
        }
        Prediction { runtime: limit, low: limit, limit, basis: Basis::Limit }
    }
}
