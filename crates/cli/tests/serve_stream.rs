//! `GET /v1/decisions`: a scheduler that disconnects and reconnects with its cursor receives exactly
//! the decisions it missed (from the audit log), then live ones, in both JSON Lines and SSE.

use crate::serve_support::*;

#[test]
fn decision_stream_resumes_from_a_cursor_after_a_disconnect() {
    let s = Scratch::new("serve-stream");
    let server = Server::start(&s, &[]);

    // A scheduler follows the stream live.
    let mut live = server.conn().stream("/v1/decisions?after=0", &[]).unwrap();
    assert_eq!(live.status, 200);
    let mut seen = Vec::new();
    for i in 1..=3 {
        let d = server.post("/v1/admit", &submit(&format!("e{i}"), &format!("j{i}"), "nlp", 1, 1.0)).json().unwrap();
        let got = next_json(&mut live);
        assert_eq!(got["seq"], d["seq"], "live decision {i}");
        assert_eq!(got["decision_id"], format!("e{i}/0"));
        seen.push(got["seq"].as_u64().unwrap());
    }
    // It disconnects; decisions keep coming while it is away.
    drop(live);
    let mut missed = Vec::new();
    for i in 4..=7 {
        let d = server.post("/v1/admit", &submit(&format!("e{i}"), &format!("j{i}"), "nlp", 1, 1.0)).json().unwrap();
        missed.push(d["seq"].as_u64().unwrap());
    }
    // It reconnects with its cursor: the missed decisions first (from the log), exactly once, in order,
    // then new ones live.
    let cursor = *seen.last().unwrap();
    let mut back = server.conn().stream(&format!("/v1/decisions?after={cursor}"), &[]).unwrap();
    let caught: Vec<u64> = (0..missed.len()).map(|_| next_json(&mut back)["seq"].as_u64().unwrap()).collect();
    assert_eq!(caught, missed);
    let d = server.post("/v1/admit", &submit("e8", "j8", "nlp", 1, 1.0)).json().unwrap();
    let got = next_json(&mut back);
    assert_eq!(got["seq"], d["seq"]);
    assert_eq!(got["event_id"], "e8");

    // Server-Sent Events resume from Last-Event-ID the same way.
    let mut sse = server
        .conn()
        .stream("/v1/decisions", &[("accept", "text/event-stream"), ("last-event-id", &missed[1].to_string())])
        .unwrap();
    assert!(sse.headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("text/event-stream")));
    let mut ids = Vec::new();
    while ids.len() < 3 {
        let line = sse.next_line().unwrap().expect("sse ended");
        if let Some(id) = line.strip_prefix("id: ") {
            ids.push(id.parse::<u64>().unwrap());
        }
    }
    assert_eq!(ids, vec![missed[2], missed[3], d["seq"].as_u64().unwrap()]);

    // A bad cursor is a 400.
    assert_eq!(server.get("/v1/decisions?after=minus-one").unwrap().status, 400);

    // SIGTERM with streams open: they end, the server drains and exits 0.
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    assert!(log.contains("stopped cleanly"), "{log}");
    let mut rest = 0;
    while back.next_line().unwrap().is_some() {
        rest += 1;
    }
    assert!(rest <= 1, "only keep-alives may follow: {rest} lines");
}
