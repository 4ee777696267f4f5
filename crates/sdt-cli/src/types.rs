//! `sdt types`: C types from a file's DWARF, laid out as pahole shows
//! them, as JSON, or as definitions an unmodified bpftrace script can
//! paste in. The reading lives in `sdt-types`.

use std::path::PathBuf;
use std::process::ExitCode;

use sdt_types::DebugInfo;

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
    let id = info.named(&name, args.unit.as_deref())?;
    if args.bpftrace {
        print!("{}", sdt_types::bpftrace_definitions(&info, id)?);
        return Ok(ExitCode::SUCCESS);
    }
    let layout = sdt_types::layout(&info, id)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&layout.to_json())?);
    } else {
        print!("{}", layout.to_text());
    }
    Ok(ExitCode::SUCCESS)
}
