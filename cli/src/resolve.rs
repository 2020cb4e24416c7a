//! Projects, environments and services may be named on the command line by id or by name:
//! an id is used as it is (the server says whether it exists), a name is looked up in the
//! list the caller can see. No match, or several, is a clear error.

use uuid::Uuid;

use super::connection::Connection;
use super::exit::{Exit, fail};
use super::listing::list_pages;

/// Every (id, name) of a list operation of the generated client, page after page.
macro_rules! names_listed {
    ($connection:expr, |$client:ident| $list:expr) => {
        list_pages!($connection, true, |$client| $list)
            .items
            .into_iter()
            .map(|item| (item.id, item.name))
            .collect::<Vec<(Uuid, String)>>()
    };
}

pub async fn project_id(connection: &Connection, wanted: &str) -> anyhow::Result<Uuid> {
    if let Ok(id) = wanted.parse() {
        return Ok(id);
    }
    let named = names_listed!(connection, |c| c.project_list());
    pick("project", "bulkhead projects list", wanted, named)
}

pub async fn environment_id(
    connection: &Connection,
    project: Uuid,
    wanted: &str,
) -> anyhow::Result<Uuid> {
    if let Ok(id) = wanted.parse() {
        return Ok(id);
    }
    let named = names_listed!(connection, |c| c.environment_list().project_id(project));
    let list = format!("bulkhead projects environments list -p {project}");
    pick("environment", &list, wanted, named)
}

pub async fn service_id(
    connection: &Connection,
    project: Uuid,
    wanted: &str,
) -> anyhow::Result<Uuid> {
    if let Ok(id) = wanted.parse() {
        return Ok(id);
    }
    let named = names_listed!(connection, |c| c.service_list().project_id(project));
    let list = format!("bulkhead services list -p {project}");
    pick("service", &list, wanted, named)
}

/// A project and a service of it, each by id or name.
pub async fn project_and_service(
    connection: &Connection,
    project: &str,
    service: &str,
) -> anyhow::Result<(Uuid, Uuid)> {
    let project = project_id(connection, project).await?;
    Ok((project, service_id(connection, project, service).await?))
}

/// The one id named `wanted`.
fn pick(kind: &str, list: &str, wanted: &str, named: Vec<(Uuid, String)>) -> anyhow::Result<Uuid> {
    let matches: Vec<Uuid> = named
        .into_iter()
        .filter(|(_, name)| name == wanted)
        .map(|(id, _)| id)
        .collect();
    match matches.as_slice() {
        [id] => Ok(*id),
        [] => fail(
            Exit::NotFound,
            format!("no {kind} named `{wanted}` that you can see (`{list}` lists them)"),
        ),
        several => fail(
            Exit::InvalidInput,
            format!(
                "{} {kind}s are named `{wanted}`: give the id of one ({})",
                several.len(),
                several
                    .iter()
                    .map(Uuid::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_picks_its_one_match_and_refuses_none_or_several() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let named = || vec![(a, "shop".to_owned()), (b, "blog".to_owned())];
        assert_eq!(pick("project", "ls", "shop", named()).unwrap(), a);
        let missing = pick("project", "ls", "nope", named()).unwrap_err();
        assert_eq!(Exit::of_error(&missing), Exit::NotFound);
        let twice = vec![(a, "shop".to_owned()), (b, "shop".to_owned())];
        let ambiguous = pick("project", "ls", "shop", twice).unwrap_err();
        assert_eq!(Exit::of_error(&ambiguous), Exit::InvalidInput);
    }
}
