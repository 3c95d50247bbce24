//! How a router's routes are wrapped, outermost first: the security headers, the body limit and
//! [`crate::body::BodyContext`] ([`outer`]); authentication from the headers alone, then the
//! cross-site check ([`guarded`]); then, per route, its power and its body ([`needing`],
//! [`with_body`]). Every router of every door is built from these, so a route is guarded the same
//! way wherever it is mounted.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use bursar_auth::Power;

/// Routes whose body is read only once the caller is authenticated and may use them
/// ([`crate::body::read_body`]).
pub fn with_body<S: Clone + Send + Sync + 'static>(routes: Router<S>) -> Router<S> {
    routes.route_layer(middleware::from_fn(crate::body::read_body))
}

/// Routes that need `power`: the power is checked before the body is read.
pub fn needing<S: Clone + Send + Sync + 'static>(power: Power, routes: Router<S>) -> Router<S> {
    with_body(routes).route_layer(middleware::from_fn(move |req, next| crate::auth::require(power, req, next)))
}

/// The layers every router's API takes, outermost first: authentication (headers only), the
/// cross-site check (so a request without a credential is told 401, and one with a credential a
/// browser sends on its own is refused before anything else happens).
pub fn guarded<S: Clone + Send + Sync + 'static>(
    api: Router<S>,
    auth: crate::auth::AuthState,
    csrf: crate::csrf::Csrf,
) -> Router<S> {
    api.layer(middleware::from_fn_with_state(csrf, crate::csrf::guard))
        .layer(middleware::from_fn_with_state(auth, crate::auth::authenticate))
}

/// The layers around a whole router, outermost first: the security headers, the body limit of the
/// extractor, and the [`crate::body::BodyContext`] (with the early 413).
pub fn outer<S: Clone + Send + Sync + 'static>(router: Router<S>, ctx: crate::body::BodyContext) -> Router<S> {
    let max_body = ctx.limits.max_body;
    router
        .layer(middleware::from_fn_with_state(ctx, crate::body::context))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn(crate::auth::security_headers))
}
