//! The checked program: every name resolved, every expression typed.
//!
//! The checker turns the syntax tree into this form and the code
//! generator reads nothing else. What was implicit in the text is
//! explicit here: a struct field read is a [`TKind::Load`] from a place
//! with a known offset, a string comparison is a [`TKind::StrEq`], a map
//! read names the map by index, and each probe block is checked once per
//! attach point (once per tracepoint of a glob, whose `args` differ).

use crate::ast::UnOp;
use crate::diag::Span;
use crate::format::Format;
use crate::types::{Agg, Ty, TypeRegistry};

pub type VarId = usize;
pub type MapId = usize;

/// A checked script.
#[derive(Clone, Debug, Default)]
pub struct Program {
    pub registry: TypeRegistry,
    pub maps: Vec<MapDecl>,
    pub probes: Vec<ProbeInstance>,
    /// `printf`, `system` and `cat` formats, by id.
    pub formats: Vec<Format>,
    /// Time formats of `time()` and `strftime()`, by id.
    pub time_formats: Vec<String>,
    /// Separators of `join()`, by id.
    pub join_separators: Vec<String>,
    /// Bytes of a string read with `str()` when no length is given,
    /// including the NUL.
    pub strlen: u32,
    /// Where C types came from: the debug files read, and the USDT
    /// arguments that DWARF typed or could not type (for `-v`).
    pub type_notes: Vec<String>,
    /// What is allowed but probably a mistake (a declared map no probe
    /// uses).
    pub warnings: Vec<crate::diag::Diagnostic>,
    /// The format of the warning a division or modulo by zero prints
    /// where it happens, at run time (its result is then 1, as in
    /// bpftrace 0.25 and later).
    pub zero_division: u32,
    /// The format of the warning an update of a full map prints where it
    /// is, at run time, the first time on each CPU (bpftrace's words).
    pub map_full: u32,
}

/// A map, with the types every use of it agreed on.
#[derive(Clone, Debug, PartialEq)]
pub struct MapDecl {
    pub name: String,
    /// Key types; empty for a map without a key (`@x`).
    pub keys: Vec<Ty>,
    pub value: Ty,
    /// Where it was first assigned.
    pub span: Span,
    /// What `let @name = KIND(N);` chose, if the script declares it.
    pub declared: Option<Declared>,
}

/// A map's kind and size, as a declaration chose them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declared {
    /// Evicts its least recently used entries when full.
    pub lru: bool,
    /// Holds a value per CPU: the kind aggregations need.
    pub per_cpu: bool,
    pub entries: u32,
}

impl MapDecl {
    /// `@name`, as printed.
    pub fn display_name(&self) -> String {
        format!("@{}", self.name)
    }

    /// Bytes of the kernel key: each key part 8-byte aligned, then the
    /// bucket for histograms. A map without a key has one `u64` zero key.
    pub fn key_size(&self, registry: &TypeRegistry) -> u32 {
        let parts: u32 = self
            .keys
            .iter()
            .map(|t| t.value_size(registry).next_multiple_of(8))
            .sum();
        let bucket = if self.has_bucket() { 8 } else { 0 };
        (parts + bucket).max(8)
    }

    /// Offsets of the key parts in the kernel key.
    pub fn key_offsets(&self, registry: &TypeRegistry) -> Vec<u32> {
        Ty::tuple_offsets(&self.keys, registry)
    }

    /// Offset of the histogram bucket in the kernel key.
    pub fn bucket_offset(&self, registry: &TypeRegistry) -> u32 {
        self.keys
            .iter()
            .map(|t| t.value_size(registry).next_multiple_of(8))
            .sum()
    }

    pub fn value_size(&self, registry: &TypeRegistry) -> u32 {
        self.value.value_size(registry).next_multiple_of(8).max(8)
    }

    pub fn aggregation(&self) -> Option<Agg> {
        match self.value {
            Ty::Agg(agg) => Some(agg),
            _ => None,
        }
    }

    pub fn is_histogram(&self) -> bool {
        self.aggregation().is_some_and(Agg::is_histogram)
    }

    /// Whether the kernel's key holds a bucket after the user's keys.
    pub fn has_bucket(&self) -> bool {
        self.aggregation().is_some_and(Agg::has_bucket)
    }

    /// Aggregations live in per-CPU maps, merged when printed.
    pub fn is_per_cpu(&self) -> bool {
        self.aggregation().is_some()
    }
}

/// The kind of probe a block runs in, which decides the builtins it may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Begin,
    End,
    Interval,
    Usdt,
    Uprobe,
    Uretprobe,
    Tracepoint,
    /// `profile:hz:N`: the CPU clock, sampled on every CPU.
    Profile,
    /// `software:EVENT`: a perf event the kernel counts.
    Software,
    /// `hardware:EVENT`: a perf event the CPU counts.
    Hardware,
}

impl ProbeKind {
    pub fn name(self) -> &'static str {
        match self {
            ProbeKind::Begin => "BEGIN",
            ProbeKind::End => "END",
            ProbeKind::Interval => "interval",
            ProbeKind::Usdt => "usdt",
            ProbeKind::Uprobe => "uprobe",
            ProbeKind::Uretprobe => "uretprobe",
            ProbeKind::Tracepoint => "tracepoint",
            ProbeKind::Profile => "profile",
            ProbeKind::Software => "software",
            ProbeKind::Hardware => "hardware",
        }
    }

    /// Runs when a perf event overflows, on whatever CPU it counts, with
    /// the interrupted task's registers (`struct bpf_perf_event_data`)
    /// as context: a sample of what was running.
    pub fn is_perf_event(self) -> bool {
        matches!(
            self,
            ProbeKind::Profile | ProbeKind::Software | ProbeKind::Hardware
        )
    }

    /// Has a task of its own to describe: the traced process at a probe
    /// of it, the task a tracepoint fired in or a perf event sampled
    /// (`BEGIN`, `END` and intervals run for sdt itself).
    pub fn has_task(self) -> bool {
        self.is_uprobe() || self.is_perf_event() || self == ProbeKind::Tracepoint
    }

    /// Runs in the traced program, with its registers as context.
    pub fn is_uprobe(self) -> bool {
        matches!(
            self,
            ProbeKind::Usdt | ProbeKind::Uprobe | ProbeKind::Uretprobe
        )
    }
}

/// One probe block checked for one attach point (or one tracepoint).
#[derive(Clone, Debug)]
pub struct ProbeInstance {
    /// Index of the probe block in the script.
    pub block: usize,
    /// Index of the attach point in the block.
    pub attach_point: usize,
    /// For a tracepoint glob: which of its tracepoints.
    pub target: usize,
    pub kind: ProbeKind,
    pub span: Span,
    /// Types of the block's variables, by [`VarId`].
    pub vars: Vec<Ty>,
    pub predicate: Option<TExpr>,
    pub body: Vec<TStmt>,
    /// The body needs to know which site fired (`uaddr()`), so each site
    /// gets a program of its own.
    pub per_site: bool,
    /// The body has `for` loops, whose bodies run as functions of their
    /// own and reach the block's variables wherever they are.
    pub loops: bool,
    /// The USDT arguments the block reads (`argN`, `args.NAME`), bit N
    /// for argument N: a site where one of them cannot be read is not
    /// traced.
    pub args_read: u16,
}

#[derive(Clone, Debug)]
pub enum TStmt {
    Expr(TExpr),
    AssignVar {
        var: VarId,
        value: TExpr,
    },
    AssignMap {
        map: MapId,
        keys: Vec<TExpr>,
        value: TExpr,
        /// The whole assignment, `@m[k] = v`.
        span: Span,
    },
    /// `@m[keys] = count()` and the other aggregations; `args` are the
    /// aggregated value (none for `count`).
    Aggregate {
        map: MapId,
        keys: Vec<TExpr>,
        agg: Agg,
        value: Option<TExpr>,
        span: Span,
    },
    If {
        cond: TExpr,
        then: Vec<TStmt>,
        otherwise: Vec<TStmt>,
    },
    While {
        cond: TExpr,
        body: Vec<TStmt>,
        span: Span,
    },
    Unroll {
        count: u32,
        body: Vec<TStmt>,
    },
    /// `for ($i : start..end)`: `body` once for each `$i` from `start`
    /// up to `end`, both evaluated once.
    ForRange {
        var: VarId,
        start: TExpr,
        end: TExpr,
        body: Vec<TStmt>,
        span: Span,
    },
    /// `for ($kv : @map)`: `body` once per entry, `$kv` the tuple of its
    /// key and value (an aggregation's value read as in expressions).
    ForMap {
        var: VarId,
        map: MapId,
        body: Vec<TStmt>,
        span: Span,
    },
    /// `let $x;`: the variable starts at zero (or empty).
    ZeroVar(VarId),
    /// `{ ... }`: statements in a scope of their own.
    Block(Vec<TStmt>),
    Break,
    Continue,
    Return,
    /// `printf` and the other calls that send a record to user space.
    Output(Output),
}

/// A record for user space to act on, in the order probes sent them.
#[derive(Clone, Debug)]
pub enum Output {
    Printf {
        format: u32,
        args: Vec<TExpr>,
    },
    /// `system(fmt, ...)`: run a command (needs `--unsafe`).
    System {
        format: u32,
        args: Vec<TExpr>,
    },
    /// `errorf(fmt, ...)` and `warnf(fmt, ...)`: a message on standard
    /// error with its place in the script.
    Message {
        format: u32,
        args: Vec<TExpr>,
        error: bool,
        span: Span,
    },
    /// `cat(fmt, ...)`: print a file's contents.
    Cat {
        format: u32,
        args: Vec<TExpr>,
    },
    /// `print(@m)`, `print(@m, top)`, `print(@m, top, div)`.
    PrintMap {
        map: MapId,
        top: u64,
        div: u64,
    },
    /// `print(value)`.
    PrintValue(TExpr),
    Clear(MapId),
    Zero(MapId),
    Exit(Option<TExpr>),
    /// `time()` or `time(fmt)`.
    Time(u32),
    /// `join(array_of_strings, sep)`.
    Join {
        array: TExpr,
        separator: u32,
    },
    /// One hit with every argument of its site, for `sdt trace`; scripts
    /// cannot write this.
    Event {
        strings: Vec<StringArg>,
    },
}

/// An argument to read as a string in an `sdt trace` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StringArg {
    /// The argument that holds the string's address.
    pub arg: usize,
    /// The argument that holds its length, for strings without a NUL
    /// (the `sdt` crate passes `&str` as pointer and length).
    pub len_arg: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct TExpr {
    pub kind: TKind,
    pub ty: Ty,
    pub span: Span,
}

/// A value a kernel helper without arguments returns, narrowed to
/// `bits` bits from bit `shift`: what most builtin variables are (`pid` is
/// the upper half of `bpf_get_current_pid_tgid()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HelperValue {
    /// The kernel's helper id (`enum bpf_func_id`).
    pub helper: u32,
    pub shift: u8,
    pub bits: u8,
}

/// A value fixed when the programs are generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Param {
    /// The `-c` command's PID.
    Cpid,
    /// `CLOCK_MONOTONIC` when the run started, in nanoseconds.
    StartNs,
    /// CPUs online (`ncpus`).
    OnlineCpus,
    /// Whether there is a `-c` command (`has_cpid`).
    HasCpid,
}

#[derive(Clone, Debug)]
pub enum TKind {
    Int(i64),
    /// A string literal (the type has room for the NUL).
    Str(Vec<u8>),
    Var(VarId),
    /// A map's value; zero (or empty) when the key is missing.
    MapGet {
        map: MapId,
        keys: Vec<TExpr>,
    },
    /// An aggregation's value, its per-CPU values merged (summed for
    /// `count` and `sum`, the least or greatest for `min` and `max`, the
    /// integer mean for `avg`); zero when the key is missing.
    AggGet {
        map: MapId,
        keys: Vec<TExpr>,
    },
    /// `@m[k]++` and friends: update the map, yield the old (postfix) or
    /// new (prefix) value.
    MapIncDec {
        map: MapId,
        keys: Vec<TExpr>,
        delta: i64,
        prefix: bool,
    },
    VarIncDec {
        var: VarId,
        delta: i64,
        prefix: bool,
    },
    /// A kernel helper's result (see [`HelperValue`]).
    Helper(HelperValue),
    /// A string a kernel helper writes into a buffer of `size` bytes
    /// (`comm`).
    HelperString {
        helper: u32,
        size: u32,
    },
    Param(Param),
    /// The process (or, with `thread`, thread) id as seen from sdt's PID
    /// namespace (`pid`, `pid(curr_ns)`).
    NsPid {
        thread: bool,
    },
    /// 1 when the probe interrupted user-space code (`usermode`).
    UserMode,
    /// `argN` of a USDT probe (read as each site's note says) or of a
    /// uprobe (the calling convention's registers).
    Arg(u8),
    /// `sargN`: the Nth stack argument of a uprobe.
    SArg(u8),
    /// The return value of a uretprobe.
    Retval,
    /// `reg("name")`: a register, by its `pt_regs` offset.
    Reg(i16),
    /// `uaddr("symbol")`: the symbol's link-time address, which the
    /// program moves by the probe site's load bias.
    UAddr(u64),
    /// The probe's name; for a probe that expands to several, the cookie
    /// says which.
    Probe,
    /// The traced function's name.
    Func,
    Unary {
        op: UnOp,
        expr: Box<TExpr>,
    },
    Binary {
        op: crate::ast::BinOp,
        lhs: Box<TExpr>,
        rhs: Box<TExpr>,
    },
    /// `&&` and `||`, which evaluate their right side only when needed.
    Logical {
        and: bool,
        lhs: Box<TExpr>,
        rhs: Box<TExpr>,
    },
    /// (In)equality of two values of one layout, byte by byte: strings
    /// (NUL-padded, so a shorter one compares as if padded), buffers,
    /// arrays and tuples.
    StrEq {
        lhs: Box<TExpr>,
        rhs: Box<TExpr>,
        negate: bool,
    },
    /// `strncmp(a, b, n)`: 0 when the first `n` bytes agree.
    StrNCmp {
        lhs: Box<TExpr>,
        rhs: Box<TExpr>,
        n: u32,
    },
    /// `strcontains(haystack, needle)`.
    StrContains {
        haystack: Box<TExpr>,
        needle: Box<TExpr>,
    },
    /// `strstr(haystack, needle)`: where the needle first starts, or -1.
    StrStr {
        haystack: Box<TExpr>,
        needle: Box<TExpr>,
    },
    /// `strlen(s)`: the bytes before the string's NUL.
    StrLen(Box<TExpr>),
    Ternary {
        cond: Box<TExpr>,
        then: Box<TExpr>,
        otherwise: Box<TExpr>,
    },
    /// An integer conversion to the expression's type.
    IntCast(Box<TExpr>),
    /// The tracepoint's record (a place in the context).
    CtxRecord,
    /// `*ptr` where the pointee is a struct or array: a place in the
    /// traced process's memory.
    UserPlace(Box<TExpr>),
    /// A member of a struct place.
    Field {
        base: Box<TExpr>,
        offset: u64,
    },
    /// An element of an array place, or of memory a pointer points at.
    Index {
        base: Box<TExpr>,
        index: Box<TExpr>,
        stride: u64,
    },
    /// A scalar read from a place.
    Load {
        place: Box<TExpr>,
        bitfield: Option<(u8, u8)>,
    },
    /// The address of a place.
    AddrOf(Box<TExpr>),
    /// A `char[N]` place read as a string.
    ArrayStr(Box<TExpr>),
    /// A tracepoint's `__data_loc` string field, whose `u32` at `offset`
    /// in the record holds the string's length and offset.
    DataLoc {
        offset: u32,
    },
    /// A struct or array place copied as a value.
    CopyPlace(Box<TExpr>),
    /// A struct value put together from values, each written at its byte
    /// offset: a scalar in its type's width, anything else in its own
    /// layout; bytes no part covers are zero (a uprobe's `args`, and its
    /// struct parameters passed in registers).
    Fields(Vec<(u32, TExpr)>),
    /// A string built from string values, one after another, each up to
    /// its NUL: as much of them as the expression's string type holds,
    /// and a NUL.
    Concat(Vec<TExpr>),
    /// `str(ptr)` or `str(ptr, len)`: a string read from the traced
    /// process, of at most `len` bytes and a NUL; or, when `ptr` is a
    /// string value, that string cut to `len` bytes.
    StrRead {
        ptr: Box<TExpr>,
        len: Option<Box<TExpr>>,
    },
    /// `buf(ptr, len)`: `len` bytes read from the traced process at
    /// `ptr`, or, when `ptr` is a string value, its first `len` bytes.
    BufRead {
        ptr: Box<TExpr>,
        len: Box<TExpr>,
    },
    Tuple(Vec<TExpr>),
    TupleIndex {
        tuple: Box<TExpr>,
        index: usize,
    },
    /// `usym(addr)`: the address and the current process.
    USym(Box<TExpr>),
    /// `ustack`.
    UStack,
    /// `kstack`: the id of the kernel stack in the stack map, or -1.
    KStack,
    /// `strftime(fmt, ns)`.
    Strftime(Box<TExpr>),
    /// `bswap(x)`.
    Bswap(Box<TExpr>),
    /// A value whose type only changes how it prints (`username`,
    /// `strerror`).
    Retype(Box<TExpr>),
    /// A value laid out again in the expression's type, which holds it:
    /// a tuple with shorter strings in one with longer ones.
    Convert(Box<TExpr>),
    /// `delete(...)`: removes an entry; true when there was one.
    Delete {
        map: MapId,
        keys: Vec<TExpr>,
    },
    /// `find(@m, k, $v)`: whether the key is there, copying its value
    /// into the variable when it is.
    Find {
        map: MapId,
        keys: Vec<TExpr>,
        var: VarId,
    },
    /// `has_key(@m, k)`.
    HasKey {
        map: MapId,
        keys: Vec<TExpr>,
    },
    /// `len(@m)`: the entries of a map, counted by walking it.
    MapLen(MapId),
    /// `len(stack)`: the frames of a user stack.
    StackLen(Box<TExpr>),
    /// `{ statements; value }`.
    Block {
        stmts: Vec<TStmt>,
        value: Box<TExpr>,
    },
}

impl TExpr {
    pub fn int(value: i64, ty: Ty, span: Span) -> TExpr {
        TExpr {
            kind: TKind::Int(value),
            ty,
            span,
        }
    }

    /// Whether the expression is a place (struct, union, array or a
    /// record's tuple member in memory) rather than a value.
    pub fn is_place(&self) -> bool {
        matches!(
            self.kind,
            TKind::CtxRecord | TKind::UserPlace(_) | TKind::Field { .. } | TKind::Index { .. }
        ) && matches!(self.ty, Ty::Record(_) | Ty::Array { .. } | Ty::Tuple(_))
    }
}
