//! Turning a [`Placement`] into one optional core per worker.
//!
//! `Auto` follows `numa::Topology::worker_plan`: one worker per RDMA NIC, or per NUMA node on
//! a host without one, each on a core of its node. It ignores GPU locality (no GPU memory is
//! registered yet), SMT siblings and isolated cores (`isolcpus`), and never starts more than
//! one worker per planned slot.

use crate::config::Placement;
use crate::error::EngineError;

/// Cores for the workers to start (`None`: unpinned).
pub(crate) fn plan(p: &Placement) -> Result<Vec<Option<usize>>, EngineError> {
    match p {
        Placement::Workers(0) => Err(EngineError::Config(
            "Placement::Workers(0): need at least one worker".into(),
        )),
        Placement::Workers(n) => Ok(vec![None; *n]),
        Placement::Cores(c) if c.is_empty() => Err(EngineError::Config(
            "Placement::Cores: empty core list".into(),
        )),
        Placement::Cores(c) => Ok(c.iter().map(|&c| Some(c)).collect()),
        Placement::Auto => Ok(auto()),
    }
}

fn auto() -> Vec<Option<usize>> {
    let planned = numa::Topology::from_system().and_then(|t| t.worker_plan());
    match planned {
        Ok(plan) if !plan.is_empty() => plan.iter().map(|w| usize::try_from(w.core).ok()).collect(),
        // No readable sysfs (containers, non-Linux): one unpinned worker still works.
        _ => vec![None],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_placements() {
        assert_eq!(plan(&Placement::Workers(2)).unwrap(), vec![None, None]);
        assert_eq!(
            plan(&Placement::Cores(vec![1, 3])).unwrap(),
            vec![Some(1), Some(3)]
        );
        assert!(plan(&Placement::Workers(0)).is_err());
        assert!(plan(&Placement::Cores(vec![])).is_err());
        assert!(!plan(&Placement::Auto).unwrap().is_empty());
    }
}
