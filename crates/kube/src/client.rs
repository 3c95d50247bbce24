//! Connecting to the API server: a kubeconfig file when one is named (`--kubeconfig`), else kube-rs's
//! own inference (`KUBECONFIG`, `~/.kube/config`, then the pod's service account: its token, the
//! cluster CA at `/var/run/secrets/kubernetes.io/serviceaccount/`). TLS is rustls on ring; the
//! cluster's CA comes from the kubeconfig or the service account, never from the system's roots.

use std::path::Path;

pub use kube::Client;
use kube::Config;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::{Error, Result};

/// A client of the API server. Must be called inside a tokio runtime (the client spawns its
/// connection pool's task).
pub async fn connect(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| Error::Config(format!("`{}`: {e}", path.display())))?;
            let options = KubeConfigOptions { context: context.map(str::to_owned), ..KubeConfigOptions::default() };
            Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| Error::Config(format!("`{}`: {e}", path.display())))?
        }
        None => Config::infer().await.map_err(|e| Error::Config(e.to_string()))?,
    };
    Client::try_from(config).map_err(|e| Error::Config(e.to_string()))
}
