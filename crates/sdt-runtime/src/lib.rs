//! The runtime: what user space does with the records the programs send,
//! and the maps they leave.
//!
//! Records arrive in one global order from the ring buffer; each starts
//! with its output id ([`sdt_codegen::layout`]). A `printf` is formatted and
//! written, a `print(@m)` reads the map and prints it, an `exit()` asks the
//! caller to stop. Output is bpftrace's text or its JSON objects
//! (`-f json`), one per line.

#![forbid(unsafe_code)]

pub mod event;
mod maps;
pub mod run;
mod symbols;
pub mod value;

use std::collections::HashMap;
use std::io::{self, Write};

use sdt_script::Names;

pub use self::maps::{datum, map_rows, print_json, print_text, unit_label, Datum, Entry, MapRow};
pub use self::symbols::Symbols;
use self::value::{decode, json_string, text, Context, Env, Symbol, Value};
use sdt_codegen::layout::{snapshot, Field, OutputInfo, HEADER};
use sdt_codegen::Compiled;
use sdt_lang::format::{Arg, Conv};
use sdt_lang::hir::{MapId, Program};
use sdt_lang::types::TypeRegistry;

/// Access to the kernel's maps, for printing them.
pub trait Maps {
    /// Every entry of user map `map`, with one value per CPU for per-CPU maps.
    fn entries(&self, map: MapId) -> io::Result<Vec<Entry>>;
    /// The frames of a recorded user stack.
    fn stack(&self, id: u32) -> Vec<u64>;
}

/// What the caller should do after a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    /// `exit()` was called, with its code if one was given.
    Exit(Option<i64>),
}

/// Output settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub json: bool,
    /// Allows `system()`.
    pub allow_unsafe: bool,
}

/// Where the two newlines go that bpftrace prints when a program ends,
/// before the maps. JSON output never has them: bpftrace writes them there
/// too, but then not every line is a JSON document (a deliberate
/// difference).
pub enum Separator<'p> {
    /// Into the output (the default).
    Output,
    /// Somewhere else: bpftrace writes them to standard output even when
    /// the output goes to a file (`-o`).
    To(Box<dyn Write + 'p>),
}

/// Takes a program's output as data instead of text: the tools of
/// `sdt` (calls, flow, ...) lay out their own tables and JSON from it.
/// With a receiver set, `printf` and `print(@map)` go to it and nothing
/// else is written for them.
pub trait Receiver {
    /// A `printf`: its format's index in the program and its arguments.
    fn printf(&mut self, format: u32, args: Vec<Datum>);
    /// A `print(@map)`, or a map printed when the program ends: its name
    /// (`@calls`) and its entries, in `print`'s order.
    fn map(&mut self, name: &str, rows: Vec<MapRow>);
}

/// Handles records and prints maps.
pub struct Runtime<'p> {
    receiver: Option<Box<dyn Receiver + 'p>>,
    program: &'p Program,
    compiled: &'p Compiled,
    names: Names,
    settings: Settings,
    out: Box<dyn Write + 'p>,
    symbols: Symbols,
    users: HashMap<u32, Option<String>>,
    /// Wall-clock nanoseconds minus `CLOCK_MONOTONIC` nanoseconds.
    wall_offset: i128,
    /// The first error writing output; output stops after it.
    error: Option<io::Error>,
    separator: Separator<'p>,
    /// Entries of `print(@m)` snapshots still arriving, by the thread and
    /// nonce of their walk (see [`sdt_codegen::layout::snapshot`]).
    snapshots: HashMap<(u64, u64), Vec<Entry>>,
}

impl<'p> Runtime<'p> {
    pub fn new(
        program: &'p Program,
        compiled: &'p Compiled,
        names: Names,
        settings: Settings,
        out: Box<dyn Write + 'p>,
    ) -> Runtime<'p> {
        Runtime {
            receiver: None,
            program,
            compiled,
            names,
            settings,
            out,
            symbols: Symbols::default(),
            users: HashMap::new(),
            wall_offset: wall_offset(),
            error: None,
            separator: Separator::Output,
            snapshots: HashMap::new(),
        }
    }

    /// Sends `printf` and map output to `receiver` as data; see
    /// [`Receiver`].
    pub fn set_receiver(&mut self, receiver: Box<dyn Receiver + 'p>) {
        self.receiver = Some(receiver);
    }

    /// Says where the newlines before the maps at the end go; see
    /// [`Separator`].
    pub fn set_separator(&mut self, separator: Separator<'p>) {
        self.separator = separator;
    }

    /// Prints the two newlines that end a program before its maps, where
    /// [`Runtime::set_separator`] said. [`Runtime::print_all_maps`] calls
    /// it; a program without maps calls it alone.
    pub fn print_separator(&mut self) {
        if self.settings.json || self.receiver.is_some() {
            return;
        }
        match &mut self.separator {
            Separator::Output => self.write(b"\n\n"),
            Separator::To(to) => {
                // Like bpftrace, which writes them with printf: a closed
                // standard output does not stop the maps.
                let _ = to.write_all(b"\n\n").and_then(|()| to.flush());
            }
        }
    }

    /// Remembers the mappings of a traced process, so that its addresses
    /// can be symbolized after it exits: those it has now, and, through
    /// the kernel's records, those it (and with `follow`, every process it
    /// forks) maps later. Returns `false` if the kernel would not record
    /// them; then only what `/proc` shows when an address is looked up is
    /// known.
    pub fn track(&mut self, pid: u32, follow: bool) -> bool {
        let events = sdt_bpf::MappingEvents::open(pid as i32, follow);
        self.symbols.refresh(pid);
        match events {
            Ok(events) => {
                self.symbols.watch(events);
                true
            }
            Err(_) => false,
        }
    }

    /// Reads the mappings of `pid` again from `/proc`.
    pub fn refresh_mappings(&mut self, pid: u32) {
        self.symbols.refresh(pid);
    }

    /// The first write error, if output failed (a closed pipe, a full disk).
    pub fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    pub fn take_error(&mut self) -> Option<io::Error> {
        self.error.take()
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            if let Err(e) = self.out.write_all(bytes) {
                self.error = Some(e);
            }
        }
    }

    fn json_line(&mut self, kind: &str, data: &str) {
        let line = format!("{{\"type\": \"{kind}\", \"data\": {data}}}\n");
        self.write(line.as_bytes());
    }

    pub fn flush(&mut self) {
        if self.error.is_none() {
            if let Err(e) = self.out.flush() {
                self.error = Some(e);
            }
        }
    }

    /// Writes text that is not a record: `Attaching N probes...`, the
    /// blank lines before the final maps.
    pub fn message(&mut self, text: &str) {
        self.write(text.as_bytes());
    }

    /// Handles one record.
    pub fn handle(&mut self, record: &[u8], maps: &dyn Maps) -> Action {
        let id = u64_at(record, 0) as usize;
        let compiled: &'p Compiled = self.compiled;
        let Some(info) = compiled.outputs.get(id) else {
            return Action::Continue;
        };
        match *info {
            OutputInfo::Printf { format, ref fields } if self.receiver.is_some() => {
                let args = self.printf_data(fields, record, maps);
                if let Some(receiver) = &mut self.receiver {
                    receiver.printf(format, args);
                }
            }
            OutputInfo::Printf { format, ref fields } => {
                let text = self.render_format(format, fields, record, maps);
                if self.settings.json {
                    self.json_line("printf", &json_string(&text));
                } else {
                    self.write(&text);
                }
            }
            OutputInfo::System { format, ref fields } => {
                let command = self.render_format(format, fields, record, maps);
                self.system(&command);
            }
            OutputInfo::Cat { format, ref fields } => {
                let path = self.render_format(format, fields, record, maps);
                self.cat(&path);
            }
            OutputInfo::MapEntry { map } => self.snapshot_entry(map, record),
            OutputInfo::PrintMap { map, top, div } => {
                self.print_snapshot(map, top, div, record, maps)
            }
            OutputInfo::PrintValue { ref field } => {
                let registry = &self.program.registry;
                let value = decode(
                    &field.ty,
                    record.get(field.offset as usize..).unwrap_or_default(),
                    registry,
                );
                let mut env = self.env(maps);
                let rendered = if env.runtime.settings.json {
                    format!(
                        "{{\"type\": \"value\", \"data\": {}}}\n",
                        value::json(&value, &mut env)
                    )
                } else {
                    format!("{}\n", text(&value, Context::Printf, &mut env))
                };
                self.write(rendered.as_bytes());
            }
            OutputInfo::Exit { has_code } => {
                let code = has_code.then(|| u64_at(record, HEADER as usize) as i64);
                return Action::Exit(code);
            }
            OutputInfo::Time { format } => {
                let format = self
                    .program
                    .time_formats
                    .get(format as usize)
                    .cloned()
                    .unwrap_or_default();
                let now = value::format_time(&format, now_wall_ns());
                if self.settings.json {
                    self.json_line("time", &json_string(now.as_bytes()));
                } else {
                    self.write(now.as_bytes());
                }
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
                    parts.push(value::raw_text(s));
                }
                let sep = self
                    .program
                    .join_separators
                    .get(separator as usize)
                    .cloned()
                    .unwrap_or_else(|| " ".into());
                let line = parts.join(&sep);
                if self.settings.json {
                    self.json_line("join", &json_string(line.as_bytes()));
                } else {
                    self.write(format!("{line}\n").as_bytes());
                }
            }
            OutputInfo::Event { .. } => {}
        }
        Action::Continue
    }

    /// The arguments of a `printf` record as data.
    fn printf_data(&mut self, fields: &[Field], record: &[u8], maps: &dyn Maps) -> Vec<Datum> {
        let program = self.program;
        let registry = &program.registry;
        let mut env = self.env(maps);
        fields
            .iter()
            .map(|f| {
                let v = decode(
                    &f.ty,
                    record.get(f.offset as usize..).unwrap_or_default(),
                    registry,
                );
                datum(&v, Context::Printf, &mut env)
            })
            .collect()
    }

    /// Formats a `printf`, `system` or `cat` record.
    fn render_format(
        &mut self,
        format: u32,
        fields: &[Field],
        record: &[u8],
        maps: &dyn Maps,
    ) -> Vec<u8> {
        let program: &'p Program = self.program;
        let Some(format) = program.formats.get(format as usize) else {
            return Vec::new();
        };
        let registry = &program.registry;
        let values: Vec<Value<'_>> = fields
            .iter()
            .map(|f| {
                decode(
                    &f.ty,
                    record.get(f.offset as usize..).unwrap_or_default(),
                    registry,
                )
            })
            .collect();
        let mut env = self.env(maps);
        let args: Vec<Arg<'static>> = values
            .iter()
            .zip(format.specs())
            .map(|(v, spec)| match (v, spec.conv) {
                (Value::Buf(bytes) | Value::Str(bytes), Conv::Raw) => {
                    Arg::Owned(value::escape_buffer(bytes).into_bytes())
                }
                (_, Conv::Str | Conv::Raw) => {
                    Arg::Owned(text(v, Context::Printf, &mut env).into_bytes())
                }
                (Value::Int { value, signed }, _) => Arg::Int {
                    value: *value,
                    signed: *signed,
                },
                (Value::Enum { value, .. }, _) => Arg::Int {
                    value: *value as u64,
                    signed: true,
                },
                (Value::Probe(x) | Value::Func(x), _)
                | (Value::USym { addr: x, .. }, _)
                | (Value::Timestamp { ns: x, .. }, _) => Arg::Int {
                    value: *x,
                    signed: false,
                },
                (Value::Username(uid), _) => Arg::Int {
                    value: u64::from(*uid),
                    signed: false,
                },
                (Value::Strerror(e), _) => Arg::Int {
                    value: *e as u64,
                    signed: true,
                },
                _ => Arg::Owned(text(v, Context::Printf, &mut env).into_bytes()),
            })
            .collect();
        let mut out = Vec::new();
        format.render(&args, &mut out);
        out
    }

    fn system(&mut self, command: &[u8]) {
        if !self.settings.allow_unsafe {
            return;
        }
        let command = String::from_utf8_lossy(command).into_owned();
        match std::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .output()
        {
            Ok(output) => {
                if self.settings.json {
                    self.json_line("system", &json_string(&output.stdout));
                } else {
                    self.write(&output.stdout);
                }
            }
            Err(e) => eprintln!("sdt: system(\"{command}\") failed: {e}"),
        }
    }

    fn cat(&mut self, path: &[u8]) {
        let path = String::from_utf8_lossy(path).into_owned();
        match std::fs::read(&path) {
            Ok(bytes) => {
                if self.settings.json {
                    self.json_line("cat", &json_string(&bytes));
                } else {
                    self.write(&bytes);
                }
            }
            Err(e) => eprintln!("sdt: cat(\"{path}\"): {e}"),
        }
    }

    /// Keeps one entry of a `print(@m)` snapshot until its print arrives.
    fn snapshot_entry(&mut self, map: MapId, record: &[u8]) {
        let Some(decl) = self.program.maps.get(map) else {
            return;
        };
        let registry = &self.program.registry;
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
                self.program.maps.get(map).map_or_else(String::new, |m| m.display_name()),
                entries.len()
            );
        }
        self.print_entries(map, entries, top, div, maps);
    }

    /// Prints one map as it is now, as the maps at the end are printed.
    pub fn print_map(&mut self, map: MapId, top: u64, div: u64, maps: &dyn Maps) {
        let Some(decl) = self.program.maps.get(map) else {
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
        let Some(decl) = self.program.maps.get(map) else {
            return;
        };
        if self.receiver.is_some() {
            let mut env = self.env(maps);
            let rows = map_rows(decl, entries, &mut env);
            if let Some(receiver) = &mut self.receiver {
                receiver.map(&decl.display_name(), rows);
            }
            return;
        }
        let json = self.settings.json;
        let mut env = self.env(maps);
        let text = if json {
            print_json(decl, entries, top, div, &mut env).map(|line| line + "\n")
        } else {
            Some(print_text(decl, entries, top, div, &mut env))
        };
        if let Some(text) = text {
            self.write(text.as_bytes());
        }
    }

    /// Prints every map, sorted by name, as bpftrace does when a program
    /// ends: after two blank lines (see [`Runtime::set_separator`]).
    pub fn print_all_maps(&mut self, maps: &dyn Maps) {
        self.print_separator();
        let mut order: Vec<MapId> = (0..self.program.maps.len()).collect();
        order.sort_by(|a, b| self.program.maps[*a].name.cmp(&self.program.maps[*b].name));
        for map in order {
            self.print_map(map, 0, 1, maps);
        }
    }

    fn env<'r>(&'r mut self, maps: &'r dyn Maps) -> RuntimeEnv<'r, 'p> {
        RuntimeEnv {
            runtime: self,
            maps,
        }
    }
}

/// The environment values render in.
struct RuntimeEnv<'r, 'p> {
    runtime: &'r mut Runtime<'p>,
    maps: &'r dyn Maps,
}

impl Env for RuntimeEnv<'_, '_> {
    fn registry(&self) -> &TypeRegistry {
        &self.runtime.program.registry
    }

    fn probe_name(&self, id: u64) -> String {
        self.runtime
            .names
            .probes
            .get(id as usize)
            .cloned()
            .unwrap_or_else(|| format!("probe {id}"))
    }

    fn func_name(&self, id: u64) -> String {
        self.runtime
            .names
            .funcs
            .get(id as usize)
            .cloned()
            .unwrap_or_else(|| format!("{id:#x}"))
    }

    fn symbol(&mut self, pid: u32, addr: u64) -> Option<Symbol> {
        self.runtime.symbols.symbol(pid, addr)
    }

    fn stack(&mut self, id: u32) -> Vec<u64> {
        self.maps.stack(id)
    }

    fn user_name(&self, uid: u32) -> Option<String> {
        if let Some(name) = self.runtime.users.get(&uid) {
            return name.clone();
        }
        user_name(uid)
    }

    fn time_format(&self, id: u32) -> &str {
        self.runtime
            .program
            .time_formats
            .get(id as usize)
            .map_or("", String::as_str)
    }

    fn wall_ns(&self, monotonic_ns: u64) -> i128 {
        self.runtime.wall_offset + i128::from(monotonic_ns)
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
    use std::rc::Rc;

    use super::*;
    use sdt_lang::hir::MapDecl;
    use sdt_lang::types::INT64;

    /// A writer whose bytes the test can read afterwards.
    #[derive(Clone, Default)]
    struct Sink(Rc<RefCell<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Sink {
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
        fn stack(&self, _: u32) -> Vec<u64> {
            Vec::new()
        }
    }

    /// What the output and standard output receive at the end of a
    /// program with one map.
    fn end(json: bool, separator: Option<fn(Sink) -> Separator<'static>>) -> (String, String) {
        let mut program = Program::default();
        program.maps.push(MapDecl {
            name: "x".into(),
            keys: vec![INT64],
            value: INT64,
            span: Default::default(),
        });
        let compiled = Compiled {
            maps: Vec::new(),
            programs: Vec::new(),
            outputs: Vec::new(),
            scratch_size: 0,
        };
        let (out, stdout) = (Sink::default(), Sink::default());
        let settings = Settings {
            json,
            ..Settings::default()
        };
        let mut runtime = Runtime::new(
            &program,
            &compiled,
            Names::default(),
            settings,
            Box::new(out.clone()),
        );
        if let Some(separator) = separator {
            runtime.set_separator(separator(stdout.clone()));
        }
        runtime.print_all_maps(&OneEntry);
        runtime.flush();
        (out.text(), stdout.text())
    }

    #[test]
    fn the_newlines_before_the_maps_go_where_bpftrace_puts_them() {
        // In the text output, before the maps.
        assert_eq!(end(false, None), ("\n\n@x[1]: 5\n".into(), "".into()));
        // Never in JSON, wherever they would go.
        let json = "{\"type\": \"map\", \"data\": {\"@x\": {\"1\": 5}}}\n";
        assert_eq!(end(true, None), (json.into(), "".into()));
        assert_eq!(
            end(true, Some(|s| Separator::To(Box::new(s)))),
            (json.into(), "".into())
        );
        // bpftrace with -o FILE: on standard output, not in the file.
        assert_eq!(
            end(false, Some(|s| Separator::To(Box::new(s)))),
            ("@x[1]: 5\n".into(), "\n\n".into())
        );
    }

    /// A map's name and rows, as a receiver gets them.
    type PrintedMap = (String, Vec<MapRow>);

    /// Keeps what a [`Receiver`] is given.
    #[derive(Clone, Default)]
    struct Kept(Rc<RefCell<Vec<PrintedMap>>>);

    impl Receiver for Kept {
        fn printf(&mut self, _: u32, _: Vec<Datum>) {}
        fn map(&mut self, name: &str, rows: Vec<MapRow>) {
            self.0.borrow_mut().push((name.to_string(), rows));
        }
    }

    #[test]
    fn a_receiver_gets_maps_as_data_and_nothing_is_printed() {
        let mut program = Program::default();
        program.maps.push(MapDecl {
            name: "x".into(),
            keys: vec![INT64],
            value: INT64,
            span: Default::default(),
        });
        let compiled = Compiled {
            maps: Vec::new(),
            programs: Vec::new(),
            outputs: Vec::new(),
            scratch_size: 0,
        };
        let (out, kept) = (Sink::default(), Kept::default());
        let mut runtime = Runtime::new(
            &program,
            &compiled,
            Names::default(),
            Settings::default(),
            Box::new(out.clone()),
        );
        runtime.set_receiver(Box::new(kept.clone()));
        runtime.print_all_maps(&OneEntry);
        runtime.flush();
        assert_eq!(out.text(), "");
        let rows = vec![MapRow {
            keys: vec![Datum::Int(1)],
            value: Datum::Int(5),
        }];
        assert_eq!(*kept.0.borrow(), vec![("@x".to_string(), rows)]);
    }
}
