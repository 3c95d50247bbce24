//! `--help`, the man pages and the shell completions come from the same clap definitions: every
//! option a subcommand's `--help` lists is in its man page, and the completions know it too.

use crate::serve_support::bursar;

/// The long options a `--help` text lists (the lines of its options section).
fn options(help: &str) -> Vec<String> {
    let mut out: Vec<String> = help
        .lines()
        .map(str::trim_start)
        .filter_map(|l| l.strip_prefix("--").or_else(|| l.split_once(", --").map(|(_, rest)| rest)))
        .filter_map(|l| l.split(|c: char| !c.is_ascii_alphanumeric() && c != '-').next())
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    out.sort();
    out.dedup();
    out
}

#[test]
fn every_option_of_every_help_is_in_its_man_page_and_the_completions() {
    let dir = std::env::temp_dir().join(format!("bursar-man-{}", std::process::id()));
    let out = bursar(&["man", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let bash = String::from_utf8(bursar(&["completions", "bash"]).stdout).unwrap();
    for sub in ["serve", "eval", "check", "report", "replay", "approve", "auth token", "audit verify", "slurm watch"] {
        let words: Vec<&str> = sub.split(' ').collect();
        let mut args = words.clone();
        args.push("--help");
        let help = String::from_utf8(bursar(&args).stdout).unwrap();
        let page = std::fs::read_to_string(dir.join(format!("bursar-{}.1", words.join("-")))).unwrap();
        let page = page.replace("\\-", "-");
        let opts = options(&help);
        assert!(!opts.is_empty(), "{sub}: no option in its help");
        for o in opts {
            assert!(page.contains(&format!("--{o}")), "bursar {sub}: `--{o}` is in --help but not in the man page");
            assert!(bash.contains(&format!("--{o}")), "bursar {sub}: `--{o}` is not completed");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let v = String::from_utf8(bursar(&["--version"]).stdout).unwrap();
    assert!(v.starts_with("bursar ") && v.contains("(commit ") && v.contains("wasm"), "{v}");
}
