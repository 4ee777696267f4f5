//! Reading a running program's maps from another thread: what a metrics
//! endpoint does at each scrape while the [`Runner`] goes on handling
//! records.
//!
//! A [`MapReader`] holds its own descriptors of the maps (duplicated, so
//! the kernel keeps the maps while either side has them open) and its own
//! copy of what decoding needs: the map declarations, the types, the
//! names of probes and functions. It shares nothing mutable with the
//! runner, so it is `Send + Sync`, cloning it is cheap, and a reader
//! that outlives its runner reads maps that no program updates any more.
//! Reading never changes a map: a scrape does not reset a counter.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use sdt_bpf::Map;
use sdt_codegen::layout;
use sdt_lang::hir::{MapId, Program};
use sdt_output::Losses;
use sdt_script::{Compilation, Names};

use crate::maps::{map_snapshot, MapSnapshot};
use crate::reads::ReadSites;
use crate::run::Runner;
use crate::symbols::Symbols;
use crate::{wall_offset, Entry, Maps, RuntimeEnv};

/// A handle on a loaded program's maps; see the module doc.
#[derive(Clone)]
pub struct MapReader {
    inner: Arc<Inner>,
}

struct Inner {
    /// The declarations and types of the maps (no probe bodies).
    program: Program,
    names: Names,
    /// User maps, by [`MapId`].
    maps: Vec<Map>,
    stacks: Option<Map>,
    lost: Option<Map>,
    /// The read sites, whose failures the lost map counts.
    reads: ReadSites,
    wall_offset: i128,
}

/// Every map of a program as it is now, and what the kernel counted as
/// lost so far.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The maps, by name.
    pub maps: Vec<MapSnapshot>,
    pub losses: Losses,
}

impl MapReader {
    /// A reader of the maps `runner` loaded.
    pub fn new(runner: &Runner<'_>) -> io::Result<MapReader> {
        let compilation = runner.compilation();
        let session = runner.session();
        let dup = |index: u32| -> io::Result<Option<Map>> {
            session
                .map(index as usize)
                .map(|m| m.try_clone().map_err(io::Error::other))
                .transpose()
        };
        let mut maps = Vec::with_capacity(compilation.program.maps.len());
        for id in 0..compilation.program.maps.len() {
            maps.push(
                dup(layout::user_map(id))?
                    .ok_or_else(|| io::Error::other(format!("no map {id}")))?,
            );
        }
        Ok(MapReader {
            inner: Arc::new(Inner {
                program: declarations(compilation),
                names: compilation.names.clone(),
                maps,
                stacks: dup(layout::STACK_MAP)?,
                lost: dup(layout::LOST_MAP)?,
                reads: ReadSites::new(compilation),
                wall_offset: wall_offset(),
            }),
        })
    }

    /// Reads every map, sorted by name as bpftrace prints them at the end.
    /// A map that cannot be read is left out, with the error.
    pub fn snapshot(&self) -> (Snapshot, Vec<(String, io::Error)>) {
        let inner = &*self.inner;
        let mut symbols = Symbols::default();
        let mut env = RuntimeEnv {
            program: &inner.program,
            names: &inner.names,
            symbols: &mut symbols,
            wall_offset: inner.wall_offset,
            maps: inner,
        };
        let mut order: Vec<MapId> = (0..inner.program.maps.len()).collect();
        order.sort_by(|a, b| {
            inner.program.maps[*a]
                .name
                .cmp(&inner.program.maps[*b].name)
        });
        let mut maps = Vec::with_capacity(order.len());
        let mut errors = Vec::new();
        for id in order {
            let decl = &inner.program.maps[id];
            match inner.entries(id) {
                Ok(entries) => maps.push(map_snapshot(decl, entries, &mut env)),
                Err(e) => errors.push((decl.display_name(), e)),
            }
        }
        let losses = Losses {
            events: inner.lost(layout::LOST_EVENTS),
            stacks: inner.lost(layout::LOST_STACKS),
            full_maps: inner
                .program
                .maps
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    (
                        m.display_name(),
                        inner.lost(layout::LOST_MAP_UPDATES + i as u32),
                    )
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
            hits: inner.lost(layout::LOST_HITS),
            failed_reads: inner.reads.failed(|index| inner.lost_per_cpu(index)),
        };
        (Snapshot { maps, losses }, errors)
    }
}

/// What decoding a compilation's maps needs of its program.
fn declarations(compilation: &Compilation) -> Program {
    let program = &compilation.program;
    Program {
        registry: program.registry.clone(),
        maps: program.maps.clone(),
        time_formats: program.time_formats.clone(),
        strlen: program.strlen,
        ..Program::default()
    }
}

impl Inner {
    /// Counter `index` of the lost map, summed over CPUs.
    fn lost(&self, index: u32) -> u64 {
        self.lost_per_cpu(index).iter().sum()
    }

    /// Each CPU's counter `index` of the lost map.
    fn lost_per_cpu(&self, index: u32) -> Vec<u64> {
        let Some(map) = &self.lost else {
            return Vec::new();
        };
        match map.lookup_per_cpu(&index.to_ne_bytes()) {
            Ok(Some(values)) => values
                .iter()
                .map(|v| {
                    v.get(..8)
                        .and_then(|b| b.try_into().ok())
                        .map_or(0, u64::from_ne_bytes)
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl Maps for Inner {
    /// Every entry once: a walk that a concurrent delete restarts (see
    /// [`Map::keys`]) can meet a key twice, which would count twice.
    fn entries(&self, id: MapId) -> io::Result<Vec<Entry>> {
        let map = self
            .maps
            .get(id)
            .ok_or_else(|| io::Error::other(format!("no map {id}")))?;
        let per_cpu = self.program.maps[id].is_per_cpu();
        let mut unique: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::new();
        for (key, values) in crate::run::read_entries(map, per_cpu)? {
            unique.insert(key, values);
        }
        Ok(unique.into_iter().collect())
    }

    fn stack(&self, id: u32) -> Vec<crate::RawFrame> {
        self.stacks
            .as_ref()
            .map_or_else(Vec::new, |map| crate::run::read_stack(map, id))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_reader_can_go_to_another_thread() {
        fn shareable<T: Send + Sync + Clone + 'static>() {}
        shareable::<super::MapReader>();
    }
}
