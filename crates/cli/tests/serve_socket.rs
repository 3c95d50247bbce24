//! Events over the Unix socket: one answer line per input line, in order, malformed lines answered
//! with their line number and reason without stopping the stream, duplicates recognised.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use crate::serve_support::*;

#[test]
fn socket_answers_each_line_in_order() {
    let s = Scratch::new("serve-socket");
    let sock = s.0.join("events.sock");
    let server = Server::start(&s, &["--socket", sock.to_str().unwrap()]);
    let mut stream = UnixStream::connect(&sock).unwrap();
    let body = format!(
        "{}\nnot json\n\n{}\n{}\n",
        submit("e1", "j1", "nlp", 2, 1.0),
        job_event("e2", "job.started", "j1", ""),
        submit("e1", "j1", "nlp", 2, 1.0),
    );
    stream.write_all(body.as_bytes()).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let answers: Vec<serde_json::Value> =
        BufReader::new(stream).lines().map(|l| serde_json::from_str(&l.unwrap()).unwrap()).collect();
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert_eq!(answers[0]["line"], 1);
    assert_eq!(answers[0]["accepted"], true);
    assert_eq!(answers[0]["decisions"][0]["decision"], "allow");
    assert_eq!(answers[1]["line"], 2);
    assert!(answers[1]["error"].as_str().is_some_and(|e| !e.is_empty()), "{answers:?}");
    assert_eq!(answers[2]["line"], 4);
    assert_eq!(answers[2]["accepted"], true);
    assert_eq!(answers[3]["line"], 5);
    assert_eq!(answers[3]["duplicate"], true);
    assert_eq!(server.get_json("/v1/jobs/j1")["phase"], "running");
    // The socket's decisions are in the log and on the stream like any other.
    assert_eq!(server.decisions(0).len(), 1);
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    assert!(!sock.exists(), "the socket file is removed on exit");
}
