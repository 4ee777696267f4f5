//! What a script asks of the traced objects, answered from their DWARF
//! and symbol tables: C types for casts the script's own C definitions do
//! not cover, the variables behind `args.NAME` of a USDT probe, the
//! parameters behind a uprobe's `args` (in [`crate::params`]), and the
//! globals `uaddr()` names ([`sdt_lang::check::Objects`]).
//!
//! A probe's object is the file that holds its USDT site or function (the
//! first one, when an attach point matches several). A name is looked up
//! there only when the script does not define it, so a script definition
//! always wins. What is found is converted into the [`TypeRegistry`] once
//! per object and DIE, on demand: only the types a script names, and the
//! types their members reach, are read. Typedefs and qualifiers dissolve
//! into the types they name; `char` arrays stay arrays of `int8`, which
//! `printf("%s")` and `str` read as strings bounded by the array size;
//! floating-point members read as unsigned integers of their size.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use sdt_lang::check::{Objects, Refusal, TargetInfo, UsdtArg};
use sdt_lang::diag::did_you_mean;
use sdt_lang::types::{EnumDef, Field, Record, RecordId, Ty, TypeRegistry};
use sdt_types::{DebugInfo, Lookup, Type, TypeId};

/// Opened debug information and symbol tables, and what was converted
/// from them, for one compilation.
#[derive(Default)]
pub struct ObjectFacts {
    cache: sdt_types::Cache,
    converted: HashMap<(PathBuf, TypeId), Ty>,
    /// The typed arguments of a probe's sites, by object and addresses.
    site_args: HashMap<(PathBuf, Vec<u64>), Rc<SiteArgs>>,
    /// `uaddr()` lookups by object file and symbol: the checker visits a
    /// block more than once, and several blocks name the same globals.
    symbols: HashMap<(PathBuf, String), SymbolLookup>,
    /// The functions uprobes attach to, for `args`.
    pub(crate) functions: crate::params::Known,
    /// What `-v` tells, in order, once each.
    notes: Vec<String>,
    /// The kernel's symbols, read at the first `kaddr()`.
    kernel_symbols: Option<sdt_kernel::KernelSymbols>,
    /// The kernel's types, read at the first that a script names.
    kernel_types: crate::kernel::KernelTypes,
}

type R<T> = Result<T, Refusal>;

/// A symbol's definitions `(address, size)` in an object file, or why
/// the file could not be read.
type SymbolLookup = Result<Vec<(u64, u64)>, String>;

impl ObjectFacts {
    /// Facts that look for separate debug files in `dirs` first
    /// (`--debuginfo`).
    pub fn with_debug_dirs(dirs: Vec<PathBuf>) -> ObjectFacts {
        ObjectFacts {
            cache: sdt_types::Cache::with_dirs(dirs),
            ..ObjectFacts::default()
        }
    }

    pub(crate) fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// The debug information of `target`'s object, read through the
    /// descriptor planning checked.
    fn open(
        &mut self,
        object: &Path,
        target: &TargetInfo,
    ) -> Result<Rc<DebugInfo>, Rc<sdt_types::Error>> {
        self.open_file(object, target.object_file.as_deref().unwrap_or(object))
    }

    /// The debug information of `object`, read as `file`.
    pub(crate) fn open_file(
        &mut self,
        object: &Path,
        file: &Path,
    ) -> Result<Rc<DebugInfo>, Rc<sdt_types::Error>> {
        let info = self.cache.open(file)?;
        let note = types_note(object, Some(file), &info);
        self.note(note);
        Ok(info)
    }
}

/// `args.NAME` of a USDT probe: each name with its argument's index and
/// type, or `None` when the sites disagree about it.
type SiteArgs = HashMap<String, Option<(usize, TypeId, String)>>;

/// Where a DWARF register is saved in the kernel's `pt_regs`.
#[cfg(target_arch = "x86_64")]
fn pt_regs_offset(register: u16) -> Option<i16> {
    // DWARF numbers rax, rdx, rcx, rbx, rsi, rdi, rbp, rsp, r8..r15.
    const SLOTS: [i16; 16] = [10, 12, 11, 5, 13, 14, 4, 19, 9, 8, 7, 6, 3, 2, 1, 0];
    SLOTS.get(usize::from(register)).map(|slot| slot * 8)
}

#[cfg(target_arch = "aarch64")]
fn pt_regs_offset(register: u16) -> Option<i16> {
    (register <= 30).then(|| register as i16 * 8)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn pt_regs_offset(_register: u16) -> Option<i16> {
    None
}

/// Where `object`'s types come from, for `-v`: the object itself (opened
/// as `file`), or a separate debug file.
fn types_note(object: &Path, file: Option<&Path>, info: &DebugInfo) -> String {
    if info.debug_file == object || Some(info.debug_file.as_path()) == file {
        format!("C types of {} from its own DWARF", object.display())
    } else {
        format!(
            "C types of {} from the DWARF in {}",
            object.display(),
            info.debug_file.display()
        )
    }
}

impl Objects for ObjectFacts {
    fn c_type(
        &mut self,
        target: &TargetInfo,
        name: &str,
        registry: &mut TypeRegistry,
    ) -> R<Option<Ty>> {
        // The probe's object first (a program's `struct timespec` is its
        // own), then the kernel's BTF (`struct task_struct`).
        let from_object = self.object_type(target, name, registry);
        if let Ok(Some(ty)) = from_object {
            return Ok(Some(ty));
        }
        if let Some(ty) = self.kernel_types.find(name, registry)? {
            self.note(format!("{name} from the kernel's BTF"));
            return Ok(Some(ty));
        }
        from_object
    }

    fn kernel_type(&mut self, name: &str, registry: &mut TypeRegistry) -> R<Option<Ty>> {
        self.kernel_types.find(name, registry)
    }

    fn complete_record(&mut self, id: RecordId, registry: &mut TypeRegistry) -> R<()> {
        self.kernel_types.complete(id, registry)
    }

    fn usdt_arg(
        &mut self,
        target: &TargetInfo,
        name: &str,
        registry: &mut TypeRegistry,
    ) -> R<UsdtArg> {
        let args = self.site_args(target)?;
        match args.get(name) {
            Some(Some((index, id, _))) => {
                let (index, id) = (*index, *id);
                let object = target.object.clone().unwrap_or_default();
                let info = self
                    .open(&object, target)
                    .map_err(|e| Refusal::new(e.to_string()))?;
                let ty = self.convert(&info, id, registry, 0)?;
                Ok(UsdtArg::Typed { index, ty })
            }
            Some(None) => Ok(UsdtArg::Differs),
            None => Ok(UsdtArg::Unknown {
                names: args
                    .iter()
                    .filter(|(_, v)| v.is_some())
                    .map(|(k, _)| k.clone())
                    .collect(),
            }),
        }
    }

    fn data_symbols(&mut self, target: &TargetInfo, symbol: &str) -> R<Vec<(u64, u64)>> {
        let (Some(object), Some(file)) = (target.object.clone(), target.object_file.clone()) else {
            return Err(Refusal::new("this probe has no object"));
        };
        self.symbols
            .entry((file.clone(), symbol.to_string()))
            .or_insert_with(|| {
                std::fs::read(&file)
                    .map_err(|e| e.to_string())
                    .and_then(|data| {
                        sdt_elf::data_symbols(&data, symbol).map_err(|e| e.to_string())
                    })
            })
            .clone()
            .map_err(|e| Refusal::new(format!("reading the symbols of {}: {e}", object.display())))
    }

    fn function_args(
        &mut self,
        target: &TargetInfo,
        registry: &mut TypeRegistry,
    ) -> R<sdt_lang::check::FunctionArgs> {
        self.uprobe_args(target, registry)
    }

    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    fn kernel_symbol(&mut self, name: &str) -> R<u64> {
        let symbols = match &self.kernel_symbols {
            Some(s) => s,
            None => {
                let read = sdt_kernel::KernelSymbols::load().map_err(|e| {
                    Refusal::new(format!("Failed to resolve kernel symbol: {name}"))
                        .label(format!("cannot read /proc/kallsyms: {e}"))
                })?;
                self.kernel_symbols.insert(read)
            }
        };
        if let Some(address) = symbols.address(name) {
            return Ok(address);
        }
        let refusal = Refusal::new(format!("Failed to resolve kernel symbol: {name}"))
            .label("/proc/kallsyms has no such symbol");
        Err(if symbols.hidden() {
            refusal.hint("/proc/kallsyms shows sdt no addresses: it needs CAP_SYSLOG, or kernel.kptr_restrict=0 with perf_event_paranoid at most 1")
        } else if !symbols.lists_variables() {
            refusal.hint("this kernel lists only its functions in /proc/kallsyms (it was built without CONFIG_KALLSYMS_ALL), so no variable such as jiffies has an address there")
        } else {
            refusal
        })
    }
}

impl ObjectFacts {
    /// The C type `name` from the DWARF of `target`'s object.
    fn object_type(
        &mut self,
        target: &TargetInfo,
        name: &str,
        registry: &mut TypeRegistry,
    ) -> R<Option<Ty>> {
        let Some(object) = target.object.clone() else {
            return Ok(None);
        };
        let info = self.open(&object, target).map_err(|e| {
            Refusal::new(format!("unknown type `{name}`"))
                .label(e.to_string())
                .hint("or define the type at the top of the script in C")
        })?;
        let found = info
            .find(name)
            .map_err(|e| Refusal::new(format!("reading the type `{name}`: {e}")))?;
        match found {
            Lookup::Found(id) => self.convert(&info, id, registry, 0).map(Some),
            Lookup::Ambiguous(defs) => Err(Refusal::new(format!(
                "`{name}` is defined differently in two compilation units of {}: {} and {}",
                info.debug_file.display(),
                defs[0].1,
                defs[1].1
            ))
            .hint(format!(
                "define the one you mean at the top of the script, where it wins; `sdt types --bpftrace --unit {} {} '{name}'` prints it",
                defs[0].1.rsplit('/').next().unwrap_or(&defs[0].1),
                object.display()
            ))),
            Lookup::Missing(close) => {
                let mut refusal = Refusal::new(format!(
                    "unknown type `{name}`: the debug information of {} does not define it",
                    object.display()
                ));
                if let Some(h) = did_you_mean(&close) {
                    refusal = refusal.hint(h);
                }
                Err(refusal)
            }
        }
    }

    pub(crate) fn convert(
        &mut self,
        info: &Rc<DebugInfo>,
        id: TypeId,
        registry: &mut TypeRegistry,
        depth: u32,
    ) -> R<Ty> {
        let key = (info.path.clone(), id);
        if let Some(ty) = self.converted.get(&key) {
            return Ok(ty.clone());
        }
        if depth > 64 {
            return Err(Refusal::new("type nests too deeply"));
        }
        let ty = match read(info, id)? {
            Type::Base { size, encoding, .. } => match size {
                1 | 2 | 4 | 8 => Ty::int(size as u8, encoding == sdt_types::Encoding::Signed),
                _ => Ty::Array {
                    elem: Box::new(Ty::int(1, false)),
                    len: size,
                },
            },
            Type::Pointer { target } => {
                let pointee = match target {
                    None => Ty::Void,
                    Some(t) => match read(info, t)? {
                        // A pointer to a function is an address.
                        Type::Function => Ty::Void,
                        _ => self.convert(info, t, registry, depth + 1)?,
                    },
                };
                Ty::ptr(pointee)
            }
            Type::Typedef { target, .. } | Type::Qualified { target, .. } => match target {
                None => Ty::Void,
                Some(t) => self.convert(info, t, registry, depth + 1)?,
            },
            Type::Array { elem, dims } => {
                let mut ty = self.convert(info, elem, registry, depth + 1)?;
                for d in dims.iter().rev() {
                    ty = Ty::Array {
                        elem: Box::new(ty),
                        len: d.unwrap_or(0),
                    };
                }
                ty
            }
            Type::Enum(e) => {
                let bytes = match e.size {
                    1 | 2 | 4 | 8 => e.size as u8,
                    _ => 4,
                };
                let def = EnumDef {
                    name: e.name.unwrap_or_else(|| "(anonymous)".into()),
                    bytes,
                    signed: e.signed,
                    values: e.values,
                };
                Ty::Enum {
                    id: registry.add_enum(def),
                    bytes,
                    signed: e.signed,
                }
            }
            Type::Function => Ty::Void,
            Type::Record(r) => {
                // Recorded before its fields, which may point back at it.
                let record = registry.add_record(Record {
                    name: r.name.clone().unwrap_or_else(|| "(anonymous)".into()),
                    is_union: r.is_union,
                    size: r.size.unwrap_or(0),
                    align: 1,
                    fields: Vec::new(),
                    incomplete: r.size.is_none(),
                });
                self.converted.insert(key.clone(), Ty::Record(record));
                let mut fields = Vec::new();
                let mut align = 1;
                for m in &r.members {
                    let ty = self.convert(info, m.ty, registry, depth + 1)?;
                    align = align.max(registry.c_align(&ty));
                    let (offset, bitfield) = match m.bitfield {
                        None => (m.offset, None),
                        Some(b) => {
                            // A bitfield is read as its declared type's
                            // storage unit, aligned, and shifted.
                            let unit = registry.c_size(&ty).clamp(1, 8);
                            let mut start = b.bit_offset / (unit * 8) * unit;
                            if b.bit_offset + b.bits > start.saturating_add(unit).saturating_mul(8)
                            {
                                start = b.bit_offset / 8;
                            }
                            let within = b.bit_offset - start * 8;
                            if within + b.bits > 64 {
                                return Err(Refusal::new(format!(
                                    "bitfield `{}` straddles 8 bytes",
                                    m.name.as_deref().unwrap_or("")
                                )));
                            }
                            (start, Some((within as u8, b.bits as u8)))
                        }
                    };
                    fields.push(Field {
                        name: m.name.clone().unwrap_or_default(),
                        ty,
                        offset,
                        bitfield,
                    });
                }
                let rec = registry.record_mut(record);
                rec.fields = fields;
                rec.align = align;
                return Ok(Ty::Record(record));
            }
        };
        self.converted.insert(key, ty.clone());
        Ok(ty)
    }

    fn site_args(&mut self, target: &TargetInfo) -> R<Rc<SiteArgs>> {
        let Some(object) = target.object.clone() else {
            return Err(Refusal::new("this probe has no object to read DWARF from"));
        };
        let addresses: Vec<u64> = target.usdt_sites.iter().map(|s| s.address).collect();
        let key = (object.clone(), addresses);
        if let Some(known) = self.site_args.get(&key) {
            return Ok(known.clone());
        }
        let info = self.open(&object, target).map_err(|e| {
            Refusal::new("args.NAME needs the probe object's debug information")
                .label(e.to_string())
        })?;
        let mut args: SiteArgs = HashMap::new();
        for site in &target.usdt_sites {
            let variables = info
                .register_variables_at(site.address)
                .map_err(|e| Refusal::new(e.to_string()))?;
            for (index, register) in site.registers.iter().enumerate() {
                let Some(register) = register else { continue };
                let Some(v) = variables
                    .iter()
                    .find(|v| pt_regs_offset(v.register) == Some(*register))
                else {
                    continue;
                };
                let type_name = info
                    .c_name(Some(v.ty))
                    .map_err(|e| Refusal::new(e.to_string()))?;
                let entry =
                    args.entry(v.name.clone())
                        .or_insert(Some((index, v.ty, type_name.clone())));
                if matches!(entry, Some((i, _, t)) if *i != index || *t != type_name) {
                    *entry = None;
                }
            }
        }
        let sites: Vec<String> = key.1.iter().map(|a| format!("{a:#x}")).collect();
        let mut typed: Vec<String> = args
            .iter()
            .map(|(name, v)| match v {
                Some((index, _, ty)) => format!("args.{name} = ({ty})arg{index}"),
                None => format!("args.{name}: differs between sites"),
            })
            .collect();
        typed.sort();
        self.note(if typed.is_empty() {
            format!(
                "the USDT sites at {} of {}: DWARF names no variable in an argument's register; their arguments stay integers",
                sites.join(", "),
                object.display()
            )
        } else {
            format!(
                "the USDT sites at {} of {}: {}",
                sites.join(", "),
                object.display(),
                typed.join(", ")
            )
        });
        let args = Rc::new(args);
        self.site_args.insert(key, args.clone());
        Ok(args)
    }
}

fn read(info: &DebugInfo, id: TypeId) -> R<Type> {
    info.get(id).map_err(|e| Refusal::new(e.to_string()))
}
