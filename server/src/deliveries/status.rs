//! The states of a delivery (column `deliveries.status`), as one enum: the
//! store reads and writes it ([`sqlx::Type`] over `text`), the alert planner
//! chooses it, and the API schema lists it.
//!
//! ```text
//!   pending ──claim──▶ sending ──2xx / 250──▶ sent
//!   retrying ─(due)─▶    │  └──failure──▶ retrying (core RetrySchedule) ── max attempts ──▶ dead
//!                        └──lease expired (worker died)──▶ claimable again, attempt counted
//!   skipped: nothing to deliver (no email address, no subscribed endpoint, endpoint deleted)
//!   in_app:  written `sent` in the alert's transaction together with its feed item
//! ```
//!
//! A leaf: it imports nothing of the server, so the store may use it.
//!
//! Statements name states as SQL literals (`status IN ('pending', ...)`),
//! not as bound parameters: the planner uses a partial index only when the
//! statement's own text implies the index's predicate (`deliveries_claimable`,
//! `deliveries_unsent`, `deliveries_dead`), and a parameter implies nothing.
//! Those literals are written here and nowhere else: [`DeliveryStatus::as_sql`]
//! and the `…_SQL` constants below, which the store splices into its
//! statements (`format!`, once per statement where it can).

use std::{fmt, str::FromStr};

use sqlx::{
    encode::IsNull,
    error::BoxDynError,
    postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef},
    Decode, Encode, Postgres, Type,
};

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    poem_openapi::Enum,
    serde::Serialize,
    serde::Deserialize,
)]
#[oai(rename_all = "snake_case")]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Queued, due at `next_attempt_at`.
    Pending,
    /// A worker holds it (a lease until `claimed_until`).
    Sending,
    /// Delivered (in-app: written with the alert).
    Sent,
    /// Failed; tried again at `next_attempt_at`.
    Retrying,
    /// Failed for good; an operator may re-queue it.
    Dead,
    /// Nothing to deliver to; `last_error` says why.
    Skipped,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 6] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Sending,
        DeliveryStatus::Sent,
        DeliveryStatus::Retrying,
        DeliveryStatus::Dead,
        DeliveryStatus::Skipped,
    ];

    /// Not final: a worker may still take them. The predicate of the claim's
    /// partial index `deliveries_claimable` (migration 0007), in its order.
    pub const UNFINISHED: [DeliveryStatus; 3] = [
        DeliveryStatus::Pending,
        DeliveryStatus::Retrying,
        DeliveryStatus::Sending,
    ];

    /// Waiting for `next_attempt_at`: the stored states a claim leases
    /// without writing the status, so a live lease reads them as `sending`.
    pub const QUEUED: [DeliveryStatus; 2] = [DeliveryStatus::Pending, DeliveryStatus::Retrying];

    /// The column value (the `CHECK` of migration 0005 lists the same).
    pub const fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Sending => "sending",
            DeliveryStatus::Sent => "sent",
            DeliveryStatus::Retrying => "retrying",
            DeliveryStatus::Dead => "dead",
            DeliveryStatus::Skipped => "skipped",
        }
    }

    /// The column value as an SQL string literal, quotes included, to be
    /// written into a statement's text (the module's comment says why).
    pub const fn as_sql(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "'pending'",
            DeliveryStatus::Sending => "'sending'",
            DeliveryStatus::Sent => "'sent'",
            DeliveryStatus::Retrying => "'retrying'",
            DeliveryStatus::Dead => "'dead'",
            DeliveryStatus::Skipped => "'skipped'",
        }
    }

    /// No worker takes it again: delivered, given up on (until an operator
    /// re-queues it) or with nothing to deliver to. A new state must choose.
    pub const fn is_final(self) -> bool {
        match self {
            DeliveryStatus::Pending | DeliveryStatus::Sending | DeliveryStatus::Retrying => false,
            DeliveryStatus::Sent | DeliveryStatus::Dead | DeliveryStatus::Skipped => true,
        }
    }
}

/// Each state as an SQL literal, by name, for `format!` templates.
pub const PENDING_SQL: &str = DeliveryStatus::Pending.as_sql();
pub const SENDING_SQL: &str = DeliveryStatus::Sending.as_sql();
pub const SENT_SQL: &str = DeliveryStatus::Sent.as_sql();
pub const RETRYING_SQL: &str = DeliveryStatus::Retrying.as_sql();
pub const DEAD_SQL: &str = DeliveryStatus::Dead.as_sql();
pub const SKIPPED_SQL: &str = DeliveryStatus::Skipped.as_sql();

/// [`DeliveryStatus::UNFINISHED`] as an SQL list, for `status IN {UNFINISHED_SQL}`:
/// the text of `deliveries_claimable`'s predicate, so the planner matches it.
/// Written out because a `const` cannot concatenate; a test proves it is
/// the enum's set.
pub const UNFINISHED_SQL: &str = "('pending', 'retrying', 'sending')";

/// [`DeliveryStatus::QUEUED`] as an SQL list (proved by the same test).
pub const QUEUED_SQL: &str = "('pending', 'retrying')";

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown delivery status {0:?}")]
pub struct UnknownStatus(String);

impl FromStr for DeliveryStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeliveryStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

// The column is `text` with a CHECK, not a PostgreSQL enum type, so the
// mapping delegates to `&str` and is written out rather than derived.
impl Type<Postgres> for DeliveryStatus {
    fn type_info() -> PgTypeInfo {
        <&str as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <&str as Type<Postgres>>::compatible(ty)
    }
}

impl PgHasArrayType for DeliveryStatus {
    fn array_type_info() -> PgTypeInfo {
        <&str as PgHasArrayType>::array_type_info()
    }
}

impl Encode<'_, Postgres> for DeliveryStatus {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <&str as Encode<Postgres>>::encode_by_ref(&self.as_str(), buf)
    }
}

impl Decode<'_, Postgres> for DeliveryStatus {
    fn decode(value: PgValueRef<'_>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<Postgres>>::decode(value)?;
        Ok(text.parse()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde_and_the_schema() {
        for status in DeliveryStatus::ALL {
            assert_eq!(status.as_str().parse::<DeliveryStatus>().ok(), Some(status));
            assert_eq!(
                serde_json::to_value(status).expect("serialise"),
                serde_json::json!(status.as_str())
            );
            assert_eq!(
                poem_openapi::types::ToJSON::to_json(&status),
                Some(serde_json::json!(status.as_str()))
            );
        }
        assert!("lost".parse::<DeliveryStatus>().is_err());
    }

    /// `(a, b, …)` as PostgreSQL reads a list of literals.
    fn sql_list(statuses: impl IntoIterator<Item = DeliveryStatus>) -> String {
        let literals: Vec<&str> = statuses.into_iter().map(DeliveryStatus::as_sql).collect();
        format!("({})", literals.join(", "))
    }

    #[test]
    fn sql_literals_quote_the_column_values() {
        for status in DeliveryStatus::ALL {
            assert_eq!(status.as_sql(), format!("'{}'", status.as_str()));
        }
    }

    /// A new state, or one that changes sides, fails here until the sets
    /// and their SQL say the same as `is_final`.
    #[test]
    fn sql_sets_are_the_enums_sets() {
        let unfinished: Vec<DeliveryStatus> = DeliveryStatus::ALL
            .into_iter()
            .filter(|status| !status.is_final())
            .collect();
        let mut listed = DeliveryStatus::UNFINISHED.to_vec();
        listed.sort();
        assert_eq!(listed, unfinished);
        assert_eq!(UNFINISHED_SQL, sql_list(DeliveryStatus::UNFINISHED));

        let queued: Vec<DeliveryStatus> = DeliveryStatus::UNFINISHED
            .into_iter()
            .filter(|status| *status != DeliveryStatus::Sending)
            .collect();
        assert_eq!(DeliveryStatus::QUEUED.to_vec(), queued);
        assert_eq!(QUEUED_SQL, sql_list(DeliveryStatus::QUEUED));
    }
}
