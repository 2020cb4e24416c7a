//! `bulkhead members` (a project's members and the invitations it sent: list, invite, change a
//! role, remove, revoke) and `bulkhead invitations` (yours: list, accept, decline). Members and
//! invitations are named by email.

use bulkhead_client::types;
use clap::Subcommand;
use uuid::Uuid;

use super::connection::{Connection, GlobalArgs};
use super::exit::{Exit, fail};
use super::listing::{Listed, Paging, list_pages};
use super::output::{self, Row};
use super::resolve;

const ROLES: [&str; 4] = ["viewer", "member", "admin", "owner"];

#[derive(clap::Args)]
#[command(after_help = "Example:
  bulkhead members invite -p shop bob@example.com --role member
  bulkhead members set-role -p shop bob@example.com admin")]
pub struct MembersArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    action: MembersAction,
}

#[derive(Subcommand)]
pub enum MembersAction {
    /// List a project's members and their roles.
    #[command(after_help = "Example:\n  bulkhead members list -p shop")]
    List {
        /// The project (name or id).
        #[arg(short, long)]
        project: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// Invite an email to the project with a role (it accepts with `bulkhead invitations`).
    #[command(
        after_help = "Example:\n  bulkhead members invite -p shop bob@example.com --role viewer"
    )]
    Invite {
        #[arg(short, long)]
        project: String,
        email: String,
        #[arg(long, value_parser = ROLES)]
        role: String,
    },
    /// The invitations the project sent that are still pending.
    #[command(after_help = "Example:\n  bulkhead members invitations -p shop")]
    Invitations {
        #[arg(short, long)]
        project: String,
        #[command(flatten)]
        paging: Paging,
    },
    /// Withdraw the pending invitation of an email.
    #[command(after_help = "Example:\n  bulkhead members revoke -p shop bob@example.com")]
    Revoke {
        #[arg(short, long)]
        project: String,
        email: String,
    },
    /// Change a member's role.
    #[command(after_help = "Example:\n  bulkhead members set-role -p shop bob@example.com admin")]
    SetRole {
        #[arg(short, long)]
        project: String,
        email: String,
        #[arg(value_parser = ROLES)]
        role: String,
    },
    /// Remove a member from the project.
    #[command(after_help = "Example:\n  bulkhead members remove -p shop bob@example.com")]
    Remove {
        #[arg(short, long)]
        project: String,
        email: String,
    },
}

#[derive(clap::Args)]
#[command(after_help = "Example:
  bulkhead invitations list
  bulkhead invitations accept shop")]
pub struct InvitationsArgs {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    action: InvitationsAction,
}

#[derive(Subcommand)]
pub enum InvitationsAction {
    /// Your pending invitations to projects.
    #[command(after_help = "Example:\n  bulkhead invitations list")]
    List(Paging),
    /// Accept the invitation to a project (by its name or id): you become a member.
    #[command(after_help = "Example:\n  bulkhead invitations accept shop")]
    Accept { project: String },
    /// Decline the invitation to a project (by its name or id).
    #[command(after_help = "Example:\n  bulkhead invitations decline shop")]
    Decline { project: String },
}

impl Row for types::MemberView {
    const HEADER: &'static [&'static str] = &["EMAIL", "NAME", "ROLE", "SINCE"];
    fn row(&self) -> Vec<String> {
        vec![
            self.email.clone(),
            self.name.clone(),
            self.role.to_string(),
            self.created_at.to_rfc3339(),
        ]
    }
}

impl Row for types::InvitationView {
    const HEADER: &'static [&'static str] = &["PROJECT", "EMAIL", "ROLE", "EXPIRES", "ID"];
    fn row(&self) -> Vec<String> {
        vec![
            self.project_name.clone(),
            self.email.clone(),
            self.role.to_string(),
            self.expires_at.to_rfc3339(),
            self.id.to_string(),
        ]
    }
}

fn role_of(role: &str) -> anyhow::Result<types::ProjectRole> {
    match role.parse() {
        Ok(role) => Ok(role),
        Err(_) => fail(Exit::Usage, format!("`{role}` is not a role")),
    }
}

pub async fn members(args: MembersArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let format = args.global.output;
    match args.action {
        MembersAction::List { project, paging } => {
            let project = resolve::project_id(&connection, &project).await?;
            members_listed(&connection, project, paging.all)
                .await?
                .print(format);
        }
        MembersAction::Invite {
            project,
            email,
            role,
        } => {
            let project = resolve::project_id(&connection, &project).await?;
            let role = role_of(&role)?;
            let invitation = connection
                .call(async |c| {
                    c.invitation_create()
                        .project_id(project)
                        .body_map(|b| b.email(email.clone()).role(role))
                        .send()
                        .await
                })
                .await?;
            output::one(format, &invitation);
        }
        MembersAction::Invitations { project, paging } => {
            let project = resolve::project_id(&connection, &project).await?;
            invitations_listed(&connection, project, paging.all)
                .await?
                .print(format);
        }
        MembersAction::Revoke { project, email } => {
            let project = resolve::project_id(&connection, &project).await?;
            let invitations = invitations_listed(&connection, project, true).await?;
            let Some(invitation) = invitations
                .items
                .iter()
                .find(|i| i.email.eq_ignore_ascii_case(&email))
            else {
                return fail(Exit::NotFound, format!("no pending invitation of {email}"));
            };
            let id = invitation.id;
            connection
                .call(async |c| {
                    c.invitation_revoke()
                        .project_id(project)
                        .invitation_id(id)
                        .send()
                        .await
                })
                .await?;
            output::done(format!("Withdrew the invitation of {email}."));
        }
        MembersAction::SetRole {
            project,
            email,
            role,
        } => {
            let project = resolve::project_id(&connection, &project).await?;
            let user = member_id(&connection, project, &email).await?;
            let role = role_of(&role)?;
            let member = connection
                .call(async |c| {
                    c.member_update()
                        .project_id(project)
                        .user_id(user)
                        .body_map(|b| b.role(role))
                        .send()
                        .await
                })
                .await?;
            output::one(format, &member);
        }
        MembersAction::Remove { project, email } => {
            let project = resolve::project_id(&connection, &project).await?;
            let user = member_id(&connection, project, &email).await?;
            connection
                .call(async |c| {
                    c.member_remove()
                        .project_id(project)
                        .user_id(user)
                        .send()
                        .await
                })
                .await?;
            output::done(format!("Removed {email} from the project."));
        }
    }
    Ok(())
}

pub async fn invitations(args: InvitationsArgs) -> anyhow::Result<()> {
    let connection = Connection::open(&args.global)?;
    let format = args.global.output;
    // Accepting or declining looks through every invitation; listing shows the first page
    // unless `--all`.
    let all = match &args.action {
        InvitationsAction::List(paging) => paging.all,
        _ => true,
    };
    let mine = list_pages!(connection, all, |c| c.me_invitation_list());
    // Project names are not unique across owners: a name that two invitations share is
    // refused rather than guessed.
    let to = |project: &str| -> anyhow::Result<Uuid> {
        let named: Vec<Uuid> = mine
            .items
            .iter()
            .filter(|i| i.project_name == project || i.project_id.to_string() == project)
            .map(|i| i.id)
            .collect();
        match named.as_slice() {
            [id] => Ok(*id),
            [] => fail(Exit::NotFound, format!("no invitation to {project}")),
            _ => fail(
                Exit::InvalidInput,
                format!("several invitations to projects named {project}: give the project's id"),
            ),
        }
    };
    match args.action {
        InvitationsAction::List(_) => mine.print(format),
        InvitationsAction::Accept { project } => {
            let id = to(&project)?;
            let member = connection
                .call(async |c| c.me_invitation_accept().invitation_id(id).send().await)
                .await?;
            output::one(format, &member);
        }
        InvitationsAction::Decline { project } => {
            let id = to(&project)?;
            connection
                .call(async |c| c.me_invitation_decline().invitation_id(id).send().await)
                .await?;
            output::done(format!("Declined the invitation to {project}."));
        }
    }
    Ok(())
}

async fn members_listed(
    connection: &Connection,
    project: Uuid,
    all: bool,
) -> anyhow::Result<Listed<types::MemberView>> {
    Ok(list_pages!(connection, all, |c| c
        .member_list()
        .project_id(project)))
}

async fn invitations_listed(
    connection: &Connection,
    project: Uuid,
    all: bool,
) -> anyhow::Result<Listed<types::InvitationView>> {
    Ok(list_pages!(connection, all, |c| c
        .invitation_list()
        .project_id(project)))
}

/// The user id of the project's member with `email`.
async fn member_id(connection: &Connection, project: Uuid, email: &str) -> anyhow::Result<Uuid> {
    let members = members_listed(connection, project, true).await?;
    match members
        .items
        .iter()
        .find(|m| m.email.eq_ignore_ascii_case(email))
    {
        Some(member) => Ok(member.user_id),
        None => fail(
            Exit::NotFound,
            format!("{email} is not a member of the project"),
        ),
    }
}
