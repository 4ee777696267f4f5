//! The kernel's perf events that `software:` and `hardware:` probes
//! name, by bpftrace's names and aliases.
//!
//! Each event is a `perf_event_attr` (its `type` and `config`) and the
//! count a probe without one samples every: bpftrace's tables, which
//! scripts and listings depend on, so the names, the aliases and the
//! default counts are bpftrace's (0.17 to 0.26 agree). Listing (`-l`)
//! and the attach-point parser read them from here.

/// Which PMU an event belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CounterKind {
    /// `PERF_TYPE_SOFTWARE`: counted by the kernel, on every machine.
    Software,
    /// `PERF_TYPE_HARDWARE`: counted by the CPU's PMU, which many virtual
    /// machines do not have.
    Hardware,
}

impl CounterKind {
    /// The probe type that names its events: `software` or `hardware`.
    pub fn name(self) -> &'static str {
        match self {
            CounterKind::Software => "software",
            CounterKind::Hardware => "hardware",
        }
    }

    /// The events of this kind.
    pub fn events(self) -> &'static [CounterEvent] {
        match self {
            CounterKind::Software => SOFTWARE,
            CounterKind::Hardware => HARDWARE,
        }
    }

    /// The event `name` (or alias) of this kind.
    pub fn find(self, name: &str) -> Option<&'static CounterEvent> {
        self.events()
            .iter()
            .find(|e| e.name == name || e.alias == Some(name))
    }
}

/// One event a probe may sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CounterEvent {
    pub kind: CounterKind,
    pub name: &'static str,
    pub alias: Option<&'static str>,
    /// `perf_event_attr.config`: `enum perf_sw_ids` or `enum perf_hw_id`.
    pub config: u64,
    /// The probe fires every this many events when it names no count.
    pub default_count: u64,
}

const fn event(
    kind: CounterKind,
    name: &'static str,
    alias: Option<&'static str>,
    config: u64,
    default_count: u64,
) -> CounterEvent {
    CounterEvent {
        kind,
        name,
        alias,
        config,
        default_count,
    }
}

use CounterKind::{Hardware as H, Software as S};

/// The software events (`enum perf_sw_ids`), as bpftrace names them.
pub const SOFTWARE: &[CounterEvent] = &[
    event(S, "alignment-faults", None, 7, 1),
    event(S, "bpf-output", None, 10, 1),
    event(S, "context-switches", Some("cs"), 3, 1000),
    event(S, "cpu-clock", Some("cpu"), 0, 1_000_000),
    event(S, "cpu-migrations", None, 4, 1),
    event(S, "dummy", None, 9, 1),
    event(S, "emulation-faults", None, 8, 1),
    event(S, "major-faults", None, 6, 1),
    event(S, "minor-faults", None, 5, 100),
    event(S, "page-faults", Some("faults"), 2, 100),
    event(S, "task-clock", None, 1, 1),
];

/// The hardware events (`enum perf_hw_id`), as bpftrace names them.
pub const HARDWARE: &[CounterEvent] = &[
    event(H, "backend-stalls", None, 8, 1_000_000),
    event(H, "branch-instructions", Some("branches"), 4, 100_000),
    event(H, "branch-misses", None, 5, 100_000),
    event(H, "bus-cycles", None, 6, 100_000),
    event(H, "cache-misses", None, 3, 1_000_000),
    event(H, "cache-references", None, 2, 1_000_000),
    event(H, "cpu-cycles", Some("cycles"), 0, 1_000_000),
    event(H, "frontend-stalls", None, 7, 1_000_000),
    event(H, "instructions", None, 1, 1_000_000),
    event(H, "ref-cycles", None, 9, 1_000_000),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_are_found() {
        let cs = CounterKind::Software.find("cs").unwrap();
        assert_eq!(
            (cs.name, cs.config, cs.default_count),
            ("context-switches", 3, 1000)
        );
        assert_eq!(CounterKind::Software.find("page-faults").unwrap().config, 2);
        assert_eq!(
            CounterKind::Hardware.find("cycles").unwrap().name,
            "cpu-cycles"
        );
        assert!(CounterKind::Hardware.find("page-faults").is_none());
        assert!(CounterKind::Software.find("cycles").is_none());
    }

    #[test]
    fn configs_are_distinct_within_a_kind() {
        for kind in [CounterKind::Software, CounterKind::Hardware] {
            let mut configs: Vec<u64> = kind.events().iter().map(|e| e.config).collect();
            configs.sort_unstable();
            configs.dedup();
            assert_eq!(configs.len(), kind.events().len());
            assert!(kind.events().iter().all(|e| e.kind == kind));
        }
    }
}
