//! The command-line client of Bulkhead: the commands that drive a running server through the
//! generated Rust client (`bulkhead-client`), as the lean `bulkhead-cli` binary and as the
//! client commands of the operators' `bulkhead` binary. No server code is in it.
//!
//! One module per group of commands: `login` (login, logout), `projects`, `services`, `domains`,
//! `members` (members and invitations), `deployments` (deploy and deployments), `providers`,
//! `routes`, `tokens`; with what they
//! share: `connection` (flags, credentials, TLS, calls), `servers` (the list of a control
//! plane's replicas, and moving on to the next when one does not answer), `credentials`,
//! `resolve` (names to ids), `follow` (event streams), `output` and [`exit`].

mod connection;
mod credentials;
mod deployments;
mod domains;
pub mod exit;
mod follow;
mod limits;
mod listing;
mod login;
mod logs;
mod members;
mod output;
mod projects;
mod providers;
mod resolve;
mod routes;
mod servers;
mod services;
mod status;
mod tokens;

pub use connection::problem_text;

/// The client commands.
#[derive(clap::Subcommand)]
pub enum ClientCommand {
    /// Log in to a server (email and password, or an API token) and store the credentials.
    Login(login::LoginArgs),
    /// End the session and delete the stored credentials.
    Logout(login::LogoutArgs),
    /// Projects and their environments.
    Projects(projects::ProjectsArgs),
    /// A project's services.
    Services(services::ServicesArgs),
    /// A project's domains: add, verify, remove.
    Domains(domains::DomainsArgs),
    /// A project's members and the invitations it sent.
    Members(members::MembersArgs),
    /// Your invitations to projects: list, accept, decline.
    Invitations(members::InvitationsArgs),
    /// Deploy a service's current spec and follow the rollout to its end.
    Deploy(deployments::DeployArgs),
    /// A service's deployments: list, show, events, cancel, rollback.
    Deployments(deployments::DeploymentsArgs),
    /// Providers: state and health, drain, enable, disable, evacuate, plugin versions.
    Providers(providers::ProvidersArgs),
    /// The routing table, its changes, and the edges serving it.
    Routes(routes::RoutesArgs),
    /// Your API tokens.
    Tokens(tokens::TokensArgs),
    /// The caps on what you (or a project) may hold, and how much is used.
    Limits(limits::LimitsArgs),
    /// What a service's instances print: the newest lines, from a time, or followed.
    Logs(logs::LogsArgs),
    /// The control plane's replicas and the leader of each kind of background work.
    Status(status::StatusArgs),
}

/// Runs one client command.
pub async fn run(command: ClientCommand) -> anyhow::Result<()> {
    bulkhead_common::tls::crypto_provider_install();
    match command {
        ClientCommand::Login(args) => login::login(args).await,
        ClientCommand::Logout(args) => login::logout(args).await,
        ClientCommand::Projects(args) => projects::projects(args).await,
        ClientCommand::Services(args) => services::services(args).await,
        ClientCommand::Domains(args) => domains::domains(args).await,
        ClientCommand::Members(args) => members::members(args).await,
        ClientCommand::Invitations(args) => members::invitations(args).await,
        ClientCommand::Deploy(args) => deployments::deploy(args).await,
        ClientCommand::Deployments(args) => deployments::deployments(args).await,
        ClientCommand::Providers(args) => providers::providers(args).await,
        ClientCommand::Routes(args) => routes::routes(args).await,
        ClientCommand::Tokens(args) => tokens::tokens(args).await,
        ClientCommand::Limits(args) => limits::limits(args).await,
        ClientCommand::Logs(args) => logs::logs(args).await,
        ClientCommand::Status(args) => status::status(args).await,
    }
}

/// What `--help` ends with: the environment the client commands read, and the exit statuses.
pub fn help_footer() -> String {
    format!(
        "Client commands read BULKHEAD_URL (the server), BULKHEAD_TOKEN (an API token) and \
         BULKHEAD_CA_FILE (a private CA), which take precedence over the credentials `login` \
         stores in BULKHEAD_CONFIG_DIR/credentials.json (default: the user's config directory, \
         bulkhead/credentials.json); a flag takes precedence over both, and stored credentials \
         are sent only to the servers that issued them. Servers are reached over HTTPS, \
         verified against the platform's roots (or --ca-file); plain http:// only to \
         loopback. --server (and BULKHEAD_URL) may list the replicas of one control plane, \
         separated by commas: a request that one of them does not answer goes to the next (a \
         write only when it cannot have been applied).\n\n{}",
        exit::Exit::help()
    )
}

/// The commands under `command` (named from `path`) whose `--help` has no example: a test of
/// each binary keeps the list empty.
pub fn commands_without_example(command: &clap::Command, path: &str) -> Vec<String> {
    let mut missing = Vec::new();
    for sub in command.get_subcommands().filter(|c| c.get_name() != "help") {
        let path = format!("{path} {}", sub.get_name());
        let help = sub.get_after_help().map(ToString::to_string);
        if !help.is_some_and(|text| text.contains("Example")) {
            missing.push(path.clone());
        }
        missing.extend(commands_without_example(sub, &path));
    }
    missing
}
