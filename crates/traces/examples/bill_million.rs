//! Writes a FOCUS bill of N lines (default 1,000,000) to a file, or imports one to /dev/null, for
//! docs/performance.md's figures of `bursar import bill`:
//!
//! ```sh
//! cargo run --release -p bursar-traces --example bill_million -- gen /tmp/bill.csv 1000000
//! /usr/bin/time -v cargo run --release -p bursar-traces --example bill_million -- import /tmp/bill.csv
//! ```
//!
//! The generated lines are hourly usage of 400 eight-GPU instances over a month, tagged with one of 40
//! projects (some lines untagged), each with a Tags JSON object, as a cloud's FOCUS export has them.

use std::io::{BufWriter, Write};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("gen") => {
            let path = args.get(2).ok_or("gen PATH [N]")?;
            let n: u64 = args.get(3).map_or(Ok(1_000_000), |s| s.parse())?;
            let mut w = BufWriter::new(std::fs::File::create(path)?);
            writeln!(
                w,
                "BillingPeriodStart,BillingPeriodEnd,ChargePeriodStart,ChargePeriodEnd,ChargeCategory,ChargeClass,ChargeFrequency,ResourceId,SkuId,RegionId,ConsumedQuantity,ConsumedUnit,ListCost,BilledCost,EffectiveCost,BillingCurrency,CapacityReservationId,CapacityReservationStatus,Tags"
            )?;
            for i in 0..n {
                let hour = i / 400 % 720;
                let node = i % 400;
                let (d, h) = (1 + hour / 24, hour % 24);
                let tags = if node % 7 == 0 {
                    String::new()
                } else {
                    format!(
                        "\"{{\"\"project\"\":\"\"p{}\"\",\"\"user\"\":\"\"u{}\"\",\"\"team\"\":\"\"t{}\"\"}}\"",
                        node % 40,
                        node % 97,
                        node % 5
                    )
                };
                let (cr, st) = if node < 160 { ("cr-h100", "Used") } else { ("", "") };
                writeln!(
                    w,
                    "2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,2026-11-{d:02}T{h:02}:00:00Z,2026-11-{d:02}T{h:02}:59:59Z,Usage,,Usage-Based,i-{node:04},p5.48xlarge,us-east-1,8,GPU-Hours,98.32,{}.{:02},80.00,USD,{cr},{st},{tags}",
                    80 + i % 13,
                    i % 100
                )?;
            }
            w.flush()?;
        }
        Some("import") => {
            let path = args.get(2).ok_or("import PATH")?;
            let file = std::fs::File::open(path)?;
            let total = file.metadata()?.len();
            let started = std::time::Instant::now();
            let mut out = BufWriter::new(std::io::sink());
            let r = bursar_traces::bill::import(
                std::io::BufReader::with_capacity(1 << 16, file),
                path,
                &bursar_traces::bill::Mapping::default(),
                Some(total),
                &mut out,
                &mut std::io::stderr(),
            )?;
            let s = started.elapsed().as_secs_f64();
            eprint!("{r}");
            eprintln!(
                "{} lines in {s:.2} s: {:.0} lines/s, {:.1} MB/s",
                r.lines,
                r.lines as f64 / s,
                total as f64 / s / 1e6
            );
        }
        _ => return Err("usage: bill_million gen PATH [N] | import PATH".into()),
    }
    Ok(())
}
