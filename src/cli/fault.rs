//! Fault injection for `clink-kafka copy` (cargo feature `failpoints`, off
//! in a release build): `CLINK_KAFKA_FAULT=<point>[:<k>][@<subtask>]`
//! SIGKILLs the process at the k-th pass of a named step boundary. The
//! points and the state each leaves behind are tabled in `copy.rs`; the sink's
//! own points come through `twopc::set_step_hook`. Without the feature this
//! module is not compiled and `fault_point!` expands to nothing, so the
//! binary neither reads the variable nor carries the hook.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, bail};
use clink_kafka::connector::{set_step_hook, SinkStep};

/// The named fault points, in the order of the steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultPoint {
    MidBatch,
    AfterBarrier,
    AfterStateWritten,
    AfterCompleted,
    AfterEndTxn,
    AfterCommit,
    AfterConfirmed,
    AfterResolve,
    AfterRecoveryOpen,
}

impl FaultPoint {
    const ALL: [FaultPoint; 9] = [
        FaultPoint::MidBatch,
        FaultPoint::AfterBarrier,
        FaultPoint::AfterStateWritten,
        FaultPoint::AfterCompleted,
        FaultPoint::AfterEndTxn,
        FaultPoint::AfterCommit,
        FaultPoint::AfterConfirmed,
        FaultPoint::AfterResolve,
        FaultPoint::AfterRecoveryOpen,
    ];

    fn name(self) -> &'static str {
        match self {
            FaultPoint::MidBatch => "mid-batch",
            FaultPoint::AfterBarrier => "after-barrier",
            FaultPoint::AfterStateWritten => "after-state-written",
            FaultPoint::AfterCompleted => "after-completed",
            FaultPoint::AfterEndTxn => "after-end-txn",
            FaultPoint::AfterCommit => "after-commit",
            FaultPoint::AfterConfirmed => "after-confirmed",
            FaultPoint::AfterResolve => "after-resolve",
            FaultPoint::AfterRecoveryOpen => "after-recovery-open",
        }
    }

    /// Whether the point belongs to one subtask (else to the coordinator).
    fn per_subtask(self) -> bool {
        !matches!(
            self,
            FaultPoint::AfterStateWritten | FaultPoint::AfterCompleted | FaultPoint::AfterConfirmed
        )
    }
}

struct Fault {
    point: FaultPoint,
    at: u64,
    subtask: Option<u32>,
    seen: AtomicU64,
}

static FAULT: OnceLock<Option<Fault>> = OnceLock::new();

const FAULT_VAR: &str = "CLINK_KAFKA_FAULT";

fn parse_fault(spec: &str) -> anyhow::Result<Fault> {
    let (rest, subtask) = match spec.split_once('@') {
        Some((rest, i)) => (
            rest,
            Some(
                i.parse::<u32>()
                    .map_err(|_| anyhow!("{FAULT_VAR}={spec:?}: the subtask after '@' must be an integer >= 0"))?,
            ),
        ),
        None => (spec, None),
    };
    let (name, at) = match rest.split_once(':') {
        Some((name, k)) => (
            name,
            k.parse::<u64>()
                .ok()
                .filter(|k| *k >= 1)
                .ok_or_else(|| anyhow!("{FAULT_VAR}={spec:?}: the occurrence after ':' must be an integer >= 1"))?,
        ),
        None => (rest, 1),
    };
    let point = FaultPoint::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
        let allowed: Vec<&str> = FaultPoint::ALL.iter().map(|p| p.name()).collect();
        anyhow!(
            "{FAULT_VAR}={spec:?}: unknown fault point {name:?}; allowed: {}",
            allowed.join(", ")
        )
    })?;
    if subtask.is_some() && !point.per_subtask() {
        bail!(
            "{FAULT_VAR}={spec:?}: {} is a coordinator point and takes no @<subtask>",
            point.name()
        );
    }
    Ok(Fault {
        point,
        at,
        subtask,
        seen: AtomicU64::new(0),
    })
}

pub(crate) fn arm_faults(parallelism: u32) -> anyhow::Result<()> {
    let fault = match std::env::var(FAULT_VAR) {
        Ok(spec) if !spec.is_empty() => Some(parse_fault(&spec)?),
        _ => None,
    };
    if let Some(f) = &fault {
        if let Some(i) = f.subtask.filter(|i| *i >= parallelism) {
            bail!("{FAULT_VAR}: subtask {i} does not exist at --parallelism {parallelism} (0..{parallelism})");
        }
        eprintln!(
            "copy: fault armed: {}:{}{}",
            f.point.name(),
            f.at,
            at_subtask(f.subtask)
        );
    }
    let _ = FAULT.set(fault);
    set_step_hook(|step, subtask| {
        if step == SinkStep::AfterEndTxn {
            fault_point(FaultPoint::AfterEndTxn, Some(subtask));
        } else if step == SinkStep::AfterResolvedCommit {
            fault_point(FaultPoint::AfterResolve, Some(subtask));
        }
    });
    Ok(())
}

fn at_subtask(subtask: Option<u32>) -> String {
    subtask.map_or(String::new(), |i| format!("@{i}"))
}

/// Passes fault point `point` (of `subtask`, for a subtask point);
/// SIGKILLs the process at the armed occurrence.
pub(crate) fn fault_point(point: FaultPoint, subtask: Option<u32>) {
    let Some(Some(fault)) = FAULT.get() else {
        return;
    };
    if fault.point != point || fault.subtask.is_some_and(|i| Some(i) != subtask) {
        return;
    }
    let seen = fault.seen.fetch_add(1, Ordering::SeqCst) + 1;
    if seen != fault.at {
        return;
    }
    eprintln!(
        "copy: fault {}:{seen}{}: SIGKILL",
        point.name(),
        at_subtask(subtask.filter(|_| point.per_subtask()))
    );
    let pid = std::process::id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-9", &pid])
        .status()
        .or_else(|_| {
            std::process::Command::new("sh")
                .args(["-c", &format!("kill -9 {pid}")])
                .status()
        });
    if !sent.is_ok_and(|s| s.success()) {
        // No way to SIGKILL ourselves: die loudly another way (a test sees
        // the wrong signal rather than a hang).
        eprintln!("copy: fault {}: could not send SIGKILL; aborting", point.name());
        std::process::abort();
    }
    // The signal is on its way; never run another step.
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_specs_parse_and_bad_ones_name_the_allowed_points() {
        let f = parse_fault("after-completed:2").unwrap();
        assert_eq!((f.point, f.at, f.subtask), (FaultPoint::AfterCompleted, 2, None));
        let f = parse_fault("mid-batch").unwrap();
        assert_eq!((f.point, f.at), (FaultPoint::MidBatch, 1));
        let f = parse_fault("after-commit:3@2").unwrap();
        assert_eq!((f.point, f.at, f.subtask), (FaultPoint::AfterCommit, 3, Some(2)));
        let f = parse_fault("after-resolve@1").unwrap();
        assert_eq!((f.point, f.at, f.subtask), (FaultPoint::AfterResolve, 1, Some(1)));
        let e = parse_fault("after-lunch").err().unwrap().to_string();
        assert!(
            e.contains("CLINK_KAFKA_FAULT") && e.contains("after-end-txn") && e.contains("after-recovery-open"),
            "{e}"
        );
        for bad in ["after-commit:0", "after-commit:x", "after-commit:-1", "after-commit:"] {
            let e = parse_fault(bad).err().unwrap().to_string();
            assert!(e.contains(">= 1"), "{bad}: {e}");
        }
        for bad in ["after-commit@x", "after-commit@-1", "after-commit:2@"] {
            let e = parse_fault(bad).err().unwrap().to_string();
            assert!(e.contains("'@'"), "{bad}: {e}");
        }
        let e = parse_fault("after-completed@1").err().unwrap().to_string();
        assert!(e.contains("coordinator point"), "{e}");
        for p in FaultPoint::ALL {
            assert_eq!(parse_fault(p.name()).unwrap().point, p);
        }
    }
}
