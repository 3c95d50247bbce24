//! A stand-in for NVIDIA's dcgm-exporter: an HTTP endpoint run by the test that serves `/metrics`
//! in dcgm-exporter's exact format, with values the test changes while Prometheus scrapes it.
//!
//! What is copied from dcgm-exporter (`internal/pkg/rendermetrics/render_metrics.go`,
//! `internal/pkg/transformation/hpc.go`, `etc/default-counters.csv`):
//! - the metric names, their `# HELP` text and `# TYPE gauge`;
//! - the label layout `gpu`, `UUID`, `pci_bus_id`, `device` (`nvidia<gpu>`, DCGM's index, *not* the
//!   device minor number), `modelName`, `Hostname`, then `hpc_job`;
//! - integers for the `DCGM_FI_DEV_*` fields and `%f` doubles for `DCGM_FI_PROF_*`;
//! - the job mapping: on every render the mapping folder is read, each file named `<gpu>` or
//!   `<gpu>.<gpu instance>` holds one job id per line, and a GPU with jobs gets one series per job
//!   with `hpc_job="<line>"`; a GPU without a file has no `hpc_job` label;
//! - on Kubernetes (`DCGM_EXPORTER_KUBERNETES=true`, `internal/pkg/transformation/kubernetes.go`) a
//!   GPU a pod holds carries `container`, `namespace` and `pod` after `Hostname`, in that (sorted)
//!   order; the test says which pod holds which GPU ([`FakeDcgm::set_pod`]).
//!
//! The test can set any value (including DCGM's error values such as 4294967295), drop a metric or
//! a whole GPU from the output, or make the target go away (connections closed unanswered).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// The fields served, in dcgm-exporter's default-counters order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Field {
    /// `DCGM_FI_DEV_GPU_UTIL`, percent.
    GpuUtil,
    /// `DCGM_FI_DEV_FB_FREE`, MiB.
    FbFree,
    /// `DCGM_FI_DEV_FB_USED`, MiB.
    FbUsed,
    /// `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, ratio.
    GrEngineActive,
}

impl Field {
    const ALL: [Field; 4] = [Field::GpuUtil, Field::FbFree, Field::FbUsed, Field::GrEngineActive];

    /// The metric name.
    pub fn name(self) -> &'static str {
        match self {
            Field::GpuUtil => "DCGM_FI_DEV_GPU_UTIL",
            Field::FbFree => "DCGM_FI_DEV_FB_FREE",
            Field::FbUsed => "DCGM_FI_DEV_FB_USED",
            Field::GrEngineActive => "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        }
    }

    fn help(self) -> &'static str {
        match self {
            Field::GpuUtil => "GPU utilization (in %).",
            Field::FbFree => "Framebuffer memory free (in MiB).",
            Field::FbUsed => "Framebuffer memory used (in MiB).",
            Field::GrEngineActive => "Ratio of time the graphics engine is active.",
        }
    }

    fn is_double(self) -> bool {
        matches!(self, Field::GrEngineActive)
    }
}

#[derive(Debug, Clone)]
struct Gpu {
    uuid: String,
    pci_bus_id: String,
    shown: bool,
    values: BTreeMap<Field, f64>,
    /// The pod holding it: namespace, pod, container.
    pod: Option<(String, String, String)>,
}

#[derive(Debug)]
struct State {
    hostname: String,
    model: String,
    map_dir: Option<PathBuf>,
    gpus: BTreeMap<u32, Gpu>,
    /// Exposition lines served after the GPU metrics (a job's own metrics, say).
    extra: String,
    serving: bool,
    scrapes: u64,
}

/// A running fake dcgm-exporter. Stops its thread on `Drop`.
#[derive(Debug)]
pub struct FakeDcgm {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn job_files(dir: &PathBuf) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let valid = {
            let (a, b) = name.split_once('.').unwrap_or((&name, "0"));
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        };
        if !valid || !e.path().is_file() {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(e.path()) {
            out.insert(name, text.lines().map(str::to_owned).collect());
        }
    }
    out
}

fn render(s: &State) -> String {
    let jobs = s.map_dir.as_ref().map(job_files).unwrap_or_default();
    let mut out = String::new();
    for f in Field::ALL {
        out.push_str(&format!("# HELP {} {}\n# TYPE {} gauge\n", f.name(), f.help(), f.name()));
        for (index, gpu) in s.gpus.iter().filter(|(_, g)| g.shown) {
            let Some(v) = gpu.values.get(&f) else { continue };
            let value = if f.is_double() { format!("{v:.6}") } else { format!("{}", *v as i64) };
            let base = format!(
                "{}{{gpu=\"{index}\",UUID=\"{}\",pci_bus_id=\"{}\",device=\"nvidia{index}\",modelName=\"{}\",Hostname=\"{}\"",
                f.name(),
                gpu.uuid,
                gpu.pci_bus_id,
                s.model,
                s.hostname
            );
            let base = match &gpu.pod {
                Some((ns, pod, container)) => {
                    format!("{base},container=\"{container}\",namespace=\"{ns}\",pod=\"{pod}\"")
                }
                None => base,
            };
            match jobs.get(&index.to_string()).filter(|j| !j.is_empty()) {
                Some(list) => {
                    for job in list {
                        out.push_str(&format!("{base},hpc_job=\"{job}\"}} {value}\n"));
                    }
                }
                None => out.push_str(&format!("{base}}} {value}\n")),
            }
        }
    }
    out.push_str(&s.extra);
    out
}

fn answer(mut conn: TcpStream, state: &Mutex<State>) -> io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = conn.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let (serving, body) = {
        let mut s = lock(state);
        s.scrapes += 1;
        (s.serving, render(&s))
    };
    if !serving {
        return Ok(()); // the target is gone: the connection closes unanswered
    }
    let path_ok = head.starts_with(b"GET /metrics ");
    let (status, body) = if path_ok { ("200 OK", body) } else { ("404 Not Found", String::from("not found\n")) };
    write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

impl FakeDcgm {
    /// Starts serving `gpus` GPUs (index 0..gpus, model NVIDIA H100 80GB HBM3) of node `hostname`, each
    /// idle with 81559 MiB free, reading job mapping files from `map_dir` when given.
    pub fn start(hostname: &str, gpus: u32, map_dir: Option<PathBuf>) -> io::Result<FakeDcgm> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let gpus = (0..gpus)
            .map(|i| {
                let values = BTreeMap::from([
                    (Field::GpuUtil, 0.0),
                    (Field::FbFree, 81_559.0),
                    (Field::FbUsed, 0.0),
                    (Field::GrEngineActive, 0.0),
                ]);
                let gpu = Gpu {
                    uuid: format!("GPU-{:08x}-0000-4000-8000-{:012x}", 0x5eed_0000 + i, u64::from(i)),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i * 0x10),
                    shown: true,
                    values,
                    pod: None,
                };
                (i, gpu)
            })
            .collect();
        let state = Arc::new(Mutex::new(State {
            hostname: hostname.to_owned(),
            model: "NVIDIA H100 80GB HBM3".into(),
            map_dir,
            gpus,
            extra: String::new(),
            serving: true,
            scrapes: 0,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::Builder::new().name("fake-dcgm".into()).spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let _ = conn.set_nonblocking(false);
                            let _ = answer(conn, &state);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })?
        };
        Ok(FakeDcgm { addr, state, stop, thread: Some(thread) })
    }

    /// Where Prometheus scrapes it.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets `field` of GPU `gpu` (`None` removes that series, as newer dcgm-exporters do for a blank
    /// value).
    pub fn set(&self, gpu: u32, field: Field, value: Option<f64>) {
        let mut s = lock(&self.state);
        if let Some(g) = s.gpus.get_mut(&gpu) {
            match value {
                Some(v) => g.values.insert(field, v),
                None => g.values.remove(&field),
            };
        }
    }

    /// Sets GPU `gpu`'s utilisation (engine ratio and the matching percentage) and memory used.
    pub fn set_load(&self, gpu: u32, engine_active: f64, fb_used_mib: f64) {
        self.set(gpu, Field::GrEngineActive, Some(engine_active));
        self.set(gpu, Field::GpuUtil, Some((engine_active * 100.0).round()));
        self.set(gpu, Field::FbUsed, Some(fb_used_mib));
        self.set(gpu, Field::FbFree, Some((81_559.0 - fb_used_mib).max(0.0)));
    }

    /// Says which pod holds GPU `gpu`: `(namespace, pod, container)`, or none (kubelet's pod
    /// resources API, as dcgm-exporter reads it on Kubernetes).
    pub fn set_pod(&self, gpu: u32, pod: Option<(&str, &str, &str)>) {
        if let Some(g) = lock(&self.state).gpus.get_mut(&gpu) {
            g.pod = pod.map(|(n, p, c)| (n.to_owned(), p.to_owned(), c.to_owned()));
        }
    }

    /// Shows or hides every series of GPU `gpu` (a GPU that fell off the bus).
    pub fn show_gpu(&self, gpu: u32, shown: bool) {
        if let Some(g) = lock(&self.state).gpus.get_mut(&gpu) {
            g.shown = shown;
        }
    }

    /// Makes the whole target answer (true) or close every connection unanswered (false).
    pub fn serve(&self, serving: bool) {
        lock(&self.state).serving = serving;
    }

    /// Scrapes answered or refused so far.
    pub fn scrapes(&self) -> u64 {
        lock(&self.state).scrapes
    }

    /// Serves `text` (exposition lines, each ending in a newline) after the GPU metrics: a job-level
    /// metric such as a training loop's tokens per second, labelled with `hpc_job`.
    pub fn set_extra(&self, text: &str) {
        lock(&self.state).extra = text.to_owned();
    }

    /// What `/metrics` serves now.
    pub fn render(&self) -> String {
        render(&lock(&self.state))
    }
}

impl Drop for FakeDcgm {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{TempDir, http_get};

    #[test]
    fn renders_dcgm_exporters_format_with_hpc_job_from_mapping_files() {
        let dir = TempDir::new("dcgm-test").unwrap();
        std::fs::write(dir.path().join("1"), "17\n18\n").unwrap();
        std::fs::write(dir.path().join("notes"), "ignored\n").unwrap();
        let d = FakeDcgm::start("node1", 2, Some(dir.path().to_owned())).unwrap();
        d.set(0, Field::GpuUtil, Some(4_294_967_295.0));
        d.set_load(1, 0.5, 1000.0);
        let text = d.render();
        assert!(
            text.contains("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n")
        );
        assert!(text.contains(
            "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-5eed0000-0000-4000-8000-000000000000\",pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"node1\"} 4294967295\n"
        ), "{text}");
        assert!(text.contains(",Hostname=\"node1\",hpc_job=\"17\"} 0.500000\n"), "{text}");
        assert!(
            text.contains(",Hostname=\"node1\",hpc_job=\"18\"} 0.500000\n"),
            "a GPU shared by two jobs has a series per job"
        );
        d.set_pod(0, Some(("nlp", "train-0-x7k2p", "trainer")));
        assert!(
            d.render().contains(
                ",Hostname=\"node1\",container=\"trainer\",namespace=\"nlp\",pod=\"train-0-x7k2p\"} 4294967295\n"
            ),
            "Kubernetes labels after Hostname"
        );
        d.set_pod(0, None);
        d.show_gpu(1, false);
        assert!(!d.render().contains("gpu=\"1\""));
        let (status, body) = http_get(d.addr(), "/metrics").unwrap();
        assert_eq!(status, 200);
        assert!(body.contains("DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\""));
        d.serve(false);
        assert!(http_get(d.addr(), "/metrics").map(|(s, _)| s).unwrap_or(0) == 0, "a gone target answers nothing");
        assert!(d.scrapes() >= 2);
    }
}
