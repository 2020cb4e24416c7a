//! Resources that belong to a project (environments, services, domains, git installations,
//! webhook endpoints): found by id *within* a project, so that another project's id is "not
//! found", and listed a page at a time for anyone who may view the project. One generic for
//! all of them.

use std::collections::HashMap;

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, TryGetable};
use serde::Serialize;
use uuid::Uuid;

use super::write::Revisioned;
use crate::app::App;
use crate::app::shared::pagination::{
    CursorKey, ListOrder, Page, PageParams, ViewPage, page_cut, page_select, paginate,
};
use crate::authz::{Principal, ProjectRole, Scope};
use crate::error::{AppError, AppResult};
use crate::ids::ProjectId;

/// A table whose rows belong to a project.
pub trait ProjectScoped: EntityTrait {
    /// Its id's type.
    type Id: CursorKey + TryGetable + Into<Uuid> + Copy + Send + Sync + 'static;
    /// What it is called in a 404 (`environment not found`).
    const NAME: &'static str;

    fn id_column() -> Self::Column;
    fn project_column() -> Self::Column;
    fn revision_column() -> Self::Column;
    fn id_of(model: &Self::Model) -> Self::Id;
}

/// Row `id` of `E`, if it belongs to `project_id`; 404 otherwise (another project's row too).
pub async fn scoped_find<E: ProjectScoped>(
    db: &impl ConnectionTrait,
    project_id: ProjectId,
    id: E::Id,
) -> AppResult<E::Model> {
    E::find()
        .filter(E::id_column().eq(id))
        .filter(E::project_column().eq(project_id))
        .one(db)
        .await?
        .ok_or_else(|| AppError::not_found(E::NAME))
}

impl App {
    /// A page of `project_id`'s rows of `E`, for a caller who may view the project.
    pub async fn scoped_list<E: ProjectScoped>(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        params: PageParams,
    ) -> AppResult<Page<E::Model>> {
        self.project_authorize(principal, project_id, ProjectRole::Viewer, Scope::Read)
            .await?;
        let select = E::find().filter(E::project_column().eq(project_id));
        paginate(&self.db, select, E::id_column(), E::id_of, &params).await
    }

    /// One page of `E` in `project_id` as views `V`, for a caller who may view the project.
    ///
    /// The page's ids and revisions are read first (two columns a row); the views kept at
    /// those revisions ([`crate::app::shared::view_cache`]) are used as they are, and only the
    /// other rows are read whole and converted, in one more query. `V` must depend on the row
    /// alone (not on who asks).
    pub async fn scoped_list_views<E, V>(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        params: PageParams,
    ) -> AppResult<ViewPage>
    where
        E: ProjectScoped,
        E::Model: Revisioned,
        V: Serialize + TryFrom<E::Model>,
        AppError: From<V::Error>,
    {
        self.project_authorize(principal, project_id, ProjectRole::Viewer, Scope::Read)
            .await?;
        let select = E::find()
            .select_only()
            .column(E::id_column())
            .column(E::revision_column())
            .filter(E::project_column().eq(project_id));
        let (select, limit) =
            page_select::<_, _, E::Id>(select, E::id_column(), &params, ListOrder::Asc)?;
        let mut keys: Vec<(E::Id, i64)> = select.into_tuple().all(&self.db).await?;
        let next_cursor = page_cut(&mut keys, limit, |(id, _)| *id);
        let mut views: Vec<_> = keys
            .iter()
            .map(|&(id, revision)| {
                let id: Uuid = id.into();
                (id, self.view_cache.get(E::NAME, id, revision))
            })
            .collect();
        let missing: Vec<E::Id> = keys
            .iter()
            .zip(&views)
            .filter(|(_, (_, view))| view.is_none())
            .map(|((id, _), _)| *id)
            .collect();
        if !missing.is_empty() {
            let mut rows: HashMap<Uuid, E::Model> = E::find()
                .filter(E::id_column().is_in(missing))
                .filter(E::project_column().eq(project_id))
                .all(&self.db)
                .await?
                .into_iter()
                .map(|row| (E::id_of(&row).into(), row))
                .collect();
            for (id, view) in views.iter_mut().filter(|(_, view)| view.is_none()) {
                // A row deleted between the two reads is left out of the page.
                if let Some(row) = rows.remove(&*id) {
                    let revision = row.revision();
                    *view =
                        Some(
                            self.view_cache
                                .put(E::NAME, *id, revision, &V::try_from(row)?)?,
                        );
                }
            }
        }
        let rows = views
            .into_iter()
            .filter_map(|(id, view)| Some((id, view?)))
            .collect();
        Ok(ViewPage::new(E::NAME, rows, next_cursor))
    }

    /// Row `id` of `E` in `project_id`, for a caller who may view the project.
    pub async fn scoped_view<E: ProjectScoped>(
        &self,
        principal: &Principal,
        project_id: ProjectId,
        id: E::Id,
    ) -> AppResult<E::Model> {
        self.project_authorize(principal, project_id, ProjectRole::Viewer, Scope::Read)
            .await?;
        scoped_find::<E>(&self.db, project_id, id).await
    }
}

/// Declares `$entity` a [`ProjectScoped`] table with ids of `$id`, called `$name`.
macro_rules! project_scoped {
    ($entity:ident, $id:ty, $name:literal) => {
        impl crate::app::projects::scoped::ProjectScoped for crate::entity::$entity::Entity {
            type Id = $id;
            const NAME: &'static str = $name;

            fn id_column() -> Self::Column {
                crate::entity::$entity::Column::Id
            }

            fn project_column() -> Self::Column {
                crate::entity::$entity::Column::ProjectId
            }

            fn revision_column() -> Self::Column {
                crate::entity::$entity::Column::Revision
            }

            fn id_of(model: &Self::Model) -> Self::Id {
                model.id
            }
        }
    };
}

project_scoped!(environment, crate::ids::EnvironmentId, "environment");
project_scoped!(service, crate::ids::ServiceId, "service");
project_scoped!(domain, uuid::Uuid, "domain");
project_scoped!(git_installation, uuid::Uuid, "git installation");
project_scoped!(webhook_endpoint, uuid::Uuid, "webhook endpoint");
