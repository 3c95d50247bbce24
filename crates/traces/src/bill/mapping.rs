//! The mapping file of `bursar import bill --mapping FILE`: how to read a cloud's export that is not
//! FOCUS, or a FOCUS export whose tags and resources need telling apart. Every table is optional;
//! without a file the reader uses [`Mapping::default`] (FOCUS column names, the tag keys `project`,
//! `user`, `team` and `job`, card-hours from `ConsumedQuantity` in a unit of [`CARD_HOUR_UNITS`]).
//!
//! ```toml
//! currency = "CNY"                      # when the export has no BillingCurrency column
//!
//! [columns]                             # FOCUS column = the export's column
//! ChargePeriodStart = "usage_start_time"
//! ChargePeriodEnd = "usage_end_time"
//! ChargeCategory = "charge_type"
//! BilledCost = "cost"
//! ConsumedQuantity = "usage_amount"
//! ConsumedUnit = "usage_unit"
//! ResourceId = "instance_id"
//! SkuId = "instance_type"
//!
//! [tags]                                # which tag keys name what (first present wins)
//! project = ["project", "cost-center"]
//! user = ["owner"]
//! team = ["team"]
//! job = ["job"]
//!
//! [tag_columns]                         # tags the export keeps in columns of their own
//! project = "label_project"
//!
//! [units]
//! card_hours = ["GPU-Hours"]            # quantities already in card-hours
//! resource_hours = ["Hours", "Hrs"]     # hours of a resource: × its GPUs (below)
//!
//! [categories]                          # the export's own category values
//! "Compute" = "usage"
//! "Reservation fee" = "purchase"
//!
//! [skus."p5.48xlarge"]                  # SkuId (or SkuPriceId) → GPU type and GPUs per unit
//! gpu_type = "H100"
//! gpus = 8
//!
//! [resources."gpu-node-17"]             # one resource: its GPUs, and the project it is dedicated to
//! gpu_type = "A100"
//! gpus = 8
//! project = "vision"
//! ```
//!
//! Errors name the file, line and column of the value, as the price file's do.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::ImportError;

/// Units whose quantity is card-hours already (compared without case, spaces and dashes).
pub const CARD_HOUR_UNITS: [&str; 6] = ["GPU-Hours", "GPU-Hour", "GPU Hours", "Card-Hours", "Card-Hour", "GPUHours"];
/// Units whose quantity is hours of the line's resource (× its GPUs when the resource is known).
pub const RESOURCE_HOUR_UNITS: [&str; 4] = ["Hours", "Hour", "Hrs", "Instance-Hours"];
/// The FOCUS columns the reader knows, as the spec spells them.
pub const FOCUS_COLUMNS: [&str; 28] = [
    "BillingPeriodStart",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
    "ChargeClass",
    "ChargeFrequency",
    "ResourceId",
    "ResourceType",
    "SkuId",
    "SkuPriceId",
    "RegionId",
    "ConsumedQuantity",
    "ConsumedUnit",
    "PricingQuantity",
    "PricingUnit",
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "BillingCurrency",
    "CommitmentDiscountId",
    "CommitmentDiscountType",
    "CommitmentDiscountStatus",
    "CommitmentDiscountQuantity",
    "CommitmentDiscountUnit",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "Tags",
];

/// GPUs of a SKU or a resource, and the project a resource is dedicated to.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gpus {
    /// GPU type of its card-hours.
    #[serde(default)]
    pub gpu_type: Option<String>,
    /// GPUs per unit (per instance-hour).
    #[serde(default)]
    pub gpus: Option<u32>,
    /// A resource dedicated to a project (resources only).
    #[serde(default)]
    pub project: Option<String>,
}

/// Which tag keys name the project, user, team, job and GPU type.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TagKeys {
    /// Project.
    pub project: Vec<String>,
    /// User.
    pub user: Vec<String>,
    /// Team.
    pub team: Vec<String>,
    /// The job the line is for.
    pub job: Vec<String>,
    /// GPU type.
    pub gpu_type: Vec<String>,
}

impl Default for TagKeys {
    fn default() -> TagKeys {
        let v = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect();
        TagKeys {
            project: v(&["project"]),
            user: v(&["user"]),
            team: v(&["team"]),
            job: v(&["job"]),
            gpu_type: v(&["gpu_type"]),
        }
    }
}

/// `[units]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Units {
    /// Units already in card-hours.
    pub card_hours: Vec<String>,
    /// Units of resource-hours.
    pub resource_hours: Vec<String>,
}

impl Default for Units {
    fn default() -> Units {
        Units {
            card_hours: CARD_HOUR_UNITS.iter().map(|s| (*s).to_owned()).collect(),
            resource_hours: RESOURCE_HOUR_UNITS.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

/// A mapping file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mapping {
    /// Currency when the export has no `BillingCurrency`.
    #[serde(default)]
    pub currency: Option<String>,
    /// FOCUS column name → the export's column name.
    #[serde(default)]
    pub columns: BTreeMap<String, String>,
    /// Tag keys.
    #[serde(default)]
    pub tags: TagKeys,
    /// Tag key → a column holding that tag's value.
    #[serde(default)]
    pub tag_columns: BTreeMap<String, String>,
    /// Units.
    #[serde(default)]
    pub units: Units,
    /// The export's category values → `usage`, `purchase`, `tax`, `credit`, `adjustment`.
    #[serde(default)]
    pub categories: BTreeMap<String, String>,
    /// SKU → GPUs.
    #[serde(default)]
    pub skus: BTreeMap<String, Gpus>,
    /// Resource id → GPUs and project.
    #[serde(default)]
    pub resources: BTreeMap<String, Gpus>,
}

/// Compares units without case, spaces, dashes and a trailing `s`.
pub fn unit_key(u: &str) -> String {
    let k: String = u.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect();
    k.strip_suffix('s').map(str::to_owned).unwrap_or(k)
}

impl Mapping {
    /// Parses a mapping file; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Mapping, ImportError> {
        let m: Mapping = toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map_or((1, 1), |s| line_col(text, s.start));
            ImportError::Format(format!(
                "{path}:{line}:{col}: mapping file: {}\n  help: see docs/importers.md (`bursar import bill`) for the tables a mapping file may hold",
                e.message().trim_end()
            ))
        })?;
        for focus in m.columns.keys() {
            if !FOCUS_COLUMNS.iter().any(|c| c.eq_ignore_ascii_case(focus)) {
                return Err(ImportError::Format(format!(
                    "{path}: mapping file: `[columns] {focus}` is not a FOCUS column bursar reads\n  help: the keys of [columns] are FOCUS names: {}",
                    FOCUS_COLUMNS.join(", ")
                )));
            }
        }
        for (from, to) in &m.categories {
            if bursar_model::ChargeCategory::parse(to).is_none() {
                return Err(ImportError::Format(format!(
                    "{path}: mapping file: `[categories] \"{from}\" = \"{to}\"`: use `usage`, `purchase`, `tax`, `credit` or `adjustment`"
                )));
            }
        }
        for (name, g) in m.skus.iter().chain(&m.resources) {
            if g.gpus == Some(0) {
                return Err(ImportError::Format(format!("{path}: mapping file: `{name}`: `gpus` must be at least 1")));
            }
        }
        Ok(m)
    }

    /// Reads and parses a mapping file.
    pub fn from_file(path: &Path) -> Result<Mapping, ImportError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ImportError::io(format!("cannot read `{shown}`"), e))?;
        Mapping::parse(&text, &shown)
    }

    /// The export's name of FOCUS column `focus` (the FOCUS name itself when unmapped).
    pub fn column<'a>(&'a self, focus: &'a str) -> &'a str {
        self.columns.iter().find(|(k, _)| k.eq_ignore_ascii_case(focus)).map_or(focus, |(_, v)| v.as_str())
    }

    /// Whether `unit` is a card-hour unit.
    pub fn is_card_hours(&self, unit: &str) -> bool {
        let k = unit_key(unit);
        self.units.card_hours.iter().any(|u| unit_key(u) == k)
    }

    /// Whether `unit` is a resource-hour unit.
    pub fn is_resource_hours(&self, unit: &str) -> bool {
        let k = unit_key(unit);
        self.units.resource_hours.iter().any(|u| unit_key(u) == k)
    }

    /// The category a value names: the mapping's own values first, then FOCUS's.
    pub fn category(&self, v: &str) -> Option<bursar_model::ChargeCategory> {
        self.categories
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(v.trim()))
            .and_then(|(_, c)| bursar_model::ChargeCategory::parse(c))
            .or_else(|| bursar_model::ChargeCategory::parse(v))
    }
}

/// 1-based line and column (characters) of byte `offset`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut start = offset.min(text.len());
    while start > 0 && !text.is_char_boundary(start) {
        start -= 1;
    }
    let before = text.get(..start).unwrap_or("");
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before.get(line_start..).map_or(0, |l| l.chars().count()) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_compare_loosely_and_errors_have_a_place() {
        let m = Mapping::default();
        assert!(m.is_card_hours("GPU-Hours") && m.is_card_hours("gpu hours") && m.is_card_hours("GPUHour"));
        assert!(m.is_resource_hours("Hour") && !m.is_card_hours("Hours"));
        let e = Mapping::parse("[skus.x]\ngpus = \"eight\"\n", "m.toml").unwrap_err().to_string();
        assert!(e.starts_with("m.toml:2:8: mapping file:"), "{e}");
        let e = Mapping::parse("[columns]\nCost = \"c\"\n", "m.toml").unwrap_err().to_string();
        assert!(e.contains("not a FOCUS column"), "{e}");
        let m =
            Mapping::parse("[columns]\nbilledcost = \"cost\"\n[categories]\nCompute = \"usage\"\n", "m.toml").unwrap();
        assert_eq!(m.column("BilledCost"), "cost");
        assert_eq!(m.category("compute"), Some(bursar_model::ChargeCategory::Usage));
        assert_eq!(m.category("Tax"), Some(bursar_model::ChargeCategory::Tax));
    }
}
