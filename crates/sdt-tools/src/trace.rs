//! `sdt trace`'s program: each probe records every argument of its site,
//! and the strings asked for, through `__sdt_event`, which only sdt's
//! own programs may use.

use sdt_job::program::StringArg;
use sdt_job::ProbeSpec;

/// The script `sdt trace` runs: each probe records every argument of its
/// site, and the strings asked for.
pub fn program(probes: &[String], strings: &[StringArg]) -> anyhow::Result<String> {
    let specs = probes
        .iter()
        .map(|p| ProbeSpec::parse(p))
        .collect::<Result<Vec<_>, _>>()?;
    let mut args: Vec<String> = Vec::new();
    for s in strings {
        args.push(s.arg.to_string());
        args.push(s.len_arg.map_or(-1, |l| l as i64).to_string());
    }
    let mut text = String::new();
    for spec in &specs {
        let (provider, name) = spec.probe.split_once(':').unwrap_or(("*", &spec.probe));
        let target = spec
            .target
            .as_deref()
            .map(crate::quoted)
            .unwrap_or_default();
        text.push_str(&format!(
            "usdt:{target}:{provider}:{name} {{ __sdt_event({}); }}\n",
            args.join(", ")
        ));
    }
    Ok(text)
}

/// `-s N` (a string up to a NUL) or `-s N:M` (of the length in argument M).
pub fn string_arg(text: &str) -> Result<StringArg, String> {
    let index = |s: &str| {
        s.parse::<usize>()
            .map_err(|_| format!("`{s}` is not an argument number"))
    };
    Ok(match text.split_once(':') {
        Some((arg, len)) => StringArg {
            arg: index(arg)?,
            len_arg: Some(index(len)?),
        },
        None => StringArg {
            arg: index(text)?,
            len_arg: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_args() {
        let nul = StringArg {
            arg: 3,
            len_arg: None,
        };
        assert_eq!(string_arg("3"), Ok(nul));
        let counted = StringArg {
            arg: 1,
            len_arg: Some(2),
        };
        assert_eq!(string_arg("1:2"), Ok(counted));
        assert!(string_arg("x").is_err());
        assert!(string_arg("1:").is_err());
    }

    #[test]
    fn scripts_quote_targets() {
        let probes = ["/odd \"dir\"/x:p:n*".to_string(), "q:r".to_string()];
        let strings = [StringArg {
            arg: 1,
            len_arg: Some(2),
        }];
        assert_eq!(
            program(&probes, &strings).unwrap(),
            "usdt:\"/odd \\\"dir\\\"/x\":p:n* { __sdt_event(1, 2); }\nusdt::q:r { __sdt_event(1, 2); }\n"
        );
    }
}
