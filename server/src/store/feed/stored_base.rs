//! The counts base kept in the database (`feed_state.counts_base`, migration
//! 0030), so that a user's first read on an instance (a new tab, another
//! instance behind the load balancer, a restart) starts from what an earlier
//! read counted instead of walking up to the badge cap from the watermarks.
//!
//! It is loaded with the user's teams, in the one statement an instance runs
//! anyway when the user's teams are not cached ([`load_reader`]), and handed
//! to the feed statements like a base kept in memory: checked in the
//! statement's own snapshot, never trusted (see [`CountsBase`]). It is written
//! in the background after a read that walked far, in batches ([`save`]),
//! never in a request's transaction: a lost, stale or racing write costs a
//! later read a walk, never a wrong count.

use sqlx::PgExecutor;
use tidings_core::Position;
use uuid::Uuid;

use super::CountsBase;
use crate::store::teams::Membership;

/// The key of the teams a base was counted with: a stored base is handed to
/// a statement only for teams with the same key (as a base in memory is only
/// for the same teams). FNV-1a over each team's id and join position, in the
/// order [`load_reader`] reads them; stable across builds and instances, as
/// a key in the database must be.
pub fn teams_key(teams: &[Membership]) -> i64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    for team in teams {
        // The length first, so ("ab", …) and ("a", "b…") cannot collide by
        // concatenation.
        eat(&(team.team_id.len() as u64).to_le_bytes());
        eat(team.team_id.as_bytes());
        eat(&team.joined.tx.to_le_bytes());
        eat(&team.joined.id.to_le_bytes());
    }
    hash as i64
}

/// A user's teams (ordered by team id, as `teams::list_memberships_of_user`)
/// and the base stored for them, if any was stored for exactly these teams.
#[derive(Debug, Clone)]
pub struct Reader {
    pub teams: Vec<Membership>,
    pub stored_base: Option<CountsBase>,
}

/// The user's teams and stored base, in one statement.
pub async fn load_reader(
    db: impl PgExecutor<'_>,
    tenant_id: Uuid,
    user_id: &str,
) -> sqlx::Result<Reader> {
    type Row = (
        Vec<String>,
        Vec<i64>,
        Vec<i64>,
        Option<Vec<i64>>,
        Option<i64>,
    );
    let (team_ids, joined_tx, joined_id, base, base_teams): Row = sqlx::query_as(
        "SELECT t.team_ids, t.joined_tx, t.joined_id, s.counts_base, s.counts_base_teams
         FROM (SELECT coalesce(array_agg(m.team_id ORDER BY m.team_id), '{}') AS team_ids,
                      coalesce(array_agg(m.joined_tx ORDER BY m.team_id), '{}') AS joined_tx,
                      coalesce(array_agg(m.joined_id ORDER BY m.team_id), '{}') AS joined_id
               FROM memberships m
               WHERE m.tenant_id = $1 AND m.user_id = $2) AS t
         LEFT JOIN feed_state s ON s.tenant_id = $1 AND s.user_id = $2",
    )
    .bind(tenant_id)
    .bind(user_id)
    .fetch_one(db)
    .await?;
    let teams: Vec<Membership> = team_ids
        .into_iter()
        .zip(joined_tx.into_iter().zip(joined_id))
        .map(|(team_id, (tx, id))| Membership {
            team_id,
            joined: Position::new(tx, id),
        })
        .collect();
    let stored_base = match (base, base_teams) {
        (Some(base), Some(key)) if key == teams_key(&teams) => CountsBase::from_param(&base),
        _ => None,
    };
    Ok(Reader { teams, stored_base })
}

/// A base to store: the user's, counted with the teams of key `teams_key`.
#[derive(Debug, Clone)]
pub struct Stored {
    pub tenant_id: Uuid,
    pub user_id: String,
    pub teams_key: i64,
    pub base: CountsBase,
}

/// Stores each base as its user's, in one statement (creating a user's
/// `feed_state` row, at the watermarks' origin, when there is none). Only
/// the base's columns are written: the watermarks are the marks' alone
/// (`store::feed::marks`). A user may appear once; rows are written in key
/// order, so two instances' batches cannot deadlock.
pub async fn save(db: impl PgExecutor<'_>, bases: &[Stored]) -> sqlx::Result<()> {
    let mut sorted: Vec<&Stored> = bases.iter().collect();
    sorted.sort_by(|a, b| (a.tenant_id, &a.user_id).cmp(&(b.tenant_id, &b.user_id)));
    let tenants: Vec<Uuid> = sorted.iter().map(|s| s.tenant_id).collect();
    let users: Vec<&str> = sorted.iter().map(|s| s.user_id.as_str()).collect();
    let keys: Vec<i64> = sorted.iter().map(|s| s.teams_key).collect();
    let flat: Vec<i64> = sorted
        .iter()
        .flat_map(|s| CountsBase::param(Some(&s.base)))
        .collect();
    sqlx::query(&format!(
        "INSERT INTO feed_state (tenant_id, user_id, counts_base, counts_base_teams)
         SELECT b.tenant_id, b.user_id, ($4::bigint[])[(b.n - 1) * {len} + 1 : b.n * {len}],
                b.teams_key
         FROM unnest($1::uuid[], $2::text[], $3::bigint[]) WITH ORDINALITY
              AS b (tenant_id, user_id, teams_key, n)
         ON CONFLICT (tenant_id, user_id) DO UPDATE
            SET counts_base = EXCLUDED.counts_base,
                counts_base_teams = EXCLUDED.counts_base_teams",
        len = CountsBase::PARAM_LEN
    ))
    .bind(&tenants)
    .bind(&users)
    .bind(&keys)
    .bind(&flat)
    .execute(db)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn teams(spec: &[(&str, i64, i64)]) -> Vec<Membership> {
        spec.iter()
            .map(|&(team_id, tx, id)| Membership {
                team_id: team_id.to_string(),
                joined: Position::new(tx, id),
            })
            .collect()
    }

    #[test]
    fn the_teams_key_changes_with_any_team_or_join_and_only_then() {
        let base = teams(&[("a", 1, 2), ("b", 3, 4)]);
        assert_eq!(teams_key(&base), teams_key(&base.clone()));
        for other in [
            teams(&[("a", 1, 2)]),
            teams(&[("a", 1, 2), ("b", 3, 5)]),
            teams(&[("a", 1, 2), ("c", 3, 4)]),
            teams(&[("ab", 1, 2), ("", 3, 4)]),
            teams(&[("b", 3, 4), ("a", 1, 2)]),
            teams(&[]),
        ] {
            assert_ne!(teams_key(&base), teams_key(&other), "{other:?}");
        }
    }

    #[test]
    fn a_base_survives_its_parameter_array() {
        let base = CountsBase {
            counted_below: 9,
            marks: tidings_core::Watermarks {
                seen: Position::new(5, 6),
                read: Position::new(3, 4),
            },
            purges: 1,
            budget: 1001,
            unseen_entries: 7,
            unread_entries: 8,
        };
        let param = CountsBase::param(Some(&base));
        assert_eq!(CountsBase::from_param(&param), Some(base));
        assert_eq!(CountsBase::from_param(&param[1..]), None);
        assert_eq!(CountsBase::from_param(&[]), None);
    }
}
