//! What the checker asks of the files a probe attaches to.
//!
//! A cast may name a C type the script does not define, `args.NAME` in a
//! USDT probe names a variable of the traced program, `args` in a uprobe
//! the traced function's parameters, and `uaddr()` names one of its
//! globals. All are answered from the probe's object (its DWARF and
//! symbol table), which the front end never reads itself: it
//! asks through this trait, which the binder implements on the files it
//! opened and checked (`sdt-bind`), and [`NoObjects`] answers for code
//! checked without any file (fuzzing, `--dump` of tests, unit tests).
//! So the front end stays text in, HIR out.

use crate::types::{RecordId, Ty, TypeRegistry};

use super::TargetInfo;

/// Answers about the objects probes attach to.
pub trait Objects {
    /// The C type `name` (`struct foo`, `enum bar`, a typedef) from the
    /// debug information of `target`'s object, added to `registry`.
    /// `Ok(None)`: the target has no object.
    fn c_type(
        &mut self,
        target: &TargetInfo,
        name: &str,
        registry: &mut TypeRegistry,
    ) -> Result<Option<Ty>, Refusal>;

    /// The USDT argument that, at every site of `target`, is the
    /// variable `name` of the traced program.
    fn usdt_arg(
        &mut self,
        target: &TargetInfo,
        name: &str,
        registry: &mut TypeRegistry,
    ) -> Result<UsdtArg, Refusal>;

    /// `args` of a uprobe: the parameters of the function `target`
    /// attaches to (every function it matches must agree), where the
    /// calling convention puts them at the function's entry.
    fn function_args(
        &mut self,
        _target: &TargetInfo,
        _registry: &mut TypeRegistry,
    ) -> Result<FunctionArgs, Refusal> {
        Err(Refusal::new("this probe has no object to read DWARF from"))
    }

    /// The definitions, `(link-time address, size)`, of the data symbol
    /// `symbol` in `target`'s object.
    fn data_symbols(
        &mut self,
        target: &TargetInfo,
        symbol: &str,
    ) -> Result<Vec<(u64, u64)>, Refusal>;

    /// Where the types came from and what `args.NAME` found, one line
    /// each, for `-v`.
    fn notes(&self) -> Vec<String>;

    /// The C type `name` (`struct task_struct`, `pid_t`) from the running
    /// kernel's BTF, added to `registry`, its pointers into the kernel's
    /// memory. A struct reached through a pointer of it is added by name
    /// and size only, its members read by [`Objects::complete_record`]
    /// when a script first looks into it: the kernel's types reach one
    /// another through pointers by the thousand. `Ok(None)`: the kernel
    /// has no BTF, or no such type.
    fn kernel_type(
        &mut self,
        _name: &str,
        _registry: &mut TypeRegistry,
    ) -> Result<Option<Ty>, Refusal> {
        Ok(None)
    }

    /// Reads the members of record `id`, if [`Objects::kernel_type`]
    /// added it without them; does nothing for any other record.
    fn complete_record(
        &mut self,
        _id: crate::types::RecordId,
        _registry: &mut TypeRegistry,
    ) -> Result<(), Refusal> {
        Ok(())
    }

    /// The address of kernel symbol `name` (`kaddr()`), from the running
    /// kernel's symbol table.
    fn kernel_symbol(&mut self, name: &str) -> Result<u64, Refusal> {
        Err(
            Refusal::new(format!("Failed to resolve kernel symbol: {name}"))
                .label("no kernel symbols are read here"),
        )
    }
}

/// What `args.NAME` names.
#[derive(Clone, Debug, PartialEq)]
pub enum UsdtArg {
    /// Argument `index`, of C type `ty`.
    Typed { index: usize, ty: Ty },
    /// The sites pass the variable as different arguments or types.
    Differs,
    /// No argument is that variable; `names` are the variables that are
    /// arguments.
    Unknown { names: Vec<String> },
}

/// A uprobe's `args`: a struct of the traced function's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionArgs {
    /// The function, as messages name it.
    pub function: String,
    /// The struct `args` is, each parameter at its [`FunctionParam::offset`].
    pub record: RecordId,
    pub params: Vec<FunctionParam>,
}

/// One parameter of a traced function.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionParam {
    pub name: String,
    pub ty: Ty,
    /// Where it is in [`FunctionArgs::record`].
    pub offset: u64,
    pub place: ParamPlace,
}

/// Where a parameter is when its function is entered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamPlace {
    /// In registers, by their offsets in `pt_regs`: eight bytes of the
    /// value each, in order.
    Registers(Vec<i16>),
    /// In the traced process's memory, `offset` bytes above the stack
    /// pointer (`pt_regs` offset `sp`).
    Stack { sp: i16, offset: u64 },
    /// At the address the register at this `pt_regs` offset holds.
    Reference(i16),
    /// Not readable, and why.
    Unreadable(String),
}

/// Why a question about an object has no answer: a message, what to
/// underline it with, and hints; the checker places it at the script's
/// text that asked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub label: Option<String>,
    pub hints: Vec<String>,
}

impl Refusal {
    pub fn new(message: impl Into<String>) -> Refusal {
        Refusal {
            message: message.into(),
            ..Refusal::default()
        }
    }

    pub fn label(mut self, label: impl Into<String>) -> Refusal {
        self.label = Some(label.into());
        self
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Refusal {
        self.hints.push(hint.into());
        self
    }
}

/// No object has anything: every probe is checked as if it had none.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObjects;

impl Objects for NoObjects {
    fn c_type(
        &mut self,
        _: &TargetInfo,
        _: &str,
        _: &mut TypeRegistry,
    ) -> Result<Option<Ty>, Refusal> {
        Ok(None)
    }

    fn usdt_arg(
        &mut self,
        _: &TargetInfo,
        _: &str,
        _: &mut TypeRegistry,
    ) -> Result<UsdtArg, Refusal> {
        Err(Refusal::new("this probe has no object to read DWARF from"))
    }

    fn data_symbols(&mut self, _: &TargetInfo, _: &str) -> Result<Vec<(u64, u64)>, Refusal> {
        Err(Refusal::new("this probe has no object"))
    }

    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}
