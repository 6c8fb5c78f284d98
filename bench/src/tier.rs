//! Sizes and durations of the two tiers. S checks that the harness works (seconds);
//! M is the real measurement (100 tenants, 2,000 teams, 20,000 users with
//! 3–20 memberships each, one team of 5,000 members, 10M events, Zipf skew).

use std::time::Duration;

use clap::ValueEnum;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
pub enum TierName {
    #[value(name = "S", alias = "s")]
    S,
    #[value(name = "M", alias = "m")]
    M,
}

#[derive(Debug, Clone, Serialize)]
pub struct Tier {
    pub name: TierName,
    pub tenants: i64,
    pub teams: i64,
    pub users: i64,
    pub min_memberships: i64,
    pub max_memberships: i64,
    /// Members of tenant 0's hottest team.
    pub big_team_members: i64,
    /// Teams of the wide reader (`seed::WIDE_READER`).
    pub wide_reader_teams: i64,
    pub events: i64,
    /// Rows per INSERT … SELECT statement while seeding events.
    pub seed_batch: i64,
    /// Repetitions of every interleaved A/B comparison (median and range reported).
    pub reps: usize,
    /// Length of one closed-loop measurement.
    #[serde(serialize_with = "secs")]
    pub measure: Duration,
    /// Length of one open-loop (fixed-rate) latency measurement.
    #[serde(serialize_with = "secs")]
    pub latency_measure: Duration,
    /// Concurrent connections of the HTTP load generator and pgbench clients.
    pub connections: u32,
    pub fanout_audiences: Vec<i64>,
    /// Events written per audience and design in the fan-out workload.
    pub fanout_writes: i64,
    /// Pending deliveries seeded for each drain measurement.
    pub drain_backlog: i64,
    /// Pending messages per run of the drain-peer workload (pgmq vs the outbox).
    pub peer_backlog: i64,
    /// Recipients per alert in the two ingest sizes (× 2 channels = deliveries).
    pub ingest_recipients: [usize; 2],
    /// Alerts created before the ingest measurements, for replays to hit.
    pub primed_alerts: usize,
    /// Alerts of 500 recipients × in_app + webhook (1,000 notifications,
    /// 1,000 deliveries, 500 inbox items each) written into every ingest SQL
    /// arm's tables before it is measured, so that index upkeep on big tables
    /// is what is measured.
    pub ingest_prefill_alerts: i64,
    /// Length of the dead-tuple soak in the drain workload.
    #[serde(serialize_with = "secs")]
    pub soak: Duration,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Tier {
    pub fn get(name: TierName) -> Tier {
        match name {
            TierName::S => Tier {
                name,
                tenants: 5,
                teams: 30,
                users: 300,
                min_memberships: 3,
                max_memberships: 8,
                big_team_members: 60,
                wide_reader_teams: 40,
                events: 20_000,
                seed_batch: 10_000,
                reps: 2,
                measure: Duration::from_millis(1000),
                latency_measure: Duration::from_millis(1000),
                connections: 8,
                fanout_audiences: vec![1, 10, 100],
                fanout_writes: 5,
                drain_backlog: 500,
                peer_backlog: 2_000,
                ingest_recipients: [5, 50],
                primed_alerts: 4,
                ingest_prefill_alerts: 20,
                soak: Duration::from_secs(3),
            },
            TierName::M => Tier {
                name,
                tenants: 100,
                teams: 2_000,
                users: 20_000,
                min_memberships: 3,
                max_memberships: 20,
                big_team_members: 5_000,
                wide_reader_teams: 1_000,
                events: 10_000_000,
                seed_batch: 250_000,
                reps: 3,
                measure: Duration::from_secs(6),
                latency_measure: Duration::from_secs(8),
                connections: 16,
                fanout_audiences: vec![1, 10, 100, 1_000, 10_000],
                fanout_writes: 20,
                drain_backlog: 20_000,
                peer_backlog: 200_000,
                ingest_recipients: [5, 500],
                primed_alerts: 64,
                ingest_prefill_alerts: 2_000,
                soak: Duration::from_secs(180),
            },
        }
    }

    pub fn label(&self) -> &'static str {
        match self.name {
            TierName::S => "S",
            TierName::M => "M",
        }
    }
}
