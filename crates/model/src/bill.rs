//! What a `billing.charge` says about the bill line it came from (wire format v1.x): the optional
//! `attribution` and `bill` fields that `bursar import bill` writes, so a report can set the bill
//! beside the hours jobs held. A producer that sends neither is a v1 producer, unaffected.
//!
//! - [`Attribution`]: how the charge found its owner — the job it names, the line's tags, the resource
//!   the mapping file assigns, or nobody (`unattributed`: an explicit account that carries no quota).
//! - [`BillLine`]: the line's charge period, category, correction flag, resource, SKU, GPU type and
//!   count, its other cost figures (effective, list, contracted), its commitment discount and capacity
//!   reservation (used or unused) and the tags it carried. Money beside `amount` (the billed cost).
//!
//! The decoder checks what it can without the engine: the period's end after its start, the statuses
//! and the category from their allowed values, costs finite and within [`crate::limits::CHARGE_AMOUNT`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// How a charge was attributed (`attribution`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attribution {
    /// The line names a job (a tag, or its resource id): the job's project is charged.
    Job,
    /// The line's own tags name the project.
    Tag,
    /// The mapping file assigns the line's resource (a node, a reservation) to a project.
    Resource,
    /// Nobody: the charge is kept in the `unattributed` account, which no quota limits.
    Unattributed,
}

impl Attribution {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Attribution::Job => "job",
            Attribution::Tag => "tag",
            Attribution::Resource => "resource",
            Attribution::Unattributed => "unattributed",
        }
    }
}

/// FOCUS `ChargeCategory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChargeCategory {
    /// Consumption (including the used and unused portions of commitments and reservations).
    Usage,
    /// An upfront or recurring purchase (a commitment, a reservation fee).
    Purchase,
    /// Tax.
    Tax,
    /// A credit.
    Credit,
    /// Anything else the provider applies.
    Adjustment,
}

impl ChargeCategory {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ChargeCategory::Usage => "usage",
            ChargeCategory::Purchase => "purchase",
            ChargeCategory::Tax => "tax",
            ChargeCategory::Credit => "credit",
            ChargeCategory::Adjustment => "adjustment",
        }
    }

    /// Parses a FOCUS value (`Usage`, `Purchase`, …), any case.
    pub fn parse(s: &str) -> Option<ChargeCategory> {
        match s.trim().to_ascii_lowercase().as_str() {
            "usage" => Some(ChargeCategory::Usage),
            "purchase" => Some(ChargeCategory::Purchase),
            "tax" => Some(ChargeCategory::Tax),
            "credit" => Some(ChargeCategory::Credit),
            "adjustment" => Some(ChargeCategory::Adjustment),
            _ => None,
        }
    }
}

/// FOCUS `CommitmentDiscountStatus` / `CapacityReservationStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UseStatus {
    /// The charge is the used portion.
    Used,
    /// The charge is the unused portion: capacity paid for that nothing ran on.
    Unused,
}

impl UseStatus {
    /// Parses `Used` / `Unused`, any case.
    pub fn parse(s: &str) -> Option<UseStatus> {
        match s.trim().to_ascii_lowercase().as_str() {
            "used" => Some(UseStatus::Used),
            "unused" => Some(UseStatus::Unused),
            _ => None,
        }
    }
}

/// A commitment discount or a capacity reservation a line belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commitment {
    /// The provider's id.
    pub id: String,
    /// `used` or `unused` (absent on a purchase line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<UseStatus>,
}

/// The bill line behind a `billing.charge` (`bill`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BillLine {
    /// Start of the charge period (inclusive): the period the charge is for. A correction names the
    /// period it corrects.
    #[serde(with = "rfc3339")]
    pub period_start: Timestamp,
    /// End of the charge period (exclusive).
    #[serde(with = "rfc3339")]
    pub period_end: Timestamp,
    /// Start of the billing period (the invoice) the line appeared in.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "rfc3339_opt")]
    pub billing_period: Option<Timestamp>,
    /// The charge category.
    pub category: ChargeCategory,
    /// FOCUS `ChargeClass` = `Correction`: the line corrects a previously invoiced period; its amounts
    /// are differences, counted in the charge period it names.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub correction: bool,
    /// The provider's resource id (an instance, a node, a reservation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The SKU (FOCUS `SkuId`; `SkuPriceId` when the export has no `SkuId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// The region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The GPU type of the card-hours (`H100`), when the line is for GPUs and the type is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_type: Option<String>,
    /// GPUs per unit of the line's resource (8 for an 8-GPU instance), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// FOCUS `EffectiveCost`: the amortised cost (commitments spread over the usage they cover).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_cost: Option<f64>,
    /// FOCUS `ListCost`: the same usage at list price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_cost: Option<f64>,
    /// FOCUS `ContractedCost`: at the negotiated price, before commitment discounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contracted_cost: Option<f64>,
    /// The commitment discount the line belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commitment: Option<Commitment>,
    /// The capacity reservation the line belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<Commitment>,
    /// The line's tags (values as strings), for grouping charges that name no job by `user` or a tag.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
}

impl BillLine {
    /// The line is the unused portion of a commitment or of a capacity reservation.
    pub fn unused(&self) -> bool {
        [&self.commitment, &self.capacity_reservation]
            .into_iter()
            .flatten()
            .any(|c| c.status == Some(UseStatus::Unused))
    }

    /// Checks what the decoder can: the period, the costs.
    pub fn check(&self) -> Result<(), String> {
        if self.period_end <= self.period_start {
            return Err("`bill.period_end` must be after `bill.period_start`".into());
        }
        for (name, v) in [
            ("effective_cost", self.effective_cost),
            ("list_cost", self.list_cost),
            ("contracted_cost", self.contracted_cost),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v.abs() <= crate::limits::CHARGE_AMOUNT)
            {
                return Err(format!(
                    "`bill.{name}` is {v}, beyond what bursar accepts (±{})",
                    crate::limits::CHARGE_AMOUNT
                ));
            }
        }
        if self.tags.len() > MAX_TAGS {
            return Err(format!("`bill.tags` has {} tags, more than the {MAX_TAGS} bursar keeps", self.tags.len()));
        }
        if self.gpus.is_some_and(|g| g > crate::limits::GPUS) {
            return Err(format!("`bill.gpus` is above the largest value bursar accepts ({})", crate::limits::GPUS));
        }
        Ok(())
    }
}

/// The most tags a bill line keeps.
pub const MAX_TAGS: usize = 64;

mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::time::Timestamp;

    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&t.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse(&s).map_err(serde::de::Error::custom)
    }
}

mod rfc3339_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::time::Timestamp;

    pub fn serialize<S: Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&t.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
        let s = <Option<std::borrow::Cow<'de, str>>>::deserialize(d)?;
        s.map(|s| Timestamp::parse(&s).map_err(serde::de::Error::custom)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_round_trips_and_its_period_is_checked() {
        let text = r#"{"period_start":"2026-11-01T00:00:00Z","period_end":"2026-11-01T01:00:00Z","category":"usage","gpu_type":"H100","gpus":8,"capacity_reservation":{"id":"cr-1","status":"unused"},"tags":{"team":"search"}}"#;
        let l: BillLine = serde_json::from_str(text).unwrap();
        assert!(l.unused());
        assert_eq!(l.check(), Ok(()));
        assert_eq!(serde_json::to_string(&l).unwrap(), text);
        let back = BillLine { period_end: l.period_start, ..l };
        assert!(back.check().unwrap_err().contains("period_end"));
        assert!(serde_json::from_str::<BillLine>(&text.replace("usage", "rent")).is_err());
    }
}
