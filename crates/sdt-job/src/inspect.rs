//! What a compiled program is: `--dump`'s sites and generated code, and
//! a verifier's rejection placed back in the script.

use std::io::{self, Write};

use sdt_bind::Target;
use sdt_script::Compilation;

/// Which path each probe that could take the fast path takes, and why,
/// one line each (for `--dump` and `-v`).
pub fn paths(compilation: &Compilation) -> Vec<String> {
    let fast = &compilation.fast;
    let mut lines: Vec<String> = fast
        .probes
        .iter()
        .map(|p| {
            format!(
                "{} takes the fast path: its hits come through memory the program shares, and {} replay{} them",
                p.display,
                p.replays
                    .iter()
                    .map(|&(program, _)| compilation.compiled.programs[program].name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                if p.replays.len() == 1 { "s" } else { "" }
            )
        })
        .collect();
    lines.extend(fast.kernel.iter().cloned());
    lines
}

/// `--dump`: the sites each attach point resolved to, then every
/// generated program, disassembled.
pub fn dump(compilation: &Compilation, out: &mut dyn Write) -> io::Result<()> {
    for b in compilation.bound.iter().flatten() {
        writeln!(out, "{}", b.text)?;
        match &b.target {
            Target::Usdt(sites) => {
                for s in sites {
                    writeln!(
                        out,
                        "  {}:{} {} {:#x} (file offset {:#x})",
                        s.provider,
                        s.name,
                        s.path.display(),
                        s.address,
                        s.attach_offset
                    )?;
                }
            }
            Target::Functions(fs) => {
                for f in fs {
                    writeln!(
                        out,
                        "  {} {} {:#x} (file offset {:#x})",
                        f.function,
                        f.path.display(),
                        f.address,
                        f.file_offset
                    )?;
                }
            }
            _ => {}
        }
    }
    for line in paths(compilation) {
        writeln!(out, "{line}")?;
    }
    let names = compilation.compiled.map_names();
    // Sleepable programs call the kfunc that the kernel was asked about.
    let kfuncs: std::collections::HashMap<i32, String> = sdt_bpf::FaultingReads::detect()
        .ok()
        .filter(|_| compilation.compiled.programs.iter().any(|p| p.sleepable))
        .map(|f| {
            (
                f.copy_from_user_str as i32,
                sdt_bpf::COPY_FROM_USER_STR.to_string(),
            )
        })
        .into_iter()
        .collect();
    for p in &compilation.compiled.programs {
        let listing = sdt_bpf::disasm::Disassembler::new()
            .map_names(names.clone())
            .kfunc_names(kfuncs.clone())
            .listing(&p.insns);
        writeln!(
            out,
            "\nprogram {} ({}, {} instructions{}):\n{listing}",
            p.display,
            p.name,
            p.insns.len(),
            if p.sleepable { ", sleepable" } else { "" }
        )?;
    }
    Ok(())
}

/// A load failure: a verifier's rejection is placed in the script, at
/// the code of the last instruction the verifier looked at.
pub(crate) fn load_error(
    e: sdt_trace::Error,
    compilation: &Compilation,
    name: &str,
    source: &str,
) -> anyhow::Error {
    if let sdt_trace::Error::Load {
        program,
        source: sdt_bpf::Error::Verifier { log, .. },
    } = &e
    {
        if let Some(p) = compilation
            .compiled
            .programs
            .iter()
            .find(|p| &p.name == program)
        {
            let span = verifier_span(log.as_str(), &p.spans)
                .unwrap_or(p.spans.first().map_or_else(Default::default, |s| s.1));
            let d = sdt_lang::diag::Diagnostic::error(span, format!("the kernel's verifier rejected the program for {}", p.display))
                .label("the verifier stopped here")
                .hint(log.summary().lines().last().unwrap_or("").to_string())
                .hint("sdt run --dump prints the program; a loop the verifier cannot bound is the usual cause");
            let text = d.to_text(name, source);
            return anyhow::anyhow!("{}", text.trim_end());
        }
    }
    anyhow::Error::from(e)
}

/// The script span of the last instruction the verifier looked at.
fn verifier_span(
    log: &str,
    spans: &[(usize, sdt_lang::diag::Span)],
) -> Option<sdt_lang::diag::Span> {
    let insn: usize = log
        .lines()
        .rev()
        .find_map(|l| l.split(':').next()?.trim().parse().ok())?;
    spans
        .iter()
        .rev()
        .find(|(start, _)| *start <= insn)
        .map(|s| s.1)
}
