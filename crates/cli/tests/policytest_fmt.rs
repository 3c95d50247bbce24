//! `bursar fmt` through the real binary: `--check` lists files that would change and exits 1, a run
//! rewrites them keeping every comment, and the repo's example policies are already formatted.

use std::path::Path;
use std::process::Output;

use crate::serve_support::bursar;
use bursar_testkit::TempDir;

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

const MESSY: &str = "# Team quotas.\n[[policy]]\nkind=\"quota\"   # family\n  id = \"quota/x\"\n\n\n\nperiod   = \"month\"\ngpu_hours = 100\n";

#[test]
fn check_lists_then_fmt_rewrites_keeping_comments() {
    let d = TempDir::new("policytest-fmt").unwrap();
    let file = d.join("q.toml");
    std::fs::write(&file, MESSY).unwrap();
    std::fs::write(d.join("q.test.toml"), "not = [toml").unwrap(); // test files are not policy files

    let check = bursar(&["fmt", "--check", d.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(1), "{}", text(&check));
    assert_eq!(String::from_utf8_lossy(&check.stdout), format!("{}\n", file.display()));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), MESSY, "--check must not write");

    let fmt = bursar(&["fmt", d.to_str().unwrap()]);
    assert!(fmt.status.success(), "{}", text(&fmt));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "# Team quotas.\n[[policy]]\nid = \"quota/x\"\nkind = \"quota\"   # family\n\nperiod = \"month\"\ngpu_hours = 100\n"
    );
    let again = bursar(&["fmt", "--check", file.to_str().unwrap()]);
    assert!(again.status.success(), "{}", text(&again));
}

#[test]
fn the_example_policies_are_formatted() {
    let policies = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
    let out = bursar(&["fmt", "--check", policies.to_str().unwrap()]);
    assert!(out.status.success(), "run `bursar fmt policies`:\n{}", text(&out));
}

#[test]
fn invalid_toml_is_reported_and_left_alone() {
    let d = TempDir::new("policytest-fmt-bad").unwrap();
    let file = d.join("bad.toml");
    std::fs::write(&file, "a = [1,\n").unwrap();
    let out = bursar(&["fmt", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("not valid TOML"), "{}", text(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "a = [1,\n");
}
