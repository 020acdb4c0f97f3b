//! Backend-neutral SQL types: each maps to PostgreSQL's native type (uuid, jsonb,
//! timestamptz, an enum type) and to SQLite's nearest equivalent (CHECK-constrained
//! text), so one `schema.rs` and one set of queries serve both backends.

#[cfg(feature = "postgres")]
use std::io::Write;

use chrono::{DateTime, Utc};
use ctxsync_protocol::{BodyKind, DiscoveryPhase, ResourceStatus};
use diesel::deserialize::{self, FromSql, FromSqlRow};
use diesel::expression::AsExpression;
#[cfg(feature = "postgres")]
use diesel::pg::{Pg, PgValue};
use diesel::query_builder::QueryId;
use diesel::serialize::{self, IsNull, Output, ToSql};
use diesel::sql_types::SqlType;
#[cfg(feature = "postgres")]
use diesel::sql_types::Timestamptz;
#[cfg(feature = "sqlite")]
use diesel::sql_types::TimestamptzSqlite;
#[cfg(feature = "sqlite")]
use diesel::sqlite::{Sqlite, SqliteValue};

/// PostgreSQL `uuid`; SQLite canonical lower-case text (`CHECK (length(id) = 36)`).
#[derive(Clone, Copy, Debug, Default, SqlType, QueryId)]
#[diesel(postgres_type(oid = 2950, array_oid = 2951))]
#[diesel(sqlite_type(name = "Text"))]
pub struct UuidSql;

/// PostgreSQL `jsonb`; SQLite JSON text (`CHECK (json_valid(..))`).
#[derive(Clone, Copy, Debug, Default, SqlType, QueryId)]
#[diesel(postgres_type(oid = 3802, array_oid = 3807))]
#[diesel(sqlite_type(name = "Text"))]
pub struct JsonSql;

/// PostgreSQL `timestamptz`; SQLite RFC 3339-like UTC text.
#[derive(Clone, Copy, Debug, Default, SqlType, QueryId)]
#[diesel(postgres_type(oid = 1184, array_oid = 1185))]
#[diesel(sqlite_type(name = "Text"))]
pub struct TimestampSql;

/// PostgreSQL enum `context_body_kind`; SQLite text.
#[derive(Clone, Copy, Debug, Default, SqlType, QueryId)]
#[diesel(postgres_type(name = "context_body_kind"))]
#[diesel(sqlite_type(name = "Text"))]
pub struct BodyKindSql;

/// PostgreSQL enum `context_resource_status`; SQLite text.
#[derive(Clone, Copy, Debug, Default, SqlType, QueryId)]
#[diesel(postgres_type(name = "context_resource_status"))]
#[diesel(sqlite_type(name = "Text"))]
pub struct ResourceStatusSql;

/// PostgreSQL enum `mcp_discovery_phase`; SQLite text.
#[derive(Clone, Copy, Debug, Default, SqlType, QueryId)]
#[diesel(postgres_type(name = "mcp_discovery_phase"))]
#[diesel(sqlite_type(name = "Text"))]
pub struct DiscoveryPhaseSql;

// ---- json ----------------------------------------------------------------------------

/// A JSON document as text: written as-is (SQLite) or as jsonb (PostgreSQL), so the
/// exact bytes the server hashed are the bytes it stores.
#[derive(Clone, Debug, PartialEq, Eq, AsExpression, FromSqlRow)]
#[diesel(sql_type = JsonSql)]
pub struct JsonText(pub String);

/// The jsonb binary format version PostgreSQL speaks.
#[cfg(feature = "postgres")]
const JSONB_VERSION: u8 = 1;

#[cfg(feature = "postgres")]
impl ToSql<JsonSql, Pg> for JsonText {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        out.write_all(&[JSONB_VERSION])?;
        out.write_all(self.0.as_bytes())?;
        Ok(IsNull::No)
    }
}

#[cfg(feature = "postgres")]
impl FromSql<JsonSql, Pg> for JsonText {
    fn from_sql(value: PgValue<'_>) -> deserialize::Result<Self> {
        match value.as_bytes().split_first() {
            Some((&JSONB_VERSION, text)) => Ok(Self(std::str::from_utf8(text)?.to_owned())),
            Some((version, _)) => Err(format!("unsupported jsonb version {version}").into()),
            None => Err("empty jsonb value".into()),
        }
    }
}

#[cfg(feature = "sqlite")]
impl ToSql<JsonSql, Sqlite> for JsonText {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
        out.set_value(self.0.as_str());
        Ok(IsNull::No)
    }
}

#[cfg(feature = "sqlite")]
impl FromSql<JsonSql, Sqlite> for JsonText {
    fn from_sql(mut value: SqliteValue<'_, '_, '_>) -> deserialize::Result<Self> {
        Ok(Self(value.read_text().to_owned()))
    }
}

// ---- timestamps ----------------------------------------------------------------------

/// A UTC timestamp column value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, AsExpression, FromSqlRow)]
#[diesel(sql_type = TimestampSql)]
pub struct DbTime(pub DateTime<Utc>);

#[cfg(feature = "postgres")]
impl ToSql<TimestampSql, Pg> for DbTime {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        <DateTime<Utc> as ToSql<Timestamptz, Pg>>::to_sql(&self.0, out)
    }
}

#[cfg(feature = "postgres")]
impl FromSql<TimestampSql, Pg> for DbTime {
    fn from_sql(value: PgValue<'_>) -> deserialize::Result<Self> {
        <DateTime<Utc> as FromSql<Timestamptz, Pg>>::from_sql(value).map(Self)
    }
}

#[cfg(feature = "sqlite")]
impl ToSql<TimestampSql, Sqlite> for DbTime {
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
        <DateTime<Utc> as ToSql<TimestamptzSqlite, Sqlite>>::to_sql(&self.0, out)
    }
}

#[cfg(feature = "sqlite")]
impl FromSql<TimestampSql, Sqlite> for DbTime {
    fn from_sql(value: SqliteValue<'_, '_, '_>) -> deserialize::Result<Self> {
        <DateTime<Utc> as FromSql<TimestamptzSqlite, Sqlite>>::from_sql(value).map(Self)
    }
}

// ---- enums ---------------------------------------------------------------------------

/// A column holding a domain enum under its lower-case name: the PostgreSQL enum label
/// (whose binary form is the label's text) or SQLite text.
macro_rules! enum_as_label {
    ($(#[$doc:meta])* $wrapper:ident($rust:ty) as $sql:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, AsExpression, FromSqlRow)]
        #[diesel(sql_type = $sql)]
        pub struct $wrapper(pub $rust);

        impl $wrapper {
            fn parse(label: &str) -> deserialize::Result<Self> {
                <$rust>::parse(label)
                    .map(Self)
                    .ok_or_else(|| format!("unknown {} `{label}`", stringify!($rust)).into())
            }
        }

        #[cfg(feature = "postgres")]
        impl ToSql<$sql, Pg> for $wrapper {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
                out.write_all(self.0.as_str().as_bytes())?;
                Ok(IsNull::No)
            }
        }

        #[cfg(feature = "postgres")]
        impl FromSql<$sql, Pg> for $wrapper {
            fn from_sql(value: PgValue<'_>) -> deserialize::Result<Self> {
                Self::parse(std::str::from_utf8(value.as_bytes())?)
            }
        }

        #[cfg(feature = "sqlite")]
        impl ToSql<$sql, Sqlite> for $wrapper {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
                out.set_value(self.0.as_str());
                Ok(IsNull::No)
            }
        }

        #[cfg(feature = "sqlite")]
        impl FromSql<$sql, Sqlite> for $wrapper {
            fn from_sql(mut value: SqliteValue<'_, '_, '_>) -> deserialize::Result<Self> {
                Self::parse(value.read_text())
            }
        }
    };
}

enum_as_label!(
    /// A `body_kind` column value.
    DbBodyKind(BodyKind) as BodyKindSql
);
enum_as_label!(
    /// A resource `status` column value.
    DbStatus(ResourceStatus) as ResourceStatusSql
);
enum_as_label!(
    /// An `mcp_discovery_phase` column value.
    DbPhase(DiscoveryPhase) as DiscoveryPhaseSql
);
