//! A real NATS cluster with JetStream (Debian's `nats-server` package, 2.9, `/usr/sbin/nats-server`)
//! on loopback ports it picks (clients, routes, and the HTTP monitoring port `/varz`, `/connz`):
//! one generated configuration file and one JetStream store folder per node in a temporary folder,
//! every node stopped by PID on `Drop` (pass, fail or panic).
//!
//! `$BURSAR_NATS_SERVER` names another binary. Tests call [`NatsCluster::binary`] first and skip,
//! saying so, when it is missing; `scripts/setup.sh` installs it.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process::{Server, TempDir, free_port};

/// A cluster of `nats-server` nodes with JetStream.
#[derive(Debug)]
pub struct NatsCluster {
    // Field order is drop order: the servers stop before their folder is removed.
    nodes: Vec<Node>,
    dir: TempDir,
}

#[derive(Debug)]
struct Node {
    server: Option<Server>,
    client: SocketAddr,
    /// The HTTP monitoring port (`/varz`, `/connz`, …).
    monitor: SocketAddr,
    conf: PathBuf,
    log: PathBuf,
}

impl NatsCluster {
    /// The binary: `$BURSAR_NATS_SERVER`, else `/usr/sbin/nats-server` if it exists.
    pub fn binary() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("BURSAR_NATS_SERVER") {
            return Some(PathBuf::from(p));
        }
        let p = PathBuf::from("/usr/sbin/nats-server");
        p.is_file().then_some(p)
    }

    /// Starts `n` nodes (1 to 5) clustered with each other, and waits until each accepts clients and
    /// JetStream has a metadata leader (with more than one node).
    pub fn start(n: usize) -> io::Result<NatsCluster> {
        Self::start_with_accounts(n, &[])
    }

    /// Like [`NatsCluster::start`], with one NATS account per name, each with JetStream and one user
    /// of the same name and password ([`NatsCluster::url_as`]). Accounts share nothing (subjects,
    /// streams, buckets), so one cluster serves several tests of a binary as if each had its own.
    /// With accounts, a client must log in as one of them.
    pub fn start_with_accounts(n: usize, accounts: &[&str]) -> io::Result<NatsCluster> {
        let n = n.clamp(1, 5);
        let bin = Self::binary().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no nats-server binary"))?;
        let dir = TempDir::new("nats")?;
        let mut last = None;
        for _ in 0..3 {
            match Self::try_start(&bin, &dir, n, accounts) {
                Ok(nodes) => return Ok(NatsCluster { nodes, dir }),
                Err(e) if e.to_string().contains("address already in use") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("nats-server did not start")))
    }

    fn try_start(bin: &Path, dir: &TempDir, n: usize, accounts: &[&str]) -> io::Result<Vec<Node>> {
        let clients: Vec<u16> = (0..n).map(|_| free_port()).collect::<io::Result<_>>()?;
        let routes: Vec<u16> = (0..n).map(|_| free_port()).collect::<io::Result<_>>()?;
        let monitors: Vec<u16> = (0..n).map(|_| free_port()).collect::<io::Result<_>>()?;
        let route_list: Vec<String> = routes.iter().map(|p| format!("nats-route://127.0.0.1:{p}")).collect();
        let accounts = if accounts.is_empty() {
            String::new()
        } else {
            let each: Vec<String> = accounts
                .iter()
                .map(|a| format!("  {a}: {{ jetstream: enabled, users: [ {{ user: {a}, password: {a} }} ] }}"))
                .collect();
            format!("accounts {{\n{}\n}}\n", each.join("\n"))
        };
        let mut nodes = Vec::new();
        for i in 0..n {
            let store = dir.path().join(format!("js{i}"));
            let cluster = if n > 1 {
                format!(
                    "cluster {{\n  name: bursar-test\n  listen: 127.0.0.1:{}\n  routes: [{}]\n}}\n",
                    routes[i],
                    route_list.join(", ")
                )
            } else {
                String::new()
            };
            let conf = format!(
                "server_name: n{i}\nlisten: 127.0.0.1:{}\nhttp: 127.0.0.1:{}\njetstream {{\n  store_dir: \"{}\"\n  max_memory_store: 64MB\n  max_file_store: 1GB\n}}\n{cluster}{accounts}",
                clients[i],
                monitors[i],
                store.display()
            );
            let path = dir.path().join(format!("n{i}.conf"));
            std::fs::write(&path, conf)?;
            let log = dir.path().join(format!("n{i}.log"));
            let server = Server::start(&format!("nats-server n{i}"), bin, &["-c".into(), path.clone().into()], &log)?;
            nodes.push(Node {
                server: Some(server),
                client: SocketAddr::from(([127, 0, 0, 1], clients[i])),
                monitor: SocketAddr::from(([127, 0, 0, 1], monitors[i])),
                conf: path,
                log,
            });
        }
        for node in &mut nodes {
            let addr = node.client;
            let log = node.log.clone();
            if let Some(s) = node.server.as_mut() {
                s.wait_until("accepting clients", Duration::from_secs(20), || {
                    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
                        && std::fs::read_to_string(&log).is_ok_and(|l| l.contains("Server is ready"))
                })?;
            }
        }
        if n > 1 {
            let logs: Vec<PathBuf> = nodes.iter().map(|n| n.log.clone()).collect();
            if let Some(s) = nodes[0].server.as_mut() {
                s.wait_until("electing a JetStream leader", Duration::from_secs(30), || {
                    logs.iter().any(|l| std::fs::read_to_string(l).is_ok_and(|t| t.contains("new metadata leader")))
                })?;
            }
        }
        Ok(nodes)
    }

    /// The client URL list, `nats://127.0.0.1:P1,nats://127.0.0.1:P2,…`.
    pub fn url(&self) -> String {
        let urls: Vec<String> = self.nodes.iter().map(|n| format!("nats://{}", n.client)).collect();
        urls.join(",")
    }

    /// The client URL list logged in as `account` (one of [`NatsCluster::start_with_accounts`]'s):
    /// `nats://account:account@127.0.0.1:P1,…`.
    pub fn url_as(&self, account: &str) -> String {
        let urls: Vec<String> = self.nodes.iter().map(|n| format!("nats://{account}:{account}@{}", n.client)).collect();
        urls.join(",")
    }

    /// The client address of node `i`.
    pub fn addr(&self, i: usize) -> Option<SocketAddr> {
        self.nodes.get(i).map(|n| n.client)
    }

    /// The HTTP monitoring address of node `i` (`/varz`, `/connz`: what a node and its clients sent
    /// and received).
    pub fn monitor(&self, i: usize) -> Option<SocketAddr> {
        self.nodes.get(i).map(|n| n.monitor)
    }

    /// The PIDs of the running nodes.
    pub fn pids(&mut self) -> Vec<u32> {
        self.nodes
            .iter_mut()
            .filter_map(|n| n.server.as_mut())
            .filter_map(|s| s.is_running().then(|| s.pid()))
            .collect()
    }

    /// Every node's log, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            out.push_str(&format!("--- nats-server n{i} ---\n"));
            out.push_str(&n.server.as_ref().map(|s| s.log_tail(30)).unwrap_or_default());
            out.push('\n');
        }
        out
    }

    /// The folder holding the configurations, logs and JetStream stores.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The configuration file of node `i`.
    pub fn conf(&self, i: usize) -> Option<&Path> {
        self.nodes.get(i).map(|n| n.conf.as_path())
    }

    /// Stops every node by PID (SIGTERM, then wait).
    pub fn stop(&mut self) -> io::Result<()> {
        for n in &mut self.nodes {
            if let Some(s) = n.server.as_mut() {
                s.stop()?;
            }
        }
        Ok(())
    }
}
