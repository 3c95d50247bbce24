//! `bursar kube checks|webhook|watch|enforce`: the Kubernetes agents. The command line only; the
//! agents live in the `bursar-kube` crate (docs/integrations/kubernetes.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use bursar_agent::server::Server;
use bursar_kube::checks::ChecksConfig;
use bursar_kube::enforce::EnforceConfig;
use bursar_kube::gpus::{MigShare, MigShares};
use bursar_kube::kinds::Kind;
use bursar_kube::review::ReviewConfig;
use bursar_kube::submit::Mapping;
use bursar_kube::watch::{Mode, WatchConfig};
use bursar_kube::webhook::WebhookConfig;
use bursar_model::Duration;

use crate::values::{parse_duration, std_duration};
use crate::{CliError, ExitCode};

/// Options of `bursar kube`.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeArgs {
    #[command(subcommand)]
    command: KubeCommand,
}

/// Options every Kubernetes agent shares.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Where serve is and how to authenticate (this agent's principal's token, a client certificate).
    #[command(flatten)]
    connect: crate::connect::ConnectArgs,
    /// Cluster name: the prefix of bursar's job ids (`<cluster>-<12 hex>`) and `kube_cluster` of
    /// every event; keep it stable and give every agent of a cluster the same one.
    #[arg(long, default_value = "kube")]
    cluster: String,
    /// A kubeconfig file (default: KUBECONFIG, ~/.kube/config, then the pod's service account).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// An extended resource that counts GPUs (repeat for several): one is a whole GPU, or its MIG
    /// share when its name holds a profile. Every nvidia.com/mig-* resource counts too, at its
    /// share (nvidia.com/mig-1g.10gb: 1/7).
    #[arg(long = "gpu-resource", default_value = "nvidia.com/gpu", value_name = "NAME")]
    gpu_resources: Vec<String>,
    /// The share of a GPU one slice of a MIG profile is, over the built-in one (its compute slices
    /// over 7, over 4 for the A30's profiles): PROFILE=SHARE, e.g. 1g.24gb=1/4 (repeat).
    #[arg(long = "mig-share", value_name = "PROFILE=SHARE")]
    mig_shares: Vec<MigShare>,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, value_enum, default_value = "info")]
    log_level: crate::serve::tracing_level::Level,
}

/// The mapping options of the agents that submit.
#[derive(Debug, Clone, clap::Args)]
pub struct MappingArgs {
    /// The label naming the project (default: the namespace is the project).
    #[arg(long, value_name = "LABEL")]
    project_label: Option<String>,
    /// The label or annotation naming the user of a Workload (the webhook takes userInfo).
    #[arg(long, value_name = "KEY", default_value = "bursar.dev/user")]
    user_key: String,
    /// The node label naming the GPU model (in node selectors and ResourceFlavors).
    #[arg(long, value_name = "LABEL", default_value = "nvidia.com/gpu.product")]
    gpu_type_label: String,
    /// Requested time when an object names none (no max-exec-time label, no activeDeadlineSeconds).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    default_time: Duration,
}

/// What the watcher and the enforcer follow.
#[derive(Debug, Clone, clap::Args)]
pub struct ModeArgs {
    /// Objects the webhook admitted, of this kind (repeat; `batch/v1/Job`, `v1/Pod`,
    /// `jobset.x-k8s.io/v1alpha2/JobSet`, `kubeflow.org/v1/PyTorchJob`, …). Without it: Kueue
    /// Workloads carrying bursar's admission check.
    #[arg(long = "kind", value_name = "KIND", value_parser = parse_kind)]
    kinds: Vec<Kind>,
}

impl ModeArgs {
    fn mode(&self) -> Mode {
        if self.kinds.is_empty() { Mode::Kueue } else { Mode::Objects(self.kinds.clone()) }
    }
}

#[derive(Debug, Clone, clap::Subcommand)]
enum KubeCommand {
    /// The Kueue admission check: ask serve for every Workload pending on bursar's AdmissionCheck.
    ///
    /// Example: bursar kube checks --cluster gpu-a --server https://bursar:7878 --token-file /run/secrets/bursar/token
    Checks {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        mapping: MappingArgs,
        /// How long after a failed ask (serve down) or status write a Workload is looked at again.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        resync: Duration,
        /// How many Workloads are judged at once (each waits for serve's answer on its own).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
        concurrency: u16,
    },
    /// The admission webhook (AdmissionReview v1 over TLS) for clusters without Kueue.
    ///
    /// Example: bursar kube webhook --listen 0.0.0.0:8443 --tls-cert /tls/tls.crt --tls-key /tls/tls.key --kind batch/v1/Job
    Webhook {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        mapping: MappingArgs,
        /// Where to listen (HTTPS).
        #[arg(long, default_value = "0.0.0.0:8443")]
        listen: SocketAddr,
        /// Write the port actually bound to this file (with --listen …:0).
        #[arg(long, value_name = "FILE")]
        port_file: Option<PathBuf>,
        /// The server certificate (PEM chain), the one the webhook configuration's caBundle signs.
        #[arg(long, value_name = "FILE")]
        tls_cert: PathBuf,
        /// Its private key (PEM).
        #[arg(long, value_name = "FILE")]
        tls_key: PathBuf,
        /// A kind to admit (repeat). Default: batch/v1/Job and v1/Pod.
        #[arg(long = "kind", value_name = "KIND", value_parser = parse_kind)]
        kinds: Vec<Kind>,
        /// A user that may resume held objects and change bursar's marks (repeat): the enforcer's
        /// service account, `system:serviceaccount:<namespace>:<name>`.
        #[arg(long = "agent-user", value_name = "USER")]
        agent_users: Vec<String>,
        /// The longest wait for serve's decision (keep it under the webhook's timeoutSeconds).
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        timeout: Duration,
        /// Admit unchecked when serve gives no decision (default: refuse).
        #[arg(long)]
        fail_open: bool,
    },
    /// Send job.queued/started/requeued/finished from Workloads (or admitted objects) and their pods.
    ///
    /// Example: bursar kube watch --cluster gpu-a --state /var/lib/bursar/kube-watch.json
    Watch {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        mode: ModeArgs,
        /// The agent's state file (created if missing; keep it on a persistent volume).
        #[arg(long, value_name = "FILE")]
        state: PathBuf,
        /// How long a run waits for all its pods before it starts with the GPUs they hold.
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        settle: Duration,
        /// How often the state is looked at without a change.
        #[arg(long, default_value = "5s", value_parser = parse_duration)]
        resync: Duration,
        /// A label selector for the pods followed with Kueue (default: every pod).
        #[arg(long, value_name = "SELECTOR")]
        pod_selector: Option<String>,
        /// With Kueue: read the ClusterQueues, ResourceFlavors and Nodes every this many resyncs
        /// (and at the first) and send the pool's inventory when it changed; 0: never.
        #[arg(long, default_value_t = 6, value_name = "RESYNCS")]
        inventory_every: u32,
        /// The region the inventory names [default: the cluster name].
        #[arg(long)]
        region: Option<String>,
    },
    /// Follow the decision stream: reclaim (deactivate, suspend), approve, reject, each recorded.
    ///
    /// Example: bursar kube enforce --cluster gpu-a --state /var/lib/bursar/kube-enforce.json
    Enforce {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        mode: ModeArgs,
        /// The agent's state file (the cursor).
        #[arg(long, value_name = "FILE")]
        state: PathBuf,
        /// Run until caught up with the stream, then exit.
        #[arg(long)]
        once: bool,
        /// With no state file yet, start after this decision seq (0: the whole stream).
        #[arg(long, default_value_t = 0)]
        start_after: u64,
        /// Tries of a failing API call before the failure is recorded.
        #[arg(long, default_value_t = 5)]
        max_attempts: u32,
        /// Wait after the first failed try; doubles each time.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        retry_delay: Duration,
    },
}

fn parse_kind(s: &str) -> Result<Kind, String> {
    Kind::parse(s)
}

impl Common {
    fn server(&self) -> Result<Server, CliError> {
        Ok(Server { client: self.connect.client(crate::connect::Fallback::Nothing)? })
    }

    fn mapping(&self, m: Option<&MappingArgs>) -> Result<Mapping, CliError> {
        let mut names = self.gpu_resources.iter().cloned();
        let mut out = Mapping {
            cluster: self.cluster.clone(),
            gpu_resource: names.next().unwrap_or_else(|| "nvidia.com/gpu".to_owned()),
            more_gpu_resources: names.collect(),
            mig_shares: MigShares::new(self.mig_shares.iter().cloned()).map_err(CliError::Message)?,
            ..Mapping::default()
        };
        if let Some(m) = m {
            out.project_label = m.project_label.clone();
            out.user_key = m.user_key.clone();
            out.gpu_type_label = m.gpu_type_label.clone();
            out.default_hours = m.default_time.as_hours();
        }
        Ok(out)
    }

    async fn client(&self) -> Result<bursar_kube::client::Client, CliError> {
        bursar_kube::client::connect(self.kubeconfig.as_deref(), self.context.as_deref()).await.map_err(fail)
    }
}

fn fail(e: bursar_kube::Error) -> CliError {
    CliError::Message(e.to_string())
}

fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Message(format!("cannot start the runtime: {e}")))
}

/// Runs `bursar kube …`.
pub fn run(args: &KubeArgs) -> Result<ExitCode, CliError> {
    let rt = runtime()?;
    match &args.command {
        KubeCommand::Checks { common, mapping, resync, concurrency } => {
            crate::values::init_agent_logging(common.log_level);
            let cfg = ChecksConfig {
                server: common.server()?,
                mapping: common.mapping(Some(mapping))?,
                resync: std_duration(*resync),
                watch_timeout: 290,
                concurrency: *concurrency,
            };
            rt.block_on(async {
                let client = common.client().await?;
                bursar_kube::checks::run(client, cfg).await.map_err(fail)
            })?;
            Ok(ExitCode::Ok)
        }
        KubeCommand::Webhook {
            common,
            mapping,
            listen,
            port_file,
            tls_cert,
            tls_key,
            kinds,
            agent_users,
            timeout,
            fail_open,
        } => {
            crate::values::init_agent_logging(common.log_level);
            let kinds = if kinds.is_empty() {
                vec![
                    Kind::parse("batch/v1/Job").map_err(CliError::Message)?,
                    Kind::parse("v1/Pod").map_err(CliError::Message)?,
                ]
            } else {
                kinds.clone()
            };
            let cfg = WebhookConfig {
                review: ReviewConfig {
                    mapping: common.mapping(Some(mapping))?,
                    kinds,
                    agent_users: agent_users.clone(),
                },
                server: common.server()?,
                timeout: std_duration(*timeout),
                fail_open: *fail_open,
            };
            let acceptor = bursar_kube::webhook::tls(tls_cert, tls_key).map_err(fail)?;
            rt.block_on(async {
                let (listener, addr) = bursar_kube::webhook::bind(*listen).await.map_err(fail)?;
                if let Some(p) = port_file {
                    std::fs::write(p, format!("{}\n", addr.port()))
                        .map_err(|e| CliError::Message(format!("cannot write `{}`: {e}", p.display())))?;
                }
                bursar_kube::webhook::serve(listener, acceptor, cfg).await.map_err(fail)
            })?;
            Ok(ExitCode::Ok)
        }
        KubeCommand::Watch { common, mode, state, settle, resync, pod_selector, inventory_every, region } => {
            crate::values::init_agent_logging(common.log_level);
            let mapping = common.mapping(None)?;
            let cfg = WatchConfig {
                inventory_every: *inventory_every,
                region: region.clone().unwrap_or_else(|| mapping.cluster.clone()),
                server: common.server()?,
                mapping,
                mode: mode.mode(),
                state: state.clone(),
                settle: *settle,
                resync: std_duration(*resync),
                pod_selector: pod_selector.clone(),
                watch_timeout: 290,
            };
            rt.block_on(async {
                let client = common.client().await?;
                bursar_kube::watch::run(client, cfg).await.map_err(fail)
            })?;
            Ok(ExitCode::Ok)
        }
        KubeCommand::Enforce { common, mode, state, once, start_after, max_attempts, retry_delay } => {
            crate::values::init_agent_logging(common.log_level);
            let cfg = EnforceConfig {
                server: common.server()?,
                cluster: common.cluster.clone(),
                mode: mode.mode(),
                state: state.clone(),
                start_after: *start_after,
                max_attempts: *max_attempts,
                retry_delay: std_duration(*retry_delay),
            };
            let client = rt.block_on(common.client())?;
            let r = bursar_kube::enforce::run(rt.handle().clone(), client, &cfg, *once).map_err(fail)?;
            eprintln!(
                "kube enforce: {} decisions read, {} actions recorded ({} recorded before), cursor {}",
                r.decisions, r.recorded, r.already_recorded, r.cursor
            );
            Ok(ExitCode::Ok)
        }
    }
}
