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
//! The SQL of the outbox still spells some states as literals where they
//! must match a partial index's predicate (`store::outbox`, migration 0007).

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
}

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
}
