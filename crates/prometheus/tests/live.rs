//! The source against a real Prometheus (Debian's 2.42) scraping a dcgm-exporter stand-in every
//! second, with `hpc_job` labels from mapping files written by `integrations/slurm/prolog-dcgm.sh`
//! itself (run here with a fake Slurm environment, a fake `nvidia-smi` and a fake
//! `/proc/driver/nvidia/gpus` whose device minor numbers are *not* the NVML indices).
//!
//! One Prometheus for the whole binary (libtest-mimic, so `main` stops it by PID after the last
//! test, pass or fail); the tests run one at a time, in order, because they share it and the
//! exporter, and the restart test comes last. Evaluation times are chosen after the change they test
//! is visible in Prometheus, so no assertion depends on how fast the machine is. Without
//! `/usr/bin/prometheus` every test is reported ignored (run `scripts/setup.sh`).
//!
//! A second Prometheus scrapes the same exporter with its API behind `--web.config.file`: TLS with a
//! certificate of a CA made here, and basic auth (a bcrypt hash). The source reads it with
//! `ca_file` and `basic_auth`; a wrong password and a CA file that does not sign its certificate
//! give errors that name the setting to fix.

#![expect(
    clippy::unwrap_used,
    reason = "a libtest-mimic test: a failed setup step or assertion is the test failing, with its message"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration as StdDuration, Instant};

use bursar_http::{BasicAuthFile, SecretSource};
use bursar_model::{Duration, Event, EventKind, Sample, Timestamp, decode_event};
use bursar_prometheus::{Config, Counters, Jobs, Poll, PollError, SlurmIds, Source};
use bursar_testkit::tls::{TestCa, WebConfig};
use bursar_testkit::{FakeDcgm, FakeNode, Field, Prometheus, TempDir};
use libtest_mimic::{Arguments, Failed, Trial};

/// Slurm device d is NVML index PERM[d] on this fake node (pairs swapped).
const PERM: [u32; 8] = [1, 0, 3, 2, 5, 4, 7, 6];

/// Slurm job id, bursar job id, Slurm's GPU numbers.
const JOBS: [(&str, &str, &str); 5] = [
    ("101", "lab-busy", "0"),
    ("102", "lab-idle", "1"),
    ("103", "lab-multi", "2,3"),
    ("104", "lab-error", "4"),
    ("105", "lab-pair", "6,7"),
];

struct World {
    _dir: TempDir,
    map: PathBuf,
    node: FakeNode,
    dcgm: FakeDcgm,
    prom: Mutex<Prometheus>,
    /// The same scrape behind TLS and basic auth.
    tls_prom: Prometheus,
    web: WebConfig,
    ca_file: PathBuf,
    ids: SlurmIds,
    gpus: BTreeMap<String, u32>,
}

impl World {
    fn jobs(&self) -> impl Jobs + '_ {
        self.ids.jobs(|id| self.gpus.get(id).copied().map(bursar_model::Gpus::whole))
    }

    fn source(&self) -> Source {
        self.source_with(|_| {})
    }

    fn source_with(&self, f: impl FnOnce(&mut Config)) -> Source {
        let url = self.prom.lock().unwrap().url();
        let mut cfg = Config {
            server: url,
            interval: Duration::seconds(1),
            lag: Duration(0),
            max_age: Duration::seconds(3),
            timeout: Duration::seconds(2),
            ..Config::default()
        };
        f(&mut cfg);
        Source::new(cfg).unwrap()
    }

    /// Waits until Prometheus's current answer to `promql` satisfies `ok`, then returns an evaluation
    /// time at or after that moment (a whole second, already past).
    fn settle(&self, promql: &str, ok: impl Fn(&[bursar_prometheus::promql::Reading]) -> bool) -> Timestamp {
        let deadline = Instant::now() + StdDuration::from_secs(20);
        loop {
            let body = self.prom.lock().unwrap().query(promql).unwrap_or_default();
            if let Ok(r) = bursar_prometheus::promql::parse(body.as_bytes())
                && ok(&r)
            {
                break;
            }
            assert!(Instant::now() < deadline, "prometheus never showed the change for `{promql}`: {body}");
            sleep(StdDuration::from_millis(100));
        }
        next_second()
    }
}

fn next_second() -> Timestamp {
    let now = Timestamp::wall_clock();
    let at = Timestamp((now.millis() / 1000 + 1) * 1000);
    sleep(StdDuration::from_millis(u64::try_from(at.millis() - now.millis() + 150).unwrap_or(1150)));
    at
}

fn sample<'a>(p: &'a Poll, job: &str) -> Option<&'a Sample> {
    p.events.iter().find_map(|e| match &e.kind {
        EventKind::JobSample(s) if s.job_id == job => Some(s),
        _ => None,
    })
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run_script(node: &FakeNode, map: &Path, script: &str, slurm_id: &str, gpus: &str) {
    node.run(&root().join("integrations/slurm").join(script), map, slurm_id, gpus).unwrap();
}

fn started(slurm: &str, bursar: &str) -> Event {
    decode_event(&format!(
        r#"{{"id":"slurm-lab-{slurm}-started","time":"2026-12-01T09:00:00Z","type":"job.started","job_id":"{bursar}","slurm_job_id":"{slurm}","slurm_cluster":"lab"}}"#
    ))
    .unwrap()
}

fn world() -> std::io::Result<World> {
    let dir = TempDir::new("prom-live")?;
    let map = dir.path().join("dcgm-job-map");
    let node = FakeNode::new(&dir.path().join("driver"), &PERM)?;
    let mut ids = SlurmIds::new("lab");
    let mut gpus = BTreeMap::new();
    for (slurm, bursar, devices) in JOBS {
        run_script(&node, &map, "prolog-dcgm.sh", slurm, devices);
        ids.observe(&started(slurm, bursar));
        gpus.insert(bursar.to_owned(), devices.split(',').count() as u32);
    }
    let dcgm = FakeDcgm::start("node1", 8, Some(map.clone()))?;
    dcgm.set_load(PERM[0], 0.9, 60_000.0);
    dcgm.set_load(PERM[1], 0.02, 30_000.0);
    dcgm.set_load(PERM[2], 0.2, 1000.0);
    dcgm.set_load(PERM[3], 0.6, 3000.0);
    dcgm.set_load(PERM[4], 0.5, 100.0);
    dcgm.set_load(PERM[6], 0.7, 100.0);
    dcgm.set_load(PERM[7], 0.7, 100.0);
    let prom = Prometheus::start(&[dcgm.addr()], StdDuration::from_secs(1))?;
    let ca = TestCa::new("bursar test CA")?;
    let ca_file = ca.write(dir.path(), "ca")?;
    let web = WebConfig::new(dir.path(), &ca, "bursar", "correct horse")?;
    std::fs::write(dir.path().join("prometheus.password"), "correct horse\n")?;
    std::fs::write(dir.path().join("wrong.password"), "battery staple\n")?;
    let tls_prom = Prometheus::start_tls(&[dcgm.addr()], StdDuration::from_secs(1), &web)?;
    Ok(World { _dir: dir, map, node, dcgm, prom: Mutex::new(prom), tls_prom, web, ca_file, ids, gpus })
}

fn engine_of(gpu: u32, v: f64) -> impl Fn(&[bursar_prometheus::promql::Reading]) -> bool {
    move |r| r.iter().any(|x| x.label("gpu") == Some(&gpu.to_string()) && (x.value - v).abs() < 1e-9)
}

type Test = fn(&World) -> Result<(), Failed>;

impl World {
    /// A source of the TLS Prometheus with `ca_file`, and basic auth with the password in `password`.
    fn tls_source(&self, ca_file: &Path, password: &str) -> Source {
        self.source_with(|c| {
            c.server = self.tls_prom.url();
            c.ca_file = Some(ca_file.to_owned());
            c.basic_auth = Some(BasicAuthFile {
                username: self.web.user.clone(),
                password_file: SecretSource::File(self._dir.path().join(password)),
            });
        })
    }

    fn settle_tls(&self, promql: &str, ok: impl Fn(&[bursar_prometheus::promql::Reading]) -> bool) -> Timestamp {
        let deadline = Instant::now() + StdDuration::from_secs(20);
        loop {
            let body = self.tls_prom.query(promql).unwrap_or_default();
            if let Ok(r) = bursar_prometheus::promql::parse(body.as_bytes())
                && ok(&r)
            {
                return next_second();
            }
            assert!(Instant::now() < deadline, "the TLS Prometheus never answered `{promql}` as expected: {body}");
            sleep(StdDuration::from_millis(100));
        }
    }
}

fn over_tls_with_basic_auth_the_busy_and_idle_jobs_are_read(w: &World) -> Result<(), Failed> {
    assert!(w.tls_prom.url().starts_with("https://"));
    let at = w.settle_tls("DCGM_FI_PROF_GR_ENGINE_ACTIVE{hpc_job=\"102\"}", engine_of(PERM[1], 0.02));
    let mut src = w.tls_source(&w.ca_file, "prometheus.password");
    let p = src.poll(at, &w.jobs());
    assert!(p.is_ok(), "{:?}", p.error);
    assert_eq!(sample(&p, "lab-busy").ok_or("no sample for the busy job")?.gpu_util, 0.9);
    assert_eq!(sample(&p, "lab-idle").ok_or("no sample for the idle job")?.gpu_util, 0.02);
    // The same time from the plain Prometheus: the same events (TLS changes the road, not the data).
    let plain_at = w.settle("DCGM_FI_PROF_GR_ENGINE_ACTIVE{hpc_job=\"102\"}", engine_of(PERM[1], 0.02));
    let a = w.tls_source(&w.ca_file, "prometheus.password").poll(plain_at, &w.jobs());
    let b = w.source().poll(plain_at, &w.jobs());
    let ids = |p: &Poll| p.events.iter().map(|e| e.id.to_string()).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
    Ok(())
}

fn a_wrong_password_or_an_unknown_ca_says_what_to_fix(w: &World) -> Result<(), Failed> {
    let at = next_second();
    let wrong = w.tls_source(&w.ca_file, "wrong.password").poll(at, &w.jobs());
    assert!(wrong.events.is_empty());
    let e = wrong.error.ok_or("a wrong password was accepted")?;
    assert!(matches!(e, PollError::Status { status: 401, .. }), "{e:?}");
    assert!(e.help().contains("check `basic_auth`"), "{}", e.help());
    assert_eq!(wrong.delta.poll_error, 1);

    let other = TestCa::new("not the CA of this Prometheus")?;
    let other_file = other.write(w._dir.path(), "other-ca")?;
    let unknown = w.tls_source(&other_file, "prometheus.password").poll(at, &w.jobs());
    let e = unknown.error.ok_or("a certificate of an unknown CA was trusted")?;
    assert!(matches!(e, PollError::Tls { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("is not trusted")
            && text.contains(&format!("the CA file `{}` (`ca_file`)", other_file.display())),
        "{text}"
    );
    assert!(unknown.events.is_empty());

    // Plain HTTP to the TLS port: Prometheus's 400 comes back with the fix.
    let plain = w.source_with(|c| c.server = w.tls_prom.url().replace("https://", "http://")).poll(at, &w.jobs());
    let e = plain.error.ok_or("plain HTTP to a TLS port was answered")?;
    assert!(e.help().contains("https://"), "{e}: {}", e.help());
    Ok(())
}

fn the_prolog_names_files_by_nvml_index(w: &World) -> Result<(), Failed> {
    // Slurm's device 0 is NVML index 1 on this node: the file is `1`, not `0`.
    assert_eq!(std::fs::read_to_string(w.map.join("1"))?, "101\n");
    assert_eq!(std::fs::read_to_string(w.map.join("0"))?, "102\n");
    assert_eq!(std::fs::read_to_string(w.map.join("3"))?, "103\n");
    assert_eq!(std::fs::read_to_string(w.map.join("2"))?, "103\n");
    // A second job on a GPU adds a line; its epilog removes only its own.
    run_script(&w.node, &w.map, "prolog-dcgm.sh", "199", "0");
    assert_eq!(std::fs::read_to_string(w.map.join("1"))?, "101\n199\n");
    run_script(&w.node, &w.map, "epilog-dcgm.sh", "199", "");
    assert_eq!(std::fs::read_to_string(w.map.join("1"))?, "101\n");
    let s = w.dcgm.render();
    assert!(s.contains("gpu=\"1\",UUID=") && s.contains(",hpc_job=\"101\"} 0.900000"), "{s}");
    Ok(())
}

fn busy_idle_and_memory_held(w: &World) -> Result<(), Failed> {
    let at = w.settle("DCGM_FI_PROF_GR_ENGINE_ACTIVE{hpc_job=\"102\"}", engine_of(PERM[1], 0.02));
    let mut src = w.source();
    let p = src.poll(at, &w.jobs());
    assert!(p.is_ok(), "{:?}", p.error);
    let busy = sample(&p, "lab-busy").ok_or("no sample for the busy job")?;
    assert_eq!((busy.gpu_util, busy.gpus, busy.gpu_util_max, busy.fb_used_mib), (0.9, Some(1), None, Some(60_000.0)));
    let idle = sample(&p, "lab-idle").ok_or("no sample for the idle job")?;
    assert_eq!((idle.gpu_util, idle.fb_used_mib), (0.02, Some(30_000.0)), "memory held, engine idle");
    assert_eq!(idle.mem_util, Some(30_000.0 / 81_559.0));
    assert!(p.events.iter().all(|e| e.time == at));
    assert_eq!(p.delta.jobs_skipped(), 0, "{:?}", p.delta);
    assert_eq!(p.delta.samples, 5);
    Ok(())
}

fn a_multi_gpu_job_gets_mean_and_max(w: &World) -> Result<(), Failed> {
    let at = w.settle("DCGM_FI_PROF_GR_ENGINE_ACTIVE{hpc_job=\"103\"}", |r| r.len() == 2);
    let p = w.source().poll(at, &w.jobs());
    let m = sample(&p, "lab-multi").ok_or("no sample for the two-GPU job")?;
    assert!((m.gpu_util - 0.4).abs() < 1e-12, "mean {}", m.gpu_util);
    assert_eq!((m.gpu_util_max, m.gpus, m.fb_used_mib), (Some(0.6), Some(2), Some(4000.0)));
    Ok(())
}

fn a_job_level_throughput_metric_rides_on_the_jobs_sample(w: &World) -> Result<(), Failed> {
    // The two-GPU job's training loop exports tokens/s per rank, labelled with its Slurm id.
    w.dcgm.set_extra(
        "# TYPE train_tokens_per_second gauge\n\
         train_tokens_per_second{hpc_job=\"103\",rank=\"0\"} 2500\n\
         train_tokens_per_second{hpc_job=\"103\",rank=\"1\"} 2620\n",
    );
    let at = w.settle("train_tokens_per_second{hpc_job=\"103\"}", |r| r.len() == 2);
    let mut src = w.source_with(|c| {
        c.metrics.throughput = "train_tokens_per_second".into();
        c.metrics.unit = "tokens".into();
    });
    assert_eq!(src.queries().len(), 5, "one more query: the job-level metric");
    let p = src.poll(at, &w.jobs());
    assert!(p.is_ok(), "{:?}", p.error);
    let m = sample(&p, "lab-multi").ok_or("no sample for the two-GPU job")?;
    assert_eq!(
        (m.throughput, m.unit.as_deref(), m.gpus),
        (Some(5120.0), Some("tokens/s"), Some(2)),
        "summed over ranks"
    );
    let busy = sample(&p, "lab-busy").ok_or("no sample for the busy job")?;
    assert_eq!(busy.throughput, None, "a job without the metric still gets its utilisation sample");
    // Without the setting the metric is not asked for.
    let p = w.source().poll(at, &w.jobs());
    assert_eq!(sample(&p, "lab-multi").and_then(|s| s.throughput), None);
    w.dcgm.set_extra("");
    Ok(())
}

fn two_polls_of_one_time_give_the_same_events(w: &World) -> Result<(), Failed> {
    let at = w.settle("DCGM_FI_PROF_GR_ENGINE_ACTIVE", |r| r.len() >= 7);
    let a = w.source().poll(at, &w.jobs());
    sleep(StdDuration::from_millis(1200)); // more scrapes land after `at`; they must not matter
    let b = w.source().poll(at, &w.jobs());
    assert!(!a.events.is_empty());
    assert_eq!(a.events, b.events, "a second instance polling the same instant makes the same events");
    assert_eq!(a.events[0].id, format!("prom-lab-busy-{at}"));
    Ok(())
}

fn a_dcgm_error_value_is_no_sample(w: &World) -> Result<(), Failed> {
    let gpu = PERM[4];
    w.dcgm.set(gpu, Field::GrEngineActive, None); // no profiling metric: the percent fallback is used
    w.dcgm.set(gpu, Field::GpuUtil, Some(4_294_967_295.0));
    let at = w.settle(&format!("DCGM_FI_DEV_GPU_UTIL{{gpu=\"{gpu}\"}}"), |r| r.iter().any(|x| x.value > 1e9));
    let at = at.max(w.settle(&format!("absent(DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu=\"{gpu}\"}})"), |r| r.len() == 1));
    let mut src = w.source();
    let p = src.poll(at, &w.jobs());
    assert!(p.is_ok());
    assert!(sample(&p, "lab-error").is_none(), "4294967295 made a sample");
    assert_eq!((p.delta.series_bad_value, p.delta.jobs_bad_value), (1, 1), "{:?}", p.delta);
    assert!(sample(&p, "lab-busy").is_some(), "the other jobs are not affected");
    w.dcgm.set(gpu, Field::GpuUtil, Some(35.0));
    let at = w.settle(&format!("DCGM_FI_DEV_GPU_UTIL{{gpu=\"{gpu}\"}}"), |r| r.iter().any(|x| x.value == 35.0));
    let p = src.poll(at, &w.jobs());
    assert_eq!(sample(&p, "lab-error").map(|s| s.gpu_util), Some(0.35), "fallback: DCGM_FI_DEV_GPU_UTIL / 100");
    assert_eq!(src.counters().jobs_bad_value, 1);
    w.dcgm.set_load(gpu, 0.5, 100.0); // the profiling metric is back for the tests after this one
    Ok(())
}

fn a_gpu_that_goes_stale_is_no_sample(w: &World) -> Result<(), Failed> {
    let gone = PERM[7];
    w.dcgm.show_gpu(gone, false);
    let at = w.settle("DCGM_FI_PROF_GR_ENGINE_ACTIVE{hpc_job=\"105\"}", |r| r.len() == 1);
    let p = w.source().poll(at, &w.jobs());
    assert!(sample(&p, "lab-pair").is_none(), "one of two GPUs answered, yet a sample was made");
    assert_eq!(p.delta.jobs_missing_gpu, 1, "{:?}", p.delta);
    w.dcgm.show_gpu(gone, true);
    let at = w.settle("DCGM_FI_PROF_GR_ENGINE_ACTIVE{hpc_job=\"105\"}", |r| r.len() == 2);
    let p = w.source().poll(at, &w.jobs());
    assert_eq!(sample(&p, "lab-pair").map(|s| s.gpus), Some(Some(2)));
    Ok(())
}

fn a_target_that_goes_away_is_no_sample(w: &World) -> Result<(), Failed> {
    w.dcgm.serve(false);
    let at = w.settle("up{job=\"dcgm\"}", |r| r.iter().any(|x| x.value == 0.0));
    let at = at.max(w.settle("DCGM_FI_PROF_GR_ENGINE_ACTIVE", |r| r.is_empty()));
    let p = w.source().poll(at, &w.jobs());
    assert!(p.is_ok() && p.events.is_empty(), "{:?}", p.events);
    assert_eq!(p.delta.jobs_no_series, 5, "every running job is counted: {:?}", p.delta);
    w.dcgm.serve(true);
    w.settle("DCGM_FI_PROF_GR_ENGINE_ACTIVE", |r| r.len() >= 8);
    Ok(())
}

fn a_prometheus_restart_is_counted_and_resumed(w: &World) -> Result<(), Failed> {
    let jobs = w.jobs();
    let mut src = w.source();
    let before = w.settle("DCGM_FI_PROF_GR_ENGINE_ACTIVE", |r| r.len() >= 8);
    let first = src.poll(before, &jobs);
    assert_eq!(first.events.len(), 5);

    let pid = w.prom.lock().unwrap().pid().ok_or("prometheus not running")?;
    w.prom.lock().unwrap().stop()?;
    let stopped = Timestamp::wall_clock();
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} still there");
    let down = src.poll(next_second(), &jobs);
    assert!(matches!(down.error, Some(PollError::Unreachable { .. })), "{:?}", down.error);
    assert!(down.events.is_empty());
    assert_eq!(down.delta.poll_unreachable, 1);
    let c = src.catch_up(Some(before), Timestamp::wall_clock(), &jobs);
    assert_eq!(c.resume, Some(before), "a failed poll does not move the resume point");
    assert!(c.polls.iter().all(|p| p.events.is_empty()));

    // Stay down past max_age, then start again on the same storage and port.
    sleep(StdDuration::from_secs(5));
    let in_gap = Timestamp((stopped.millis() / 1000 + 4) * 1000);
    w.prom.lock().unwrap().start_again()?;

    // Prometheus keeps no staleness markers across a shutdown: at a time in the gap it still answers
    // the last samples from before it stopped. Their own timestamps give them away.
    let p = src.poll(in_gap, &jobs);
    assert!(p.is_ok(), "{:?}", p.error);
    assert!(p.events.is_empty(), "samples from before the restart were passed off as current: {:?}", p.events);
    assert!(p.delta.jobs_stale >= 4, "{:?}", p.delta);
    let lenient =
        Source::new(Config { max_age: Duration::minutes(10), ..w.source().config().clone() })?.poll(in_gap, &jobs);
    assert!(
        !lenient.events.is_empty(),
        "without the age check the old data would have counted (the check is what works)"
    );

    // The same instant from before the stop, asked again: the same events.
    assert_eq!(src.poll(before, &jobs).events, first.events);

    // Polling resumes, and the catch-up from the old resume point covers every second once. (Wait for
    // samples scraped since the restart: the old ones answer the plain selector for 5 minutes.)
    let now = w.settle("time() - timestamp(DCGM_FI_PROF_GR_ENGINE_ACTIVE) < 2", |r| r.len() >= 8);
    let c = src.catch_up(Some(before), Timestamp(now.millis() + 999), &jobs);
    assert_eq!(c.resume, Some(now));
    let times: Vec<i64> = c.polls.iter().map(|p| p.at.millis()).collect();
    assert_eq!(times.first(), Some(&(before.millis() + 1000)));
    assert!(times.windows(2).all(|w| w[1] - w[0] == 1000), "{times:?}");
    let last = c.polls.last().ok_or("no poll")?;
    assert_eq!(last.events.len(), 5, "fresh samples after the restart: {:?}", last.delta);
    let all: Counters = *src.counters();
    assert!(all.poll_unreachable >= 2 && all.jobs_stale >= 4, "{all:?}");
    assert!(all.render().contains("bursar_prometheus_poll_failures_total{reason=\"unreachable\"}"));
    Ok(())
}

fn main() {
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let tests: [(&str, Test); 11] = [
        ("the_prolog_names_files_by_nvml_index", the_prolog_names_files_by_nvml_index),
        ("busy_idle_and_memory_held", busy_idle_and_memory_held),
        ("a_multi_gpu_job_gets_mean_and_max", a_multi_gpu_job_gets_mean_and_max),
        (
            "a_job_level_throughput_metric_rides_on_the_jobs_sample",
            a_job_level_throughput_metric_rides_on_the_jobs_sample,
        ),
        ("two_polls_of_one_time_give_the_same_events", two_polls_of_one_time_give_the_same_events),
        ("a_dcgm_error_value_is_no_sample", a_dcgm_error_value_is_no_sample),
        ("a_gpu_that_goes_stale_is_no_sample", a_gpu_that_goes_stale_is_no_sample),
        ("a_target_that_goes_away_is_no_sample", a_target_that_goes_away_is_no_sample),
        (
            "over_tls_with_basic_auth_the_busy_and_idle_jobs_are_read",
            over_tls_with_basic_auth_the_busy_and_idle_jobs_are_read,
        ),
        ("a_wrong_password_or_an_unknown_ca_says_what_to_fix", a_wrong_password_or_an_unknown_ca_says_what_to_fix),
        ("a_prometheus_restart_is_counted_and_resumed", a_prometheus_restart_is_counted_and_resumed),
    ];
    let have = Prometheus::binary().is_some();
    if !have {
        bursar_testkit::need::missing("prometheus (every test here is ignored without it)", "scripts/setup.sh");
    }
    let wanted = tests.iter().any(|(name, _)| args.filter.as_deref().is_none_or(|f| name.contains(f)));
    let world: Option<Arc<World>> = if have && wanted && !args.list {
        match world() {
            Ok(w) => Some(Arc::new(w)),
            Err(e) => {
                eprintln!("live: cannot start the test world: {e}");
                std::process::exit(101);
            }
        }
    } else {
        None
    };
    let trials = tests
        .into_iter()
        .map(|(name, test)| {
            let w = world.clone();
            Trial::test(name, move || match &w {
                Some(w) => test(w),
                None => Ok(()),
            })
            .with_ignored_flag(!have)
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    drop(world); // stops both Prometheus servers (by PID) and the exporter, pass or fail
    conclusion.exit();
}
