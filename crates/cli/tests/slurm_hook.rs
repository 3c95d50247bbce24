//! The Slurm admission hook (`integrations/slurm/job_submit.lua`) outside slurmctld: runs
//! `integrations/slurm/test/hook_test.lua` under Debian's `lua5.1` (the Lua that Debian's Slurm links),
//! with a fake `curl` answering what `bursar serve` answers. The end-to-end test against a real Slurm
//! (`integrations/slurm/e2e.sh`) runs the same hook inside slurmctld.
//!
//! `scripts/setup.sh` installs `lua5.1`; without it the test is skipped, unless `CI` is set.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_hook_reads_serves_answer_by_field() {
    let Ok(lua) = which("lua5.1") else {
        bursar_testkit::need::missing("lua5.1", "scripts/setup.sh");
        return;
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("bursar-hook-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(lua)
        .arg(root.join("integrations/slurm/test/hook_test.lua"))
        .arg(&dir)
        .env("BURSAR_SLURM_CONFIG", dir.join("bursar.lua"))
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all cases passed"), "{text}");
}

fn which(name: &str) -> Result<PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file()).ok_or(())
}

/// Issue 55: the hook asks over serve's event socket, on one connection it keeps, with no process
/// started per submission; when serve restarts, the next submission reconnects on its own. Runs
/// `integrations/slurm/test/socket_test.lua` under `lua5.1` with Debian's lua-socket against a real
/// `bursar serve --socket`.
#[test]
fn the_hook_asks_over_the_event_socket_and_reconnects() {
    use std::io::BufRead;
    let Ok(lua) = which("lua5.1") else {
        bursar_testkit::need::missing("lua5.1", "scripts/setup.sh");
        return;
    };
    let has_socket = Command::new(&lua).args(["-e", "require('socket.unix')"]).status().is_ok_and(|s| s.success());
    if !has_socket {
        bursar_testkit::need::missing("Lua 5.1's socket.unix (lua-socket)", "scripts/setup.sh");
        return;
    }
    let s = crate::serve_support::Scratch::new("hook-socket");
    s.write_policy(
        "size.toml",
        "[[policy]]\nid = \"rules/size\"\ndescription = \"At most 8 GPUs a job.\"\nkind = \"rule\"\non = [\"job.submitted\"]\nwhen = \"job.gpus > 8\"\ndecision = \"deny\"\nreason = \"at most 8 GPUs a job\"\n",
    );
    let sock = s.0.join("events.sock");
    let flags = ["--socket", sock.to_str().unwrap()];
    let mut server = Some(crate::serve_support::Server::start(&s, &flags));
    let url = server.as_ref().map(|x| x.url()).unwrap_or_default();
    let cfg = s.0.join("bursar.lua");
    std::fs::write(
        &cfg,
        format!("return {{ socket = {:?}, url = \"{url}/v1/admit\", cluster = \"t\" }}\n", sock.to_str().unwrap()),
    )
    .unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut child = Command::new(lua)
        .arg(root.join("integrations/slurm/test/socket_test.lua"))
        .arg(&s.0)
        .env("BURSAR_SLURM_CONFIG", &cfg)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            break;
        }
        said.push_str(&line);
        if line.trim() == "ready" {
            // serve restarts on the same socket; the hook's kept connection is now a closed one.
            if let Some(old) = server.take() {
                let _ = old.terminate();
            }
            let _server = crate::serve_support::Server::start(&s, &flags);
            std::fs::write(s.0.join("restarted"), "").unwrap();
            let mut rest = String::new();
            std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
            said.push_str(&rest);
            break;
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success() && said.contains("all cases passed"), "{said}");
}
