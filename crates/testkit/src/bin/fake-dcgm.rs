//! `bursar-fake-dcgm`: the dcgm-exporter stand-in ([`bursar_testkit::FakeDcgm`]) as a process, for the
//! shell end-to-end test against a real Slurm (`integrations/slurm/e2e.sh`), where Prometheus scrapes it
//! like a GPU node's exporter.
//!
//! ```text
//! bursar-fake-dcgm --map-dir DIR [--load-dir DIR] [--gpus 8] [--hostname lab] [--busy 0.9] --port-file FILE
//! ```
//!
//! It serves `/metrics` in dcgm-exporter's format for `--gpus` GPUs, labelling each GPU with the jobs
//! the Slurm prolog listed in its mapping file under `--map-dir` (`hpc_job`). What cannot be had without
//! a GPU is how busy each one is, so the test says: a GPU with no job reads 0; a GPU running a job reads
//! `--busy`, unless `--load-dir` holds a file named after the job's Slurm id, whose number (a ratio,
//! 0–1) it reads instead. Runs until killed; writes its port to `--port-file` once it serves.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use bursar_testkit::FakeDcgm;

struct Args {
    map_dir: PathBuf,
    load_dir: Option<PathBuf>,
    gpus: u32,
    hostname: String,
    busy: f64,
    port_file: PathBuf,
}

const USAGE: &str = "usage: bursar-fake-dcgm --map-dir DIR [--load-dir DIR] [--gpus N] [--hostname NAME] [--busy RATIO] --port-file FILE";

fn parse() -> Result<Args, String> {
    let mut map_dir = None;
    let mut load_dir = None;
    let mut gpus = 8u32;
    let mut hostname = "lab".to_owned();
    let mut busy = 0.9f64;
    let mut port_file = None;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--map-dir" => map_dir = Some(PathBuf::from(value()?)),
            "--load-dir" => load_dir = Some(PathBuf::from(value()?)),
            "--gpus" => gpus = value()?.parse().map_err(|e| format!("--gpus: {e}"))?,
            "--hostname" => hostname = value()?,
            "--busy" => busy = value()?.parse().map_err(|e| format!("--busy: {e}"))?,
            "--port-file" => port_file = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(Args {
        map_dir: map_dir.ok_or_else(|| format!("--map-dir is required\n{USAGE}"))?,
        load_dir,
        gpus,
        hostname,
        busy,
        port_file: port_file.ok_or_else(|| format!("--port-file is required\n{USAGE}"))?,
    })
}

/// The jobs in GPU `gpu`'s mapping file (`<gpu>`, one Slurm job id per line), if any.
fn jobs_on(map_dir: &Path, gpu: u32) -> Vec<String> {
    std::fs::read_to_string(map_dir.join(gpu.to_string()))
        .map(|t| t.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The load the test set for Slurm job `job`, if it set one.
fn load_of(load_dir: Option<&Path>, job: &str) -> Option<f64> {
    let text = std::fs::read_to_string(load_dir?.join(job)).ok()?;
    text.trim().parse::<f64>().ok().filter(|v| (0.0..=1.0).contains(v))
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let dcgm = match FakeDcgm::start(&args.hostname, args.gpus, Some(args.map_dir.clone())) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bursar-fake-dcgm: cannot listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = std::fs::write(&args.port_file, dcgm.addr().port().to_string()) {
        eprintln!("bursar-fake-dcgm: cannot write {}: {e}", args.port_file.display());
        return ExitCode::FAILURE;
    }
    eprintln!("bursar-fake-dcgm: serving {} GPUs of {} on {}", args.gpus, args.hostname, dcgm.addr());
    loop {
        for gpu in 0..args.gpus {
            let jobs = jobs_on(&args.map_dir, gpu);
            let load = match jobs.first() {
                None => 0.0,
                Some(job) => load_of(args.load_dir.as_deref(), job).unwrap_or(args.busy),
            };
            let fb = if jobs.is_empty() { 0.0 } else { 40_000.0 };
            dcgm.set_load(gpu, load, fb);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
