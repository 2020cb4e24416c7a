//! OpenID Connect providers, through the `openidconnect` crate: discovery from the issuer, the
//! authorization request (PKCE S256, a nonce), the code exchange with `client_secret_basic` or
//! `client_secret_post`, and the ID token validated before anything in it is believed —
//! signature by a key of the provider's JWKS (`alg: none` and keys it does not publish
//! refused), issuer, audience, expiry and nonce; the userinfo endpoint's `sub` must be the
//! ID token's; the authorization response's `iss` (RFC 9207) must be the issuer when the
//! provider says it sends one.
//!
//! What a provider says of itself is discovered at its first sign-in and kept
//! ([`DISCOVERY_TTL`]). A provider rotating its keys signs with a `kid` not yet known here: its
//! JWKS is fetched again then, at most once per [`JWKS_REFETCH_COOLDOWN`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use openidconnect::core::{
    CoreAuthDisplay, CoreAuthenticationFlow, CoreClaimName, CoreClaimType, CoreClient,
    CoreClientAuthMethod, CoreGrantType, CoreJsonWebKey, CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm, CoreResponseMode, CoreResponseType, CoreSubjectIdentifierType,
    CoreUserInfoClaims,
};
use openidconnect::{
    AccessToken, AdditionalProviderMetadata, AuthType, AuthorizationCode, ClaimsVerificationError,
    ClientId, ClientSecret, CsrfToken, DiscoveryError, IssuerUrl, JsonWebKeySet, Nonce,
    OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, ProviderMetadata, RedirectUrl,
    RequestTokenError, Scope, SignatureVerificationError, TokenResponse, UserInfoError,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::app::identity::sign_in::calls::ProviderHttp;
use crate::app::identity::sign_in::outside::{Account, exchange_refused, refused};
use crate::config::{SignInProvider, TokenEndpointAuthMethod};
use crate::error::{AppError, AppResult};

/// How long what a provider said of itself is kept before it is asked again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);
/// The least time between two fetches of a provider's keys.
pub const JWKS_REFETCH_COOLDOWN: Duration = Duration::from_secs(5);
/// The scopes asked for when the operator names none (beside `openid`, always asked for).
const SCOPES_DEFAULT: [&str; 2] = ["email", "profile"];

/// RFC 9207's field of a provider's metadata: whether its authorization responses carry `iss`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub(crate) struct IssParameter {
    #[serde(default)]
    authorization_response_iss_parameter_supported: bool,
}

impl AdditionalProviderMetadata for IssParameter {}

type Metadata = ProviderMetadata<
    IssParameter,
    CoreAuthDisplay,
    CoreClientAuthMethod,
    CoreClaimName,
    CoreClaimType,
    CoreGrantType,
    CoreJweContentEncryptionAlgorithm,
    CoreJweKeyManagementAlgorithm,
    CoreJsonWebKey,
    CoreResponseMode,
    CoreResponseType,
    CoreSubjectIdentifierType,
>;

/// A provider's metadata and keys, and when each was fetched.
struct Discovered {
    metadata: Metadata,
    discovered_at: Instant,
    jwks_fetched_at: Instant,
}

/// What one provider said of itself, if asked yet; locked while it is being asked.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Discovered>>>>;

/// What each provider said of itself, by name; one discovery (or key fetch) at a time per
/// provider, so that a crowd signing in at once asks once.
#[derive(Default)]
pub(crate) struct Discoveries {
    known: Mutex<HashMap<String, Slot>>,
}

impl Discoveries {
    fn slot(&self, provider: &str) -> Slot {
        self.known
            .lock()
            .expect("not poisoned")
            .entry(provider.to_owned())
            .or_default()
            .clone()
    }
}

/// The nonce of a sign-in: bound to its `state` (a hash of it), so that an ID token made for
/// another sign-in is refused, and nothing more needs keeping.
fn nonce_of(state: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"bulkhead-oidc-nonce:");
    hash.update(state.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.finalize())
}

/// The provider's metadata, discovered now if not known or too old.
async fn discovered(
    http: &ProviderHttp<'_>,
    provider: &SignInProvider,
) -> AppResult<Arc<Discovered>> {
    let slot = http.discoveries().slot(&provider.name);
    let mut known = slot.lock().await;
    if let Some(found) = known
        .as_ref()
        .filter(|found| found.discovered_at.elapsed() < DISCOVERY_TTL)
    {
        return Ok(found.clone());
    }
    let issuer =
        IssuerUrl::new(provider.issuer.clone().unwrap_or_default()).map_err(AppError::internal)?;
    let metadata = Metadata::discover_async(issuer, http)
        .await
        .map_err(|err| discovery_failed(&provider.name, err))?;
    let now = Instant::now();
    let found = Arc::new(Discovered {
        metadata,
        discovered_at: now,
        jwks_fetched_at: now,
    });
    *known = Some(found.clone());
    tracing::info!(provider = %provider.name, "OpenID Provider discovered");
    Ok(found)
}

/// The provider's keys fetched again after `used` failed to verify a token whose key it did
/// not have: `None` while the last fetch is within [`JWKS_REFETCH_COOLDOWN`].
async fn keys_refetched(
    http: &ProviderHttp<'_>,
    provider: &SignInProvider,
    used: &Discovered,
) -> AppResult<Option<Arc<Discovered>>> {
    let slot = http.discoveries().slot(&provider.name);
    let mut known = slot.lock().await;
    if let Some(newer) = known
        .as_ref()
        .filter(|found| found.jwks_fetched_at > used.jwks_fetched_at)
    {
        return Ok(Some(newer.clone()));
    }
    if used.jwks_fetched_at.elapsed() < JWKS_REFETCH_COOLDOWN {
        return Ok(None);
    }
    let jwks = JsonWebKeySet::fetch_async(used.metadata.jwks_uri(), http)
        .await
        .map_err(|err| discovery_failed(&provider.name, err))?;
    let found = Arc::new(Discovered {
        metadata: used.metadata.clone().set_jwks(jwks),
        discovered_at: used.discovered_at,
        jwks_fetched_at: Instant::now(),
    });
    *known = Some(found.clone());
    tracing::info!(provider = %provider.name, "OpenID Provider's keys fetched again: a token named a key not known");
    Ok(Some(found))
}

fn discovery_failed(name: &str, err: DiscoveryError<AppError>) -> AppError {
    match err {
        DiscoveryError::Request(err) => err,
        DiscoveryError::Response(status, _, _) => refused(format!(
            "{name} did not describe itself (its discovery or keys answered {status})"
        )),
        other => refused(format!(
            "{name} described itself in a way that is not OpenID Connect Discovery: {other}"
        )),
    }
}

fn client_of(
    provider: &SignInProvider,
    discovered: &Discovered,
) -> AppResult<
    CoreClient<
        openidconnect::EndpointSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointMaybeSet,
        openidconnect::EndpointMaybeSet,
    >,
> {
    let metadata = &discovered.metadata;
    let method = provider.token_endpoint_auth_method.unwrap_or_else(|| {
        let supported = metadata.token_endpoint_auth_methods_supported();
        let post_only = supported.is_some_and(|methods| {
            methods.contains(&CoreClientAuthMethod::ClientSecretPost)
                && !methods.contains(&CoreClientAuthMethod::ClientSecretBasic)
        });
        if post_only {
            TokenEndpointAuthMethod::ClientSecretPost
        } else {
            TokenEndpointAuthMethod::ClientSecretBasic
        }
    });
    let client = CoreClient::from_provider_metadata(
        metadata.clone(),
        ClientId::new(provider.client_id.clone()),
        Some(ClientSecret::new(provider.client_secret.clone())),
    )
    .set_redirect_uri(RedirectUrl::new(provider.redirect_uri.clone()).map_err(AppError::internal)?)
    .set_auth_type(match method {
        TokenEndpointAuthMethod::ClientSecretBasic => AuthType::BasicAuth,
        TokenEndpointAuthMethod::ClientSecretPost => AuthType::RequestBody,
    });
    Ok(client)
}

/// The provider's page to send the browser to, for the sign-in `state` with the PKCE
/// `verifier`.
pub(crate) async fn authorize_url(
    http: &ProviderHttp<'_>,
    provider: &SignInProvider,
    state: &str,
    verifier: &str,
) -> AppResult<String> {
    let discovered = discovered(http, provider).await?;
    let client = client_of(provider, &discovered)?;
    let challenge =
        PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(verifier.to_owned()));
    let state = state.to_owned();
    let nonce = nonce_of(&state);
    let mut request = client
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            move || CsrfToken::new(state),
            move || Nonce::new(nonce),
        )
        .set_pkce_challenge(challenge);
    if provider.scopes.is_empty() {
        for scope in SCOPES_DEFAULT {
            request = request.add_scope(Scope::new(scope.to_owned()));
        }
    }
    for scope in provider.scopes.iter().filter(|scope| *scope != "openid") {
        request = request.add_scope(Scope::new(scope.clone()));
    }
    Ok(request.url().0.to_string())
}

/// What the provider's redirect brought back, and what the sign-in kept.
pub(crate) struct Returned<'a> {
    pub code: &'a str,
    pub state: &'a str,
    /// RFC 9207's `iss`, if it came.
    pub iss: Option<&'a str>,
    pub verifier: String,
}

/// The account a code stands for, once the provider's answers are validated.
pub(crate) async fn account(
    http: &ProviderHttp<'_>,
    provider: &SignInProvider,
    returned: Returned<'_>,
) -> AppResult<Account> {
    let name = provider.name.as_str();
    let mut discovered = discovered(http, provider).await?;
    let issuer = discovered.metadata.issuer().as_str();
    match returned.iss {
        Some(iss) if iss != issuer => {
            return Err(refused(format!(
                "the sign-in came back from `{iss}`, not from {name}'s issuer: start the sign-in again"
            )));
        }
        None if discovered
            .metadata
            .additional_metadata()
            .authorization_response_iss_parameter_supported =>
        {
            return Err(refused(format!(
                "{name} sends `iss` with its answer (RFC 9207), and none came: finish with the `iss` the provider sent back"
            )));
        }
        _ => {}
    }
    let client = client_of(provider, &discovered)?;
    let token = client
        .exchange_code(AuthorizationCode::new(returned.code.to_owned()))
        .map_err(AppError::internal)?
        .set_pkce_verifier(PkceCodeVerifier::new(returned.verifier))
        .request_async(http)
        .await
        .map_err(|err| match err {
            RequestTokenError::Parse(err, _) => refused(format!(
                "{name} answered the code exchange with what is not an OpenID Connect token answer (at `{}`): start the sign-in again",
                err.path()
            )),
            other => exchange_refused(name, other),
        })?;
    let id_token = token.id_token().ok_or_else(|| {
        refused(format!(
            "{name} answered the code exchange without an ID token: it is not acting as an OpenID Provider"
        ))
    })?;
    let nonce = Nonce::new(nonce_of(returned.state));
    let claims = loop {
        let client = client_of(provider, &discovered)?;
        match id_token.claims(&client.id_token_verifier(), &nonce) {
            Ok(claims) => break claims.clone(),
            Err(ClaimsVerificationError::SignatureVerification(
                SignatureVerificationError::NoMatchingKey,
            )) => match keys_refetched(http, provider, &discovered).await? {
                Some(refetched) if refetched.jwks_fetched_at > discovered.jwks_fetched_at => {
                    discovered = refetched;
                }
                _ => {
                    return Err(refused(format!(
                        "{name}'s ID token is signed with a key it does not publish: start the sign-in again"
                    )));
                }
            },
            Err(err) => {
                return Err(refused(format!(
                    "{name}'s ID token is not valid ({}): start the sign-in again",
                    claims_error(&err)
                )));
            }
        }
    };
    let subject = claims.subject().as_str().to_owned();
    let mut login = claims
        .email()
        .map(|email| email.as_str().to_owned())
        .or_else(|| claims.preferred_username().map(|u| u.as_str().to_owned()));
    let client = client_of(provider, &discovered)?;
    if let Ok(request) = client.user_info(
        AccessToken::new(token.access_token().secret().clone()),
        Some(claims.subject().clone()),
    ) {
        let info: CoreUserInfoClaims = request.request_async(http).await.map_err(|err| match err {
            UserInfoError::Request(err) => err,
            UserInfoError::ClaimsVerification(err) => refused(format!(
                "{name}'s userinfo endpoint answered for another account than the ID token's ({}): start the sign-in again",
                claims_error(&err)
            )),
            UserInfoError::Response(status, _, _) => {
                refused(format!("{name} did not show the account ({status})"))
            }
            other => refused(format!("{name} did not show the account: {other}")),
        })?;
        login = info
            .email()
            .map(|email| email.as_str().to_owned())
            .or_else(|| info.preferred_username().map(|u| u.as_str().to_owned()))
            .or(login);
    }
    Ok(Account {
        subject,
        login: login.unwrap_or_default(),
    })
}

/// What was wrong with a token's claims, said without its contents.
fn claims_error(err: &ClaimsVerificationError) -> String {
    match err {
        ClaimsVerificationError::Expired(_) => "it has expired".into(),
        ClaimsVerificationError::InvalidAudience(_) => "it was issued to another client".into(),
        ClaimsVerificationError::InvalidIssuer(_) => "it was issued by another issuer".into(),
        ClaimsVerificationError::InvalidNonce(_) => {
            "it was made for another sign-in (its nonce)".into()
        }
        ClaimsVerificationError::InvalidSubject(_) => "its subject is not the ID token's".into(),
        ClaimsVerificationError::SignatureVerification(SignatureVerificationError::NoSignature) => {
            "it is not signed (`alg: none`)".into()
        }
        ClaimsVerificationError::SignatureVerification(_) => "its signature does not verify".into(),
        other => other.to_string(),
    }
}
