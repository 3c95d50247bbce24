//! `GET /v1/report` and `GET /report` from a running `bursar serve`: the same JSON as `bursar report`
//! for the current month, and the self-contained HTML page, over a real socket.

use crate::serve_support::*;

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
    assert_eq!(v("productive") + v("idle") + v("failure") + v("held") + v("unmeasured"), v("nominal"));
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

/// The report `serve` answers takes its idle threshold and budgets from the policy set in force —
/// also after a reload — not from nothing (it used to draw every project "(no monthly budget)" at
/// the default 5 % threshold, whatever the policies said).
#[test]
fn serve_reports_with_the_budgets_and_threshold_of_the_set_in_force() {
    let s = Scratch::new("serve-report-budget");
    let quota = |nlp: u32| {
        format!(
            "[[policy]]\nid = \"quota/month\"\ndescription = \"Monthly budgets.\"\nkind = \"quota\"\ngpu_hours = 1_000\nlimits = {{ nlp = {nlp} }}\n"
        )
    };
    s.write_policy("q.toml", &quota(300));
    s.write_policy(
        "r.toml",
        "[[policy]]\nid = \"reclaim/idle\"\ndescription = \"Idle GPUs go back.\"\nkind = \"reclaim\"\n[policy.idle]\nbelow = 0.08\nwindow = \"2h\"\ngrace = \"30m\"\n",
    );
    let server = Server::start(&s, &[]);
    for (project, job) in [("nlp", "j1"), ("cv", "j2")] {
        let a = server.post("/v1/admit", &submit(&format!("s-{job}"), job, project, 2, 1.0));
        assert_eq!(a.status, 200, "{}", a.text());
        let r = server.post("/v1/events", &job_event(&format!("t-{job}"), "job.started", job, ""));
        assert_eq!(r.status, 200, "{}", r.text());
        let r =
            server.post("/v1/events", &job_event(&format!("f-{job}"), "job.finished", job, r#","status":"succeeded""#));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let budget = |r: &serde_json::Value, p: &str| {
        r["burndown"].as_array().unwrap().iter().find(|b| b["project"] == p).map(|b| b["budget_gpu_hours"].clone())
    };
    let r = server.get_json("/v1/report");
    assert_eq!(r["idle_threshold"], 0.08, "{r}");
    assert_eq!(budget(&r, "nlp"), Some(serde_json::json!(300.0)), "{r}");
    assert_eq!(budget(&r, "cv"), Some(serde_json::json!(1000.0)), "{r}");
    let html = server.get("/report").unwrap().text();
    assert!(html.contains("nlp: budget left of 300 GPU-h") && !html.contains("no monthly budget"), "{html}");

    // A reload changes the set in force, and with it the next report's budgets.
    s.write_policy("q.toml", &quota(600));
    let reload = server.post("/v1/reload", "");
    assert_eq!(reload.status, 200, "{}", reload.text());
    let r = server.get_json("/v1/report");
    assert_eq!(budget(&r, "nlp"), Some(serde_json::json!(600.0)), "{r}");
}

/// `GET /v1/report?by=config&cost_per_unit=true` with `serve --prices`: the same cost-per-unit
/// section as `bursar report --cost-per-unit` (hand-computed in `report_cost.rs`), on the trials of
/// `tests/cases/cost-per-unit-advice` posted to the server.
#[test]
fn serve_answers_the_cost_per_unit_with_its_price_file() {
    let s = Scratch::new("serve-report-cost");
    let case = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases/cost-per-unit-advice");
    s.write_policy("advice.toml", &std::fs::read_to_string(case.join("policies/advice.toml")).unwrap());
    let prices = s.0.join("prices.toml");
    std::fs::write(
        &prices,
        "currency = \"CNY\"\n[on_demand]\nper_gpu_hour = 15.0\n[gpu_types]\nA100 = { on_demand = 12.0 }\nH100 = { on_demand = 30.0 }\n",
    )
    .unwrap();
    let server = Server::start(&s, &["--prices", &prices.display().to_string()]);
    let events = std::fs::read_to_string(case.join("events.jsonl")).unwrap();
    let r = server.post("/v1/events", &events);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = server.get_json("/v1/report?by=config&period=all&cost_per_unit=true");
    assert_eq!(r["by"], "config");
    let cfg = &r["cost_per_unit"]["configs"][0];
    let row = |t: &str, g: u64| {
        cfg["rows"].as_array().unwrap().iter().find(|x| x["gpu_type"] == t && x["gpus"] == g).unwrap().clone()
    };
    // A100 x8: 12 / (800 × 3600) × 1000 = 0.0041667 per 1k tokens, the cheaper at 8 GPUs.
    let a8 = row("A100", 8);
    let od = a8["cost"][0]["per_1k"].as_f64().unwrap();
    assert!((od - 12.0 / 2880.0).abs() < 1e-12, "{a8}");
    assert_eq!((a8["rank"].as_u64(), row("H100", 8)["rank"].as_u64()), (Some(1), Some(2)));
    assert!((row("H100", 8)["scaling_efficiency"].as_f64().unwrap() - 0.6).abs() < 1e-12);
    // The billing comparison comes with the price file too; without the parameter, no section.
    assert!(r["billing"].is_object());
    assert!(server.get_json("/v1/report?period=all").get("cost_per_unit").is_none());
    let bad = server.get("/v1/report?cost_per_unit=maybe").unwrap();
    assert_eq!(bad.status, 400, "{}", bad.text());
    let html = server.get("/report?period=all&cost_per_unit=1").unwrap().text();
    assert!(html.contains("<h2>Cost per unit of work</h2>"));
}
