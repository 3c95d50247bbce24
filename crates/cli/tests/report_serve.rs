//! `GET /v1/report` and `GET /report` from a running `bursar serve`: the same JSON as `bursar report`
//! for the current month, and the self-contained HTML page, over a real socket.

mod serve_support;

use serve_support::*;

#[test]
fn serve_answers_the_report_as_json_and_html() {
    let s = Scratch::new("serve-report");
    s.write_policy(
        "r.toml",
        "[[policy]]\nid = \"reclaim/idle\"\ndescription = \"Idle GPUs go back.\"\nkind = \"reclaim\"\n[policy.idle]\nbelow = 0.05\nwindow = \"2h\"\ngrace = \"30m\"\n",
    );
    let server = Server::start(&s, &[]);
    let a = server.post("/v1/admit", &submit("e1", "j1", "nlp", 2, 1.0));
    assert_eq!(a.status, 200, "{}", a.text());
    for (id, kind, extra) in [
        ("e2", "job.started", ""),
        ("e3", "job.sample", r#","gpu_util":0.8"#),
        ("e4", "job.finished", r#","status":"succeeded""#),
    ] {
        let r = server.post("/v1/events", &job_event(id, kind, "j1", extra));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let r = server.get_json("/v1/report");
    let groups = r["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{r}");
    assert_eq!(groups[0]["key"], "nlp");
    let split = &r["total"]["exact_gpu_ms"];
    let v = |k: &str| split[k].as_i64().unwrap();
    assert_eq!(v("productive") + v("idle") + v("failure") + v("held"), v("nominal"));
    assert_eq!(r["by"], "project");
    // The current period is the month of the newest event.
    assert_eq!(r["period"].as_str().unwrap(), &now()[..7]);

    let by_user = server.get_json("/v1/report?by=user&period=all");
    assert_eq!(by_user["groups"][0]["key"], "alice");
    let bad = server.get("/v1/report?by=team").unwrap();
    assert_eq!(bad.status, 400, "{}", bad.text());
    assert!(bad.text().contains("tag:KEY"));

    let html = server.get("/report").unwrap();
    assert_eq!(html.status, 200);
    assert!(html.headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/html")));
    let text = html.text();
    assert!(text.starts_with("<!DOCTYPE html>") && text.contains("data-chart=\"split\"") && !text.contains("<script"));
}
