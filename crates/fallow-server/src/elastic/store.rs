//! The controller's hold on fallow-store: `PoolControl` for `Store`, mapping the fast/careful choice to
//! `ReclaimPath::Fast` / `ReclaimPath::Careful`.
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
