//! Talking to `bursar serve` through the typed client (`bursar-client`): posting events and action
//! records (`POST /v1/events`), asking for admissions (`POST /v1/admit`, for the agents that admit:
//! Kubernetes' admission check and webhook) and following decisions (`GET /v1/decisions?after=SEQ`). An agent
//! authenticates as its own principal (a `producer` that also holds `read` to follow decisions).

use std::net::SocketAddr;

use bursar_client::{Client, ClientError, DecisionStream};
use bursar_model::Input;
use bursar_model::api::Sequenced;

use crate::{Error, Result};

/// Where serve listens, and its token.
#[derive(Debug, Clone)]
pub struct Server {
    /// The client of serve: its URL (http or https, with a CA file), its credential.
    pub client: Client,
}

/// serve's answer to `POST /v1/events`, as far as an agent cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// Inputs applied now.
    pub accepted: u64,
    /// Inputs whose id serve had already seen (a resend).
    pub duplicates: u64,
}

impl Server {
    /// A server on plain loopback HTTP with an optional bearer token (tests).
    pub fn plain(addr: SocketAddr, token: Option<String>) -> Server {
        Server { client: Client::new(addr, token) }
    }

    fn client(&self) -> Client {
        self.client.clone()
    }

    fn err(&self, e: ClientError) -> Error {
        Error::Server { addr: self.client.server().to_owned(), message: e.to_string() }
    }

    /// Posts inputs. Fails if serve is unreachable, answers an error, or rejected any line (a rejected
    /// line is a bug in the agent, never something to drop quietly).
    pub fn post(&self, inputs: &[Input]) -> Result<Posted> {
        if inputs.is_empty() {
            return Ok(Posted { accepted: 0, duplicates: 0 });
        }
        let reply = self.client().post_inputs(inputs).map_err(|e| self.err(e))?;
        if !reply.rejected.is_empty() {
            let lines: Vec<String> = reply.rejected.iter().map(|r| format!("line {}: {}", r.line, r.error)).collect();
            return Err(Error::Server {
                addr: self.client.server().to_owned(),
                message: format!("serve rejected events: {}", lines.join("; ")),
            });
        }
        Ok(Posted { accepted: reply.accepted, duplicates: reply.duplicates.len() as u64 })
    }

    /// Asks for the admission decision of one `job.submitted` (`POST /v1/admit`, the `submit`
    /// power). A resend of the same event id is answered with the decision made the first time
    /// (`duplicate`), so an agent that crashed between asking and acting simply asks again.
    pub fn admit(&self, submitted: &bursar_model::Event) -> Result<bursar_model::api::AdmitReply> {
        self.client().admit(submitted).map_err(|e| self.err(e))
    }

    /// [`Server::admit`] with the expected start of an allowed job (`POST /v1/admit?estimate=true`).
    pub fn admit_with_estimate(&self, submitted: &bursar_model::Event) -> Result<bursar_model::api::AdmitReply> {
        self.client().admit_with_estimate(submitted).map_err(|e| self.err(e))
    }

    /// What a submission would be answered now, recorded nowhere (`POST /v1/admit?test_only=true`):
    /// a scheduler's dry run.
    pub fn preview(&self, submitted: &bursar_model::Event) -> Result<bursar_model::api::AdmitReply> {
        self.client().preview(submitted).map_err(|e| self.err(e))
    }

    /// Opens the decision stream after `after`; `follow` keeps it open for live decisions.
    pub fn decisions(&self, after: u64, follow: bool) -> Result<Decisions> {
        let stream = self.client().decisions(after, follow).map_err(|e| self.err(e))?;
        Ok(Decisions { stream, server: self.clone() })
    }
}

/// A stream of decisions, each with its `seq`.
#[derive(Debug)]
pub struct Decisions {
    stream: DecisionStream,
    server: Server,
}

impl Decisions {
    /// The next decision; `None` when the stream ended (serve stopped, or caught up without `follow`).
    pub fn next_decision(&mut self) -> Result<Option<Sequenced>> {
        self.stream.next_decision().map_err(|e| self.server.err(e))
    }
}
