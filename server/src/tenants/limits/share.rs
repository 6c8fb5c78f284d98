//! A bounded share per tenant: a semaphore per tenant with `per_tenant`
//! permits. Two things are shared out this way (`super::Limits`):
//! - the database pool: a request of a tenant holds one permit while its
//!   handler runs, so one tenant's burst waits behind its own requests and
//!   leaves the rest of the pool to everybody else;
//! - held refusals: a refusal held before it is answered takes one permit
//!   without waiting ([`Shares::try_acquire`]), so one tenant's held refusals
//!   cannot take every connection.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

type Map = Arc<Mutex<HashMap<Uuid, Arc<Semaphore>>>>;

pub struct Shares {
    per_tenant: usize,
    wait: Duration,
    /// Only tenants with requests in flight or waiting have an entry.
    tenants: Map,
}

/// One of a tenant's permits; the tenant's entry goes when its last one does.
pub struct SharePermit {
    tenant: Uuid,
    permit: Option<OwnedSemaphorePermit>,
    tenants: Map,
}

impl Shares {
    pub fn new(per_tenant: usize, wait: Duration) -> Self {
        Shares {
            per_tenant: per_tenant.max(1),
            wait,
            tenants: Arc::default(),
        }
    }

    pub fn per_tenant(&self) -> usize {
        self.per_tenant
    }

    /// A permit of `tenant`'s share, waiting up to the configured time behind
    /// the tenant's own requests; `None` when the wait ran out.
    pub async fn acquire(&self, tenant: Uuid) -> Option<SharePermit> {
        let semaphore = {
            let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
            tenants
                .entry(tenant)
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
                .clone()
        };
        // The clone counts as a user of the entry while this request waits.
        let waited = tokio::time::timeout(self.wait, semaphore.acquire_owned()).await;
        let permit = match waited {
            Ok(Ok(permit)) => Some(permit),
            _ => None,
        };
        let held = SharePermit {
            tenant,
            permit,
            tenants: self.tenants.clone(),
        };
        held.permit.is_some().then_some(held)
    }

    /// A permit of `tenant`'s share if one is free now; never waits.
    pub fn try_acquire(&self, tenant: Uuid) -> Option<SharePermit> {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        let semaphore = tenants
            .entry(tenant)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)));
        let permit = semaphore.clone().try_acquire_owned().ok()?;
        Some(SharePermit {
            tenant,
            permit: Some(permit),
            tenants: self.tenants.clone(),
        })
    }

    /// Tenants with an entry (for tests: entries do not pile up).
    #[cfg(test)]
    fn tenants(&self) -> usize {
        self.tenants.lock().map(|t| t.len()).unwrap_or_default()
    }
}

impl Drop for SharePermit {
    fn drop(&mut self) {
        let mut tenants = self.tenants.lock().unwrap_or_else(|e| e.into_inner());
        drop(self.permit.take());
        // The map's own reference is the last: nobody holds or waits.
        if tenants
            .get(&self.tenant)
            .is_some_and(|s| Arc::strong_count(s) == 1)
        {
            tenants.remove(&self.tenant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tenant_waits_behind_itself_and_never_behind_another() {
        let shares = Shares::new(2, Duration::from_millis(50));
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let first = shares.acquire(a).await.expect("a's first");
        let second = shares.acquire(a).await.expect("a's second");
        assert!(shares.acquire(a).await.is_none(), "a's share is used up");
        let other = shares.acquire(b).await.expect("b is not held back by a");
        drop(first);
        let third = shares.acquire(a).await.expect("a's freed permit");
        drop((second, third, other));
        assert_eq!(shares.tenants(), 0, "entries go with their last permit");
    }

    #[test]
    fn try_acquire_takes_a_free_permit_or_none_and_leaves_no_entry_behind() {
        let shares = Shares::new(1, Duration::from_secs(60));
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let held = shares.try_acquire(a).expect("a's one permit");
        assert!(shares.try_acquire(a).is_none(), "a's share is used up");
        let other = shares.try_acquire(b).expect("b has its own");
        drop((held, other));
        assert_eq!(shares.tenants(), 0, "entries go with their last permit");
        assert!(shares.try_acquire(a).is_some(), "a's freed permit");
        assert_eq!(shares.tenants(), 0);
    }
}
