//! Typed ids for agents, chats, turns, sign-ins and audit entries, stored as the
//! backend-neutral [`UuidSql`].

use std::fmt;
use std::str::FromStr;

use diesel::deserialize::{self, FromSql, FromSqlRow};
use diesel::expression::AsExpression;
#[cfg(feature = "postgres")]
use diesel::pg::{Pg, PgValue};
use diesel::serialize::{self, Output, ToSql};
#[cfg(feature = "sqlite")]
use diesel::sqlite::{Sqlite, SqliteValue};
use uuid::Uuid;

use ctxsync_protocol::tool_call::ToolCallId;

use crate::sql_types::UuidSql;

macro_rules! uuid_id {
    ($(#[$doc:meta])* $vis:vis $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, AsExpression, FromSqlRow)]
        #[diesel(sql_type = UuidSql)]
        $vis struct $name(Uuid);

        impl $name {
            /// A fresh random (v4) id.
            $vis fn new_random() -> Self {
                Self(Uuid::new_v4())
            }

            /// Wraps an existing UUID (any version).
            $vis fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }

            /// The underlying UUID.
            $vis fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.hyphenated().fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(text).map(Self)
            }
        }

        #[cfg(feature = "postgres")]
        impl ToSql<UuidSql, Pg> for $name {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
                <Uuid as ToSql<diesel::sql_types::Uuid, Pg>>::to_sql(&self.0, out)
            }
        }

        #[cfg(feature = "postgres")]
        impl FromSql<UuidSql, Pg> for $name {
            fn from_sql(value: PgValue<'_>) -> deserialize::Result<Self> {
                <Uuid as FromSql<diesel::sql_types::Uuid, Pg>>::from_sql(value).map(Self)
            }
        }

        #[cfg(feature = "sqlite")]
        impl ToSql<UuidSql, Sqlite> for $name {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Sqlite>) -> serialize::Result {
                out.set_value(self.0.hyphenated().to_string());
                Ok(serialize::IsNull::No)
            }
        }

        #[cfg(feature = "sqlite")]
        impl FromSql<UuidSql, Sqlite> for $name {
            fn from_sql(mut value: SqliteValue<'_, '_, '_>) -> deserialize::Result<Self> {
                Ok(Self(Uuid::parse_str(value.read_text())?))
            }
        }
    };
}

uuid_id!(
    /// A workspace agent (a row of `workspace_agents`).
    pub AgentId
);
uuid_id!(
    /// A chat (a row of `chats`).
    pub ChatId
);
uuid_id!(
    /// A turn of a chat (a row of `chat_turns`).
    pub TurnId
);
uuid_id!(
    /// A person's sign-in to one of an agent's MCP servers (a row of `mcp_sign_ins`).
    pub SignInId
);
uuid_id!(
    /// An entry of the audit log other than a tool call's end (a row of `sign_in_audit`).
    pub AuditEntryId
);
uuid_id!(
    /// A tool call's id as its rows hold it (`tool_calls.id`): protocol's
    /// [`ToolCallId`] in the column's SQL type. Diesel's traits cannot be implemented for
    /// protocol's type here, so queries bind this and everything public carries that.
    pub(crate) ToolCallKey
);

impl From<ToolCallKey> for ToolCallId {
    fn from(key: ToolCallKey) -> Self {
        Self::from_uuid(key.as_uuid())
    }
}

impl From<ToolCallId> for ToolCallKey {
    fn from(id: ToolCallId) -> Self {
        Self::from_uuid(id.as_uuid())
    }
}
