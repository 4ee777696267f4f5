//! `args` of a uprobe: the traced function's parameters from its DWARF,
//! each with where the calling convention puts it ([`crate::abi`]), as
//! the checker asks for them ([`sdt_lang::check::Objects::function_args`]).
//!
//! The function is the one whose code starts where the probe is, found in
//! the debug information by that address, so static functions of one name
//! and C++ overloads are told apart. Parameters are where the ABI says
//! only at the function's first instruction, and only if the compiler
//! kept the ABI: a probe past the entry, a function DWARF marks
//! `DW_CC_nocall`, and GCC's clones whose calling convention it changed
//! (`.isra`, `.constprop`, `.part`, `.cold`) are refused, as are the
//! functions of an attach point that differ in their parameters.
//!
//! `args` itself is a struct of the parameters, each in a slot of its
//! own that starts on an eight-byte boundary (bpftrace packs them; the
//! layout is not visible to scripts, and aligned slots let each part be
//! written whole).

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use sdt_lang::check::{
    FunctionArgs, FunctionEntry, FunctionParam, ParamPlace, Refusal, TargetInfo,
};
use sdt_lang::types::{Field, Record, TypeRegistry};

use crate::abi::{self, Place};
use crate::types::ObjectFacts;

/// What was found for a function at an address of an object.
pub(crate) type Known = HashMap<(PathBuf, u64), Result<Rc<Found>, Refusal>>;

/// A function's `args`, and the C type of each parameter, which tells
/// two functions' parameters apart across compilation units.
pub(crate) struct Found {
    args: FunctionArgs,
    types: Vec<String>,
}

/// Symbol suffixes of GCC's clones, whose calling convention is GCC's own.
const CLONES: [&str; 4] = [".isra.", ".constprop.", ".part.", ".cold"];

impl ObjectFacts {
    pub(crate) fn uprobe_args(
        &mut self,
        target: &TargetInfo,
        registry: &mut TypeRegistry,
    ) -> Result<FunctionArgs, Refusal> {
        let Some(first) = target.functions.first() else {
            return Err(Refusal::new(
                "this probe has no function to read DWARF from",
            ));
        };
        let found = self.function(first, registry)?;
        for other in &target.functions[1..] {
            let theirs = self.function(other, registry)?;
            let same = theirs.types == found.types
                && theirs.args.params.len() == found.args.params.len()
                && theirs
                    .args
                    .params
                    .iter()
                    .zip(&found.args.params)
                    .all(|(a, b)| a.name == b.name && a.place == b.place);
            if !same {
                return Err(Refusal::new(format!(
                    "`args` differs between the functions this attach point matches: {} and {}",
                    found.args.function, theirs.args.function
                ))
                .hint("attach a block to each function by its name"));
            }
        }
        Ok(found.args.clone())
    }

    fn function(
        &mut self,
        entry: &FunctionEntry,
        registry: &mut TypeRegistry,
    ) -> Result<Rc<Found>, Refusal> {
        if entry.offset != 0 {
            return Err(past_entry(entry));
        }
        let key = (entry.object_file.clone(), entry.address);
        if let Some(known) = self.functions.get(&key) {
            return known.clone();
        }
        let found = self.read_function(entry, registry).map(Rc::new);
        self.functions.insert(key, found.clone());
        found
    }

    fn read_function(
        &mut self,
        entry: &FunctionEntry,
        registry: &mut TypeRegistry,
    ) -> Result<Found, Refusal> {
        let name = entry.symbol.as_str();
        let info = self
            .open_file(&entry.object, &entry.object_file)
            .map_err(|e| {
                Refusal::new(format!(
                    "`args` of {name} needs the debug information of {}",
                    entry.object.display()
                ))
                .label(e.to_string())
                .hint("or read the parameters as arg0, arg1, ... with casts")
            })?;
        let dwarf = |e: sdt_types::Error| Refusal::new(e.to_string());
        let Some(function) = info.function_at(entry.address).map_err(dwarf)? else {
            let mut refusal = Refusal::new(format!(
                "the debug information of {} does not describe {name}",
                entry.object.display()
            ));
            if info.debug_file != entry.object_file {
                refusal = refusal.label(format!("read from {}", info.debug_file.display()));
            }
            return Err(refusal.hint(
                "its source file was compiled without -g; read the parameters as arg0, arg1, ... with casts",
            ));
        };
        if function.nocall || CLONES.iter().any(|c| name.contains(c)) {
            return Err(Refusal::new(format!(
                "the compiler changed how {name} is called, so its parameters are not where the calling convention puts them"
            ))
            .hint(if function.nocall {
                "its DWARF says so (DW_CC_nocall)"
            } else {
                "it is a clone the compiler made with fewer or other parameters"
            }));
        }
        if !cfg!(target_arch = "x86_64") {
            return Err(Refusal::new(
                "`args` of uprobes follows the x86-64 calling convention, and this is another architecture",
            )
            .hint("read the parameters as arg0, arg1, ... with casts"));
        }
        let places = abi::places(&info, &function).map_err(dwarf)?;
        let mut params = Vec::new();
        let mut fields = Vec::new();
        let mut types = Vec::new();
        let mut at = 0u64;
        for (i, (p, place)) in function.params.iter().zip(places).enumerate() {
            let name = p.name.clone().unwrap_or_else(|| format!("arg{i}"));
            let ty = self.convert(&info, p.ty, registry, 0)?;
            types.push(info.c_name(Some(p.ty)).map_err(dwarf)?);
            let place = match place {
                Place::Registers(r) => ParamPlace::Registers(r),
                Place::Stack(offset) => ParamPlace::Stack {
                    sp: abi::STACK_POINTER,
                    offset,
                },
                Place::Reference(r) => ParamPlace::Reference(r),
                Place::Unreadable(why) => ParamPlace::Unreadable(why),
            };
            fields.push(Field {
                name: name.clone(),
                ty: ty.clone(),
                offset: at,
                bitfield: None,
            });
            params.push(FunctionParam {
                name,
                ty: ty.clone(),
                offset: at,
                place,
            });
            at += registry.c_size(&ty).next_multiple_of(8).max(8);
        }
        let function_name = function.name.clone().unwrap_or_else(|| name.to_string());
        let record = registry.add_record(Record {
            name: format!("{function_name}_args"),
            is_union: false,
            size: at,
            align: 8,
            fields,
            incomplete: false,
        });
        self.note_args(entry, &function_name, &params);
        Ok(Found {
            args: FunctionArgs {
                function: function_name,
                record,
                params,
            },
            types,
        })
    }

    /// For `-v`: where each parameter was found.
    fn note_args(&mut self, entry: &FunctionEntry, function: &str, params: &[FunctionParam]) {
        let described: Vec<String> = params
            .iter()
            .map(|p| {
                let at = match &p.place {
                    ParamPlace::Registers(r) if r.is_empty() => "nowhere (empty)".to_string(),
                    ParamPlace::Registers(r) => r
                        .iter()
                        .map(|o| abi::register_name(*o))
                        .collect::<Vec<_>>()
                        .join("+"),
                    ParamPlace::Stack { offset, .. } => format!("{offset}(%rsp)"),
                    ParamPlace::Reference(r) => format!("*{}", abi::register_name(*r)),
                    ParamPlace::Unreadable(why) => format!("unreadable: {why}"),
                };
                format!("{} in {at}", p.name)
            })
            .collect();
        self.note(format!(
            "args of {function} at {:#x} of {}: {}",
            entry.address,
            entry.object.display(),
            if described.is_empty() {
                "no parameters".to_string()
            } else {
                described.join(", ")
            }
        ));
    }
}

fn past_entry(entry: &FunctionEntry) -> Refusal {
    Refusal::new(format!(
        "`args` are the parameters where they are at a function's first instruction, and this probe is {} bytes into it ({})",
        entry.offset, entry.symbol
    ))
    .hint("attach a block to the function itself and keep what you need in a map keyed by tid")
}
