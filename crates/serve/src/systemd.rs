//! Telling systemd how serve is doing (`Type=notify` units): `READY=1` once the policies compiled,
//! the audit log is open and the engine recovered (before any request is taken), `RELOADING=1` …
//! `READY=1` around a reload, `STOPPING=1` when it drains. The protocol is one datagram to the
//! socket named by `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket); without that
//! variable (not started by systemd) nothing is sent. No library: the protocol is three lines.

/// Sends `state` (e.g. `READY=1`) to systemd, if serve runs under a `Type=notify` unit. Failures are
/// logged, never fatal: a unit that waits for readiness then times out and says so.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let socket = socket.to_string_lossy().into_owned();
    if let Err(e) = send(&socket, state) {
        tracing::warn!(socket, state, error = %e, "cannot notify systemd");
    }
}

fn send(socket: &str, state: &str) -> std::io::Result<()> {
    let sock = std::os::unix::net::UnixDatagram::unbound()?;
    match socket.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        }
        None => {
            sock.send_to(state.as_bytes(), socket)?;
        }
    }
    Ok(())
}

/// `RELOADING=1` with the monotonic clock systemd asks for (`MONOTONIC_USEC`).
pub fn reloading() {
    // CLOCK_MONOTONIC is what systemd reads; /proc/uptime is its seconds since boot, close enough
    // for the "reload started at" systemd records (and needs no unsafe clock_gettime).
    let usec = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|t| t.split_whitespace().next().and_then(|s| s.parse::<f64>().ok()))
        .map_or(0, |s| (s * 1e6) as u64);
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datagram_reaches_the_socket() {
        let dir = std::env::temp_dir().join(format!("bursar-sdnotify-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
