use std::path::PathBuf;

use bursar_model::{Attribution, EventKind, decode_event};

use super::*;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/focus").join(name)
}

fn run(text: &str, mapping: &Mapping) -> (BillReport, Vec<Event>, String) {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    let r = import(text.as_bytes(), "bill.csv", mapping, None, &mut out, &mut notes).unwrap();
    let events = String::from_utf8(out).unwrap().lines().map(|l| decode_event(l).unwrap()).collect::<Vec<_>>();
    (r, events, String::from_utf8(notes).unwrap())
}

fn charge(e: &Event) -> &BillingCharge {
    match &e.kind {
        EventKind::BillingCharge(c) => c,
        other => panic!("not a charge: {other:?}"),
    }
}

const GPU_MAPPING: &str = r#"
[skus."p5.48xlarge"]
gpu_type = "H100"
gpus = 8
[skus."p4d.24xlarge"]
gpu_type = "A100"
gpus = 8
"#;

#[test]
fn the_gpu_pool_bill_every_line_attributed_and_counted() {
    let text = std::fs::read_to_string(data("gpu-pool.csv")).unwrap();
    let m = Mapping::parse(GPU_MAPPING, "m.toml").unwrap();
    let (r, ev, notes) = run(&text, &m);
    assert_eq!((r.lines, r.charges, r.refused), (9, 9, 0), "{notes}");
    // Card-hours: 8 + 8 used, 176 reserved and unused, 16 + 8 on demand, −8 corrected.
    assert_eq!(r.gpu_ms, 208 * 3_600_000);
    assert_eq!((r.unused_lines, r.unused_gpu_ms), (1, 176 * 3_600_000));
    assert_eq!(r.corrections, 1);
    // 1920 + 65.54 + 32.77 + 1.32 + 187.60 − 32.77, in micro-units.
    assert_eq!(r.billed.get("USD"), Some(&2_174_460_000));
    assert_eq!(r.by_attribution.get("job").map(|x| x.0), Some(2));
    assert_eq!(r.by_attribution.get("tag").map(|x| x.0), Some(2));
    assert_eq!(r.by_attribution.get("unattributed").map(|x| x.0), Some(5));

    let purchase = charge(&ev[0]);
    assert_eq!((purchase.project.as_deref(), purchase.attribution), (None, Some(Attribution::Unattributed)));
    assert_eq!((purchase.gpu_hours, purchase.amount), (0.0, Some(1920.0)), "a purchase has no consumed quantity");
    let tagged = charge(&ev[1]);
    assert_eq!(tagged.project.as_deref(), Some("nlp"));
    let b = tagged.bill.as_deref().unwrap();
    assert_eq!((b.gpu_type.as_deref(), b.gpus, b.effective_cost), (Some("H100"), Some(8), Some(80.0)));
    assert_eq!(b.tags.get("user").map(String::as_str), Some("alice"));
    assert_eq!(ev[1].time.to_string(), "2026-11-02T09:00:00Z", "a charge is dated at its charge period");
    let job = charge(&ev[2]);
    assert_eq!(
        (job.job_id.as_deref(), job.project.as_deref(), job.attribution),
        (Some("j1"), Some("nlp"), Some(Attribution::Job))
    );
    let unused = charge(&ev[3]);
    assert!(unused.bill.as_deref().unwrap().unused());
    assert_eq!(unused.gpu_hours, 176.0);
    let correction = charge(&ev[8]);
    let cb = correction.bill.as_deref().unwrap();
    assert!(cb.correction);
    assert_eq!((correction.gpu_hours, correction.amount), (-8.0, Some(-32.77)));
    assert_eq!(cb.period_start.to_string(), "2026-10-31T22:00:00Z", "counted in the period it corrects");
    assert_eq!(cb.billing_period.map(|t| t.to_string()).as_deref(), Some("2026-11-01T00:00:00Z"));
    let storage = charge(&ev[6]);
    assert_eq!((storage.gpu_hours, storage.mode), (0.0, None), "GB-Months are not card-hours");
}

#[test]
fn the_same_bill_twice_or_an_overlapping_one_gives_the_same_ids() {
    let text = std::fs::read_to_string(data("gpu-pool.csv")).unwrap();
    let m = Mapping::default();
    let (_, a, _) = run(&text, &m);
    let (_, b, _) = run(&text, &m);
    assert_eq!(a, b);
    // An export of part of the period, with its columns in another order and numbers written
    // otherwise, names the same lines by the same ids.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.truncate(4);
    let part = lines.join("\n").replace(",80.00,0.00,80.00,", ",80,0,8E1,");
    let (_, c, _) = run(&part, &m);
    assert_eq!(c.len(), 3);
    for (x, y) in c.iter().zip(&a) {
        assert_eq!(x.id, y.id);
    }
    // A line repeated within one file is kept, under its own id.
    let twice = format!("{text}{}\n", text.lines().nth(2).unwrap());
    let (r, d, _) = run(&twice, &m);
    assert_eq!((r.charges, r.repeats), (10, 1));
    assert_eq!(d[9].id, format!("{}-1", d[1].id));
}

#[test]
fn the_spec_examples_read_as_they_are() {
    // null as text, blank lines between records, `SkuPriceid` spelled so, the unused portion of a
    // commitment without a consumed quantity.
    let text =
        std::fs::read_to_string(data("zero_percent_utilization_without_commitment_discount_flexibility.csv")).unwrap();
    let (r, ev, notes) = run(&text, &Mapping::default());
    assert_eq!((r.lines, r.charges, r.refused), (3, 3, 0), "{notes}");
    let unused = charge(&ev[1]);
    let b = unused.bill.as_deref().unwrap();
    assert!(b.unused());
    assert_eq!(b.commitment.as_ref().map(|c| c.id.as_str()), Some("<my-commitment-discount-id>"));
    assert_eq!((unused.amount, b.effective_cost), (Some(0.0), Some(1.5)));
    assert_eq!(b.sku.as_deref(), Some("VM_LARGE"));
    assert_eq!(unused.gpu_hours, 0.0, "a VM's hours are no card-hours without its GPU count");
    let text = std::fs::read_to_string(data("commitment_discount_usage_scenario_3.csv")).unwrap();
    let (r, _, notes) = run(&text, &Mapping::default());
    assert_eq!((r.charges, r.refused), (2, 0), "{notes}");
}

#[test]
fn a_line_that_is_not_a_time_is_refused_with_its_place_and_the_rest_goes_in() {
    // The spec's own purchase scenario 2 ends two charge periods at `T30:00:00Z`.
    let text = std::fs::read_to_string(data("commitment_discount_purchase_scenario_2.csv")).unwrap();
    let (r, ev, notes) = run(&text, &Mapping::default());
    assert_eq!((r.lines, r.charges, r.refused), (3, 2, 1), "{notes}");
    assert_eq!(ev.len(), 2);
    assert!(notes.contains("bill.csv:4: column 4 (ChargePeriodEnd): `2023-02-01T30:00:00Z` is not a time"), "{notes}");
}

#[test]
fn every_bad_line_is_refused_with_file_line_and_column() {
    let text = std::fs::read_to_string(data("gpu-pool.csv")).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[2] = lines[2].replace("Usage,,Usage-Based", "Rent,,Usage-Based"); // line 3: category
    lines[4] = lines[4].replace(",0.00,1760.00,", ",0.0O,1760.00,"); // line 5: billed cost
    lines[5] = lines[5].replace("\"{\"\"job\"\"", "\"{\"\"job\"\"}{"); // line 6: tags
    lines[6] = lines[6].replace(",8,GPU-Hours,", ",8,GPU-Hours,,"); // line 7: one field too many
    lines[7] = lines[7].replace("Usage,,", "Usage,Corection,"); // line 8: charge class
    let (r, ev, notes) = run(&lines.join("\n"), &Mapping::default());
    assert_eq!((r.lines, r.charges, r.refused), (9, 4, 5), "{notes}");
    assert_eq!(ev.len(), 4);
    for want in [
        "bill.csv:3: column 5 (ChargeCategory): `Rent` is not a charge category",
        "bill.csv:5: column 20 (BilledCost): `0.0O` is not a number",
        "bill.csv:6: column 28 (Tags): is not a JSON object of tags",
        "bill.csv:7: has 29 fields where the header has 28",
        "bill.csv:8: column 6 (ChargeClass): `Corection` is not a charge class",
    ] {
        assert!(notes.contains(want), "missing `{want}` in:\n{notes}");
    }
}

#[test]
fn a_bill_without_a_required_column_stops_with_the_columns_it_has() {
    let mut notes = Vec::new();
    let e = import("a,b\n1,2\n".as_bytes(), "x.csv", &Mapping::default(), None, &mut Vec::new(), &mut notes)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("x.csv:1: the bill has no column `ChargePeriodStart`"), "{e}");
    assert!(e.contains("--mapping"), "{e}");
    let e = import("".as_bytes(), "x.csv", &Mapping::default(), None, &mut Vec::new(), &mut notes).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}

#[test]
fn another_clouds_export_through_a_mapping_file() {
    // An export with its own column names, tags in columns, instance-hours and its own categories.
    let mapping = Mapping::parse(
        r#"
currency = "CNY"
[columns]
ChargePeriodStart = "usage_start"
ChargePeriodEnd = "usage_end"
ChargeCategory = "charge_type"
BilledCost = "cost"
ListCost = "list_cost"
ConsumedQuantity = "usage_amount"
ConsumedUnit = "usage_unit"
ResourceId = "instance_id"
SkuId = "instance_type"
[tags]
project = ["cost_center"]
[tag_columns]
cost_center = "label_cost_center"
owner = "label_owner"
[tags.user]
[categories]
"Compute" = "usage"
[skus."gn7-8xa100"]
gpu_type = "A100"
gpus = 8
[resources."node-7"]
gpu_type = "H100"
gpus = 4
project = "vision"
"#,
        "m.toml",
    );
    // `[tags.user]` is a table, not a list: the file is refused with its place.
    let e = mapping.unwrap_err().to_string();
    assert!(e.starts_with("m.toml:"), "{e}");
    let mapping = Mapping::parse(
        r#"
currency = "CNY"
[columns]
ChargePeriodStart = "usage_start"
ChargePeriodEnd = "usage_end"
ChargeCategory = "charge_type"
BilledCost = "cost"
ListCost = "list_cost"
ConsumedQuantity = "usage_amount"
ConsumedUnit = "usage_unit"
ResourceId = "instance_id"
SkuId = "instance_type"
[tags]
project = ["cost_center"]
user = ["owner"]
[tag_columns]
cost_center = "label_cost_center"
owner = "label_owner"
[categories]
"Compute" = "usage"
[skus."gn7-8xa100"]
gpu_type = "A100"
gpus = 8
[resources."node-7"]
gpu_type = "H100"
gpus = 4
project = "vision"
"#,
        "m.toml",
    )
    .unwrap();
    let csv = "usage_start,usage_end,charge_type,instance_id,instance_type,usage_amount,usage_unit,cost,list_cost,label_cost_center,label_owner\n\
        2026-11-02 09:00:00,2026-11-02 10:00:00,Compute,i-1,gn7-8xa100,1.5,Hrs,180.5,200,nlp,alice\n\
        2026-11-02 09:00:00,2026-11-02 10:00:00,Compute,node-7,custom,1,Hours,120,120,,\n\
        2026-11-02 09:00:00,2026-11-02 10:00:00,Compute,i-9,gn7-8xa100,1,Hrs,120.333,130,,\n";
    let (r, ev, notes) = run(csv, &mapping);
    assert_eq!((r.charges, r.refused), (3, 0), "{notes}");
    let a = charge(&ev[0]);
    assert_eq!(
        (a.project.as_deref(), a.attribution, a.currency.as_deref()),
        (Some("nlp"), Some(Attribution::Tag), Some("CNY"))
    );
    assert_eq!(a.gpu_hours, 12.0, "1.5 instance-hours × 8 A100");
    assert_eq!(a.bill.as_deref().and_then(|b| b.tags.get("user")).map(String::as_str), Some("alice"));
    let node = charge(&ev[1]);
    assert_eq!(
        (node.project.as_deref(), node.attribution, node.gpu_hours),
        (Some("vision"), Some(Attribution::Resource), 4.0)
    );
    assert_eq!(node.bill.as_deref().and_then(|b| b.gpu_type.as_deref()), Some("H100"));
    let none = charge(&ev[2]);
    assert_eq!((none.project.as_deref(), none.attribution), (None, Some(Attribution::Unattributed)));
    assert_eq!(none.amount, Some(120.333));
}

#[test]
fn progress_is_noted_every_hundred_thousand_lines() {
    let row = "2026-11-02T09:00:00Z,2026-11-02T10:00:00Z,Usage,1.00\n";
    let mut text = String::from("ChargePeriodStart,ChargePeriodEnd,ChargeCategory,BilledCost\n");
    for _ in 0..PROGRESS_EVERY {
        text.push_str(row);
    }
    let mut notes = Vec::new();
    let len = text.len() as u64;
    let r =
        import(text.as_bytes(), "big.csv", &Mapping::default(), Some(len), &mut std::io::sink(), &mut notes).unwrap();
    assert_eq!((r.charges, r.repeats), (PROGRESS_EVERY, PROGRESS_EVERY - 1));
    let notes = String::from_utf8(notes).unwrap();
    assert!(
        notes.starts_with("import bill big.csv: 100000 lines (99%)")
            || notes.starts_with("import bill big.csv: 100000 lines (100%)"),
        "{notes}"
    );
}

mod any_input {
    use proptest::prelude::*;

    use super::*;

    /// The fuzz target's body (fuzz/fuzz_targets/import_bill.rs), run here on generated inputs so that
    /// `cargo test` exercises it too: no panic, and every line written decodes.
    fn never_panics(data: &[u8]) {
        let mapped = Mapping::parse(
            "currency = \"USD\"\n[columns]\nBilledCost = \"cost\"\n[tag_columns]\nproject = \"label\"\n[skus.s]\ngpu_type = \"H100\"\ngpus = 8\n",
            "fuzz.toml",
        )
        .unwrap();
        for m in [Mapping::default(), mapped] {
            let mut out = Vec::new();
            if import(data, "fuzz.csv", &m, None, &mut out, &mut std::io::sink()).is_ok() {
                for line in String::from_utf8_lossy(&out).lines() {
                    assert!(decode_event(line).is_ok(), "{line}");
                }
            }
        }
    }

    fn field() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("null".to_owned()),
            Just("2026-11-02T09:00:00Z".to_owned()),
            Just("2026-11-02".to_owned()),
            Just("Usage".to_owned()),
            Just("Correction".to_owned()),
            Just("Unused".to_owned()),
            Just("GPU-Hours".to_owned()),
            Just("s".to_owned()),
            Just("\"{\"\"project\"\":\"\"nlp\"\",\"\"job\"\":\"\"j1\"\"}\"".to_owned()),
            "-?[0-9]{0,20}(\\.[0-9]{0,9})?(E-?[0-9]{1,3})?",
            "[ -~]{0,12}",
        ]
    }

    proptest! {
        #[test]
        fn any_bytes(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            never_panics(&data);
        }

        #[test]
        fn lines_of_plausible_fields(rows in proptest::collection::vec(proptest::collection::vec(field(), 0..9), 0..6)) {
            let mut text = String::from("ChargePeriodStart,ChargePeriodEnd,ChargeCategory,BilledCost,cost,ChargeClass,ConsumedQuantity,ConsumedUnit,Tags,SkuId,label\n");
            for r in rows {
                text.push_str(&r.join(","));
                text.push('\n');
            }
            never_panics(text.as_bytes());
        }
    }
}
