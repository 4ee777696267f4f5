//! What the generated programs send to user space, and where each map
//! lives: the contract between the code generator and the runtime.
//!
//! Every ring-buffer record starts with a `u64` output id, an index into
//! [`Compiled::outputs`](crate::Compiled::outputs) that says what
//! the record is (a `printf`, a `print(@m)`, an `exit()`, ...) and how its
//! fields are laid out. The fields follow, each at an 8-byte aligned
//! offset, in the layout of its type ([`Ty::value_size`]).

use sdt_lang::hir::MapId;
use sdt_lang::types::Ty;

/// Bytes of the record header (the output id).
pub const HEADER: u32 = 8;

/// Fixed places in the program's list of maps; user maps follow.
pub const RING_MAP: u32 = 0;
/// Per-CPU counters of what could not be done; see [`LOST_EVENTS`].
pub const LOST_MAP: u32 = 1;
/// A per-CPU array of one element: scratch memory for strings, keys and
/// records, so that nothing large lives on the 512-byte BPF stack.
pub const SCRATCH_MAP: u32 = 2;
/// User stacks for `ustack`.
pub const STACK_MAP: u32 = 3;
/// Frames a stack map entry holds: the kernel's most (`PERF_MAX_STACK_DEPTH`).
pub const STACK_DEPTH: u32 = 127;

/// The bytes of one frame in the stack map: an address, or, with
/// `build_id_stacks` ([`crate::Options::build_id_stacks`]), a
/// `struct bpf_stack_build_id`.
pub const fn stack_frame_size(build_id_stacks: bool) -> u32 {
    if build_id_stacks {
        sdt_bpf::STACK_BUILD_ID_FRAME
    } else {
        8
    }
}
/// A one-element array whose `u64` user space sets to 1 when the run ends
/// ([`STOPPED`]). Every attached program reads it first and returns if
/// set: the probes do nothing from then on, although the kernel has not
/// detached them yet. Detaching waits for the kernel, and is left to
/// another process once the output is complete.
pub const CONTROL_MAP: u32 = 4;
/// Per-CPU counters of the hits of the probes the session asked to count
/// ([`Unit::counted`](crate::Unit::counted)): one `u64` per counted probe,
/// which its programs add one to before anything else, predicate
/// included, so that a probe that fired is told from one whose predicate
/// kept it quiet.
pub const HITS_MAP: u32 = 5;
/// Scratch memory per thread, for the programs that may sleep while they
/// read (see [`CompiledProgram::sleepable`](crate::CompiledProgram)): a
/// task storage map with one value of the scratch size per thread that
/// hit such a probe, freed with the thread. A per-CPU value could be
/// overwritten by another thread run on the same CPU while a read waits
/// for a page. A one-element array stands in when no program sleeps.
pub const TASK_SCRATCH_MAP: u32 = 6;
/// Index of user map 0.
pub const FIRST_USER_MAP: u32 = 7;

/// The control map's value once the run has ended.
pub const STOPPED: u64 = 1;

/// Counter 0 of the lost map: records the ring buffer had no room for.
pub const LOST_EVENTS: u32 = 0;
/// Counter 1: stacks that could not be recorded.
pub const LOST_STACKS: u32 = 1;
/// Counter 2: hits dropped because the kernel had no memory for the
/// thread's scratch memory ([`TASK_SCRATCH_MAP`]).
pub const LOST_HITS: u32 = 2;
/// Counter `LOST_MAP_UPDATES + map id`: updates a full map refused.
/// Read sites' counters follow the maps' ([`read_failure_counters`]).
pub const LOST_MAP_UPDATES: u32 = 3;

/// The counters of read site `site` in the lost map of a program with
/// `maps` user maps: reads that failed, and the last failure's error
/// (negative).
pub fn read_failure_counters(maps: usize, site: u32) -> (u32, u32) {
    let base = LOST_MAP_UPDATES + maps as u32 + 2 * site;
    (base, base + 1)
}

/// A place where a program reads the traced process's memory, for the
/// report of reads that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadSite {
    /// The probe instance, an index into the program's probes.
    pub instance: usize,
    pub what: ReadWhat,
}

/// What a read site reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReadWhat {
    /// The script's expression there (`str(arg1)`, `$s->name`, `buf(...)`).
    Expr(sdt_lang::diag::Span),
    /// Argument N of an `sdt trace` event, read as a string.
    EventArg(u32),
}

/// The map index of user map `id`.
pub fn user_map(id: MapId) -> u32 {
    FIRST_USER_MAP + id as u32
}

/// How user space handles a record with a given output id.
#[derive(Clone, Debug, PartialEq)]
pub enum OutputInfo {
    /// A `printf`; with `stamped`, its [`stamp`] follows the header.
    Printf {
        format: u32,
        fields: Vec<Field>,
        stamped: bool,
    },
    System {
        format: u32,
        fields: Vec<Field>,
    },
    /// `errorf`/`warnf`: a formatted message for standard error, about
    /// the script text at `span`.
    Message {
        format: u32,
        fields: Vec<Field>,
        error: bool,
        span: sdt_lang::diag::Span,
    },
    Cat {
        format: u32,
        fields: Vec<Field>,
    },
    /// `print(@m, top, div)`: print the entries of the snapshot the
    /// record names (see [`snapshot`]); the record says how many the walk
    /// saw, so that entries the ring had no room for are noticed.
    PrintMap {
        map: MapId,
        top: u64,
        div: u64,
    },
    /// One entry of a `print(@m)` snapshot: the key, then the value (one
    /// per possible CPU for a per-CPU map), after the [`snapshot`] header.
    MapEntry {
        map: MapId,
    },
    PrintValue {
        field: Field,
    },
    /// The code, if given, is the record's `u64` field at offset 8.
    Exit {
        has_code: bool,
    },
    Time {
        format: u32,
    },
    /// `join()`: up to [`JOIN_MAX`] strings of `size` bytes each, after a
    /// count.
    Join {
        separator: u32,
        size: u32,
    },
    /// One probe hit for `sdt trace`: time, pid/tid, cookie, comm, then
    /// the site's arguments.
    Event {
        args: u32,
        strings: Vec<sdt_lang::hir::StringArg>,
    },
}

/// Strings `join()` reads from an array.
pub const JOIN_MAX: u32 = 16;

/// A typed field of a record.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    pub ty: Ty,
    pub offset: u32,
}

/// Layout of the records of a `print(@m)` snapshot ([`OutputInfo::MapEntry`]
/// and [`OutputInfo::PrintMap`]): the thread that took it and a nonce of
/// the walk tie its records together, whatever other threads send between
/// them.
pub mod snapshot {
    /// `pid_tgid` of the thread that printed.
    pub const THREAD: u32 = 8;
    /// The walk's start time, in nanoseconds.
    pub const NONCE: u32 = 16;
    /// In `PrintMap`: how many entries the walk saw (0 in `MapEntry`).
    pub const COUNT: u32 = 24;
    /// Where an entry's key starts.
    pub const HEADER_END: u32 = 32;
}

/// Layout of the stamp of a `printf` record compiled for a timeline
/// ([`Options::stamp_printf`](crate::Options::stamp_printf)): when and on
/// which thread it was made. The fields follow it.
pub mod stamp {
    /// `bpf_ktime_get_ns()`.
    pub const TIME: u32 = 8;
    pub const PID_TGID: u32 = 16;
    /// The thread's name, 16 bytes.
    pub const COMM: u32 = 24;
    /// Where the fields start.
    pub const END: u32 = 40;
}

/// Layout of an `Event` record (see [`OutputInfo::Event`]).
pub mod event {
    pub const TIME: u32 = 8;
    pub const PID_TGID: u32 = 16;
    pub const COOKIE: u32 = 24;
    pub const COMM: u32 = 32;
    pub const ARGS: u32 = 48;
    /// Bytes read for each string argument, including the NUL.
    pub const STRING_LEN: u32 = 256;
}

/// The context of a program that replays a hit of the fast path
/// ([`crate::ArgAccess::Replay`]): what the probe's program would have
/// asked the kernel, taken from the hit's record by the tracer, which
/// runs the program (`BPF_PROG_TYPE_SYSCALL`) on these bytes.
pub mod replay {
    /// `u64`: `CLOCK_MONOTONIC` at the hit, in nanoseconds.
    pub const TIME: u32 = 0;
    /// `u64`: process id << 32 | thread id, as sdt's PID namespace sees them.
    pub const PID_TGID: u32 = 8;
    /// `u64`: group id << 32 | user id.
    pub const UID_GID: u32 = 16;
    /// `u64`: probe id << 32 | site id, as an attach cookie would be.
    pub const COOKIE: u32 = 24;
    /// 16 bytes: the thread's name.
    pub const COMM: u32 = 32;
    /// `u64` × [`ARGS_MAX`]: the arguments' register values.
    pub const ARGS: u32 = 48;
    /// `u64` × [`ARGS_MAX`]: for each argument whose bytes the hit
    /// copied, where the copy is in the tracer's memory (0: none).
    pub const CAPTURED: u32 = ARGS + 8 * ARGS_MAX;
    /// Bytes of the context.
    pub const SIZE: u32 = CAPTURED + 8 * ARGS_MAX;
    /// Arguments a probe has at most.
    pub const ARGS_MAX: u32 = 12;

    /// What a replay program runs on: a batch of hits, each a context as
    /// above, one after another in the tracer's memory. `u64`: where the
    /// first starts.
    pub const BATCH_RECORDS: u32 = 0;
    /// `u64`: how many there are.
    pub const BATCH_COUNT: u32 = 8;
    /// Bytes of a batch's description.
    pub const BATCH_SIZE: u32 = 16;
}
