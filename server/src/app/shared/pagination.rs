//! Cursor pagination, the same for every list: items are ordered by id (UUIDv7, so by creation
//! time) or by a unique name, and the cursor is the last key of a page, opaque to clients.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Select,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::error::{AppError, AppResult, ErrorCode};
use crate::ids::{DeploymentId, EnvironmentId, InstanceId, ProjectId, ServiceId};

pub const DEFAULT_LIMIT: u64 = 50;
pub const MAX_LIMIT: u64 = 200;

/// Query parameters of every list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Items per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// The order of a list that can be read either way (by id, so by creation time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    /// Oldest first.
    #[default]
    Asc,
    /// Newest first.
    Desc,
}

/// Query parameters of a list that can be read either way.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OrderedPageParams {
    /// `asc` (oldest first, the default) or `desc` (newest first). A cursor continues the
    /// order it was given in.
    pub order: Option<ListOrder>,
    /// Items per page, 1 to 200 (default 50).
    #[param(minimum = 1, maximum = 200)]
    pub limit: Option<u64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

impl OrderedPageParams {
    /// The page wanted, and in which order.
    pub fn split(self) -> (PageParams, ListOrder) {
        let page = PageParams {
            limit: self.limit,
            cursor: self.cursor,
        };
        (page, self.order.unwrap_or_default())
    }
}

/// One page of a list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            next_cursor: self.next_cursor,
        }
    }

    /// [`Self::map`] with a conversion that may fail.
    pub fn try_map<U>(self, f: impl FnMut(T) -> AppResult<U>) -> AppResult<Page<U>> {
        Ok(Page {
            items: self
                .items
                .into_iter()
                .map(f)
                .collect::<AppResult<Vec<U>>>()?,
            next_cursor: self.next_cursor,
        })
    }
}

impl PageParams {
    fn limit(&self) -> AppResult<u64> {
        match self.limit.unwrap_or(DEFAULT_LIMIT) {
            limit @ 1..=MAX_LIMIT => Ok(limit),
            _ => Err(AppError::new(
                ErrorCode::InvalidQuery,
                format!("`limit` must be between 1 and {MAX_LIMIT}"),
            )),
        }
    }

    fn after<K: CursorKey>(&self) -> AppResult<Option<K>> {
        let Some(cursor) = &self.cursor else {
            return Ok(None);
        };
        URL_SAFE_NO_PAD
            .decode(cursor)
            .ok()
            .and_then(|bytes| K::from_cursor(&bytes))
            .map(Some)
            .ok_or_else(|| {
                AppError::new(
                    ErrorCode::InvalidCursor,
                    "`cursor` is not a cursor returned by this list",
                )
            })
    }
}

/// A key that lists are ordered by and that a cursor carries: a UUIDv7 id, or a unique name.
pub trait CursorKey: Sized + Into<sea_orm::Value> {
    fn to_cursor(&self) -> Vec<u8>;
    fn from_cursor(bytes: &[u8]) -> Option<Self>;
}

impl CursorKey for Uuid {
    fn to_cursor(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }

    fn from_cursor(bytes: &[u8]) -> Option<Self> {
        Uuid::from_slice(bytes).ok()
    }
}

impl CursorKey for String {
    fn to_cursor(&self) -> Vec<u8> {
        self.as_bytes().to_vec()
    }

    fn from_cursor(bytes: &[u8]) -> Option<Self> {
        String::from_utf8(bytes.to_vec()).ok()
    }
}

/// A typed id's cursor is its UUID's.
macro_rules! uuid_cursor {
    ($($id:ty),*) => {
        $(
            impl CursorKey for $id {
                fn to_cursor(&self) -> Vec<u8> {
                    self.0.to_cursor()
                }

                fn from_cursor(bytes: &[u8]) -> Option<Self> {
                    Uuid::from_cursor(bytes).map(Self)
                }
            }
        )*
    };
}

uuid_cursor!(
    ProjectId,
    EnvironmentId,
    ServiceId,
    DeploymentId,
    InstanceId
);

/// Runs `select` for one page, ordered by `id_column`.
pub async fn paginate<E, C, K>(
    db: &impl ConnectionTrait,
    select: Select<E>,
    id_column: C,
    id_of: impl Fn(&E::Model) -> K,
    params: &PageParams,
) -> AppResult<Page<E::Model>>
where
    E: EntityTrait,
    C: ColumnTrait,
    K: CursorKey,
{
    paginate_ordered(db, select, id_column, id_of, params, ListOrder::Asc).await
}

/// [`paginate`] in `order`: newest first, each page's cursor is the oldest key it holds.
pub async fn paginate_ordered<E, C, K>(
    db: &impl ConnectionTrait,
    select: Select<E>,
    id_column: C,
    id_of: impl Fn(&E::Model) -> K,
    params: &PageParams,
    order: ListOrder,
) -> AppResult<Page<E::Model>>
where
    E: EntityTrait,
    C: ColumnTrait,
    K: CursorKey,
{
    let limit = params.limit()?;
    let mut select = match order {
        ListOrder::Asc => select.order_by_asc(id_column),
        ListOrder::Desc => select.order_by_desc(id_column),
    }
    .limit(limit + 1);
    if let Some(after) = params.after::<K>()? {
        select = select.filter(match order {
            ListOrder::Asc => id_column.gt(after),
            ListOrder::Desc => id_column.lt(after),
        });
    }
    let mut items = select.all(db).await?;
    let next_cursor = if items.len() as u64 > limit {
        items.truncate(limit as usize);
        items
            .last()
            .map(|last| URL_SAFE_NO_PAD.encode(id_of(last).to_cursor()))
    } else {
        None
    };
    Ok(Page { items, next_cursor })
}
