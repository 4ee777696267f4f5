//! `sdt types`: C types from a file's DWARF, laid out as pahole shows
//! them, as JSON, or as definitions an unmodified bpftrace script can
//! paste in. The reading lives in `sdt-types`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use sdt_types::{DebugInfo, Layout, Lookup};

const AFTER_HELP: &str = "\
NAME is `struct foo`, `union foo`, `enum foo` or a typedef name; a bare
name that is no typedef is tried as a struct, union and enum in turn. A
name defined differently in two compilation units is an error that names
both; --unit picks one.
Without NAME, every name the file defines is listed.

The DWARF comes from the file itself, or from the separate debug file its
build-id names (/usr/lib/debug/.build-id/xx/yyyy.debug), or from the one its
.gnu_debuglink names. Distributions ship those in -dbg or -dbgsym packages.

Output:
  By default, pahole's layout: each member with its offset and size (a
  bitfield as offset:bit), holes and trailing padding called out; an enum
  with its values.
  --json prints one object: kind, name, size, padding, members (name,
  declaration, type, offset, size, bit_offset and bits for a bitfield,
  hole_before) and enumerators (name, value).
  --bpftrace prints C definitions of the type and every type it holds by
  value, then a BEGIN block that fills @ENUM_names[value] = \"NAME\" for each
  enum, for bpftrace scripts that cannot read DWARF themselves.

Examples:
  sdt types ./app 'struct request'
  sdt types --bpftrace ./app 'struct request' > request.bt
  sdt types --json /usr/lib/x86_64-linux-gnu/libc.so.6 'struct _IO_FILE'";

/// Print C types from a file's debug information.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub struct TypesArgs {
    /// Print JSON.
    #[arg(long, conflicts_with = "bpftrace")]
    json: bool,

    /// Print C definitions and an enum-name BEGIN block for bpftrace.
    #[arg(long)]
    bpftrace: bool,

    /// Of a name defined differently in several compilation units, take
    /// the definition in the first unit whose name contains UNIT.
    #[arg(long, value_name = "UNIT")]
    unit: Option<String>,

    /// The ELF file (program, library or debug file).
    file: PathBuf,

    /// The type to print.
    name: Option<String>,
}

pub fn run(args: TypesArgs) -> anyhow::Result<ExitCode> {
    let info = DebugInfo::open(&args.file)?;
    let Some(name) = args.name else {
        for name in info.names()? {
            println!("{name}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let id = match &args.unit {
        Some(unit) => find_in_unit(&info, &name, unit)?,
        None => find(&info, &name)?,
    };
    if args.bpftrace {
        print!("{}", sdt_types::bpftrace_definitions(&info, id)?);
        return Ok(ExitCode::SUCCESS);
    }
    let layout = sdt_types::layout(&info, id)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json(&layout))?);
    } else {
        print!("{}", layout.to_text());
    }
    Ok(ExitCode::SUCCESS)
}

/// The one type `name` means, or an error that says what to do.
fn find(info: &DebugInfo, name: &str) -> anyhow::Result<sdt_types::TypeId> {
    let bare = !name.contains(' ');
    let tries: Vec<String> = if bare {
        ["", "struct ", "union ", "enum "]
            .iter()
            .map(|kw| format!("{kw}{name}"))
            .collect()
    } else {
        vec![name.to_string()]
    };
    let mut suggestions = Vec::new();
    for t in &tries {
        match info.find(t).context("reading debug information")? {
            Lookup::Found(id) => return Ok(id),
            Lookup::Ambiguous(defs) => bail!(
                "`{t}` is defined differently in two compilation units of {}: {}; pick one with --unit (for example --unit {})",
                info.debug_file.display(),
                defs.iter().map(|(_, unit)| unit.as_str()).collect::<Vec<_>>().join(" and "),
                defs[0].1.rsplit('/').next().unwrap_or(&defs[0].1)
            ),
            Lookup::Missing(close) => suggestions.extend(close),
        }
    }
    suggestions.dedup();
    let hint = if suggestions.is_empty() {
        String::new()
    } else {
        format!("; did you mean {}?", suggestions.join(", "))
    };
    bail!(
        "{} defines no type `{name}`{hint}",
        info.debug_file.display()
    )
}

/// `name` as defined in the first unit whose name contains `unit`.
fn find_in_unit(info: &DebugInfo, name: &str, unit: &str) -> anyhow::Result<sdt_types::TypeId> {
    let bare = !name.contains(' ');
    let tries: Vec<String> = if bare {
        ["", "struct ", "union ", "enum "]
            .iter()
            .map(|kw| format!("{kw}{name}"))
            .collect()
    } else {
        vec![name.to_string()]
    };
    for t in &tries {
        if let Some(id) = info.find_in_unit(t, unit)? {
            return Ok(id);
        }
    }
    bail!(
        "no compilation unit of {} whose name contains `{unit}` defines `{name}`",
        info.debug_file.display()
    )
}

fn json(layout: &Layout) -> serde_json::Value {
    let members: Vec<serde_json::Value> = layout
        .members
        .iter()
        .map(|m| {
            let mut v = serde_json::json!({
                "name": m.name,
                "declaration": m.declaration,
                "type": m.type_name,
                "offset": m.offset,
                "size": m.size,
                "hole_before": m.hole_before,
            });
            if let Some((bit, bits)) = m.bitfield {
                v["bit_offset"] = bit.into();
                v["bits"] = bits.into();
            }
            v
        })
        .collect();
    let enumerators: Vec<serde_json::Value> = layout
        .enumerators
        .iter()
        .map(|(name, value)| serde_json::json!({ "name": name, "value": value }))
        .collect();
    serde_json::json!({
        "kind": layout.kind,
        "name": layout.name,
        "size": layout.size,
        "padding": layout.padding,
        "target": layout.target,
        "members": members,
        "enumerators": enumerators,
    })
}
