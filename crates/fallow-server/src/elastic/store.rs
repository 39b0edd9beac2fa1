//! The controller's hold on fallow-store: `PoolControl` for `Store` (fast/careful mapped to
//! `ReclaimPath::Fast` / `ReclaimPath::Careful`; ELASTIC RECLAIM uses it), and `ElasticPool`, the store as
//! the controller thread drives it, which touches the store only while the mode is elastic.
use super::controller::{PoolControl, Reclaimed};
use fallow_store::{ReclaimPath, ReclaimReport, Store};

impl PoolControl for Store {
    fn resident_bytes(&self) -> usize {
        Store::resident_bytes(self)
    }

    fn persistent_bytes(&self) -> usize {
        Store::persistent_bytes(self)
    }

    fn set_pool_limit_bytes(&self, bytes: usize) {
        Store::set_pool_limit_bytes(self, bytes)
    }

    fn reclaim(&self, bytes: usize, fast: bool) -> Reclaimed {
        let path = if fast {
            ReclaimPath::Fast
        } else {
            ReclaimPath::Careful
        };
        reclaimed(&Store::reclaim(self, bytes, path))
    }
}

/// A store report in the controller's terms.
pub fn reclaimed(report: &ReclaimReport) -> Reclaimed {
    Reclaimed {
        bytes: report.released_bytes as u64,
        objects: report.objects,
        micros: report.duration.as_micros() as u64,
        fast: report.path == ReclaimPath::Fast,
    }
}

/// The pool as the controller thread drives it: the store, but only while the live configuration says
/// elastic. The mode is read under the configuration lock at the moment the limit is set, so a
/// `CONFIG SET` to fixed mode (which clears the limit after changing the configuration) can never be
/// overwritten by a step that began in elastic mode.
pub struct ElasticPool<'a>(pub &'a crate::server::Server);

impl ElasticPool<'_> {
    fn elastic(&self) -> bool {
        self.0.config.read().memory_mode == super::settings::MemoryMode::Elastic
    }
}

impl PoolControl for ElasticPool<'_> {
    fn resident_bytes(&self) -> usize {
        self.0.store.resident_bytes()
    }

    fn persistent_bytes(&self) -> usize {
        self.0.store.persistent_bytes()
    }

    fn set_pool_limit_bytes(&self, bytes: usize) {
        // The read guard lives until the limit is stored.
        let config = self.0.config.read();
        if config.memory_mode == super::settings::MemoryMode::Elastic || bytes == 0 {
            self.0.store.set_pool_limit_bytes(bytes);
        }
    }

    fn reclaim(&self, bytes: usize, fast: bool) -> Reclaimed {
        if !self.elastic() {
            return Reclaimed::default();
        }
        let reclaimed = PoolControl::reclaim(&self.0.store, bytes, fast);
        // Client-side caching: readers of the evicted keys are told.
        let server = self.0;
        let outlet = crate::tracking::Outlet {
            pubsub: &server.pubsub,
            clients_memory: &server.clients_memory,
        };
        server.tracking.unattributed_changes(&outlet);
        reclaimed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::elastic::settings::MemoryMode;
    use crate::server::Server;

    #[test]
    fn fixed_mode_keeps_the_controller_off_the_store() {
        let server = Server::new(Config {
            shards: 1,
            threads: 1,
            ..Config::default()
        });
        let pool = ElasticPool(&server);
        pool.set_pool_limit_bytes(5 << 20);
        assert_eq!(server.store.pool_limit_bytes(), 5 << 20);
        server.config.write().memory_mode = MemoryMode::Fixed;
        server.config_changed();
        assert_eq!(
            server.store.pool_limit_bytes(),
            0,
            "cleared by the CONFIG SET"
        );
        pool.set_pool_limit_bytes(7 << 20);
        assert_eq!(
            server.store.pool_limit_bytes(),
            0,
            "a late elastic step is ignored"
        );
        assert_eq!(pool.reclaim(1 << 20, true), Reclaimed::default());
    }
}
