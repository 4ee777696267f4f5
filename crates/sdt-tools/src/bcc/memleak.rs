//! BCC's `memleak`: the allocations a process has not freed, by the
//! stack that made them.
//!
//! Every allocator of the C library (or of `-O OBJ`) gets an entry probe
//! that keeps the size asked (filtered by `-z`/`-Z`, sampled by `-s`) and
//! a return probe that records what it returned: by address, the size,
//! the time and the user stack. `free`, `munmap` and `realloc` drop what
//! they free. Each report takes what is still recorded, at least `-o`
//! milliseconds old, adds it up by stack, and shows the `-T` largest,
//! largest last, each frame as `func+0xOFF [module]`.
//!
//! Only a process's allocators: BCC's kernel mode (no `-p` or `-c`: the
//! `kmem` tracepoints, with kernel stacks) is refused.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::bail;
use sdt_output::{Cell, Column, Datum, Event, Layout, MapPrint, Sink, Stack, Stream, Table};

use super::target::{self, Point};
use super::{report_blocks, sym, time_of_day, Maps, Program, Run};
use crate::execute::Reports;
use crate::report::Report;
use crate::Common;

/// What `memleak` is asked.
#[derive(Clone, Debug)]
pub struct Options {
    /// A line for every allocation and free instead of reports (`-t`).
    pub trace: bool,
    /// Also list each allocation (`-a`).
    pub show_allocs: bool,
    /// Only allocations at least this old, in milliseconds (`-o`).
    pub older_ms: u64,
    /// Report from totals by stack (`--combined-only`).
    pub combined_only: bool,
    /// Record one allocation in about this many (`-s`).
    pub sample_rate: u64,
    /// The stacks shown (`-T`).
    pub top: usize,
    /// Only sizes of at least this (`-z`), ...
    pub min_size: Option<u64>,
    /// ... and at most this (`-Z`).
    pub max_size: Option<u64>,
    /// The library or program of the allocators (`-O`).
    pub obj: String,
    /// Rank stacks by bytes (`size`) or allocations (`count`).
    pub sort_by_count: bool,
    /// Before every allocator's name (`--symbols-prefix`).
    pub symbols_prefix: String,
    /// Seconds between reports.
    pub interval: u64,
    /// Reports to print.
    pub count: Option<u64>,
    /// Print the program on standard error.
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            trace: false,
            show_allocs: false,
            older_ms: 500,
            combined_only: false,
            sample_rate: 1,
            top: 10,
            min_size: None,
            max_size: None,
            obj: "c".into(),
            sort_by_count: false,
            symbols_prefix: String::new(),
            interval: 5,
            count: None,
            verbose: false,
        }
    }
}

/// An allocator: its name, the size it is asked for, and what it returns.
struct Allocator {
    name: &'static str,
    /// The size, from its arguments.
    size: &'static str,
    /// Where the address is at the return.
    address: Address,
    /// Whether a library may lack it.
    optional: bool,
}

/// Where the address an allocator gives is, at its return.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Address {
    Returned,
    /// In the pointer its first argument points to (`posix_memalign`),
    /// when it returns 0.
    Stored,
    /// Returned, and `MAP_FAILED` (-1) on failure (`mmap`).
    Mapped,
}

/// The allocators BCC's memleak traces.
const ALLOCATORS: [Allocator; 9] = [
    Allocator::new("malloc", "arg0", Address::Returned, false),
    Allocator::new("calloc", "arg0 * arg1", Address::Returned, false),
    Allocator::new("realloc", "arg1", Address::Returned, false),
    Allocator::new("mmap", "arg1", Address::Mapped, true),
    Allocator::new("posix_memalign", "arg2", Address::Stored, false),
    Allocator::new("valloc", "arg0", Address::Returned, true),
    Allocator::new("memalign", "arg1", Address::Returned, false),
    Allocator::new("pvalloc", "arg0", Address::Returned, true),
    Allocator::new("aligned_alloc", "arg1", Address::Returned, true),
];

impl Allocator {
    const fn new(name: &'static str, size: &'static str, address: Address, optional: bool) -> Self {
        Allocator {
            name,
            size,
            address,
            optional,
        }
    }
}

pub fn run(common: &Common, options: &Options) -> anyhow::Result<ExitCode> {
    if common.pid().is_none() && common.command.is_none() {
        bail!(
            "kernel allocations (memleak without -p or -c) are not traced: sdt's memleak \
             traces a process's allocators; give -p PID or -c COMMAND"
        );
    }
    if let (Some(min), Some(max)) = (options.min_size, options.max_size) {
        if min > max {
            bail!("min_size (-z) can't be greater than max_size (-Z)");
        }
    }
    let Some(path) = target::for_functions(&options.obj) else {
        bail!("unable to find library {}", options.obj);
    };
    let present = target::function_names(&path)?;
    let mut program = Program::new("sdt memleak: allocations not freed, by stack");
    for allocator in &ALLOCATORS {
        let name = format!("{}{}", options.symbols_prefix, allocator.name);
        if !present.contains(&name) {
            if allocator.optional {
                continue;
            }
            bail!(
                "{} has no {name}: give the allocator's library with -O",
                path.display()
            );
        }
        program.add(&name, &allocation(&path, &name, allocator, options));
    }
    for free in ["free", "munmap"] {
        let name = format!("{}{free}", options.symbols_prefix);
        if present.contains(&name) {
            program.add(&name, &release(&path, &name, options.trace));
        } else if free == "free" {
            bail!(
                "{} has no {name}: give the allocator's library with -O",
                path.display()
            );
        }
    }
    if !options.trace {
        // An exec replaces the process's memory: what it allocated before
        // (sdt's own code, in a command it starts) is gone.
        program.add(
            "",
            "tracepoint:sched:sched_process_exec {\n  @exec[pid] = nsecs;\n}\n",
        );
        let print = "  print(@allocs);\n  print(@exec);\n";
        program.add("", &report_blocks(Some(options.interval), print));
    }
    let reports = Reports::new(options.count);
    let report = Leaks {
        options: options.clone(),
        maps: Maps::default(),
        reports: reports.clone(),
        stream: Stream {
            name: "memleak",
            columns: vec![
                Column::both("comm", "").width(16),
                Column::both("pid", "").width(7),
                Column::both("message", ""),
            ],
            layout: Layout::default(),
        },
    };
    let mut run = Run::new(common, program);
    run.map_entries = 1 << 16;
    run.verbose = options.verbose;
    run.reports = (!options.trace).then_some(reports);
    let command = common.command.clone();
    run.run(report, move |out, pid| {
        if let Some(command) = &command {
            out.event(Event::Heading(&format!(
                "Executing '{command}' and tracing the resulting process."
            )));
        }
        if let Some(pid) = pid {
            out.event(Event::Heading(&format!(
                "Attaching to pid {pid}, Ctrl+C to quit."
            )));
        }
    })
}

/// The probes of one allocator: the size kept at entry (if it passes
/// the filters), the allocation recorded at the return.
fn allocation(
    path: &std::path::Path,
    name: &str,
    allocator: &Allocator,
    options: &Options,
) -> String {
    let entry = Point::Entry {
        path: path.to_path_buf(),
        function: name.to_string(),
        offset: 0,
    };
    let exit = Point::Return {
        path: path.to_path_buf(),
        function: name.to_string(),
    };
    let mut filters = Vec::new();
    if let Some(min) = options.min_size {
        filters.push(format!("$size >= {min}"));
    }
    if let Some(max) = options.max_size {
        filters.push(format!("$size <= {max}"));
    }
    if options.sample_rate > 1 {
        filters.push(format!("nsecs % {} == 0", options.sample_rate));
    }
    let mut keep = String::from("@size[tid] = $size;");
    if allocator.address == Address::Stored {
        keep.push_str(" @memptr[tid] = arg0;");
    }
    if options.trace {
        keep.push_str(" printf(\"%s %s %d %d\\n\", \"alloc entered\", comm, pid, $size);");
    }
    let kept = match filters.as_slice() {
        [] => format!("  {keep}\n"),
        some => format!("  if ({}) {{\n    {keep}\n  }}\n", some.join(" && ")),
    };
    // realloc frees what it is given, whatever it returns.
    let freed = if allocator.name == "realloc" {
        "  if (arg0 != 0) {\n    delete(@allocs, (pid, arg0));\n  }\n"
    } else {
        ""
    };
    let (address, valid) = match allocator.address {
        Address::Returned => ("retval", "$address != 0"),
        Address::Mapped => ("retval", "$address != 0 && $address != 0xffffffffffffffff"),
        Address::Stored => ("retval == 0 ? *(uint64 *)@memptr[tid] : 0", "$address != 0"),
    };
    let mut record = String::from("@allocs[pid, $address] = ($size, nsecs, ustack);");
    if options.trace {
        record.push_str(
            " printf(\"%s %s %d %d %d\\n\", \"alloc exited\", comm, pid, $size, $address);",
        );
    }
    let forget = if allocator.address == Address::Stored {
        "  delete(@size, tid);\n  delete(@memptr, tid);\n"
    } else {
        "  delete(@size, tid);\n"
    };
    format!(
        "{} {{\n{freed}  $size = (uint64)({});\n{kept}}}\n\
         {} /has_key(@size, tid)/ {{\n  $size = @size[tid];\n  $address = (uint64)({address});\n{forget}  if ({valid}) {{\n    {record}\n  }}\n}}\n",
        entry.attach(),
        allocator.size,
        exit.attach(),
    )
}

/// A function that frees its first argument.
fn release(path: &std::path::Path, name: &str, trace: bool) -> String {
    let point = Point::Entry {
        path: path.to_path_buf(),
        function: name.to_string(),
        offset: 0,
    };
    let said = if trace {
        "\n    printf(\"%s %s %d %d %d\\n\", \"free entered\", comm, pid, arg0, @allocs[pid, arg0].0);"
    } else {
        ""
    };
    format!(
        "{} /arg0 != 0/ {{\n  if (has_key(@allocs, (pid, arg0))) {{{said}\n    delete(@allocs, (pid, arg0));\n  }}\n}}\n",
        point.attach()
    )
}

/// An allocation still recorded.
struct Allocation {
    pid: i128,
    address: u64,
    size: u64,
    time_ns: u64,
    stack: Stack,
}

/// `memleak`'s report.
struct Leaks {
    options: Options,
    maps: Maps,
    reports: Reports,
    /// `-t`'s lines.
    stream: Stream,
}

impl Leaks {
    /// The allocations still recorded, but those a process made before
    /// its last exec.
    fn allocations(allocs: Option<&MapPrint>, execs: Option<&MapPrint>) -> Vec<Allocation> {
        let Some(map) = allocs else {
            return Vec::new();
        };
        let exec = |pid: i128| -> u64 {
            execs
                .and_then(|m| {
                    m.rows
                        .iter()
                        .find(|r| r.key.first().map(Datum::as_int) == Some(pid))
                })
                .map_or(0, |r| r.value.number() as u64)
        };
        map.rows
            .iter()
            .filter_map(|row| {
                let [pid, address] = row.key.as_slice() else {
                    return None;
                };
                let sdt_output::MapValue::Datum(Datum::Tuple(values)) = &row.value else {
                    return None;
                };
                let [size, time, Datum::Stack(stack)] = values.as_slice() else {
                    return None;
                };
                Some(Allocation {
                    pid: pid.as_int(),
                    address: address.as_int() as u64,
                    size: size.as_int() as u64,
                    time_ns: time.as_int() as u64,
                    stack: stack.clone(),
                })
            })
            .filter(|a| a.time_ns >= exec(a.pid))
            .collect()
    }

    fn report(&self, allocations: Vec<Allocation>, now_ns: u64, out: &mut dyn Sink) {
        let options = &self.options;
        let time = time_of_day();
        out.event(Event::Heading(&format!(
            "[{time}] Top {} stacks with outstanding allocations:",
            options.top
        )));
        let old_enough = |a: &&Allocation| {
            options.combined_only
                || now_ns.saturating_sub(a.time_ns) >= options.older_ms * 1_000_000
        };
        let mut shown: Vec<&Allocation> = allocations.iter().filter(old_enough).collect();
        if options.show_allocs && !options.combined_only {
            shown.sort_by_key(|a| (a.size, a.address));
            out.event(Event::Table(&addresses(&shown)));
        }
        let mut by_stack: BTreeMap<Vec<u64>, (u64, u64, &Stack)> = BTreeMap::new();
        for allocation in &shown {
            let key = allocation.stack.frames.iter().map(|f| f.addr).collect();
            let entry = by_stack.entry(key).or_insert((0, 0, &allocation.stack));
            entry.0 += allocation.size;
            entry.1 += 1;
        }
        let mut stacks: Vec<(u64, u64, &Stack)> = by_stack.into_values().collect();
        let rank = |s: &(u64, u64, &Stack)| if options.sort_by_count { s.1 } else { s.0 };
        stacks.sort_by_key(|s| std::cmp::Reverse(rank(s)));
        stacks.truncate(options.top);
        stacks.reverse();
        out.event(Event::Table(&self.stacks(&stacks, &time)));
    }

    /// `\tN bytes in M allocations from stack`, each frame under it.
    fn stacks(&self, stacks: &[(u64, u64, &Stack)], time: &str) -> Table {
        let combined = self.options.combined_only;
        let rows = stacks
            .iter()
            .map(|(bytes, count, stack)| {
                let mut frames: Vec<Cell> = stack
                    .frames
                    .iter()
                    .map(|f| match combined {
                        true => Cell::Text(sym(f, true, true)),
                        false => Cell::Text(format!("0x{:016x}\t{}", f.addr, sym(f, true, true))),
                    })
                    .collect();
                if frames.is_empty() && combined {
                    frames.push(Cell::Text("stack information lost".into()));
                }
                let json = stack.frames.iter().map(|f| Cell::Text(sym(f, true, true)));
                vec![
                    Cell::Text(format!("{bytes} bytes in {count} allocations from stack")),
                    Cell::List(frames),
                    Cell::Int((*bytes).into()),
                    Cell::Int((*count).into()),
                    Cell::List(json.collect()),
                ]
            })
            .collect();
        Table {
            key: "stacks",
            columns: vec![
                Column::text(""),
                Column::text("").below("\t\t"),
                Column::json("bytes"),
                Column::json("allocations"),
                Column::json("frames"),
            ],
            rows,
            fields: vec![
                ("time", Cell::Text(time.to_string())),
                ("top", Cell::Int(self.options.top as i128)),
            ],
            notes: Vec::new(),
            layout: Layout {
                indent: "\t",
                ..Layout::default()
            },
        }
    }

    /// `-t`: a line for an allocation or a free, from the program's
    /// `printf`: its kind, the command, the process and its numbers.
    fn traced(&self, args: &[Datum], out: &mut dyn Sink) {
        let [Datum::Str(kind), comm, pid, numbers @ ..] = args else {
            return;
        };
        let number = |n: usize| numbers.get(n).map_or(0, |d| d.as_int() as u64);
        let message = match kind.as_slice() {
            b"alloc entered" => format!("alloc entered, size = {}", number(0)),
            b"alloc exited" => format!(
                "alloc exited, size = {}, result = {:x}",
                number(0),
                number(1)
            ),
            _ => format!(
                "free entered, address = {:x}, size = {}",
                number(0),
                number(1)
            ),
        };
        let row = [
            Cell::Text(comm.to_text()),
            Cell::Int(pid.as_int()),
            Cell::Text(message),
        ];
        out.event(Event::Row(&self.stream, &row));
    }
}

/// `-a`: `\taddr = %x size = %s` for each allocation.
fn addresses(allocations: &[&Allocation]) -> Table {
    Table {
        key: "allocations",
        columns: vec![
            Column::text(""),
            Column::json("address"),
            Column::json("size"),
        ],
        rows: allocations
            .iter()
            .map(|a| {
                vec![
                    Cell::Text(format!("addr = {:x} size = {}", a.address, a.size)),
                    Cell::Int(a.address.into()),
                    Cell::Int(a.size.into()),
                ]
            })
            .collect(),
        fields: Vec::new(),
        notes: Vec::new(),
        layout: Layout {
            indent: "\t",
            ..Layout::default()
        },
    }
}

impl Report for Leaks {
    fn map(&mut self, map: &MapPrint, _: &mut dyn Sink) {
        self.maps.add(map);
    }

    fn printf(&mut self, args: &[Datum], out: &mut dyn Sink) {
        if self.options.trace {
            return self.traced(args, out);
        }
        if let Some((maps, now_ns)) = self.maps.ended(args) {
            let allocations = Self::allocations(maps.get("@allocs"), maps.get("@exec"));
            self.report(allocations, now_ns, out);
            self.reports.add();
        }
    }
}
