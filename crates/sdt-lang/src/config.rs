//! Configuration: `config = { NAME = VALUE; ... }` in a script, and the
//! `BPFTRACE_*` environment variables, resolved into one [`Config`].
//!
//! The options are bpftrace's (0.26), under its names: a name is
//! case-insensitive and may carry the `BPFTRACE_` prefix of its
//! environment variable (`BPFTRACE_STACK_MODE = raw`). An environment
//! variable wins over the script, as in bpftrace, and bpftrace 0.17's
//! older variable names (`BPFTRACE_STRLEN`, `BPFTRACE_MAP_KEYS_MAX`,
//! `BPFTRACE_CAT_BYTES_MAX`) are still read. Names that were renamed give
//! a warning and set the new option; deprecated ones a warning and nothing.
//!
//! Some options change what sdt does ([`Config`]'s fields); the others are
//! checked for a valid value and then have no effect, because sdt has
//! nothing they could tune (no LLVM, no perf buffers, no kernel stacks):
//! [`IGNORED`] lists them, and `--help` says so.
//!
//! Resolving reads no file and no kernel interface; the environment is
//! passed in, so that tests need not change the process's.

use crate::ast::{ConfigEntry, ExprKind};
use crate::diag::Diagnostic;

/// What happens to an attach point that matches nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissingProbes {
    /// Leave it out silently.
    Ignore,
    /// Leave it out with a warning.
    Warn,
    /// Refuse the script (the default).
    #[default]
    Error,
}

/// The options that change what sdt does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Bytes of a string buffer, NUL included.
    pub max_strlen: u64,
    /// Entries of each map.
    pub max_map_keys: u64,
    /// Bytes `cat()` prints of a file.
    pub max_cat_bytes: u64,
    /// Whether the maps are printed when the program ends.
    pub print_maps_on_exit: bool,
    pub missing_probes: MissingProbes,
    /// How `ustack` prints when no mode is given.
    pub stack_mode: crate::types::StackMode,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_strlen: crate::check::DEFAULT_STRLEN.into(),
            max_map_keys: 4096,
            max_cat_bytes: 10 * 1024,
            print_maps_on_exit: true,
            missing_probes: MissingProbes::Error,
            stack_mode: crate::types::StackMode::Bpftrace,
        }
    }
}

/// Options bpftrace has that sdt accepts, checks and then ignores, each
/// with why.
pub const IGNORED: &[(&str, &str)] = &[
    (
        "cache_user_symbols",
        "symbols are resolved from each process's own mappings",
    ),
    ("cpp_demangle", "C++ names are always demangled"),
    (
        "lazy_symbolication",
        "symbols are resolved as records arrive",
    ),
    ("license", "programs are always loaded as GPL"),
    ("log_size", "the verifier's log is always read in full"),
    (
        "max_bpf_progs",
        "sdt makes one program per probe and argument shape",
    ),
    ("max_probes", "sdt attaches every matching site"),
    (
        "on_stack_limit",
        "strings and records live off the BPF stack",
    ),
    (
        "perf_rb_pages",
        "sdt has one ring buffer; size it with --buffer-size",
    ),
    ("show_debug_info", "stacks show symbol+offset"),
    (
        "str_trunc_trailer",
        "truncated strings are cut without a trailer",
    ),
    ("use_blazesym", "sdt symbolizes with its own ELF reader"),
    (
        "unstable_import_statement",
        "there are no unstable features to enable",
    ),
    (
        "unstable_tseries",
        "there are no unstable features to enable",
    ),
    (
        "unstable_typeinfo",
        "there are no unstable features to enable",
    ),
    (
        "unstable_dw_ustack",
        "there are no unstable features to enable",
    ),
];

/// Old names and the options they set now.
const RENAMED: &[(&str, &str)] = &[
    ("strlen", "max_strlen"),
    ("no_cpp_demangle", "cpp_demangle"),
    ("cat_bytes_max", "max_cat_bytes"),
    ("map_keys_max", "max_map_keys"),
];

/// Options that no longer do anything anywhere.
const DEPRECATED: &[&str] = &[
    "symbol_source",
    "max_type_res_iterations",
    "unstable_addr",
    "unstable_import",
    "unstable_macro",
    "unstable_map_decl",
];

/// Options only the environment can set (they choose kernel files).
const ENVIRONMENT_ONLY: &[&str] = &["btf", "kernel_build", "kernel_source", "vmlinux"];

/// bpftrace 0.17's environment variables that 0.20 renamed, and the
/// options they set. The new name wins when both are set.
const OLD_VARIABLES: &[(&str, &str)] = &[
    ("BPFTRACE_STRLEN", "max_strlen"),
    ("BPFTRACE_MAP_KEYS_MAX", "max_map_keys"),
    ("BPFTRACE_CAT_BYTES_MAX", "max_cat_bytes"),
];

/// The licences the kernel takes as GPL-compatible, in the order
/// bpftrace lists them.
const LICENSES: &[&str] = &[
    "Dual MIT/GPL",
    "Dual BSD/GPL",
    "Dual MPL/GPL",
    "GPL and additional rights",
    "GPL v2",
    "GPL",
];

/// A value as written in a config block or the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Number(u64),
    Text(String),
}

/// A resolved configuration and the warnings resolving it gave.
#[derive(Clone, Debug, Default)]
pub struct Resolved {
    pub config: Config,
    /// Warnings about the script's config block, placed in it.
    pub warnings: Vec<Diagnostic>,
}

/// Resolves the script's config block, then the environment (`env`
/// gives a variable's value by name).
pub fn resolve(
    entries: &[ConfigEntry],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved, ConfigError> {
    let mut resolved = Resolved::default();
    let mut errors = Vec::new();
    for entry in entries {
        let value = match &entry.value.kind {
            ExprKind::Int(n) if *n >= 0 => u64::try_from(*n).map(Value::Number).ok(),
            ExprKind::Str(bytes) => Some(Value::Text(String::from_utf8_lossy(bytes).into())),
            ExprKind::Ident(word) => Some(Value::Text(word.clone())),
            _ => None,
        };
        let Some(value) = value else {
            errors.push(Diagnostic::error(
                entry.value.span,
                format!(
                    "{}: the value must be a number, a string or a word",
                    entry.name
                ),
            ));
            continue;
        };
        match set(&mut resolved.config, &entry.name, &value) {
            Ok(Set::Done) => {}
            Ok(Set::Renamed(new)) => resolved.warnings.push(Diagnostic::warning(
                entry.span,
                format!("{} has been renamed, please use {new}", entry.name),
            )),
            Ok(Set::Deprecated) => resolved.warnings.push(Diagnostic::warning(
                entry.span,
                format!("{} is deprecated and has no effect", entry.name),
            )),
            Err(message) => errors.push(Diagnostic::error(entry.span, message)),
        }
    }
    if !errors.is_empty() {
        return Err(ConfigError::Script(errors));
    }
    for &(variable, option) in OLD_VARIABLES {
        if let Some(value) = env(variable) {
            set(&mut resolved.config, option, &Value::Text(value))
                .map_err(|why| ConfigError::Environment(format!("{variable}: {why}")))?;
        }
    }
    for option in KNOWN.iter().copied().chain(IGNORED.iter().map(|i| i.0)) {
        let variable = format!("BPFTRACE_{}", option.to_ascii_uppercase());
        if let Some(value) = env(&variable) {
            set(&mut resolved.config, option, &Value::Text(value))
                .map_err(|why| ConfigError::Environment(format!("{variable}: {why}")))?;
        }
    }
    Ok(resolved)
}

/// Why a configuration cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Errors in the script's config block.
    Script(Vec<Diagnostic>),
    /// An environment variable with a value that is not valid.
    Environment(String),
}

/// The options [`Config`] holds.
const KNOWN: &[&str] = &[
    "max_strlen",
    "max_map_keys",
    "max_cat_bytes",
    "print_maps_on_exit",
    "missing_probes",
    "stack_mode",
];

enum Set {
    Done,
    Renamed(&'static str),
    Deprecated,
}

/// Sets option `name` (as written: any case, `BPFTRACE_` prefix allowed).
fn set(config: &mut Config, name: &str, value: &Value) -> Result<Set, String> {
    let mut key = name.to_ascii_lowercase();
    if let Some(rest) = key.strip_prefix("bpftrace_") {
        key = rest.to_string();
    }
    if DEPRECATED.contains(&key.as_str()) {
        return Ok(Set::Deprecated);
    }
    let mut outcome = Set::Done;
    if let Some(&(_, new)) = RENAMED.iter().find(|(old, _)| *old == key) {
        key = new.to_string();
        outcome = Set::Renamed(new);
    }
    let number = || -> Result<u64, String> {
        match value {
            Value::Number(n) => Ok(*n),
            Value::Text(text) => crate::lexer::parse_int(text.trim())
                .map_err(|_| format!("{name}: expecting a number, got {text}")),
        }
    };
    let boolean = || -> Result<bool, String> {
        match value {
            Value::Number(n) => Ok(*n != 0),
            Value::Text(text) => match text.trim().to_ascii_lowercase().as_str() {
                "1" | "true" => Ok(true),
                "0" | "false" => Ok(false),
                _ => Err(format!(
                    "{name}: Invalid bool value: valid values are true, false, 1 or 0."
                )),
            },
        }
    };
    match key.as_str() {
        "max_strlen" => config.max_strlen = number()?,
        "max_map_keys" => config.max_map_keys = number()?,
        "max_cat_bytes" => config.max_cat_bytes = number()?,
        "print_maps_on_exit" => config.print_maps_on_exit = boolean()?,
        "cpp_demangle" | "lazy_symbolication" | "show_debug_info" | "use_blazesym" => {
            boolean()?;
        }
        "log_size" | "max_bpf_progs" | "max_probes" | "on_stack_limit" | "perf_rb_pages" => {
            number()?;
        }
        "missing_probes" => {
            config.missing_probes = match value {
                Value::Text(t) if t.eq_ignore_ascii_case("ignore") => MissingProbes::Ignore,
                Value::Text(t) if t.eq_ignore_ascii_case("warn") => MissingProbes::Warn,
                Value::Text(t) if t.eq_ignore_ascii_case("error") => MissingProbes::Error,
                _ => {
                    return Err(format!(
                        "{name}: Invalid value for missing_probes: valid values are ignore, warn, and error."
                    ))
                }
            }
        }
        "license" => match value {
            Value::Text(t) if LICENSES.contains(&t.as_str()) => {}
            other => {
                let found = match other {
                    Value::Number(n) => n.to_string(),
                    Value::Text(t) => t.clone(),
                };
                return Err(format!(
                    "Invalid value for license. Found: {found}. Valid values: {}.",
                    LICENSES.join(", ")
                ));
            }
        },
        "stack_mode" => {
            config.stack_mode = match value {
                Value::Text(t) => crate::types::StackMode::named(t),
                Value::Number(_) => None,
            }
            .ok_or_else(|| {
                format!(
                    "{name}: Invalid value for stack_mode: valid values are bpftrace, raw, perf, and build_id."
                )
            })?
        }
        "cache_user_symbols" => match value {
            Value::Number(_) => {}
            Value::Text(t)
                if ["1", "0", "per_pid", "per_program", "none"]
                    .contains(&t.to_ascii_lowercase().as_str()) => {}
            _ => {
                return Err(format!(
                    "{name}: Invalid value for cache_user_symbols: valid values are PER_PID, PER_PROGRAM, and NONE."
                ))
            }
        },
        "str_trunc_trailer" => {}
        k if k.starts_with("unstable_") && IGNORED.iter().any(|i| i.0 == k) => match value {
            Value::Number(_) => {}
            Value::Text(t)
                if ["enable", "warn", "error", "true", "false", "1", "0"]
                    .contains(&t.to_ascii_lowercase().as_str()) => {}
            _ => {
                return Err(format!(
                    "{name}: Invalid value for unstable config: valid values are enable, warn, and error."
                ))
            }
        },
        k if ENVIRONMENT_ONLY.contains(&k) => {
            return Err(format!("{name}: can only be set as an environment variable"))
        }
        _ => return Err(format!("{name}: not a known configuration option")),
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::parse;

    fn resolve_text(text: &str, env: &[(&str, &str)]) -> Result<Resolved, ConfigError> {
        let script = parse(text).expect("parses");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(&script.config, &|name| {
            env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn options_that_change_what_sdt_does() {
        let r = resolve_text(
            "config = { max_strlen = 128; BPFTRACE_MAX_MAP_KEYS = 10; print_maps_on_exit = false; missing_probes = \"warn\"; Max_Cat_Bytes = 1; stack_mode = build_id } BEGIN {}",
            &[],
        )
        .unwrap();
        assert_eq!(
            r.config,
            Config {
                max_strlen: 128,
                max_map_keys: 10,
                max_cat_bytes: 1,
                print_maps_on_exit: false,
                missing_probes: MissingProbes::Warn,
                stack_mode: crate::types::StackMode::BuildId,
            }
        );
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn the_environment_wins_and_old_names_are_read() {
        let r = resolve_text(
            "config = { max_strlen = 128 } BEGIN {}",
            &[
                ("BPFTRACE_MAX_STRLEN", "200"),
                ("BPFTRACE_MAP_KEYS_MAX", "7"),
            ],
        )
        .unwrap();
        assert_eq!(r.config.max_strlen, 200);
        assert_eq!(r.config.max_map_keys, 7);
        let r = resolve_text(
            "BEGIN {}",
            &[("BPFTRACE_STRLEN", "30"), ("BPFTRACE_MAX_STRLEN", "40")],
        )
        .unwrap();
        assert_eq!(r.config.max_strlen, 40, "the new name wins");
        let e = resolve_text("BEGIN {}", &[("BPFTRACE_PRINT_MAPS_ON_EXIT", "maybe")]).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Environment(m) if m.contains("BPFTRACE_PRINT_MAPS_ON_EXIT") && m.contains("bool")),
            "{e:?}"
        );
    }

    #[test]
    fn accepted_renamed_deprecated_and_unknown() {
        let r = resolve_text(
            "config = { stack_mode = raw; show_debug_info = 0; license = \"Dual BSD/GPL\"; strlen = 99; unstable_macro = 1 } BEGIN {}",
            &[],
        )
        .unwrap();
        assert_eq!(r.config.max_strlen, 99);
        let messages: Vec<&str> = r.warnings.iter().map(|w| w.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "strlen has been renamed, please use max_strlen",
                "unstable_macro is deprecated and has no effect"
            ]
        );
        let errors = |text: &str| match resolve_text(text, &[]) {
            Err(ConfigError::Script(d)) => d.into_iter().map(|d| d.message).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            errors("config = { bad_config = raw } BEGIN {}"),
            ["bad_config: not a known configuration option"]
        );
        assert!(errors("config = { license = \"Potato\" } BEGIN {}")[0]
            .starts_with("Invalid value for license. Found: Potato. Valid values: Dual MIT/GPL,"));
        assert_eq!(
            errors("config = { max_strlen = abc; missing_probes = 2; vmlinux = 1 } BEGIN {}"),
            [
                "max_strlen: expecting a number, got abc",
                "missing_probes: Invalid value for missing_probes: valid values are ignore, warn, and error.",
                "vmlinux: can only be set as an environment variable",
            ]
        );
    }
}
