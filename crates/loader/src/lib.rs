//! Loading a policy directory into one [`PolicySet`]: find the files, compile each, collect every error
//! of every file, hand `kind = "wasm"` declarations to a [`ComponentHost`], and fingerprint the set.
//!
//! Which files are policy files: every `*.toml` under the directory, recursively, except `Cargo.toml`,
//! `rust-toolchain.toml`, test files (`*.test.toml`, see `docs/testing-policies.md`) and anything under a
//! hidden directory, `target/`, `src/`, `tests/` or `node_modules/` (a JavaScript policy's build tools). Files are read in sorted path order, so the set (and
//! its digest) does not depend on the file system's listing order.
//!
//! The digest of a set is SHA-256 over the sorted list of `path NUL sha256(content) LF` of its files,
//! followed by the same line for each WebAssembly component its policies run (the bytes the host
//! compiles, read once here): it is what the audit log records as the policy-set version of every
//! decision, so replacing a guest's `.wasm` is a new set, like editing a policy file. (Before, a
//! guest's bytes were not in it: a reload after replacing one answered "unchanged", and after a
//! restart the new guest decided under the old digest.)

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bursar_engine::{Guest, Policy, PolicySet, SourceFile};
use bursar_lang::{Diagnostic, WasmDecl};
use sha2::{Digest, Sha256};

/// Instantiates WebAssembly policies declared in manifests.
pub trait ComponentHost {
    /// Compiles (or fetches from a cache) and prepares the component of `decl`.
    fn instantiate(&self, decl: &WasmDecl) -> Result<Arc<dyn Policy>, Diagnostic>;

    /// Like [`ComponentHost::instantiate`] with the component's bytes, read by the loader (which puts
    /// their digest in the set's): the code that runs is the code the digest names.
    fn instantiate_bytes(&self, decl: &WasmDecl, bytes: &[u8]) -> Result<Arc<dyn Policy>, Diagnostic> {
        let _ = bytes;
        self.instantiate(decl)
    }
}

/// A host for builds without WebAssembly support: every `kind = "wasm"` policy is an error.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoComponents;

impl ComponentHost for NoComponents {
    fn instantiate(&self, decl: &WasmDecl) -> Result<Arc<dyn Policy>, Diagnostic> {
        Err(decl.component_at.clone().with_help("this build of bursar was made without WebAssembly support"))
    }
}

/// Hex SHA-256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in d.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

fn skip_dir(name: &str) -> bool {
    name.starts_with('.') || matches!(name, "target" | "src" | "tests" | "node_modules")
}

fn is_policy_file(name: &str) -> bool {
    name.ends_with(".toml") && !name.ends_with(".test.toml") && !matches!(name, "Cargo.toml" | "rust-toolchain.toml")
}

/// The policy files under `dir`, sorted. A file given directly is returned as is.
pub fn policy_files(dir: &Path) -> Result<Vec<PathBuf>, Diagnostic> {
    let mut out = Vec::new();
    if dir.is_file() {
        out.push(dir.to_path_buf());
        return Ok(out);
    }
    fn walk(d: &Path, out: &mut Vec<PathBuf>) -> Result<(), Diagnostic> {
        let entries = std::fs::read_dir(d)
            .map_err(|e| Diagnostic::file(&d.display().to_string(), format!("cannot read directory: {e}")))?;
        for entry in entries {
            let entry = entry.map_err(|e| Diagnostic::file(&d.display().to_string(), format!("cannot list: {e}")))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let ft = entry.file_type().map_err(|e| Diagnostic::file(&path.display().to_string(), e.to_string()))?;
            if ft.is_dir() {
                if !skip_dir(&name) {
                    walk(&path, out)?;
                }
            } else if is_policy_file(&name) {
                out.push(path);
            }
        }
        Ok(())
    }
    walk(dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// Loads every policy file under `dir` into one set, or returns every error found. A directory that
/// holds no policy is an error: an empty set allows every job, which is never what a reload that
/// deleted the files, or a mistyped path, meant (see [`load_dir_allowing_empty`]).
pub fn load_dir(dir: &Path, host: &dyn ComponentHost) -> Result<PolicySet, Vec<Diagnostic>> {
    let set = load_dir_allowing_empty(dir, host)?;
    if set.is_empty() {
        return Err(vec![
            Diagnostic::file(&dir.display().to_string(), "no policy found: an empty set would allow every job")
                .with_help(
                    "add policy files (`*.toml`), or pass `--allow-empty` if allowing every job is what you mean",
                ),
        ]);
    }
    Ok(set)
}

/// Like [`load_dir`], but an empty set is not an error (`--allow-empty`).
pub fn load_dir_allowing_empty(dir: &Path, host: &dyn ComponentHost) -> Result<PolicySet, Vec<Diagnostic>> {
    let files = policy_files(dir).map_err(|d| vec![d])?;
    let mut errors = Vec::new();
    let mut policies: Vec<Arc<dyn Policy>> = Vec::new();
    let mut tags = Vec::new();
    let mut sources = Vec::new();
    let mut guests: Vec<Guest> = Vec::new();
    for path in &files {
        let name = path.display().to_string();
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                errors.push(Diagnostic::file(&name, format!("cannot read file: {e}")));
                continue;
            }
        };
        sources.push(SourceFile { path: name.clone(), digest: sha256_hex(&bytes) });
        let Ok(text) = String::from_utf8(bytes) else {
            errors.push(Diagnostic::file(&name, "file is not UTF-8 text"));
            continue;
        };
        let base = path.parent().unwrap_or(Path::new("."));
        match bursar_lang::compile_str(&name, &text, base) {
            Ok(compiled) => {
                policies.extend(compiled.policies);
                tags.extend(compiled.tags);
                for decl in &compiled.wasm {
                    let shown = decl.component.display().to_string();
                    let bytes = match std::fs::read(&decl.component) {
                        Ok(b) => b,
                        Err(e) => {
                            let mut d = decl.component_at.clone();
                            d.message = format!("cannot read component `{shown}`: {e}");
                            errors.push(d.with_help(
                                "build the example policies with `scripts/build-wasm.sh`, or fix the `component` path",
                            ));
                            continue;
                        }
                    };
                    guests.push(Guest { policy: decl.meta.id.to_string(), path: shown, digest: sha256_hex(&bytes) });
                    match host.instantiate_bytes(decl, &bytes) {
                        Ok(p) => policies.push(p),
                        Err(d) => errors.push(d),
                    }
                }
            }
            Err(mut ds) => errors.append(&mut ds),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // The guests' components are files of the set too (once each, however many policies run one).
    for g in &guests {
        if !sources.iter().any(|s| s.path == g.path) {
            sources.push(SourceFile { path: g.path.clone(), digest: g.digest.clone() });
        }
    }
    let mut listing = String::new();
    for s in &sources {
        listing.push_str(&s.path);
        listing.push('\0');
        listing.push_str(&s.digest);
        listing.push('\n');
    }
    let digest = sha256_hex(listing.as_bytes());
    let set = PolicySet::new(policies, sources, digest)
        .map(|s| s.with_guests(guests))
        .and_then(|s| s.with_tags(tags))
        .map_err(|e| vec![Diagnostic::file(&dir.display().to_string(), e.to_string())])?;
    let untrusted = untrusted_budgets(&set);
    if untrusted.is_empty() { Ok(set) } else { Err(untrusted) }
}

/// A diagnostic for every quota that counts by a tag nothing says the source of: the submitter
/// would choose whose budget their job spends (`--comment team=search` on Slurm).
fn untrusted_budgets(set: &PolicySet) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for p in &set.limits().policies {
        for q in &p.limits.quotas {
            let bursar_engine::QuotaScope::Tag(key) = &q.scope else { continue };
            if set.tag_sources().iter().any(|t| &t.key == key) || out.iter().any(|(k, _): &(String, _)| k == key) {
                continue;
            }
            let location = set.get(&p.policy).map(|x| x.meta().source.clone()).unwrap_or_default();
            out.push((key.clone(), at_location(&location, format!(
                "policy `{}` counts GPU-hours by tag `{key}`, but no `[[tag]]` table says where `{key}` comes from, so the submitter would choose whose budget a job spends",
                p.policy
            )).with_help(format!(
                "add a `[[tag]]` table: `key = \"{key}\"`, `from = \"project\"` and a `map` from project to value (the scheduler's account mapping), or `from = \"submitter\"` if the scheduler itself sets `{key}` (docs/security.md)"
            ))));
        }
    }
    out.into_iter().map(|(_, d)| d).collect()
}

/// A diagnostic at a policy's `file:line:col`.
fn at_location(location: &str, message: String) -> Diagnostic {
    let mut parts = location.rsplitn(3, ':');
    let (col, line, file) = (parts.next(), parts.next(), parts.next());
    match (file, line.and_then(|l| l.parse().ok()), col.and_then(|c| c.parse().ok())) {
        (Some(file), Some(line), Some(column)) => {
            let mut d = Diagnostic::file(file, message);
            d.line = line;
            d.column = column;
            d
        }
        _ => Diagnostic::file(location, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_files_skip_build_and_tool_directories() {
        let root = std::env::temp_dir().join(format!("bursar-loader-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for dir in ["team", "node_modules/pkg", "target/x", ".git", "src", "tests"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for file in [
            "quota.toml",
            "quota.test.toml",
            "Cargo.toml",
            "team/fit.toml",
            "node_modules/pkg/config.toml",
            "target/x/a.toml",
            ".git/b.toml",
            "src/c.toml",
            "tests/d.toml",
        ] {
            std::fs::write(root.join(file), "").unwrap();
        }
        let found: Vec<String> = policy_files(&root)
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap().to_string_lossy().into_owned())
            .collect();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, ["quota.toml", "team/fit.toml"]);
    }
}
