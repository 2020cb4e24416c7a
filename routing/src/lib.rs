//! Routing tables as they travel: the table (domains to healthy upstreams), the signed
//! snapshot that carries it to edges, the changes between two revisions, and the Caddy
//! configuration a table becomes ([`caddy`]). Shared by the control plane, which builds and
//! signs tables, and the edge agent (`bulkhead-edge`), which verifies and applies them; so it
//! depends on neither.
//!
//! A signed snapshot is one JSON object, the same over HTTP, on an edge's disk, on a mirror or
//! in a file:
//!
//! ```json
//! {"format":"bulkhead.routing-table.v1","key_id":"…","signature":"…","table":{…}}
//! ```
//!
//! The Ed25519 signature (base64) covers the exact bytes of the `table` member as they appear
//! in the document, so a snapshot is verified without re-serializing anything.

pub mod caddy;

use std::collections::{BTreeMap, HashMap};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use chrono::{DateTime, Utc};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The `format` of a signed snapshot.
pub const SNAPSHOT_FORMAT: &str = "bulkhead.routing-table.v1";

/// Where a domain's requests go: one healthy instance of its service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Upstream {
    /// `host:port` where the instance answers.
    pub address: String,
    pub provider: String,
    pub region: String,
    pub instance_key: String,
    /// Relative share of the domain's requests.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub weight: u32,
}

/// A domain and the healthy instances of its service. A route with no upstreams is kept (its
/// domain still belongs to the service); a proxy answers 503 for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Route {
    pub domain: String,
    pub project_id: Uuid,
    pub service_id: Uuid,
    pub upstreams: Vec<Upstream>,
}

/// One revision of the routing table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RoutingTable {
    /// Monotonic: a newer table has a higher revision.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub revision: i64,
    pub generated_at: DateTime<Utc>,
    /// Whether every route and upstream this revision dropped was taken away on purpose
    /// (a domain deleted, an instance drained by a rollout); edges refuse a large drop that is
    /// not.
    pub drop_intended: bool,
    /// Sorted by domain; each route's upstreams by instance key.
    pub routes: Vec<Route>,
}

impl RoutingTable {
    /// How many upstreams the table has across its routes.
    pub fn upstream_count(&self) -> usize {
        self.routes.iter().map(|route| route.upstreams.len()).sum()
    }
}

/// One change of the table from one revision to the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum RouteChange {
    /// The domain's route is now this (new, or its upstreams changed).
    Set { route: Route },
    /// The domain has no route any more.
    Remove { domain: String },
}

/// The changes that turn `old` into `new` (both sorted by domain).
pub fn changes_between(old: &[Route], new: &[Route]) -> Vec<RouteChange> {
    let old: BTreeMap<&str, &Route> = old.iter().map(|r| (r.domain.as_str(), r)).collect();
    let new_by_domain: BTreeMap<&str, &Route> =
        new.iter().map(|r| (r.domain.as_str(), r)).collect();
    let mut changes = Vec::new();
    for (domain, route) in &old {
        if !new_by_domain.contains_key(domain) {
            changes.push(RouteChange::Remove {
                domain: (*domain).to_owned(),
            });
        } else if new_by_domain[domain] != *route {
            changes.push(RouteChange::Set {
                route: new_by_domain[domain].clone(),
            });
        }
    }
    for (domain, route) in &new_by_domain {
        if !old.contains_key(domain) {
            changes.push(RouteChange::Set {
                route: (*route).clone(),
            });
        }
    }
    changes
}

/// SHA-256 (hex) of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The strong ETag of a signed snapshot document, as the control plane serves it (and an edge
/// sends back in `If-None-Match`).
pub fn snapshot_etag(document: &[u8]) -> String {
    format!("\"{}\"", &sha256_hex(document)[..32])
}

/// The id of a public key: the first 16 hex digits of its SHA-256.
pub fn key_id_of(public: &VerifyingKey) -> String {
    sha256_hex(public.as_bytes())[..16].to_owned()
}

/// A signed snapshot as read: the `table` member kept as the exact bytes that were signed.
#[derive(Debug, Serialize, Deserialize)]
pub struct SignedSnapshot {
    pub format: String,
    pub key_id: String,
    /// Ed25519 over the bytes of `table`, base64.
    pub signature: String,
    pub table: Box<RawValue>,
}

/// The signed snapshot document as the OpenAPI document describes it (readers must verify
/// the signature over the exact bytes of `table`, not over a re-serialization).
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SignedSnapshotDoc {
    /// `bulkhead.routing-table.v1`.
    pub format: String,
    /// The key that signed it (see `GET /v1/routing-table/keys`).
    pub key_id: String,
    /// Ed25519 over the bytes of `table` as they appear in the document, base64.
    pub signature: String,
    pub table: RoutingTable,
}

/// Why a snapshot was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("not a routing-table snapshot: {0}")]
    Malformed(String),
    #[error("signed by key {0}, which is not trusted")]
    UnknownKey(String),
    #[error("the signature does not match the table")]
    BadSignature,
}

impl SnapshotError {
    /// A short name for metrics and status reports.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::UnknownKey(_) => "unknown_key",
            Self::BadSignature => "bad_signature",
        }
    }
}

impl SignedSnapshot {
    /// Serializes `table` and signs it: the bytes of a snapshot document.
    pub fn sign(table: &RoutingTable, key: &SigningKey) -> Vec<u8> {
        Self::sign_json(
            serde_json::to_string(table).expect("a table serializes"),
            key,
        )
    }

    /// Signs a table already serialized (`table_json` must be the JSON of a [`RoutingTable`]):
    /// the bytes of a snapshot document.
    /// The document is written around the table's bytes, which are neither parsed nor copied
    /// twice: the same bytes as serializing a [`SignedSnapshot`].
    pub fn sign_json(table_json: String, key: &SigningKey) -> Vec<u8> {
        let signature = BASE64.encode(key.sign(table_json.as_bytes()).to_bytes());
        let mut document = Vec::with_capacity(table_json.len() + 256);
        let mut member = |name: &str, value: &str| {
            document.extend_from_slice(if document.is_empty() { b"{\"" } else { b",\"" });
            document.extend_from_slice(name.as_bytes());
            document.extend_from_slice(b"\":");
            serde_json::to_writer(&mut document, value).expect("a string serializes");
        };
        member("format", SNAPSHOT_FORMAT);
        member("key_id", &key_id_of(&key.verifying_key()));
        member("signature", &signature);
        document.extend_from_slice(b",\"table\":");
        document.extend_from_slice(table_json.as_bytes());
        document.push(b'}');
        document
    }

    /// Parses a snapshot document and checks its signature against `trusted`.
    pub fn verify(bytes: &[u8], trusted: &TrustedKeys) -> Result<RoutingTable, SnapshotError> {
        let document: SignedSnapshot = serde_json::from_slice(bytes)
            .map_err(|err| SnapshotError::Malformed(err.to_string()))?;
        if document.format != SNAPSHOT_FORMAT {
            return Err(SnapshotError::Malformed(format!(
                "unknown format `{}`",
                document.format
            )));
        }
        let key = trusted
            .0
            .get(&document.key_id)
            .ok_or_else(|| SnapshotError::UnknownKey(document.key_id.clone()))?;
        let signature = BASE64
            .decode(&document.signature)
            .ok()
            .and_then(|bytes| Signature::from_slice(&bytes).ok())
            .ok_or(SnapshotError::BadSignature)?;
        key.verify_strict(document.table.get().as_bytes(), &signature)
            .map_err(|_| SnapshotError::BadSignature)?;
        serde_json::from_str(document.table.get())
            .map_err(|err| SnapshotError::Malformed(err.to_string()))
    }
}

/// A published public key of the routing tables.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublishedKey {
    /// The first 16 hex digits of the SHA-256 of the public key.
    pub id: String,
    /// The 32-byte Ed25519 public key, base64.
    pub public_key: String,
    #[cfg_attr(feature = "openapi", schema(value_type = RoutingKeyState))]
    pub state: String,
    pub created_at: DateTime<Utc>,
    pub activated_at: Option<DateTime<Utc>>,
    pub retired_at: Option<DateTime<Utc>>,
}

/// A routing key's state (a string in [`PublishedKey`], so that an edge reads a state it does
/// not know yet): named for the OpenAPI document.
#[cfg(feature = "openapi")]
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RoutingKeyState {
    /// Published ahead of use: edges trust it before it signs.
    Next,
    /// Signs new snapshots.
    Active,
    /// Signed earlier snapshots, which edges may still hold.
    Retired,
}

/// The keys document: `GET /v1/routing-table/keys`, and what an edge is told to trust.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PublishedKeys {
    pub keys: Vec<PublishedKey>,
}

/// The keys a reader of snapshots trusts, by id.
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys(HashMap<String, VerifyingKey>);

impl TrustedKeys {
    /// Trusts each key of a keys document (whatever its state: a retired key still vouches
    /// for the snapshots it signed).
    pub fn from_document(bytes: &[u8]) -> anyhow::Result<Self> {
        let document: PublishedKeys = serde_json::from_slice(bytes)?;
        let mut keys = HashMap::new();
        for key in document.keys {
            let public = public_key_parse(&key.public_key)?;
            let id = key_id_of(&public);
            anyhow::ensure!(
                id == key.id,
                "key {} does not match its public key (id {id})",
                key.id
            );
            keys.insert(id, public);
        }
        Ok(Self(keys))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A 32-byte Ed25519 public key from base64.
pub fn public_key_parse(text: &str) -> anyhow::Result<VerifyingKey> {
    let bytes: [u8; 32] = BASE64
        .decode(text.trim())?
        .try_into()
        .map_err(|_| anyhow::anyhow!("an Ed25519 public key is 32 bytes"))?;
    Ok(VerifyingKey::from_bytes(&bytes)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(revision: i64, domains: &[&str]) -> RoutingTable {
        RoutingTable {
            revision,
            generated_at: Utc::now(),
            drop_intended: false,
            routes: domains
                .iter()
                .map(|domain| Route {
                    domain: (*domain).to_owned(),
                    project_id: Uuid::nil(),
                    service_id: Uuid::nil(),
                    upstreams: vec![Upstream {
                        address: "127.0.0.1:8080".into(),
                        provider: "metal".into(),
                        region: "local".into(),
                        instance_key: format!("{domain}-1"),
                        weight: 1,
                    }],
                })
                .collect(),
        }
    }

    fn trusted(key: &SigningKey) -> TrustedKeys {
        let public = key.verifying_key();
        TrustedKeys(HashMap::from([(key_id_of(&public), public)]))
    }

    #[test]
    fn a_signed_snapshot_verifies_and_a_tampered_one_does_not() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let signed = SignedSnapshot::sign(&table(3, &["a.example"]), &key);
        let verified = SignedSnapshot::verify(&signed, &trusted(&key)).unwrap();
        assert_eq!(verified.revision, 3);
        let tampered = String::from_utf8(signed)
            .unwrap()
            .replace("127.0.0.1:8080", "10.6.6.6:8080");
        assert_eq!(
            SignedSnapshot::verify(tampered.as_bytes(), &trusted(&key)),
            Err(SnapshotError::BadSignature)
        );
        let stranger = SigningKey::from_bytes(&[9; 32]);
        let foreign = SignedSnapshot::sign(&table(4, &["a.example"]), &stranger);
        assert!(matches!(
            SignedSnapshot::verify(&foreign, &trusted(&key)),
            Err(SnapshotError::UnknownKey(_))
        ));
    }

    #[test]
    fn a_snapshot_signed_from_json_is_the_document_serde_writes() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let table = table(5, &["a.example", "b.example"]);
        let table_json = serde_json::to_string(&table).unwrap();
        let signed = SignedSnapshot::sign_json(table_json.clone(), &key);
        let document = SignedSnapshot {
            format: SNAPSHOT_FORMAT.into(),
            key_id: key_id_of(&key.verifying_key()),
            signature: BASE64.encode(key.sign(table_json.as_bytes()).to_bytes()),
            table: RawValue::from_string(table_json).unwrap(),
        };
        assert_eq!(signed, serde_json::to_vec(&document).unwrap());
        assert_eq!(SignedSnapshot::verify(&signed, &trusted(&key)), Ok(table));
    }

    #[test]
    fn changes_name_what_was_set_and_what_was_removed() {
        let old = table(1, &["a.example", "b.example"]).routes;
        let mut new = table(2, &["b.example", "c.example"]).routes;
        new[0].upstreams.clear();
        let changes = changes_between(&old, &new);
        assert_eq!(changes.len(), 3, "{changes:?}");
        assert!(changes.contains(&RouteChange::Remove {
            domain: "a.example".into()
        }));
        assert!(changes.contains(&RouteChange::Set {
            route: new[0].clone()
        }));
        assert!(changes.contains(&RouteChange::Set {
            route: new[1].clone()
        }));
        assert!(changes_between(&new, &new).is_empty());
    }
}
