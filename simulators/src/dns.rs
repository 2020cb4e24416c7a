//! A small authoritative DNS server over UDP, for domain verification: it answers `TXT`
//! questions from records set through [`DnsSimulator::txt_set`] (or its HTTP API, for
//! `bulkhead dev`), `NXDOMAIN` for names it has no record of, and `SERVFAIL` to everything
//! while [`DnsSimulator::fail`] is on (a resolver outage). Messages are hickory-proto's.
//!
//! HTTP API (JSON): `PUT /records/{name}` with `{"txt": ["…"]}` sets a name's TXT records,
//! `DELETE /records/{name}` removes them.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::put;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use serde::Deserialize;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use crate::RunningSimulator;

#[derive(Default)]
struct Zone {
    /// TXT records by lowercase name, without the trailing dot.
    txt: Mutex<HashMap<String, Vec<String>>>,
    failing: AtomicBool,
}

/// A running DNS simulator: UDP on `dns_addr`, its HTTP API on `api`.
pub struct DnsSimulator {
    pub dns_addr: SocketAddr,
    pub api: RunningSimulator,
    zone: Arc<Zone>,
    task: AbortOnDrop,
}

/// The UDP server's task, stopped when the simulator goes.
struct AbortOnDrop(JoinHandle<()>);

impl AbortOnDrop {
    fn abort(&self) {
        self.0.abort();
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl DnsSimulator {
    /// Serves DNS and the HTTP API on free loopback ports.
    pub async fn start() -> std::io::Result<Self> {
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let dns_addr = socket.local_addr()?;
        let zone = Arc::new(Zone::default());
        let task = AbortOnDrop(tokio::spawn(serve(socket, zone.clone())));
        let router = axum::Router::new()
            .route("/records/{name}", put(records_put).delete(records_delete))
            .with_state(zone.clone());
        let api = RunningSimulator::serve((Ipv4Addr::LOCALHOST, 0).into(), router).await?;
        Ok(Self {
            dns_addr,
            api,
            zone,
            task,
        })
    }

    /// Sets the TXT records of `name` (none removes them).
    pub fn txt_set(&self, name: &str, values: Vec<String>) {
        txt_set(&self.zone, name, values);
    }

    /// Adds `value` to the TXT records of `name` (several challenges can share a name).
    pub fn txt_add(&self, name: &str, value: String) {
        let mut txt = self.zone.txt.lock().expect("not poisoned");
        let values = txt.entry(name_key(name)).or_default();
        if !values.contains(&value) {
            values.push(value);
        }
    }

    /// Answers `SERVFAIL` to every question while `failing`.
    pub fn fail(&self, failing: bool) {
        self.zone.failing.store(failing, Ordering::Relaxed);
    }

    /// Stops answering, and stops the HTTP API.
    pub async fn shutdown(self) -> std::io::Result<()> {
        self.task.abort();
        self.api.shutdown().await
    }
}

fn name_key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn txt_set(zone: &Zone, name: &str, values: Vec<String>) {
    let mut txt = zone.txt.lock().expect("not poisoned");
    if values.is_empty() {
        txt.remove(&name_key(name));
    } else {
        txt.insert(name_key(name), values);
    }
}

async fn serve(socket: UdpSocket, zone: Arc<Zone>) {
    let mut buffer = vec![0; 4096];
    loop {
        let Ok((len, peer)) = socket.recv_from(&mut buffer).await else {
            continue;
        };
        let Some(answer) = answer(&zone, &buffer[..len]) else {
            continue; // not a DNS message: nothing to answer
        };
        if let Ok(bytes) = answer.to_vec() {
            let _ = socket.send_to(&bytes, peer).await;
        }
    }
}

/// The answer to one request, `None` for what is not a DNS query.
fn answer(zone: &Zone, request: &[u8]) -> Option<Message> {
    let request = Message::from_vec(request).ok()?;
    if request.metadata.message_type != MessageType::Query {
        return None;
    }
    let mut answer = Message::response(request.metadata.id, request.metadata.op_code);
    answer.metadata.authoritative = true;
    answer.metadata.recursion_desired = request.metadata.recursion_desired;
    answer.queries = request.queries.clone();
    let [query] = request.queries.as_slice() else {
        answer.metadata.response_code = ResponseCode::FormErr;
        return Some(answer);
    };
    if request.metadata.op_code != OpCode::Query {
        answer.metadata.response_code = ResponseCode::NotImp;
        return Some(answer);
    }
    if zone.failing.load(Ordering::Relaxed) {
        answer.metadata.response_code = ResponseCode::ServFail;
        return Some(answer);
    }
    let key = name_key(&query.name().to_ascii());
    let values = zone.txt.lock().expect("not poisoned").get(&key).cloned();
    match values {
        None => answer.metadata.response_code = ResponseCode::NXDomain,
        Some(values) if query.query_type() == RecordType::TXT => {
            answer.answers = values
                .into_iter()
                .map(|value| {
                    Record::from_rdata(query.name().clone(), 0, RData::TXT(TXT::new(vec![value])))
                })
                .collect();
        }
        // The name exists, with no record of the asked type: an empty NOERROR answer.
        Some(_) => {}
    }
    Some(answer)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Records {
    txt: Vec<String>,
}

async fn records_put(
    State(zone): State<Arc<Zone>>,
    Path(name): Path<String>,
    Json(records): Json<Records>,
) -> StatusCode {
    if Name::from_ascii(&name).is_err() || records.txt.iter().any(|value| value.len() > 255) {
        return StatusCode::UNPROCESSABLE_ENTITY;
    }
    txt_set(&zone, &name, records.txt);
    StatusCode::NO_CONTENT
}

async fn records_delete(State(zone): State<Arc<Zone>>, Path(name): Path<String>) -> StatusCode {
    txt_set(&zone, &name, Vec::new());
    StatusCode::NO_CONTENT
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, record_type: RecordType) -> Vec<u8> {
        let mut message = Message::query();
        message.add_query(hickory_proto::op::Query::query(
            Name::from_ascii(name).unwrap(),
            record_type,
        ));
        message.to_vec().unwrap()
    }

    #[tokio::test]
    async fn it_answers_what_is_set_and_fails_when_asked() {
        let dns = DnsSimulator::start().await.unwrap();
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let ask = async |name: &str, record_type| {
            socket
                .send_to(&query(name, record_type), dns.dns_addr)
                .await
                .unwrap();
            let mut buffer = vec![0; 4096];
            let len = socket.recv(&mut buffer).await.unwrap();
            Message::from_vec(&buffer[..len]).unwrap()
        };
        let missing = ask("_c.example.com.", RecordType::TXT).await;
        assert_eq!(missing.metadata.response_code, ResponseCode::NXDomain);

        // Through the HTTP API, as `bulkhead dev`'s guide says.
        let http = crate::test_http();
        let put = http
            .put(format!("{}/records/_c.Example.com", dns.api.url()))
            .json(&serde_json::json!({"txt": ["one", "two"]}))
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 204);
        let found = ask("_c.example.COM.", RecordType::TXT).await;
        assert_eq!(found.metadata.response_code, ResponseCode::NoError);
        let values: Vec<String> = found
            .answers
            .iter()
            .filter_map(|record| match &record.data {
                RData::TXT(txt) => Some(txt.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(values, ["one", "two"]);
        let other_type = ask("_c.example.com.", RecordType::A).await;
        assert_eq!(other_type.metadata.response_code, ResponseCode::NoError);
        assert!(other_type.answers.is_empty());

        dns.fail(true);
        let failed = ask("_c.example.com.", RecordType::TXT).await;
        assert_eq!(failed.metadata.response_code, ResponseCode::ServFail);
        dns.fail(false);
        dns.txt_set("_c.example.com", Vec::new());
        let removed = ask("_c.example.com.", RecordType::TXT).await;
        assert_eq!(removed.metadata.response_code, ResponseCode::NXDomain);
    }
}
