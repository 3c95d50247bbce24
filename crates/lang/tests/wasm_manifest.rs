//! The `kind = "wasm"` manifest: `[policy.limits]` with the instance `strategy`, and its errors.

use std::path::Path;

use bursar_lang::{Diagnostic, WasmStrategy, compile_str};

fn manifest(limits: &str) -> String {
    format!(
        r#"[[policy]]
id = "wasm/p"
description = "d"
kind = "wasm"
component = "p.wasm"

[policy.limits]
fuel = 1_000
{limits}
"#
    )
}

fn strategy(limits: &str) -> Result<Option<WasmStrategy>, Vec<Diagnostic>> {
    let compiled = compile_str("p.toml", &manifest(limits), Path::new("dir"))?;
    assert_eq!(compiled.wasm.len(), 1);
    assert_eq!(compiled.wasm[0].limits.fuel, Some(1_000));
    Ok(compiled.wasm[0].limits.strategy)
}

#[test]
fn strategy_is_optional_and_takes_reuse_or_fresh() {
    assert_eq!(strategy("").ok(), Some(None));
    assert_eq!(strategy(r#"strategy = "reuse""#).ok(), Some(Some(WasmStrategy::Reuse)));
    assert_eq!(strategy(r#"strategy = "fresh""#).ok(), Some(Some(WasmStrategy::Fresh)));
}

#[test]
fn an_unknown_strategy_is_an_error_at_its_value_with_a_suggestion() {
    let Err(errors) = strategy(r#"strategy = "frehs""#) else { unreachable!("`frehs` was accepted") };
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert_eq!((e.file.as_str(), e.line, e.column), ("p.toml", 9, 12), "{e}");
    assert_eq!(e.message, "`strategy` must be `reuse` or `fresh`, found `frehs`", "{e}");
    assert_eq!(e.help.as_deref(), Some("did you mean `fresh`?"), "{e}");
}

#[test]
fn strategy_must_be_a_string() {
    let Err(errors) = strategy("strategy = 1") else { unreachable!("a number was accepted") };
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0].line, errors[0].column), (9, 12), "{}", errors[0]);
}

#[test]
fn a_misspelt_strategy_key_is_an_unknown_field_with_a_suggestion() {
    let Err(errors) = strategy(r#"stratgy = "fresh""#) else { unreachable!("`stratgy` was accepted") };
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert_eq!((e.line, e.column), (9, 1), "{e}");
    assert!(e.message.starts_with("unknown field `stratgy` in `limits`"), "{e}");
    assert_eq!(e.help.as_deref(), Some("did you mean `strategy`?"), "{e}");
}
