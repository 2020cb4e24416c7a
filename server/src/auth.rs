//! Credentials: password hashing (argon2), opaque API and refresh tokens (random, stored as
//! SHA-256), and JWT access tokens signed with an Ed25519 key that is generated on first start
//! and persisted in the database.
//!
//! Validation pins the algorithm (EdDSA), and requires and checks expiry, not-before, issuer
//! and audience; a token signed any other way, or with `alg: none`, is refused.

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::Utc;
use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{EncodePrivateKey, EncodePublicKey};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rand::RngCore;
use sea_orm::{ActiveModelTrait, DatabaseConnection, EntityTrait, QueryOrder, Set};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::entity::signing_key;
use crate::secrets::SecretBox;

/// Issuer (`iss`) of Bulkhead's access tokens.
pub const JWT_ISSUER: &str = "bulkhead";
/// Audience (`aud`) of Bulkhead's access tokens.
pub const JWT_AUDIENCE: &str = "bulkhead-api";
/// Prefix of opaque API tokens, so that they are recognisable (e.g. by secret scanners).
pub const API_TOKEN_PREFIX: &str = "bh_";
/// Prefix of opaque refresh tokens.
pub const REFRESH_TOKEN_PREFIX: &str = "bhr_";

/// Hashes a password with argon2id and a random salt.
pub fn password_hash(password: &str) -> anyhow::Result<String> {
    let mut salt = [0u8; 16];
    rand::rng().fill_bytes(&mut salt);
    let salt = SaltString::encode_b64(&salt).map_err(|err| anyhow::anyhow!("salt: {err}"))?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map_err(|err| anyhow::anyhow!("argon2: {err}"))?
        .to_string())
}

/// Checks `password` against a stored argon2 hash.
pub fn password_verify(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false)
}

/// A new random opaque token with `prefix` (256 bits of entropy).
pub fn opaque_token_generate(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// The stored form of an opaque token: hex SHA-256. A fast hash is right here because the
/// tokens are random, not chosen by people.
pub fn opaque_token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn signing_key_purpose(id: &str) -> String {
    format!("jwt-signing-key:{id}")
}

/// The private half of a stored signing key, opened.
pub fn signing_key_private_pem(
    secrets: &SecretBox,
    key: &signing_key::Model,
) -> anyhow::Result<String> {
    secrets.open_value(&signing_key_purpose(&key.id), &key.private_key_pem)
}

/// Claims of an access token.
#[derive(Debug, Serialize, Deserialize)]
pub struct AccessClaims {
    pub iss: String,
    pub aud: String,
    /// The user's id.
    pub sub: Uuid,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
    pub jti: Uuid,
    /// The session (refresh-token family) the token belongs to.
    #[serde(default)]
    pub sid: Uuid,
    /// The user's session epoch when the token was issued: a password change or disabling the
    /// user moves the epoch on, and tokens of an earlier one are refused.
    #[serde(default)]
    pub sep: i64,
}

/// The key pair that signs and verifies access tokens.
pub struct JwtKeys {
    key_id: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl JwtKeys {
    /// Loads the newest signing key from the database, generating and storing one on first
    /// start. Its private half is stored sealed (a plaintext one, from an earlier version, is
    /// sealed in place).
    pub async fn load_or_create(
        db: &DatabaseConnection,
        secrets: &SecretBox,
    ) -> anyhow::Result<Self> {
        let stored = signing_key::Entity::find()
            .order_by_desc(signing_key::Column::CreatedAt)
            .one(db)
            .await?;
        let key = match stored {
            Some(key) => key,
            None => {
                let mut seed = [0u8; 32];
                rand::rng().fill_bytes(&mut seed);
                let signing = SigningKey::from_bytes(&seed);
                let private_pem = signing.to_pkcs8_pem(LineEnding::LF)?.to_string();
                let public_pem = signing.verifying_key().to_public_key_pem(LineEnding::LF)?;
                let id = Uuid::now_v7().to_string();
                let candidate = signing_key::ActiveModel {
                    private_key_pem: Set(secrets.seal(&signing_key_purpose(&id), &private_pem)),
                    id: Set(id),
                    algorithm: Set("EdDSA".into()),
                    public_key_pem: Set(public_pem),
                    created_at: Set(Utc::now()),
                };
                // Two replicas starting together may both insert; the newest key wins for both.
                candidate.insert(db).await?;
                signing_key::Entity::find()
                    .order_by_desc(signing_key::Column::CreatedAt)
                    .one(db)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("signing key vanished after insert"))?
            }
        };
        let purpose = signing_key_purpose(&key.id);
        let private_pem = if SecretBox::is_sealed(&key.private_key_pem) {
            signing_key_private_pem(secrets, &key)?
        } else {
            let plaintext = key.private_key_pem.clone();
            let mut active: signing_key::ActiveModel = key.clone().into();
            active.private_key_pem = Set(secrets.seal(&purpose, &plaintext));
            active.update(db).await?;
            plaintext
        };
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_issuer(&[JWT_ISSUER]);
        validation.set_audience(&[JWT_AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "nbf", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = 5;
        Ok(Self {
            key_id: key.id,
            encoding: EncodingKey::from_ed_pem(private_pem.as_bytes())?,
            decoding: DecodingKey::from_ed_pem(key.public_key_pem.as_bytes())?,
            validation,
        })
    }

    /// Signs an access token for `user_id` in session `family` and epoch `epoch`, valid for
    /// `ttl`.
    pub fn access_token_issue(
        &self,
        user_id: Uuid,
        family: Uuid,
        epoch: i64,
        ttl: std::time::Duration,
    ) -> anyhow::Result<String> {
        let now = Utc::now().timestamp();
        let claims = AccessClaims {
            iss: JWT_ISSUER.into(),
            aud: JWT_AUDIENCE.into(),
            sub: user_id,
            iat: now,
            nbf: now,
            exp: now + ttl.as_secs() as i64,
            jti: Uuid::new_v4(),
            sid: family,
            sep: epoch,
        };
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(self.key_id.clone());
        Ok(jsonwebtoken::encode(&header, &claims, &self.encoding)?)
    }

    /// Verifies an access token and returns its claims.
    pub fn access_token_verify(
        &self,
        token: &str,
    ) -> Result<AccessClaims, jsonwebtoken::errors::Error> {
        jsonwebtoken::decode::<AccessClaims>(token, &self.decoding, &self.validation)
            .map(|data| data.claims)
    }
}
