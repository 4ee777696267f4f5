//! The programs whose maps are metrics, and what a scrape reads of them.
//!
//! Each program is up (loaded, with a [`MapReader`] on its maps) or down
//! (with the reason). A scrape reads every map of every program that is
//! up at that moment, through the kernel: nothing is cached, and nothing
//! read is ever reset, so a counter only goes back when the program
//! itself clears its map. Then sdt's own health: `sdt_up`,
//! `sdt_probes_attached`, `sdt_program_load_seconds`,
//! `sdt_events_lost_total`, `sdt_map_updates_dropped_total` (updates a
//! full map refused), `sdt_dropped_series_total`, `sdt_hits_lost_total`
//! (hits the kernel had no scratch memory for) and
//! `sdt_failed_reads_total` (reads of the traced process's memory that
//! failed, by probe and the script's text and place of the read: the
//! series a label such as `arg0=""` came from).
//!
//! **Cardinality is bounded** per map: the first `series_limit` label
//! sets a scrape meets are exported from then on, and any other is left
//! out and counted in `sdt_dropped_series_total{map=...}` the first time
//! it is left out. The series kept stay the same from scrape to scrape,
//! so graphs do not jump between keys. Left-out keys are remembered up to
//! [`DROPPED_MEMORY`] per map, after which memory starts over: a key left
//! out again after that is counted again.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use sdt_job::MapReader;
use sdt_output::metrics::{merge, Family, Kind, Naming as FamilyNaming, Series, Source, Value};

use crate::naming::{Naming, PROGRAM_LABEL};

/// Left-out label sets remembered per map, to count each once.
pub const DROPPED_MEMORY: usize = 65_536;

/// The default of `series_limit`.
pub const DEFAULT_SERIES_LIMIT: usize = 10_000;

/// The programs whose maps are exported; see the module doc.
pub struct Exporter {
    series_limit: usize,
    programs: Mutex<Programs>,
}

#[derive(Default)]
struct Programs {
    by_name: BTreeMap<String, Program>,
    /// Metric names whose kinds two programs disagree on, already said.
    conflicts: BTreeSet<String>,
}

struct Program {
    state: State,
    /// By map.
    limits: BTreeMap<String, Limiter>,
}

enum State {
    Up(Running),
    Down,
}

/// A program that runs: how to read it and what to call what it has.
pub struct Running {
    pub reader: MapReader,
    pub naming: Naming,
    /// Labels every series of the program carries besides `program`: the
    /// cgroup it traces, if it traces one.
    pub labels: Vec<(String, String)>,
    /// Probes attached, as `Attaching N probes...` counts them.
    pub probes: usize,
    /// From reading the program to its probes attached.
    pub load: Duration,
}

#[derive(Default)]
struct Limiter {
    admitted: HashSet<u64>,
    dropped: HashSet<u64>,
    dropped_total: u64,
}

impl Limiter {
    /// Keeps the series admitted before and, up to `limit`, new ones.
    fn apply(&mut self, series: &mut Vec<Series>, limit: usize) {
        series.retain(|s| {
            let mut hasher = DefaultHasher::new();
            s.labels.hash(&mut hasher);
            let id = hasher.finish();
            if self.admitted.contains(&id) {
                return true;
            }
            if self.admitted.len() < limit {
                self.admitted.insert(id);
                return true;
            }
            if self.dropped.len() >= DROPPED_MEMORY {
                self.dropped.clear();
            }
            if self.dropped.insert(id) {
                self.dropped_total += 1;
            }
            false
        });
    }
}

impl Exporter {
    /// No programs yet; at most `series_limit` series per map.
    pub fn new(series_limit: usize) -> Exporter {
        Exporter {
            series_limit,
            programs: Mutex::new(Programs::default()),
        }
    }

    fn programs(&self) -> std::sync::MutexGuard<'_, Programs> {
        // A scrape that panicked left nothing half-changed that matters.
        self.programs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `program` runs: its metrics are exported from now on, counted
    /// afresh (its maps are new).
    pub fn up(&self, program: &str, running: Running) {
        self.programs().by_name.insert(
            program.to_string(),
            Program {
                state: State::Up(running),
                limits: BTreeMap::new(),
            },
        );
    }

    /// `program` does not run; it is reported with `sdt_up 0`.
    pub fn down(&self, program: &str) {
        self.programs().by_name.insert(
            program.to_string(),
            Program {
                state: State::Down,
                limits: BTreeMap::new(),
            },
        );
    }

    /// `program` is gone: nothing of it is reported any more.
    pub fn remove(&self, program: &str) {
        self.programs().by_name.remove(program);
    }

    /// Whether `program` is up.
    pub fn is_up(&self, program: &str) -> bool {
        self.programs()
            .by_name
            .get(program)
            .is_some_and(|p| matches!(p.state, State::Up(_)))
    }
}

impl Source for Exporter {
    fn families(&self) -> Vec<Family> {
        let limit = self.series_limit;
        let mut programs = self.programs();
        let Programs {
            by_name,
            conflicts: said,
        } = &mut *programs;
        let mut maps = Vec::new();
        let mut health = Health::default();
        for (name, program) in by_name.iter_mut() {
            let mut constant = vec![(PROGRAM_LABEL.to_string(), name.clone())];
            let running = match &program.state {
                State::Down => {
                    health.up.push(series(&constant, Value::Number(0)));
                    continue;
                }
                State::Up(running) => running,
            };
            constant.extend(running.labels.iter().cloned());
            health.up.push(series(&constant, Value::Number(1)));
            let attached = i128::try_from(running.probes).unwrap_or(i128::MAX);
            health
                .attached
                .push(series(&constant, Value::Number(attached)));
            let load = Value::Float(running.load.as_secs_f64());
            health.load.push(series(&constant, load));
            let (snapshot, errors) = running.reader.snapshot();
            for (map, error) in errors {
                eprintln!("sdt: {name}: cannot read {map}: {error}");
            }
            for map in &snapshot.maps {
                let Some(naming) = running.naming.maps.get(&map.print.name) else {
                    continue;
                };
                if naming.hidden {
                    continue;
                }
                let naming = FamilyNaming {
                    name: &naming.metric,
                    help: &naming.help,
                    labels: &naming.labels,
                    constant: &constant,
                };
                let Some(mut family) = Family::of_map(&map.print, &map.sums, &naming) else {
                    continue;
                };
                let limiter = program.limits.entry(map.print.name.clone()).or_default();
                limiter.apply(&mut family.series, limit);
                maps.push(family);
            }
            let losses = snapshot.losses;
            health
                .lost
                .push(series(&constant, Value::Number(i128::from(losses.events))));
            for (map, n) in &losses.full_maps {
                let labels = with_map(&constant, map);
                health
                    .full
                    .push(series(&labels, Value::Number(i128::from(*n))));
            }
            health
                .hits
                .push(series(&constant, Value::Number(i128::from(losses.hits))));
            for read in &losses.failed_reads {
                let mut labels = constant.clone();
                labels.extend([
                    ("probe".to_string(), read.probe.clone()),
                    ("read".to_string(), read.what.clone()),
                    ("at".to_string(), read.at.clone()),
                ]);
                let count = Value::Number(i128::from(read.count));
                health.failed_reads.push(series(&labels, count));
            }
            for (map, limiter) in &program.limits {
                let labels = with_map(&constant, map);
                let dropped = Value::Number(i128::from(limiter.dropped_total));
                health.dropped.push(series(&labels, dropped));
            }
        }
        let (mut families, conflicts) = merge(maps);
        for name in conflicts {
            if said.insert(name.clone()) {
                eprintln!(
                    "sdt: two programs export `{name}` as different kinds of metric; only the first is served (name one otherwise: `// sdt: name @MAP = ...`)"
                );
            }
        }
        families.extend(health.families());
        families
    }
}

fn series(labels: &[(String, String)], value: Value) -> Series {
    Series {
        labels: labels.to_vec(),
        value,
    }
}

fn with_map(constant: &[(String, String)], map: &str) -> Vec<(String, String)> {
    let mut labels = constant.to_vec();
    labels.push(("map".to_string(), map.to_string()));
    labels
}

/// sdt's own series, gathered over the programs.
#[derive(Default)]
struct Health {
    up: Vec<Series>,
    attached: Vec<Series>,
    load: Vec<Series>,
    lost: Vec<Series>,
    full: Vec<Series>,
    dropped: Vec<Series>,
    hits: Vec<Series>,
    failed_reads: Vec<Series>,
}

impl Health {
    fn families(self) -> Vec<Family> {
        vec![
            Family::new(
                "sdt_up",
                "1 if the program is loaded and its probes attached, 0 if it failed (see sdt's log)",
                Kind::Gauge,
                self.up,
            ),
            Family::new(
                "sdt_probes_attached",
                "Probes of the program attached, as bpftrace counts them",
                Kind::Gauge,
                self.attached,
            ),
            Family::new(
                "sdt_program_load_seconds",
                "Time from reading the program to its probes attached",
                Kind::Gauge,
                self.load,
            ),
            Family::new(
                "sdt_events_lost",
                "Records the program sent that found the ring buffer full",
                Kind::Counter,
                self.lost,
            ),
            Family::new(
                "sdt_map_updates_dropped",
                "Updates of a map refused because it was full (raise BPFTRACE_MAP_KEYS_MAX)",
                Kind::Counter,
                self.full,
            ),
            Family::new(
                "sdt_dropped_series",
                "Keys of a map left out of the metrics because the map had more series than the limit",
                Kind::Counter,
                self.dropped,
            ),
            Family::new(
                "sdt_hits_lost",
                "Hits dropped because the kernel had no memory for the thread's scratch space",
                Kind::Counter,
                self.hits,
            ),
            Family::new(
                "sdt_failed_reads",
                "Reads of the traced process's memory that failed, by probe and by the script's read (what they read showed as zeros or an empty string)",
                Kind::Counter,
                self.failed_reads,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: usize) -> Vec<Series> {
        (0..n)
            .map(|i| series(&[("k".into(), i.to_string())], Value::Number(1)))
            .collect()
    }

    #[test]
    fn the_limit_keeps_the_same_series_and_counts_each_key_left_out_once() {
        let mut limiter = Limiter::default();
        let mut first = set(5);
        limiter.apply(&mut first, 3);
        assert_eq!(first, set(3));
        assert_eq!(limiter.dropped_total, 2);
        // The same keys again, in another order, plus a new one.
        let mut again = set(6);
        again.reverse();
        limiter.apply(&mut again, 3);
        let kept: Vec<String> = again.iter().map(|s| s.labels[0].1.clone()).collect();
        assert_eq!(kept, ["2", "1", "0"]);
        assert_eq!(limiter.dropped_total, 3);
    }
}
