//! The typed variables at a code address: what DWARF can say about a USDT
//! argument.
//!
//! A probe's note gives each argument a size and a location (`8@%rsi`),
//! never a C type. DWARF does not describe the note either, but it does
//! describe every parameter and local variable of the function around
//! the site, with a location list saying where each one lives at each
//! address. When an argument is in a register at the site and a variable
//! in scope there lives in that same register, the argument is that
//! variable: its name and type are the argument's. This finds parameters
//! and locals passed as they are (`DTRACE_PROBE2(p, n, s, len)`), in the
//! function or in an inlined function around the site; arguments that
//! are expressions (`&s->stats`, `n + 1`), constants, or in memory match
//! no variable.

use std::rc::Rc;

use gimli::{AttributeValue, Operation};

use crate::{DebugInfo, Error, PartUnit, Reader, TypeId};

/// A variable that lives in a register at an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterVariable {
    pub name: String,
    pub ty: TypeId,
    /// The DWARF register number.
    pub register: u16,
}

impl DebugInfo {
    /// The parameters and local variables in scope at `pc` (a link-time
    /// address) that live in a register there, innermost scope first.
    pub fn register_variables_at(&self, pc: u64) -> Result<Vec<RegisterVariable>, Error> {
        let dwarf = self.full_dwarf()?;
        let Some(unit) = self.unit_at(&dwarf, pc)? else {
            return Ok(Vec::new());
        };
        let unit = PartUnit::main(unit);
        let fail = |e: gimli::Error| self.corrupt(unit.header.offset().0 as u64, e);
        let mut tree = unit.entries_tree(None).map_err(fail)?;
        let root = tree.root().map_err(fail)?;
        let mut found = Vec::new();
        self.scope(&dwarf, &unit, root, pc, &mut found, 0)?;
        found.reverse();
        Ok(found)
    }

    pub(crate) fn full_dwarf(&self) -> Result<Rc<gimli::Dwarf<Reader>>, Error> {
        if let Some(d) = &*self.full.borrow() {
            return Ok(d.clone());
        }
        let d = Rc::new(crate::locate::load_dwarf(
            &self.debug_file,
            self.owner.clone(),
            true,
            false,
        )?);
        *self.full.borrow_mut() = Some(d.clone());
        Ok(d)
    }

    /// The unit whose code holds `pc`: through `.debug_aranges`, else
    /// through each unit's ranges.
    pub(crate) fn unit_at(
        &self,
        dwarf: &gimli::Dwarf<Reader>,
        pc: u64,
    ) -> Result<Option<gimli::Unit<Reader>>, Error> {
        let fail = |e: gimli::Error| self.corrupt(0, e);
        let mut headers = dwarf.debug_aranges.headers();
        while let Some(header) = headers.next().map_err(fail)? {
            let mut entries = header.entries();
            while let Some(entry) = entries.next().map_err(fail)? {
                let r = entry.range();
                if r.begin <= pc && pc < r.end {
                    let unit_header = dwarf
                        .unit_header(header.debug_info_offset())
                        .map_err(fail)?;
                    return Ok(Some(dwarf.unit(unit_header).map_err(fail)?));
                }
            }
        }
        let mut units = dwarf.units();
        while let Some(header) = units.next().map_err(fail)? {
            let unit = dwarf.unit(header).map_err(fail)?;
            let mut ranges = dwarf.unit_ranges(&unit).map_err(fail)?;
            while let Some(r) = ranges.next().map_err(fail)? {
                if r.begin <= pc && pc < r.end {
                    return Ok(Some(unit));
                }
            }
        }
        Ok(None)
    }

    /// Collects the register variables of the scopes under `node` that
    /// hold `pc`, outermost first.
    fn scope(
        &self,
        dwarf: &gimli::Dwarf<Reader>,
        unit: &PartUnit,
        node: gimli::EntriesTreeNode<'_, '_, Reader>,
        pc: u64,
        found: &mut Vec<RegisterVariable>,
        depth: u32,
    ) -> Result<(), Error> {
        if depth > crate::MAX_DEPTH {
            return Ok(());
        }
        let fail = |e: gimli::Error| self.corrupt(unit.header.offset().0 as u64, e);
        let mut children = node.children();
        while let Some(child) = children.next().map_err(fail)? {
            let entry = child.entry();
            match entry.tag() {
                gimli::DW_TAG_formal_parameter | gimli::DW_TAG_variable if depth > 0 => {
                    if let Some(v) = self.register_variable(dwarf, unit, entry, pc)? {
                        found.push(v);
                    }
                }
                gimli::DW_TAG_subprogram
                | gimli::DW_TAG_inlined_subroutine
                | gimli::DW_TAG_lexical_block => {
                    let mut ranges = dwarf.die_ranges(unit, entry).map_err(fail)?;
                    let mut holds = false;
                    while let Some(r) = ranges.next().map_err(fail)? {
                        holds |= r.begin <= pc && pc < r.end;
                    }
                    if holds {
                        self.scope(dwarf, unit, child, pc, found, depth + 1)?;
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn register_variable(
        &self,
        dwarf: &gimli::Dwarf<Reader>,
        unit: &PartUnit,
        entry: &gimli::DebuggingInformationEntry<Reader>,
        pc: u64,
    ) -> Result<Option<RegisterVariable>, Error> {
        let fail = |e: gimli::Error| self.corrupt(unit.header.offset().0 as u64, e);
        let Some(location) = entry.attr_value(gimli::DW_AT_location) else {
            return Ok(None);
        };
        let expression = match location {
            AttributeValue::Exprloc(e) => Some(e),
            other => {
                let mut found = None;
                if let Some(mut list) = dwarf.attr_locations(unit, other).map_err(fail)? {
                    while let Some(l) = list.next().map_err(fail)? {
                        if l.range.begin <= pc && pc < l.range.end {
                            found = Some(l.data);
                            break;
                        }
                    }
                }
                found
            }
        };
        let Some(expression) = expression else {
            return Ok(None);
        };
        let mut ops = expression.operations(unit.encoding());
        let register = match ops.next().map_err(fail)? {
            Some(Operation::Register { register }) => register.0,
            _ => return Ok(None),
        };
        if ops.next().map_err(fail)?.is_some() {
            return Ok(None);
        }
        // An inlined or out-of-line copy names its origin for the rest.
        let mut described = entry.clone();
        for _ in 0..4 {
            if described.attr(gimli::DW_AT_name).is_some() {
                break;
            }
            match described.attr_value(gimli::DW_AT_abstract_origin) {
                Some(AttributeValue::UnitRef(o)) => described = unit.entry(o).map_err(fail)?,
                _ => return Ok(None),
            }
        }
        let Some(name) = self.name(unit, &described)? else {
            return Ok(None);
        };
        let Some(ty) = self.type_ref(unit, &described)? else {
            return Ok(None);
        };
        Ok(Some(RegisterVariable { name, ty, register }))
    }
}
