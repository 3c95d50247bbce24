//! How the client commands reach `bursar serve` and prove who they are: the flags `bursar pending`,
//! `approve`, `reject`, `keepalive` and the Slurm agents share ([`ConnectArgs`]).
//!
//! The server is a URL (`https://bursar.lab:7878`, or `HOST:PORT` for plain HTTP), trusted through
//! `--ca-file` when its certificate is not signed by the system's roots. The credential is a token
//! read from a file (`--token-file`, or `$BURSAR_TOKEN_FILE`; never from the command line, where
//! every local user can read it), a client certificate (`--client-cert`, `--client-key`), or a MUNGE
//! credential made for each request by the local `munged` (`--munge`; the people commands use it by
//! default on a host that has `munge` and no token), so an approval is signed by whoever typed it.

use std::path::PathBuf;

use bursar_client::Client;

use crate::CliError;

/// Where serve is and how to authenticate to it.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectArgs {
    /// Where `bursar serve` listens: a URL (`https://bursar.lab:7878`) or `HOST:PORT` (plain HTTP).
    #[arg(long, value_name = "URL", default_value = "127.0.0.1:7878")]
    pub server: String,
    /// The CA certificate(s) (PEM) serve's TLS certificate is checked against, instead of the
    /// system's roots.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// A file holding a bearer token for serve (`bursar auth token` makes one).
    #[arg(long, value_name = "FILE", env = "BURSAR_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// A TLS client certificate (PEM) to present, with --client-key.
    #[arg(long, value_name = "FILE", requires = "client_key")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's key (PEM).
    #[arg(long, value_name = "FILE", requires = "client_cert")]
    pub client_key: Option<PathBuf>,
    /// Sign each request with a MUNGE credential from the local munged (serve learns your UID); the
    /// default of the people commands when munged runs here and no token is given.
    #[arg(long, conflicts_with = "token_file")]
    pub munge: bool,
    /// munged's socket, for --munge (default: munge's own, /run/munge/munge.socket.2).
    #[arg(long, value_name = "PATH")]
    pub munge_socket: Option<PathBuf>,
}

/// How a command would like to authenticate when the flags do not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Nothing (the agents: a server without principals, on loopback).
    Nothing,
    /// MUNGE when `munge` is installed (a person at a Slurm login node).
    MungeIfInstalled,
}

/// munge's own default socket.
const MUNGE_SOCKET: &str = "/run/munge/munge.socket.2";

impl ConnectArgs {
    /// Whether this host can make MUNGE credentials: `munge` on `PATH` and munged's socket present.
    fn munge_available(&self) -> bool {
        let socket = self.munge_socket.clone().unwrap_or_else(|| PathBuf::from(MUNGE_SOCKET));
        socket.exists()
            && std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("munge").is_file()))
    }
}

impl ConnectArgs {
    /// The server's URL: `HOST:PORT` means plain HTTP.
    pub fn url(&self) -> String {
        if self.server.contains("://") { self.server.clone() } else { format!("http://{}", self.server) }
    }

    /// Whether the client will present a credential (then serve knows who it is, and an answer needs
    /// no name).
    pub fn authenticates(&self, fallback: Fallback) -> bool {
        self.token_file.is_some()
            || self.client_cert.is_some()
            || self.munge
            || (fallback == Fallback::MungeIfInstalled && self.munge_available())
    }

    /// The client these flags describe.
    pub fn client(&self, fallback: Fallback) -> Result<Client, CliError> {
        let mut cfg = bursar_http::ClientConfig::new(self.url());
        cfg.ca_file = self.ca_file.clone();
        if let (Some(cert_file), Some(key_file)) = (&self.client_cert, &self.client_key) {
            cfg.identity = Some(bursar_http::Identity { cert_file: cert_file.clone(), key_file: key_file.clone() });
        }
        cfg.auth = if let Some(path) = &self.token_file {
            let token = std::fs::read_to_string(path)
                .map_err(|e| CliError::io(format!("cannot read the token file `{}`", path.display()), e))?;
            bursar_http::Auth::bearer(Some(token.trim()))
        } else if self.munge || (fallback == Fallback::MungeIfInstalled && self.munge_available()) {
            let settings = bursar_auth::MungeSettings { socket: self.munge_socket.clone(), ..Default::default() };
            bursar_http::Auth::Header(std::sync::Arc::new(move |method: &str, path: &str, body: &[u8]| {
                let payload = bursar_auth::munge::binding(method, path, body);
                match bursar_auth::munge::encode(&settings, &payload) {
                    Ok(cred) => Some(format!("{} {cred}", bursar_auth::munge::SCHEME)),
                    Err(e) => {
                        eprintln!("bursar: cannot make a MUNGE credential: {e}");
                        None
                    }
                }
            }))
        } else {
            bursar_http::Auth::None
        };
        Client::with_config(cfg).map_err(|e| CliError::Message(e.to_string()))
    }
}
