//! NOTIFY: the channel names are defined here, once. The SQL binds them
//! (`pg_notify($1, $2)`) and the listeners (`crate::db::listen`) subscribe to them.
//!
//! A notification is delivered when the sending transaction commits and not at
//! all when it rolls back, so listeners hear of exactly what happened. It may
//! still be lost while a listener is disconnected: every listener treats a
//! notification as a hint and recovers on reconnect (polls, or flushes).

use sqlx::PgExecutor;
use uuid::Uuid;

/// The channels the server notifies and listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyChannel {
    /// A user's memberships changed, or a credential (a user's tokens
    /// revoked, a signing secret rotated): every instance drops its cached
    /// copy, and its streams act on it.
    Cache,
    /// Deliveries became due: outbox workers claim at once instead of polling.
    Outbox,
    /// A team alert awaits background expansion.
    Expansion,
    /// A user's watermarks or read items changed: streams send `marks`.
    Marks,
}

impl NotifyChannel {
    pub const fn name(self) -> &'static str {
        match self {
            NotifyChannel::Cache => "tidings_cache",
            NotifyChannel::Outbox => "tidings_outbox",
            NotifyChannel::Expansion => "tidings_expansion",
            NotifyChannel::Marks => "tidings_marks",
        }
    }
}

/// Sends `payload` on `channel` when the caller's transaction commits.
pub async fn notify(
    db: impl PgExecutor<'_>,
    channel: NotifyChannel,
    payload: &str,
) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(channel.name())
        .bind(payload)
        .execute(db)
        .await?;
    Ok(())
}

const MEMBERSHIPS_PREFIX: &str = "memberships:";
const MARKS_PREFIX: &str = "marks:";
const REVOKED_PREFIX: &str = "revoked:";
const ROTATED_PREFIX: &str = "rotated:";

/// The payloads on [`NotifyChannel::Cache`] saying a credential changed:
/// every instance forgets it from its credential caches and ends the
/// streams it affects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialsChanged {
    /// A user's tokens issued until now were revoked.
    UserTokensRevoked { tenant_id: Uuid, user_id: String },
    /// A tenant's signing secret was rotated.
    SigningSecretRotated { tenant_id: Uuid },
}

impl CredentialsChanged {
    pub fn payload(&self) -> String {
        match self {
            CredentialsChanged::UserTokensRevoked { tenant_id, user_id } => {
                user_payload(REVOKED_PREFIX, *tenant_id, user_id)
            }
            CredentialsChanged::SigningSecretRotated { tenant_id } => {
                format!("{ROTATED_PREFIX}{tenant_id}")
            }
        }
    }

    pub fn parse(payload: &str) -> Option<Self> {
        if let Some(tenant) = payload.strip_prefix(ROTATED_PREFIX) {
            return Some(CredentialsChanged::SigningSecretRotated {
                tenant_id: tenant.parse().ok()?,
            });
        }
        let (tenant_id, user_id) = parse_user_payload(REVOKED_PREFIX, payload)?;
        Some(CredentialsChanged::UserTokensRevoked { tenant_id, user_id })
    }
}

/// The payload on [`NotifyChannel::Cache`] saying a user's teams changed. A
/// tenant id is a UUID (no `:`), so the user id after it may contain anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipsChanged {
    pub tenant_id: Uuid,
    pub user_id: String,
}

impl MembershipsChanged {
    pub fn payload(&self) -> String {
        user_payload(MEMBERSHIPS_PREFIX, self.tenant_id, &self.user_id)
    }

    pub fn parse(payload: &str) -> Option<Self> {
        let (tenant_id, user_id) = parse_user_payload(MEMBERSHIPS_PREFIX, payload)?;
        Some(MembershipsChanged { tenant_id, user_id })
    }
}

/// The payload on [`NotifyChannel::Marks`]: a user's marks changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarksChanged {
    pub tenant_id: Uuid,
    pub user_id: String,
}

impl MarksChanged {
    pub fn payload(&self) -> String {
        user_payload(MARKS_PREFIX, self.tenant_id, &self.user_id)
    }

    pub fn parse(payload: &str) -> Option<Self> {
        let (tenant_id, user_id) = parse_user_payload(MARKS_PREFIX, payload)?;
        Some(MarksChanged { tenant_id, user_id })
    }
}

fn user_payload(prefix: &str, tenant_id: Uuid, user_id: &str) -> String {
    format!("{prefix}{tenant_id}:{user_id}")
}

fn parse_user_payload(prefix: &str, payload: &str) -> Option<(Uuid, String)> {
    let rest = payload.strip_prefix(prefix)?;
    let (tenant, user) = rest.split_once(':')?;
    Some((tenant.parse().ok()?, user.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_notices_round_trip_whatever_the_user_id() {
        let tenant_id = Uuid::now_v7();
        for user in ["u1", "a:b:c", "ünïcödé", " "] {
            let notice = MembershipsChanged {
                tenant_id,
                user_id: user.to_string(),
            };
            assert_eq!(MembershipsChanged::parse(&notice.payload()), Some(notice));
        }
        assert_eq!(MembershipsChanged::parse("other:x"), None);
        assert_eq!(MembershipsChanged::parse("memberships:not-a-uuid:u"), None);
        let marks = MarksChanged {
            tenant_id,
            user_id: "a:b".to_string(),
        };
        assert_eq!(MarksChanged::parse(&marks.payload()), Some(marks.clone()));
        assert_eq!(MembershipsChanged::parse(&marks.payload()), None);
        for notice in [
            CredentialsChanged::UserTokensRevoked {
                tenant_id,
                user_id: "a:b".into(),
            },
            CredentialsChanged::SigningSecretRotated { tenant_id },
        ] {
            assert_eq!(
                CredentialsChanged::parse(&notice.payload()),
                Some(notice.clone())
            );
            assert_eq!(MembershipsChanged::parse(&notice.payload()), None);
        }
        assert_eq!(CredentialsChanged::parse(&marks.payload()), None);
    }

    #[test]
    fn channel_names_are_distinct() {
        let names = [
            NotifyChannel::Cache.name(),
            NotifyChannel::Outbox.name(),
            NotifyChannel::Expansion.name(),
            NotifyChannel::Marks.name(),
        ];
        assert!(names
            .iter()
            .enumerate()
            .all(|(i, a)| names[i + 1..].iter().all(|b| a != b)));
    }
}
