//! GitHub's OAuth apps: OAuth 2.0's authorization code flow with PKCE (the `oauth2` crate),
//! no ID token; the account is `GET {userinfo_url}`'s `id` and `login`. The client secret goes
//! in the form body, as GitHub's documentation shows.

use oauth2::basic::BasicClient;
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope, TokenResponse, TokenUrl,
};

use crate::app::identity::sign_in::calls::ProviderHttp;
use crate::app::identity::sign_in::outside::{Account, exchange_refused, refused};
use crate::config::SignInProvider;
use crate::error::{AppError, AppResult};

type Client = BasicClient<
    oauth2::EndpointSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointNotSet,
    oauth2::EndpointSet,
>;

fn client_of(provider: &SignInProvider) -> AppResult<Client> {
    Ok(BasicClient::new(ClientId::new(provider.client_id.clone()))
        .set_client_secret(ClientSecret::new(provider.client_secret.clone()))
        .set_auth_uri(
            AuthUrl::new(provider.authorize_url().to_owned()).map_err(AppError::internal)?,
        )
        .set_token_uri(TokenUrl::new(provider.token_url().to_owned()).map_err(AppError::internal)?)
        .set_redirect_uri(
            RedirectUrl::new(provider.redirect_uri.clone()).map_err(AppError::internal)?,
        )
        .set_auth_type(AuthType::RequestBody))
}

/// GitHub's page to send the browser to, for the sign-in `state` with the PKCE `verifier`.
pub(crate) fn authorize_url(
    provider: &SignInProvider,
    state: &str,
    verifier: &str,
) -> AppResult<String> {
    let challenge =
        PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(verifier.to_owned()));
    let state = state.to_owned();
    let (url, _) = client_of(provider)?
        .authorize_url(move || CsrfToken::new(state))
        .add_scopes(provider.scopes.iter().cloned().map(Scope::new))
        .set_pkce_challenge(challenge)
        .url();
    Ok(url.to_string())
}

/// The account a code stands for: exchanged with the verifier, then read.
pub(crate) async fn account(
    http: &ProviderHttp<'_>,
    provider: &SignInProvider,
    code: &str,
    verifier: String,
) -> AppResult<Account> {
    let name = provider.name.as_str();
    let token = client_of(provider)?
        .exchange_code(AuthorizationCode::new(code.to_owned()))
        .set_pkce_verifier(PkceCodeVerifier::new(verifier))
        .request_async(http)
        .await
        .map_err(|err| match err {
            // GitHub answers a refused code with 200 and `{"error": …}`.
            RequestTokenError::Parse(_, body) => {
                let error = serde_json::from_slice::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|answer| answer["error"].as_str().map(str::to_owned))
                    .filter(|error| error.len() <= 64)
                    .unwrap_or_else(|| "no token".into());
                refused(format!(
                    "{name} refused the code ({error}): start the sign-in again"
                ))
            }
            other => exchange_refused(name, other),
        })?;
    let read = http
        .get(provider.userinfo_url())
        .bearer_auth(token.access_token().secret())
        .header("accept", "application/json")
        .header("user-agent", "Bulkhead");
    let answer = http.send(read).await?;
    if !answer.status().is_success() {
        return Err(refused(format!(
            "{name} did not show the account ({})",
            answer.status()
        )));
    }
    let info: serde_json::Value = serde_json::from_slice(answer.body())
        .map_err(|err| refused(format!("{name}'s account is not JSON: {err}")))?;
    let text = |value: &serde_json::Value| match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    Ok(Account {
        subject: text(&info["id"]).unwrap_or_default(),
        login: text(&info["login"]).unwrap_or_default(),
    })
}
