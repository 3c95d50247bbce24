//! Fuzz what `bursar serve` reads from a request's headers before anything else (issue 46): the
//! `Authorization` scheme and credential, Slurm's and a proxy's user headers (every credential is
//! checked, any failing one refuses the request), and the cross-site rule's `Origin`,
//! `Sec-Fetch-Site` and `Content-Type`. Any bytes must give an answer (a caller, a 401, a 403 or a
//! 415), never a panic; a credential no configured principal lists never names a declared principal.

#![no_main]

use bursar_auth::{AuthSettings, Authenticator, PrincipalDecl, Presented, ProxySettings, Role, TokenDecl, TokenHash};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(6, '\n');
    let (authorization, slurm, proxy, origin, fetch, ctype) =
        (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next());
    let settings = AuthSettings {
        principals: vec![PrincipalDecl {
            name: "ops".into(),
            roles: [Role::Admin].into_iter().collect(),
            tokens: vec![TokenDecl { hash: TokenHash::of("bursar_fuzz-token"), expires: None }],
            ..PrincipalDecl::default()
        }],
        people: [Role::User].into_iter().collect(),
        proxy: Some(ProxySettings { addresses: vec!["127.0.0.1".parse().unwrap()], header: "x-user".into() }),
        ..AuthSettings::default()
    };
    let Ok(auth) = Authenticator::new(&settings) else { return };
    let presented = Presented {
        authorization,
        slurm_token: slurm.filter(|s| !s.is_empty()),
        proxy_user: proxy.filter(|s| !s.is_empty()),
        peer: Some("127.0.0.1".parse().unwrap()),
        request: Some("bursar-request-v1 POST /v1/events".into()),
        ..Presented::default()
    };
    if let Ok(caller) = auth.authenticate(&presented, bursar_model::Timestamp(0)) {
        let by_token = authorization.is_some_and(|a| a.trim().ends_with("bursar_fuzz-token"));
        assert!(!caller.principal.declared || by_token, "a declared principal without its token");
    }
    let mut h = axum::http::HeaderMap::new();
    for (k, v) in [("origin", origin), ("sec-fetch-site", fetch), ("content-type", ctype)] {
        if let Some(v) = v.and_then(|v| axum::http::HeaderValue::from_str(v).ok()) {
            h.insert(k, v);
        }
    }
    let csrf = bursar_serve::csrf::Csrf::api(std::sync::Arc::from(Vec::new()), std::sync::Arc::default());
    let _ = bursar_serve::csrf::check(&csrf, &axum::http::Method::POST, &h);
});
