//! Reading the log the way people ask: filtered decisions ([`query`]), one job's story ([`explain`]),
//! and summaries by kind, policy and project ([`stats`]).
//!
//! Every filter maps to an index: `(job, seq)` and `time` are SQLite indexes on `decisions`;
//! `(project, time)` and `(user, time)` are the look-up tables the writer fills in sorted runs
//! (schema version 5, `decisions_by_project` and `decisions_by_user`), read together with the
//! decisions after the last run, in one read transaction.
//! Policies are stored as a JSON array per decision and matched with SQLite's `json_each`. Times are
//! event times in ms since the epoch; `since` is inclusive and `until` exclusive.

use rusqlite::OptionalExtension;
use rusqlite::params_from_iter;
use rusqlite::types::Value;
use serde::Serialize;

use crate::SourceFile;
use crate::error::{AuditError, Result};
use crate::log::{AuditLog, DECISION_COLUMNS, PolicyLoad, StoredDecision, StoredEvent};
use crate::log::{decision_from_row, limit_i64};

/// Which decisions [`query`] returns. Every set field must match.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Project, exactly.
    pub project: Option<String>,
    /// User, exactly.
    pub user: Option<String>,
    /// Job id, exactly.
    pub job: Option<String>,
    /// Decision kind (`deny`, …).
    pub decision: Option<String>,
    /// A policy id among those that produced the decision; `*` and `?` are wildcards (`quota/*`).
    pub policy: Option<String>,
    /// Event time at or after, ms since the epoch.
    pub since: Option<i64>,
    /// Event time before, ms since the epoch.
    pub until: Option<i64>,
    /// Only dry-run (true) or only enforced (false) decisions.
    pub dry_run: Option<bool>,
    /// At most this many, oldest first.
    pub limit: Option<usize>,
}

impl Filter {
    fn where_clause(&self, alias: &str, args: &mut Vec<Value>) -> String {
        let mut w: Vec<String> = Vec::new();
        let eq = |col: &str, v: &Option<String>, w: &mut Vec<String>, args: &mut Vec<Value>| {
            if let Some(v) = v {
                args.push(Value::Text(v.clone()));
                w.push(format!("{alias}{col} = ?{}", args.len()));
            }
        };
        eq("project", &self.project, &mut w, args);
        eq("user", &self.user, &mut w, args);
        eq("job", &self.job, &mut w, args);
        eq("decision", &self.decision, &mut w, args);
        if let Some(p) = &self.policy {
            args.push(Value::Text(p.clone()));
            let op = if p.contains(['*', '?']) { "GLOB" } else { "=" };
            w.push(format!("EXISTS (SELECT 1 FROM json_each({alias}policies) WHERE value {op} ?{})", args.len()));
        }
        if let Some(s) = self.since {
            args.push(Value::Integer(s));
            w.push(format!("{alias}time >= ?{}", args.len()));
        }
        if let Some(u) = self.until {
            args.push(Value::Integer(u));
            w.push(format!("{alias}time < ?{}", args.len()));
        }
        if let Some(d) = self.dry_run {
            args.push(Value::Integer(i64::from(d)));
            w.push(format!("{alias}dry_run = ?{}", args.len()));
        }
        if w.is_empty() { String::new() } else { format!("WHERE {}", w.join(" AND ")) }
    }
}

/// The decisions matching `filter`, in event-time order (then sequence order).
pub fn query(log: &AuditLog, filter: &Filter) -> Result<Vec<StoredDecision>> {
    let mut out = Vec::new();
    query_each(log, filter, |d| {
        out.push(d);
        Ok(())
    })?;
    Ok(out)
}

/// Like [`query`], handing each decision to `f` as it is read (constant memory for big answers).
pub fn query_each(
    log: &AuditLog,
    filter: &Filter,
    mut f: impl FnMut(StoredDecision) -> std::io::Result<()>,
) -> Result<u64> {
    // A job is the most selective filter and has its own index; a project or a user without one
    // is looked up in its table.
    if filter.job.is_none() {
        let by = [("project", &filter.project), ("user", &filter.user)];
        if let Some((table, key)) =
            by.iter().find_map(|(column, key)| Some((crate::log::lookup("decisions", column)?, key.as_deref()?)))
        {
            return by_lookup(log, filter, table, key, f);
        }
    }
    let mut args = Vec::new();
    let w = filter.where_clause("", &mut args);
    // Ordering by the indexed time (and the rowid, implicitly last in every index) lets the time
    // index answer without a sort.
    let mut sql = format!("SELECT {DECISION_COLUMNS} FROM decisions {w} ORDER BY time, seq");
    if let Some(l) = filter.limit {
        args.push(Value::Integer(limit_i64(l)));
        sql.push_str(&format!(" LIMIT ?{}", args.len()));
    }
    let mut st = log.conn.prepare(&sql).map_err(AuditError::sqlite("prepare the query"))?;
    let mut rows = st.query(params_from_iter(args.iter())).map_err(AuditError::sqlite("run the query"))?;
    let mut n = 0;
    while let Some(r) = rows.next().map_err(AuditError::sqlite("read the answer"))? {
        let d = decision_from_row(r).map_err(AuditError::sqlite("read the answer"))?;
        f(d).map_err(AuditError::Output)?;
        n += 1;
    }
    Ok(n)
}

/// [`query_each`] through a look-up table: the decisions it covers in `(time, seq)` order, merged
/// with the matching decisions after its last run (fewer than [`crate::log::INDEX_RUN`], read
/// first), all in one read transaction so that a run committed meanwhile is neither missed nor
/// read twice.
fn by_lookup(
    log: &AuditLog,
    filter: &Filter,
    lookup: &crate::log::Lookup,
    key: &str,
    mut f: impl FnMut(StoredDecision) -> std::io::Result<()>,
) -> Result<u64> {
    crate::log::in_one_read(&log.conn, || {
        let through = crate::log::indexed_through(&log.conn, "decisions")?;
        let limit = filter.limit.unwrap_or(usize::MAX);
        // The decisions after the last run, sorted.
        let mut args = Vec::new();
        let w = filter.where_clause("", &mut args);
        args.push(Value::Integer(through));
        let after = format!("seq > ?{}", args.len());
        let w = if w.is_empty() { format!("WHERE {after}") } else { format!("{w} AND {after}") };
        // NOT INDEXED: by sequence number, never through the time index (a week of every project).
        let sql = format!("SELECT {DECISION_COLUMNS} FROM decisions NOT INDEXED {w} ORDER BY time, seq");
        let mut st = log.conn.prepare(&sql).map_err(AuditError::sqlite("prepare the query"))?;
        let mut tail = std::collections::VecDeque::new();
        let mut rows = st.query(params_from_iter(args.iter())).map_err(AuditError::sqlite("run the query"))?;
        while let Some(r) = rows.next().map_err(AuditError::sqlite("read the answer"))? {
            tail.push_back(decision_from_row(r).map_err(AuditError::sqlite("read the answer"))?);
        }
        // The decisions the table covers, in its key order.
        let mut args = Vec::new();
        let w = filter.where_clause("d.", &mut args);
        args.push(Value::Text(key.to_owned()));
        let mut on = format!("x.{} = ?{}", lookup.column, args.len());
        args.push(Value::Integer(through));
        on.push_str(&format!(" AND x.seq <= ?{}", args.len()));
        if let Some(s) = filter.since {
            args.push(Value::Integer(s));
            on.push_str(&format!(" AND x.time >= ?{}", args.len()));
        }
        if let Some(u) = filter.until {
            args.push(Value::Integer(u));
            on.push_str(&format!(" AND x.time < ?{}", args.len()));
        }
        let w = if w.is_empty() { format!("WHERE {on}") } else { format!("{w} AND {on}") };
        let columns = crate::log::prefixed(DECISION_COLUMNS, "d");
        let sql = format!(
            "SELECT {columns} FROM {} x JOIN decisions d ON d.seq = x.seq {w} ORDER BY x.time, x.seq",
            lookup.table
        );
        let mut st = log.conn.prepare(&sql).map_err(AuditError::sqlite("prepare the query"))?;
        let mut rows = st.query(params_from_iter(args.iter())).map_err(AuditError::sqlite("run the query"))?;
        let mut n = 0u64;
        let mut emit = |d: StoredDecision, n: &mut u64| -> Result<bool> {
            if *n as usize >= limit {
                return Ok(false);
            }
            f(d).map_err(AuditError::Output)?;
            *n += 1;
            Ok(true)
        };
        while let Some(r) = rows.next().map_err(AuditError::sqlite("read the answer"))? {
            let d = decision_from_row(r).map_err(AuditError::sqlite("read the answer"))?;
            while tail.front().is_some_and(|t| (t.time, t.seq) < (d.time, d.seq)) {
                if let Some(t) = tail.pop_front()
                    && !emit(t, &mut n)?
                {
                    return Ok(n);
                }
            }
            if !emit(d, &mut n)? {
                return Ok(n);
            }
        }
        for t in tail {
            if !emit(t, &mut n)? {
                break;
            }
        }
        Ok(n)
    })
}

/// One step of a job's story.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// An event about the job.
    Event(StoredEvent),
    /// A decision about the job.
    Decision(StoredDecision),
}

/// A policy set that decided something in the story.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetInfo {
    /// Its digest.
    pub digest: String,
    /// Its files (empty when the set was never recorded).
    pub files: Vec<SourceFile>,
    /// When it was first loaded, ms since the epoch (None when never recorded).
    pub first_loaded_at: Option<i64>,
}

/// Everything the log knows about one job, in order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Story {
    /// The job.
    pub job: String,
    /// Its project, from the first row that names one.
    pub project: Option<String>,
    /// Its user, likewise.
    pub user: Option<String>,
    /// Events and decisions, in the order they were applied and made.
    pub steps: Vec<Step>,
    /// The policy sets that made its decisions, in first-use order.
    pub policy_sets: Vec<SetInfo>,
    /// Policy loads and failed reloads recorded while the job's events were applied.
    pub loads: Vec<PolicyLoad>,
    /// Inputs about the job that were refused when applied (schema 7).
    pub refused: Vec<crate::StoredRefusal>,
    /// When the log was pruned and the job's submission is not in it any more: the last event seq
    /// the newest prune removed and its `before` (ms), so the story can say why its start is missing.
    pub pruned: Option<(i64, i64)>,
}

/// The story of job `job`: its events and decisions in order, and the policy-set versions in force.
pub fn explain(log: &AuditLog, job: &str) -> Result<Story> {
    let events = log.events_of_job(job)?;
    let sql = format!("SELECT {DECISION_COLUMNS} FROM decisions WHERE job = ?1 ORDER BY seq");
    let mut st = log.conn.prepare(&sql).map_err(AuditError::sqlite("prepare the decision read"))?;
    let decisions = st
        .query_map([job], decision_from_row)
        .map_err(AuditError::sqlite("read the job's decisions"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(AuditError::sqlite("read the job's decisions"))?;

    let project =
        events.iter().find_map(|e| e.project.clone()).or_else(|| decisions.iter().find_map(|d| d.project.clone()));
    let user = events.iter().find_map(|e| e.user.clone()).or_else(|| decisions.iter().find_map(|d| d.user.clone()));

    let mut policy_sets: Vec<SetInfo> = Vec::new();
    for d in &decisions {
        if policy_sets.iter().any(|s| s.digest == d.policy_set) {
            continue;
        }
        let (files, at) = match log.policy_set_files(&d.policy_set)? {
            Some((f, at)) => (f, Some(at)),
            None => (Vec::new(), None),
        };
        policy_sets.push(SetInfo { digest: d.policy_set.clone(), files, first_loaded_at: at });
    }

    // Merge: a decision goes right after the event that caused it (a timer decision may be caused by an
    // event about another job, or by no logged event: then it goes by its event time).
    let mut steps: Vec<(i64, i64, u8, i64, Step)> = Vec::new();
    for e in events {
        steps.push((e.seq, e.time, 0, e.seq, Step::Event(e)));
    }
    for d in decisions {
        let at = d.event_seq.unwrap_or(i64::MAX);
        steps.push((at, d.time, 1, d.seq, Step::Decision(d)));
    }
    steps.sort_by_key(|s| (s.0, s.2, s.3));

    let (first, last) = match (steps.first(), steps.iter().rev().find(|s| s.0 != i64::MAX)) {
        (Some(f), Some(l)) => (f.0, l.0),
        _ => (0, 0),
    };
    let loads = log
        .policy_loads()?
        .into_iter()
        .filter(|l| !steps.is_empty() && l.event_seq >= first.saturating_sub(1) && l.event_seq <= last)
        .collect();
    let refused = log.refusals(0, Some(job), 1000)?;
    let submitted = steps.iter().any(|s| matches!(&s.4, Step::Event(e) if e.kind == "job.submitted"));
    let pruned = if submitted {
        None
    } else {
        log.conn
            .query_row(
                "SELECT through_seq, before FROM checkpoints WHERE chain = 'events' ORDER BY through_seq DESC LIMIT 1",
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )
            .optional()
            .map_err(AuditError::sqlite("read the prune checkpoints"))?
    };
    Ok(Story {
        job: job.to_owned(),
        project,
        user,
        steps: steps.into_iter().map(|s| s.4).collect(),
        policy_sets,
        loads,
        refused,
        pruned,
    })
}

/// Counts of one group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Count {
    /// The group key (a kind, a policy id, a project).
    pub key: String,
    /// The decision kind within the group.
    pub decision: String,
    /// Enforced decisions.
    pub count: u64,
    /// GPU-hours concerned (requested for admissions, remaining for reclaims).
    pub gpu_hours: f64,
}

/// What a dry-run policy would have decided differently from what was enforced.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DryRunDiff {
    /// The dry-run policy.
    pub policy: String,
    /// What it would have decided.
    pub would: String,
    /// What was enforced for the same event and job (`none` when nothing was: a dry-run reclaim).
    pub enforced: String,
    /// How many times.
    pub count: u64,
    /// GPU-hours concerned.
    pub gpu_hours: f64,
    /// True when the dry-run decision differs from the enforced one.
    pub differs: bool,
}

/// A summary of a period.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// Period start (inclusive), ms since the epoch.
    pub since: Option<i64>,
    /// Period end (exclusive).
    pub until: Option<i64>,
    /// Enforced decisions.
    pub decisions: u64,
    /// Dry-run decisions.
    pub dry_run: u64,
    /// Events applied in the period.
    pub events: u64,
    /// Enforced decisions by kind (`key` = kind).
    pub by_kind: Vec<Count>,
    /// Enforced decisions by policy and kind.
    pub by_policy: Vec<Count>,
    /// Enforced decisions by project and kind.
    pub by_project: Vec<Count>,
    /// What dry-run policies would have decided, against what was enforced.
    pub dry_run_diffs: Vec<DryRunDiff>,
}

/// Summarises decisions with event time in `[since, until)`.
pub fn stats(log: &AuditLog, since: Option<i64>, until: Option<i64>) -> Result<Stats> {
    // Both bounds are always bound (open ends as the extremes) so every statement has two parameters.
    let range = |alias: &str| format!("{alias}time >= ?1 AND {alias}time < ?2");
    let args = [Value::Integer(since.unwrap_or(i64::MIN)), Value::Integer(until.unwrap_or(i64::MAX))];
    let counts = |sql: &str| -> Result<Vec<Count>> {
        let mut st = log.conn.prepare(sql).map_err(AuditError::sqlite("prepare a summary"))?;
        let rows = st
            .query_map(params_from_iter(args.iter()), |r| {
                Ok(Count {
                    key: r.get::<_, Option<String>>(0)?.unwrap_or_else(|| "-".into()),
                    decision: r.get(1)?,
                    count: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                    gpu_hours: r.get::<_, Option<f64>>(3)?.unwrap_or(0.0),
                })
            })
            .map_err(AuditError::sqlite("summarise"))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(AuditError::sqlite("summarise"))
    };
    let r = range("");
    let rd = range("d.");
    let by_kind = counts(&format!(
        "SELECT decision, decision, COUNT(*), SUM(gpu_hours) FROM decisions WHERE dry_run = 0 AND {r} \
         GROUP BY decision ORDER BY COUNT(*) DESC, decision"
    ))?;
    let by_policy = counts(&format!(
        "SELECT j.value, d.decision, COUNT(*), SUM(d.gpu_hours) FROM decisions d, json_each(d.policies) j \
         WHERE d.dry_run = 0 AND {rd} GROUP BY j.value, d.decision ORDER BY j.value, COUNT(*) DESC"
    ))?;
    let by_project = counts(&format!(
        "SELECT project, decision, COUNT(*), SUM(gpu_hours) FROM decisions WHERE dry_run = 0 AND {r} \
         GROUP BY project, decision ORDER BY project, COUNT(*) DESC"
    ))?;
    let sql = format!(
        "SELECT j.value, d.decision, COALESCE(e.decision, 'none'), COUNT(*), SUM(d.gpu_hours) \
         FROM decisions d JOIN json_each(d.policies) j \
         LEFT JOIN decisions e ON e.job = d.job AND e.event_id = d.event_id AND e.dry_run = 0 AND e.admission = 1 \
         WHERE d.dry_run = 1 AND d.decision != 'alert' AND {rd} \
         GROUP BY 1, 2, 3 ORDER BY 1, COUNT(*) DESC"
    );
    let mut st = log.conn.prepare(&sql).map_err(AuditError::sqlite("prepare the dry-run summary"))?;
    let dry_run_diffs = st
        .query_map(params_from_iter(args.iter()), |r| {
            Ok(DryRunDiff {
                policy: r.get(0)?,
                would: r.get(1)?,
                enforced: r.get(2)?,
                count: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                gpu_hours: r.get::<_, Option<f64>>(4)?.unwrap_or(0.0),
                differs: r.get::<_, String>(1)? != r.get::<_, String>(2)?,
            })
        })
        .map_err(AuditError::sqlite("summarise dry-run decisions"))?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map_err(AuditError::sqlite("summarise dry-run decisions"))?;
    let one = |sql: String| -> Result<u64> {
        log.conn
            .query_row(&sql, params_from_iter(args.iter()), |r| r.get::<_, i64>(0))
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(AuditError::sqlite("count"))
    };
    let decisions = one(format!("SELECT COUNT(*) FROM decisions WHERE dry_run = 0 AND {r}"))?;
    let dry_run = one(format!("SELECT COUNT(*) FROM decisions WHERE dry_run = 1 AND {r}"))?;
    let events = one(format!("SELECT COUNT(*) FROM events WHERE {r}"))?;
    Ok(Stats { since, until, decisions, dry_run, events, by_kind, by_policy, by_project, dry_run_diffs })
}
