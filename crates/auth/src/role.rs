//! Roles a principal is given and the powers they grant: what each kind of caller may do, and
//! nothing more.
//!
//! | role | powers | for |
//! |---|---|---|
//! | `scheduler` | `submit` | the admission hook (`job_submit.lua`, an admission controller) |
//! | `producer` | `report`, `keepalive` | job starts, ends, samples, assets, ticks, action records, for the jobs it speaks for |
//! | `billing` | `bill` | billing records |
//! | `approver` | `answer` | approvals and rejections, only of jobs whose policies name this principal |
//! | `user` | `keepalive` | a person keeping their own job alive |
//! | `reader` | `read` | pages, the decision stream, jobs, projects, policies, reports, metrics |
//! | `admin` | `admin` | reload, snapshot and prune |

use std::fmt;

/// A role, as a principal's `roles` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// Submits jobs for admission.
    Scheduler,
    /// Reports what jobs do (starts, ends, samples), assets, ticks and action records.
    Producer,
    /// Sends billing records.
    Billing,
    /// Answers approval requests that name it.
    Approver,
    /// A person: keeps their own jobs alive.
    User,
    /// Reads pages, streams, reports and metrics.
    Reader,
    /// Reloads policies and takes snapshots.
    Admin,
}

impl Role {
    /// Every role, in the order of the docs.
    pub const ALL: [Role; 7] =
        [Role::Scheduler, Role::Producer, Role::Billing, Role::Approver, Role::User, Role::Reader, Role::Admin];

    /// Every role's name.
    pub const NAMES: [&'static str; 7] = ["scheduler", "producer", "billing", "approver", "user", "reader", "admin"];

    /// The name in a configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Scheduler => "scheduler",
            Role::Producer => "producer",
            Role::Billing => "billing",
            Role::Approver => "approver",
            Role::User => "user",
            Role::Reader => "reader",
            Role::Admin => "admin",
        }
    }

    /// The role named `name`.
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// What the role may do.
    pub fn powers(self) -> &'static [Power] {
        match self {
            Role::Scheduler => &[Power::Submit],
            Role::Producer => &[Power::Report, Power::Keepalive],
            Role::Billing => &[Power::Bill],
            Role::Approver => &[Power::Answer],
            Role::User => &[Power::Keepalive],
            Role::Reader => &[Power::Read],
            Role::Admin => &[Power::Admin],
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a request or an input needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Power {
    /// `job.submitted`, `POST /v1/admit`.
    Submit,
    /// `job.started`, `job.finished`, `job.sample`, `asset.registered`, `clock.tick`,
    /// `action.executed`, `action.failed`.
    Report,
    /// `billing.charge`.
    Bill,
    /// `approval.granted`, `approval.rejected`, `POST /v1/jobs/{id}/approve|reject`.
    Answer,
    /// `job.keepalive`, `POST /v1/jobs/{id}/keepalive`.
    Keepalive,
    /// Every `GET` but `/healthz`.
    Read,
    /// `POST /v1/reload`, `POST /v1/snapshot`, `POST /v1/audit/prune`.
    Admin,
}

impl Power {
    /// The power's name, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Power::Submit => "submit",
            Power::Report => "report",
            Power::Bill => "bill",
            Power::Answer => "answer",
            Power::Keepalive => "keepalive",
            Power::Read => "read",
            Power::Admin => "admin",
        }
    }

    /// The roles that grant it.
    pub fn granted_by(self) -> Vec<Role> {
        Role::ALL.into_iter().filter(|r| r.powers().contains(&self)).collect()
    }
}

impl fmt::Display for Power {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of roles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Roles(u8);

impl Roles {
    /// No role.
    pub const NONE: Roles = Roles(0);

    /// Every role (a server without principals, on loopback).
    pub fn all() -> Roles {
        Roles::from_iter(Role::ALL)
    }

    /// Whether `role` is among them.
    pub fn has(self, role: Role) -> bool {
        self.0 & role.bit() != 0
    }

    /// Whether one of them grants `power`.
    pub fn grant(self, power: Power) -> bool {
        self.iter().any(|r| r.powers().contains(&power))
    }

    /// The roles, in order.
    pub fn iter(self) -> impl Iterator<Item = Role> {
        Role::ALL.into_iter().filter(move |r| self.has(*r))
    }

    /// The names, comma-separated (`none` when empty).
    pub fn names(self) -> String {
        let names: Vec<&str> = self.iter().map(Role::as_str).collect();
        if names.is_empty() { "no role".to_owned() } else { names.join(", ") }
    }
}

impl FromIterator<Role> for Roles {
    fn from_iter<I: IntoIterator<Item = Role>>(iter: I) -> Roles {
        Roles(iter.into_iter().fold(0, |acc, r| acc | r.bit()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_power_has_a_role_and_names_round_trip() {
        for p in [Power::Submit, Power::Report, Power::Bill, Power::Answer, Power::Keepalive, Power::Read, Power::Admin]
        {
            assert!(!p.granted_by().is_empty(), "{p} is granted by no role");
        }
        for (r, n) in Role::ALL.iter().zip(Role::NAMES) {
            assert_eq!(Role::parse(n), Some(*r));
        }
        let rs: Roles = [Role::Approver, Role::Reader].into_iter().collect();
        assert!(rs.grant(Power::Answer) && rs.grant(Power::Read) && !rs.grant(Power::Submit));
        assert_eq!(rs.names(), "approver, reader");
        assert!(Roles::all().grant(Power::Admin));
    }
}
