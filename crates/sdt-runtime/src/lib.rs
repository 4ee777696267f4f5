//! The runtime: running a compilation, and what user space does with the
//! records the programs send and the maps they leave.
//!
//! What comes in: a [`sdt_script::Compilation`], and a [`Sink`] for what it
//! produces. [`run::Runner`] creates the maps, loads and attaches the
//! programs through `sdt-trace`'s session, runs BEGIN, intervals and END,
//! and reads the ring buffer. Records arrive in one global order; each
//! starts with its output id ([`sdt_codegen::layout`]). [`Runtime`] decodes
//! each into data, resolves what only user space knows (symbols, names,
//! times) and hands it to the sink: a `printf`, a `print(@m)` snapshot, an
//! `exit()` that asks the caller to stop. How anything looks is the sink's
//! business; this crate must never format output itself. What is traced
//! (`-p`, `-c`, everything) and when a run ends is `sdt-job`'s.
//!
//! What it must never depend on: the command line (`sdt-cli`) or anything
//! built on top of it (`sdt-tools`). They hand it a compilation and a sink.

#![forbid(unsafe_code)]

pub mod event;
mod fast;
mod later;
mod maps;
pub mod reads;
pub mod run;
pub mod scrape;
mod symbols;
pub mod value;

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use sdt_codegen::layout::{snapshot, stamp, Field, OutputInfo, HEADER};
use sdt_lang::format::{Arg, Conv};
use sdt_lang::hir::{MapId, Program};
use sdt_lang::types::TypeRegistry;
use sdt_output::text::{escape_buffer, hex_buffer, raw_text, Context};
use sdt_output::{Event, Printed, Sink, Stamp, TextKind, Thread};
use sdt_script::{Compilation, Growth, Names};
use sdt_trace::PlannedSite;

pub use self::maps::{map_print, map_snapshot, Entry, MapSnapshot};
pub use self::symbols::{RawFrame, Symbols};
use self::value::{decode, resolve, shown_number, Env, Symbol, Value};

/// The files that uprobes (USDT sites among them) are attached to: where
/// frames of stacks recorded by build ID are looked for first.
fn attached_objects<'a>(
    attach: impl Iterator<Item = &'a sdt_trace::Attach>,
) -> impl Iterator<Item = &'a std::path::Path> {
    attach
        .flat_map(|a| match a {
            sdt_trace::Attach::Uprobe { sites, .. } => sites.as_slice(),
            _ => &[],
        })
        .map(|site| site.path.as_path())
}

/// Maps whose names start with this are sdt's own (what a span pragma
/// adds to a script): never printed at the end.
pub const INTERNAL_MAP_PREFIX: &str = "__sdt_";

/// Access to the kernel's maps, for printing them.
pub trait Maps {
    /// Every entry of user map `map`, with one value per CPU for per-CPU maps.
    fn entries(&self, map: MapId) -> io::Result<Vec<Entry>>;
    /// The frames of a recorded stack.
    fn stack(&self, id: u32) -> Vec<RawFrame>;
}

/// What the caller should do after a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    /// `exit()` was called, with its code if one was given.
    Exit(Option<i64>),
}

/// Handles records and prints maps.
pub struct Runtime<'p> {
    sink: Box<dyn Sink + 'p>,
    known: Known<'p>,
    /// Whether `system()` may run commands (`--unsafe`).
    allow_unsafe: bool,
    compilation: &'p Compilation,
    /// The output layouts and sites by id: the compilation's, and more
    /// once objects mapped later are attached (see [`Growth`]).
    tables: Arc<Tables>,
    /// `sdt trace`'s hits: how many arrived, how many could not be
    /// decoded, and the latest time (hits never go back in time).
    hits: Hits,
    /// Entries of `print(@m)` snapshots still arriving, by the thread and
    /// nonce of their walk (see [`sdt_codegen::layout::snapshot`]).
    snapshots: HashMap<(u64, u64), Vec<Entry>>,
    /// The time of the latest stamped `printf`: like hits, stamps never
    /// go back in time (see [`event::decode`]).
    latest_stamp_ns: u64,
    /// Bytes `cat()` prints of a file at most.
    cat_limit: u64,
}

/// What the ids in records mean.
struct Tables {
    outputs: Vec<OutputInfo>,
    sites: Vec<PlannedSite>,
}

/// What values are resolved with: the program's names and types, and
/// the symbols of the traced processes.
struct Known<'p> {
    program: &'p Program,
    names: Names,
    symbols: Symbols,
    /// Wall-clock nanoseconds minus `CLOCK_MONOTONIC` nanoseconds.
    wall_offset: i128,
}

/// Counts of `sdt trace`'s hits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hits {
    /// Hits handed to the output.
    pub delivered: u64,
    /// Event records that could not be decoded (counted as lost).
    pub undecodable: u64,
    /// The time of the latest hit.
    latest_ns: u64,
}

impl<'p> Runtime<'p> {
    /// A runtime for `compilation`, whose output goes to `sink`;
    /// `system()` runs commands only with `allow_unsafe`.
    pub fn new(
        compilation: &'p Compilation,
        allow_unsafe: bool,
        sink: Box<dyn Sink + 'p>,
    ) -> Runtime<'p> {
        let mut symbols = Symbols::default();
        symbols.add_objects(attached_objects(compilation.attach.iter()));
        Runtime {
            sink,
            known: Known {
                program: &compilation.program,
                names: compilation.names.clone(),
                symbols,
                wall_offset: wall_offset(),
            },
            allow_unsafe,
            compilation,
            tables: Arc::new(Tables {
                outputs: compilation.compiled.outputs.clone(),
                sites: compilation.sites.clone(),
            }),
            hits: Hits::default(),
            snapshots: HashMap::new(),
            latest_stamp_ns: 0,
            cat_limit: u64::MAX,
        }
    }

    /// `cat()` prints at most `bytes` of a file (`max_cat_bytes`).
    pub fn limit_cat(&mut self, bytes: u64) {
        self.cat_limit = bytes;
    }

    /// How many USDT sites the programs serve, with those of objects
    /// attached after the start.
    pub fn sites(&self) -> usize {
        self.tables.sites.len()
    }

    /// How many sites of the USDT probe `provider:name` the programs
    /// serve, with those of objects attached after the start.
    pub fn sites_of(&self, provider: &str, name: &str) -> usize {
        self.tables
            .sites
            .iter()
            .filter(|s| s.provider == provider && s.name == name)
            .count()
    }

    /// The hits of `sdt trace` so far.
    pub fn hits(&self) -> Hits {
        self.hits
    }

    /// Where the output goes, for what the caller reports itself
    /// (attached probes, losses).
    pub fn sink(&mut self) -> &mut dyn Sink {
        &mut *self.sink
    }

    /// Remembers the mappings of a traced process, so that its addresses
    /// can be symbolized after it exits: those it has now, and, through
    /// the kernel's records, those it (and with `follow`, every process it
    /// forks) maps later. Returns `false` if the kernel would not record
    /// them; then only what `/proc` shows when an address is looked up is
    /// known.
    pub fn track(&mut self, pid: u32, follow: bool) -> bool {
        let events = sdt_bpf::MappingEvents::open(pid as i32, follow, false);
        self.known.symbols.refresh(pid);
        match events {
            Ok(events) => {
                self.known.symbols.watch(events);
                true
            }
            Err(_) => false,
        }
    }

    /// Remembers the mappings of every process on the machine from now on
    /// (a system-wide run whose programs record user addresses), so that
    /// `usym` and stack frames the kernel gave as addresses are named
    /// after their process has gone, and frames recorded by build ID are
    /// found in the files those processes mapped. Returns `false` if the
    /// kernel would not record them.
    pub fn track_everything(&mut self) -> bool {
        match sdt_bpf::MappingEvents::open(-1, false, false) {
            Ok(events) => {
                self.known.symbols.watch_everything(events);
                true
            }
            Err(_) => false,
        }
    }

    /// Applies the kernel's records of mappings (see [`Symbols`]).
    pub(crate) fn keep_up_with_mappings(&mut self) {
        self.known.symbols.keep_up();
    }

    /// Takes the names, sites and output layouts of a compilation that has
    /// grown, before records of its new programs arrive.
    pub(crate) fn grow(&mut self, growth: &Growth) {
        self.known.names = growth.names().clone();
        self.tables = Arc::new(Tables {
            outputs: growth.outputs.clone(),
            sites: growth.sites().to_vec(),
        });
        let probes: Vec<(&str, &str)> = growth
            .sites()
            .iter()
            .map(|s| (s.provider.as_str(), s.name.as_str()))
            .collect();
        self.sink.event(Event::ProbesAdded(&probes));
        let sites = growth.sites().iter().map(|s| s.path.as_path());
        self.known.symbols.add_objects(sites);
    }

    /// Reads the mappings of `pid` again from `/proc`.
    pub fn refresh_mappings(&mut self, pid: u32) {
        self.known.symbols.refresh(pid);
    }

    /// The first write error, if output failed (a closed pipe, a full disk).
    pub fn error(&self) -> Option<&io::Error> {
        self.sink.error()
    }

    pub fn flush(&mut self) {
        self.sink.flush();
    }

    /// Handles one record.
    pub fn handle(&mut self, record: &[u8], maps: &dyn Maps) -> Action {
        let id = u64_at(record, 0) as usize;
        let tables = Arc::clone(&self.tables);
        let Some(info) = tables.outputs.get(id) else {
            return Action::Continue;
        };
        match *info {
            OutputInfo::Printf {
                format,
                ref fields,
                stamped,
            } => {
                let when = stamped.then(|| {
                    let time_ns = u64_at(record, stamp::TIME as usize).max(self.latest_stamp_ns);
                    self.latest_stamp_ns = time_ns;
                    let pid_tgid = u64_at(record, stamp::PID_TGID as usize);
                    let comm = record
                        .get(stamp::COMM as usize..stamp::END as usize)
                        .unwrap_or_default();
                    let comm = &comm[..comm.iter().position(|&b| b == 0).unwrap_or(comm.len())];
                    (time_ns, pid_tgid, comm)
                });
                let mut printed = PrintfRecord {
                    known: &mut self.known,
                    maps,
                    format,
                    fields,
                    record,
                    stamp: when,
                    text: None,
                };
                self.sink.event(Event::Printf(&mut printed));
            }
            OutputInfo::Message {
                format,
                ref fields,
                error,
                span,
            } => {
                let text = self.known.render(format, fields, record, maps);
                let compilation = self.compilation;
                eprintln!(
                    "{}:{}: {}: {}",
                    compilation.source_name,
                    span.location(&compilation.source),
                    if error { "ERROR" } else { "WARNING" },
                    String::from_utf8_lossy(&text)
                );
            }
            OutputInfo::System { format, ref fields } => {
                let command = self.known.render(format, fields, record, maps);
                self.system(&command);
            }
            OutputInfo::Cat { format, ref fields } => {
                let path = self.known.render(format, fields, record, maps);
                self.cat(&path);
            }
            OutputInfo::MapEntry { map } => self.snapshot_entry(map, record),
            OutputInfo::PrintMap { map, top, div } => {
                self.print_snapshot(map, top, div, record, maps)
            }
            OutputInfo::PrintValue { ref field } => {
                let program = self.known.program;
                let value = decode(
                    &field.ty,
                    record.get(field.offset as usize..).unwrap_or_default(),
                    &program.registry,
                );
                let value = resolve(&value, &mut self.known.env(maps));
                self.sink.event(Event::Value(&value));
            }
            OutputInfo::Exit { has_code } => {
                let code = has_code.then(|| u64_at(record, HEADER as usize) as i64);
                return Action::Exit(code);
            }
            OutputInfo::Time { format } => {
                let format = self
                    .known
                    .program
                    .time_formats
                    .get(format as usize)
                    .cloned()
                    .unwrap_or_default();
                let now = value::format_time(&format, now_wall_ns());
                self.sink.event(Event::Text(TextKind::Time, now.as_bytes()));
            }
            OutputInfo::Join { separator, size } => {
                let count = (u64_at(record, HEADER as usize) as usize)
                    .min(sdt_codegen::layout::JOIN_MAX as usize);
                let stride = size.next_multiple_of(8) as usize;
                let start = HEADER as usize + 8;
                let mut parts = Vec::new();
                for i in 0..count {
                    let bytes = record
                        .get(start + i * stride..start + i * stride + size as usize)
                        .unwrap_or_default();
                    let s = &bytes[..bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len())];
                    parts.push(raw_text(s));
                }
                let sep = self
                    .known
                    .program
                    .join_separators
                    .get(separator as usize)
                    .cloned()
                    .unwrap_or_else(|| " ".into());
                self.sink
                    .event(Event::Text(TextKind::Join, parts.join(&sep).as_bytes()));
            }
            OutputInfo::Event { .. } => {
                match event::decode(record, &tables.outputs, &tables.sites, self.hits.latest_ns) {
                    Some(hit) => {
                        self.hits.latest_ns = hit.time_ns;
                        self.hits.delivered += 1;
                        self.sink.event(Event::Hit(&hit));
                    }
                    None => self.hits.undecodable += 1,
                }
            }
        }
        Action::Continue
    }

    fn system(&mut self, command: &[u8]) {
        if !self.allow_unsafe {
            return;
        }
        let command = String::from_utf8_lossy(command).into_owned();
        match std::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .output()
        {
            Ok(output) => self
                .sink
                .event(Event::Text(TextKind::System, &output.stdout)),
            Err(e) => eprintln!("sdt: system(\"{command}\") failed: {e}"),
        }
    }

    fn cat(&mut self, path: &[u8]) {
        let path = String::from_utf8_lossy(path).into_owned();
        let limit = self.cat_limit;
        let read = std::fs::File::open(&path).and_then(|f| {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut std::io::Read::take(f, limit), &mut bytes)?;
            Ok(bytes)
        });
        match read {
            Ok(bytes) => self.sink.event(Event::Text(TextKind::Cat, &bytes)),
            Err(e) => eprintln!("sdt: cat(\"{path}\"): {e}"),
        }
    }

    /// Keeps one entry of a `print(@m)` snapshot until its print arrives.
    fn snapshot_entry(&mut self, map: MapId, record: &[u8]) {
        let program = self.known.program;
        let Some(decl) = program.maps.get(map) else {
            return;
        };
        let registry = &program.registry;
        let key_size = decl.key_size(registry) as usize;
        let value_size = decl.value_size(registry) as usize;
        let start = snapshot::HEADER_END as usize;
        let Some(key) = record.get(start..start + key_size) else {
            return;
        };
        let values = record
            .get(start + key_size..)
            .unwrap_or_default()
            .chunks_exact(value_size)
            .map(<[u8]>::to_vec);
        let values: Vec<Vec<u8>> = if decl.is_per_cpu() {
            values.collect()
        } else {
            values.take(1).collect()
        };
        let walk = (
            u64_at(record, snapshot::THREAD as usize),
            u64_at(record, snapshot::NONCE as usize),
        );
        self.snapshots
            .entry(walk)
            .or_default()
            .push((key.to_vec(), values));
    }

    /// Prints the snapshot a `print(@m)` record closes. A snapshot with
    /// fewer entries than the walk saw lost some to a full ring buffer,
    /// which is said.
    fn print_snapshot(&mut self, map: MapId, top: u64, div: u64, record: &[u8], maps: &dyn Maps) {
        let thread = u64_at(record, snapshot::THREAD as usize);
        let walk = (thread, u64_at(record, snapshot::NONCE as usize));
        let entries = self.snapshots.remove(&walk).unwrap_or_default();
        // A thread's earlier snapshots whose print was lost are done with.
        self.snapshots.retain(|(t, _), _| *t != thread);
        let seen = u64_at(record, snapshot::COUNT as usize);
        if (entries.len() as u64) < seen {
            eprintln!(
                "sdt: print({}) shows {} of its {seen} entries: the ring buffer was full; try a larger --buffer-size",
                self.known.program.maps.get(map).map_or_else(String::new, |m| m.display_name()),
                entries.len()
            );
        }
        self.print_entries(map, entries, top, div, maps);
    }

    /// Prints one map as it is now, as the maps at the end are printed.
    pub fn print_map(&mut self, map: MapId, top: u64, div: u64, maps: &dyn Maps) {
        let Some(decl) = self.known.program.maps.get(map) else {
            return;
        };
        match maps.entries(map) {
            Ok(entries) => self.print_entries(map, entries, top, div, maps),
            Err(e) => eprintln!("sdt: cannot read {}: {e}", decl.display_name()),
        }
    }

    /// Prints `entries` of `map`, as `print(@m)` does.
    fn print_entries(
        &mut self,
        map: MapId,
        entries: Vec<Entry>,
        top: u64,
        div: u64,
        maps: &dyn Maps,
    ) {
        let program = self.known.program;
        let Some(decl) = program.maps.get(map) else {
            return;
        };
        let print = map_print(decl, entries, top, div, &mut self.known.env(maps));
        self.sink.event(Event::Map(&print));
    }

    /// Prints every map but sdt's own, sorted by name, as bpftrace does
    /// when a program ends.
    pub fn print_all_maps(&mut self, maps: &dyn Maps) {
        self.sink.event(Event::MapsFollow);
        let program = self.known.program;
        let mut order: Vec<MapId> = (0..program.maps.len())
            .filter(|&id| !program.maps[id].name.starts_with(INTERNAL_MAP_PREFIX))
            .collect();
        order.sort_by(|a, b| program.maps[*a].name.cmp(&program.maps[*b].name));
        for map in order {
            self.print_map(map, 0, 1, maps);
        }
    }
}

impl Known<'_> {
    fn env<'r>(&'r mut self, maps: &'r dyn Maps) -> RuntimeEnv<'r> {
        RuntimeEnv {
            program: self.program,
            names: &self.names,
            symbols: &mut self.symbols,
            wall_offset: self.wall_offset,
            maps,
        }
    }

    /// The values of a `printf`, `system` or `cat` record.
    fn values<'r>(&self, fields: &[Field], record: &'r [u8]) -> Vec<Value<'r>> {
        let registry = &self.program.registry;
        fields
            .iter()
            .map(|f| {
                decode(
                    &f.ty,
                    record.get(f.offset as usize..).unwrap_or_default(),
                    registry,
                )
            })
            .collect()
    }

    /// Formats a `printf`, `system` or `cat` record.
    fn render(&mut self, format: u32, fields: &[Field], record: &[u8], maps: &dyn Maps) -> Vec<u8> {
        let program = self.program;
        let Some(format) = program.formats.get(format as usize) else {
            return Vec::new();
        };
        let values = self.values(fields, record);
        let mut env = self.env(maps);
        let mut as_text = |v: &Value<'_>| {
            let d = resolve(v, &mut env);
            Arg::Owned(sdt_output::text::datum(&d, Context::Printf).into_bytes())
        };
        let args: Vec<Arg<'static>> = values
            .iter()
            .zip(format.specs())
            .map(|(v, spec)| match (v, spec.conv) {
                (Value::Buf(bytes) | Value::Str(bytes), Conv::Raw) => {
                    Arg::Owned(escape_buffer(bytes).into_bytes())
                }
                (Value::Buf(bytes) | Value::Str(bytes), Conv::RawHex) => {
                    Arg::Owned(hex_buffer(bytes, "\\x", "").into_bytes())
                }
                (Value::Buf(bytes) | Value::Str(bytes), Conv::RawHexSpaced) => {
                    Arg::Owned(hex_buffer(bytes, "", " ").into_bytes())
                }
                (_, c) if !c.wants_integer() => as_text(v),
                (Value::Int { value, signed }, _) => Arg::Int {
                    value: *value,
                    signed: *signed,
                },
                (Value::Bool(b), _) => Arg::Int {
                    value: u64::from(*b),
                    signed: false,
                },
                (Value::Enum { value, .. }, _) => Arg::Int {
                    value: *value as u64,
                    signed: true,
                },
                (Value::Ptr(x), _) => Arg::Int {
                    value: *x,
                    signed: false,
                },
                (Value::Shown(shown, bytes), _) => match shown_number(*shown, bytes) {
                    Some((value, signed)) => Arg::Int { value, signed },
                    None => as_text(v),
                },
                _ => as_text(v),
            })
            .collect();
        let mut out = Vec::new();
        format.render(&args, &mut out);
        out
    }
}

/// A `printf` record, formatted or turned into data only when a sink asks.
struct PrintfRecord<'r, 'p> {
    known: &'r mut Known<'p>,
    maps: &'r dyn Maps,
    format: u32,
    fields: &'r [Field],
    record: &'r [u8],
    /// Its time, `pid_tgid` and thread name, when compiled with them.
    stamp: Option<(u64, u64, &'r [u8])>,
    text: Option<Vec<u8>>,
}

impl Printed for PrintfRecord<'_, '_> {
    fn format(&self) -> u32 {
        self.format
    }

    fn text(&mut self) -> &[u8] {
        if self.text.is_none() {
            let text = self
                .known
                .render(self.format, self.fields, self.record, self.maps);
            self.text = Some(text);
        }
        self.text.as_deref().unwrap_or_default()
    }

    fn args(&mut self) -> Vec<sdt_output::Datum> {
        let values = self.known.values(self.fields, self.record);
        let mut env = self.known.env(self.maps);
        values.iter().map(|v| resolve(v, &mut env)).collect()
    }

    fn stamp(&self) -> Option<Stamp<'_>> {
        let (time_ns, pid_tgid, comm) = self.stamp?;
        Some(Stamp {
            time_ns,
            thread: Thread {
                pid: (pid_tgid >> 32) as u32,
                tid: pid_tgid as u32,
                comm,
            },
        })
    }
}

/// The environment values are resolved in.
struct RuntimeEnv<'r> {
    program: &'r Program,
    names: &'r Names,
    symbols: &'r mut Symbols,
    wall_offset: i128,
    maps: &'r dyn Maps,
}

impl Env for RuntimeEnv<'_> {
    fn registry(&self) -> &TypeRegistry {
        &self.program.registry
    }

    fn probe_name(&self, id: u64) -> String {
        self.names
            .probes
            .get(id as usize)
            .cloned()
            .unwrap_or_else(|| format!("probe {id}"))
    }

    fn func_name(&self, id: u64) -> String {
        self.names
            .funcs
            .get(id as usize)
            .cloned()
            .unwrap_or_else(|| format!("{id:#x}"))
    }

    fn symbol(&mut self, pid: u32, addr: u64) -> Option<Symbol> {
        self.symbols.symbol(pid, addr)
    }

    fn module(&mut self, pid: u32, addr: u64) -> Option<String> {
        self.symbols.module(pid, addr)
    }

    fn build_id(&mut self, pid: u32, addr: u64) -> Option<(Vec<u8>, u64)> {
        self.symbols.build_id(pid, addr)
    }

    fn kernel_symbol(&mut self, addr: u64) -> Option<Symbol> {
        self.symbols.kernel_symbol(addr)
    }

    fn stack(&mut self, id: u32) -> Vec<RawFrame> {
        self.maps.stack(id)
    }

    fn object_frame(&mut self, pid: u32, build_id: &[u8; 20], offset: u64) -> sdt_output::Frame {
        self.symbols.object_frame(pid, build_id, offset)
    }

    fn user_name(&self, uid: u32) -> Option<String> {
        user_name(uid)
    }

    fn time_format(&self, id: u32) -> &str {
        self.program
            .time_formats
            .get(id as usize)
            .map_or("", String::as_str)
    }

    fn wall_ns(&self, monotonic_ns: u64) -> i128 {
        self.wall_offset + i128::from(monotonic_ns)
    }
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    bytes
        .get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_ne_bytes)
        .unwrap_or(0)
}

fn now_wall_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC`, to show kernel timestamps as dates.
fn wall_offset() -> i128 {
    let monotonic = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let mono_ns = i128::from(monotonic.tv_sec) * 1_000_000_000 + i128::from(monotonic.tv_nsec);
    now_wall_ns() - mono_ns
}

/// A user's name from `/etc/passwd`.
fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id: u32 = fields.nth(1)?.parse().ok()?;
        (id == uid).then(|| name.to_string())
    })
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::io::Write;
    use std::rc::Rc;

    use super::*;
    use sdt_lang::hir::MapDecl;
    use sdt_lang::types::INT64;

    /// A writer whose bytes the test can read afterwards.
    #[derive(Clone, Default)]
    struct Shared(Rc<RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.borrow().clone()).unwrap()
        }
    }

    /// `@x[1]: 5`.
    struct OneEntry;

    impl Maps for OneEntry {
        fn entries(&self, _: MapId) -> io::Result<Vec<Entry>> {
            Ok(vec![(
                1i64.to_ne_bytes().to_vec(),
                vec![5i64.to_ne_bytes().to_vec()],
            )])
        }
        fn stack(&self, _: u32) -> Vec<RawFrame> {
            Vec::new()
        }
    }

    /// What the output and standard output receive at the end of a
    /// program with one map.
    fn end(json: bool, separator_to_stdout: bool) -> (String, String) {
        let mut program = Program::default();
        program.maps.push(MapDecl {
            name: "x".into(),
            keys: vec![INT64],
            value: INT64,
            span: Default::default(),
            declared: None,
        });
        let compilation = Compilation {
            program,
            ..Compilation::default()
        };
        let (out, stdout) = (Shared::default(), Shared::default());
        let sink: Box<dyn sdt_output::Sink> = match (json, separator_to_stdout) {
            (true, _) => Box::new(sdt_output::json::Json::new(Box::new(out.clone()))),
            (false, false) => Box::new(sdt_output::text::Text::new(Box::new(out.clone()))),
            (false, true) => Box::new(
                sdt_output::text::Text::new(Box::new(out.clone()))
                    .separator_to(Box::new(stdout.clone())),
            ),
        };
        let mut runtime = Runtime::new(&compilation, false, sink);
        runtime.print_all_maps(&OneEntry);
        runtime.flush();
        (out.text(), stdout.text())
    }

    #[test]
    fn the_newlines_before_the_maps_go_where_bpftrace_puts_them() {
        // In the text output, before the maps.
        assert_eq!(end(false, false), ("\n\n@x[1]: 5\n".into(), "".into()));
        // Never in JSON.
        let json = "{\"type\": \"map\", \"data\": {\"@x\": {\"1\": 5}}}\n";
        assert_eq!(end(true, false), (json.into(), "".into()));
        // bpftrace with -o FILE: on standard output, not in the file.
        assert_eq!(end(false, true), ("@x[1]: 5\n".into(), "\n\n".into()));
    }
}
