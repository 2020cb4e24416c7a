//! Resources that belong to a project (environments, services, domains, git installations,
//! webhook endpoints): found by id *within* a project, so that another project's id is "not
//! found", and listed a page at a time for anyone who may view the project. One generic for
//! all of them.

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};

use crate::app::App;
use crate::app::shared::pagination::{CursorKey, Page, PageParams, paginate};
use crate::authz::{Principal, ProjectRole, Scope};
use crate::error::{AppError, AppResult};
use crate::ids::ProjectId;

/// A table whose rows belong to a project.
pub trait ProjectScoped: EntityTrait {
    /// Its id's type.
    type Id: CursorKey + Copy + Send + Sync + 'static;
    /// What it is called in a 404 (`environment not found`).
    const NAME: &'static str;

    fn id_column() -> Self::Column;
    fn project_column() -> Self::Column;
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
