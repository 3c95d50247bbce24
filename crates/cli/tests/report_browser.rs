//! The HTML report in headless Chromium: runs `tests/browser/report_html.sh` against this build's
//! `bursar`. The script skips (exit 0, with a message) when Chromium is not installed, and fails
//! instead under CI (`CI=true`, the switch of `bursar_testkit::need`); see the script for what it
//! checks.

use std::path::Path;
use std::process::Command;

#[test]
fn html_report_renders_in_headless_chromium() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/browser/report_html.sh");
    let out = Command::new("bash").arg(&script).arg(env!("CARGO_BIN_EXE_bursar")).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "{} failed:\n{stdout}\n{stderr}", script.display());
    assert!(stdout.contains("ok: report rendered") || stdout.contains("SKIP: chromium is not installed"), "{stdout}");
}
