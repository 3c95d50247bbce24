//! Broken policy files and the whole message a user sees: `tests/check/<name>/` holds `policies/` and
//! `expected.stderr`; each becomes a test that runs the real `bursar check` and requires exit status 1
//! and exactly that stderr (file:line:col, source line, underline, help). `BURSAR_BLESS=1` rewrites
//! the expectations. A case directory whose name starts with `ok-` must pass with exit 0.

use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::{Arguments, Failed, Trial};

fn run_case(case: &Path, name: &str) -> Result<(), Failed> {
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .current_dir(case)
        .arg("check")
        .arg("policies")
        .output()
        .map_err(|e| format!("cannot run bursar: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let want_code = if name.starts_with("ok-") { 0 } else { 1 };
    if out.status.code() != Some(want_code) {
        return Err(format!("exit status {:?}, expected {want_code}; stderr:\n{stderr}", out.status.code()).into());
    }
    let path = case.join("expected.stderr");
    if std::env::var_os("BURSAR_BLESS").is_some() {
        std::fs::write(&path, &stderr).map_err(|e| e.to_string())?;
    }
    let expected = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if stderr != expected {
        return Err(format!("stderr differs.\n--- expected\n{expected}\n--- actual\n{stderr}").into());
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/check");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    cases.sort();
    let trials = cases
        .into_iter()
        .map(|case| {
            let name = case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let n2 = name.clone();
            Trial::test(name, move || run_case(&case, &n2))
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
