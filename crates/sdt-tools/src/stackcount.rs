//! `sdt stackcount`'s program: how often each user stack reaches some
//! probes, like BCC's `stackcount` for user space.
//!
//! Every probe counts its hits by `ustack` in one map, which `sdt run`
//! then prints as it prints any map: as text, as folded stacks, and as a
//! flame graph. So the stacks here and in `sdt run` are the same stacks,
//! folded by the same code.

use anyhow::bail;
use sdt_job::ProbeSpec;

use crate::quoted;

/// The program that counts the stacks at `probes`: one block, every probe
/// an attach point of it; `per_process`, by process too.
pub fn program(probes: &[String], per_process: bool) -> anyhow::Result<String> {
    let points = probes
        .iter()
        .map(|p| attach_point(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let key = if per_process {
        "comm, pid, ustack"
    } else {
        "ustack"
    };
    Ok(format!(
        "// sdt stackcount: how often each user stack reaches the probes.\n{} {{\n  @[{key}] = count();\n}}\n",
        points.join(",\n")
    ))
}

/// A probe as `sdt trace` or bpftrace's `uprobe:`/`uretprobe:` take it,
/// as an attach point of sdt's language.
fn attach_point(probe: &str) -> anyhow::Result<String> {
    for kind in ["uprobe", "uretprobe"] {
        let Some(rest) = probe.strip_prefix(kind).and_then(|r| r.strip_prefix(':')) else {
            continue;
        };
        let Some((target, function)) = rest.split_once(':') else {
            bail!("`{probe}`: expected {kind}:TARGET:FUNCTION");
        };
        if target.is_empty() || function.is_empty() {
            bail!("`{probe}`: expected {kind}:TARGET:FUNCTION, neither empty");
        }
        // A C++ or Rust name (`shop::checkout(int)`) is one only quoted.
        let plain = function
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_*?.$@".contains(c));
        let function = if plain {
            function.to_string()
        } else {
            quoted(function)
        };
        return Ok(format!("{kind}:{}:{function}", quoted(target)));
    }
    let spec = ProbeSpec::parse(probe)?;
    let (provider, name) = spec.probe.split_once(':').unwrap_or(("*", &spec.probe));
    let target = spec.target.as_deref().map(quoted).unwrap_or_default();
    Ok(format!("usdt:{target}:{provider}:{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_become_one_block_counting_by_stack() {
        let probes = [
            "app:slow_path".to_string(),
            "usdt:/bin/x:p:n*".to_string(),
            "uprobe:libc:malloc".to_string(),
            "uretprobe:/a \"b\":f".to_string(),
            "uprobe:x:shop::checkout(int)".to_string(),
        ];
        assert_eq!(
            program(&probes, false).unwrap(),
            "// sdt stackcount: how often each user stack reaches the probes.\n\
             usdt::app:slow_path,\n\
             usdt:\"/bin/x\":p:n*,\n\
             uprobe:\"libc\":malloc,\n\
             uretprobe:\"/a \\\"b\\\"\":f,\n\
             uprobe:\"x\":\"shop::checkout(int)\" {\n  @[ustack] = count();\n}\n"
        );
    }

    #[test]
    fn per_process_keys_by_command_and_pid_first() {
        assert!(program(&["app:slow".to_string()], true)
            .unwrap()
            .contains("@[comm, pid, ustack] = count();"));
    }

    #[test]
    fn bad_probes_are_refused() {
        for bad in ["uprobe:libc", "uprobe::malloc", "slow_path", "a::b"] {
            assert!(program(&[bad.to_string()], false).is_err(), "{bad}");
        }
    }
}
