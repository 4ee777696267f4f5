//! From a request to what compiling needs: the script parsed, its
//! includes read and its probes filtered, its configuration resolved,
//! its named parameters bound, and its target started.

use sdt_bpf::Mechanism;
use sdt_lang::ast::Script;
use sdt_lang::check::{CheckOptions, MAX_STRLEN};
use sdt_lang::config::{Config, ConfigError};
use sdt_lang::diag::Diagnostics;
use sdt_lang::getopt;
use sdt_script::Compilation;

use crate::diagnostics::print_diagnostics;
use crate::target::Traced;
use crate::{include, Failure, Job, Request, Source};

/// A request whose script is ready to compile and whose target runs.
pub struct Prepared {
    request: Request,
    script: Script,
    config: Config,
    traced: Traced,
    mechanism: Mechanism,
    options: sdt_script::Options,
    /// The fast path's socket, held while the run may serve it.
    listener: Option<sdt_fastpath::Listener>,
}

impl Job {
    /// Prepares `request` without compiling it, for a front end that
    /// compiles text of its own made from the script (the fleet adds the
    /// blocks of its span pragmas): see [`Prepared::compile_text`].
    ///
    /// In order: the script is parsed, its includes read and its probes
    /// filtered, its configuration resolved (the script's `config`, then
    /// `BPFTRACE_*` unless the program is sdt's own), its named parameters
    /// checked; then the target starts (a `-c` command held before its
    /// first instruction, killed if the job never runs).
    pub fn prepare(request: Request) -> Result<Prepared, Failure> {
        let source = &request.source;
        let script = sdt_lang::parser::parse(&source.text)
            .map_err(|d| script_failure(Diagnostics::from(d), source))?;
        check_includes(&request)?;
        let script = reprepare(script, &request).map_err(|d| script_failure(d, source))?;
        let config = resolve_config(&script, &request)?;
        let declared = getopt::declarations(&source.text);
        getopt::bind(&declared, &request.named).map_err(Failure::Parameters)?;
        let cgroup = request
            .cgroup
            .as_deref()
            .map(sdt_trace::Cgroup::find)
            .transpose()
            .map_err(Failure::other)?;
        let traced = Traced::start(
            request.pids(),
            request.command(),
            cgroup,
            request.in_service,
        )
        .map_err(Failure::other)?;
        let mechanism = if request.compile_only {
            request.mechanism.unwrap_or(Mechanism::UprobeMulti)
        } else {
            sdt_trace::mechanism(request.mechanism).map_err(Failure::other)?
        };
        let mut options = compile_options(&request, &config, &traced, mechanism);
        let fastpath = fastpath_wanted() && fastpath_reachable(&traced);
        // Another sdt serving the fast path has the socket: this run
        // takes every hit through the kernel.
        let listener = (fastpath && !request.compile_only)
            .then(sdt_fastpath::Listener::bind)
            .and_then(Result::ok);
        options.fastpath = fastpath && (request.compile_only || listener.is_some());
        Ok(Prepared {
            request,
            script,
            config,
            traced,
            mechanism,
            options,
            listener,
        })
    }
}

impl Prepared {
    /// The script as the request gave it.
    pub fn source(&self) -> &Source {
        &self.request.source
    }

    /// Compiles the script.
    pub fn compile(self) -> Result<Job, Failure> {
        let source = &self.request.source;
        let text = source.text.clone();
        match self.compile_script(&text, self.script.clone()) {
            Ok(compilation) => {
                let text = source.text.clone();
                Ok(self.into_job(text, compilation))
            }
            Err(diagnostics) => Err(script_failure(diagnostics, source)),
        }
    }

    /// Compiles `text`, made from the script by the front end, prepared
    /// as the script was (its includes read, its probes filtered).
    pub fn compile_text(&self, text: &str) -> Result<Compilation, Diagnostics> {
        let parsed = sdt_lang::parser::parse(text).map_err(Diagnostics::from)?;
        let script = reprepare(parsed, &self.request)?;
        self.compile_script(text, script)
    }

    /// Compiles `script`, whose text is `text`; again with every `printf`
    /// stamped with its hit's time when probes take the fast path, so
    /// that their output sorts among the kernel's (see `sdt_runtime`'s
    /// `fast` module).
    fn compile_script(&self, text: &str, script: Script) -> Result<Compilation, Diagnostics> {
        let name = &self.request.source.name;
        let compilation = sdt_script::compile_parsed(name, text, script.clone(), &self.options)?;
        if compilation.fast.is_empty() || self.options.codegen.stamp_printf {
            return Ok(compilation);
        }
        let mut stamped = self.options.clone();
        stamped.codegen.stamp_printf = true;
        sdt_script::compile_parsed(name, text, script, &stamped)
    }

    /// The job of `compilation`, compiled from `text` by
    /// [`compile_text`](Self::compile_text).
    pub fn into_job(self, text: String, compilation: Compilation) -> Job {
        let traced = self.traced.view(self.request.command());
        let start = crate::hints::at_start(&compilation, &traced, self.request.internal);
        let listener = self.listener.filter(|_| !compilation.fast.is_empty());
        Job {
            request: self.request,
            text,
            listener,
            compilation,
            traced: self.traced,
            config: self.config,
            mechanism: self.mechanism,
            start,
        }
    }

    /// The failure of errors in `text`, which the front end compiled.
    pub fn failure(&self, diagnostics: Diagnostics, text: String) -> Failure {
        Failure::Script {
            diagnostics,
            name: self.request.source.name.clone(),
            text,
        }
    }
}

fn script_failure(diagnostics: Diagnostics, source: &Source) -> Failure {
    Failure::Script {
        diagnostics,
        name: source.name.clone(),
        text: source.text.clone(),
    }
}

/// An `--include` file that does not exist is a mistake on the command
/// line, not in the script.
fn check_includes(request: &Request) -> Result<(), Failure> {
    let base = request.source.dir.as_deref();
    for file in &request.includes {
        if include::locate(file, &request.include_dirs, base).is_none() {
            return Err(Failure::Other(anyhow::anyhow!(
                "--include {}: file not found",
                file.display()
            )));
        }
    }
    Ok(())
}

/// Reads the includes into `script` and applies the probe filter.
fn reprepare(mut script: Script, request: &Request) -> Result<Script, Diagnostics> {
    let base = request.source.dir.as_deref();
    include::read(&mut script, &request.includes, &request.include_dirs, base)?;
    if let Some(filter) = &request.probe_filter {
        // Checked when the request was made; a bad one filters nothing.
        if let Ok(regex) = regex::Regex::new(filter) {
            filter_probes(&mut script, &regex);
        }
    }
    Ok(script)
}

/// Removes the attach points `--probe-filter` does not match, and the
/// probes left with none; BEGIN and END stay.
fn filter_probes(script: &mut Script, regex: &regex::Regex) {
    for probe in &mut script.probes {
        probe.attach_points.retain(|ap| {
            let kind = ap.fields[0].to_ascii_lowercase();
            (ap.fields.len() == 1 && (kind == "begin" || kind == "end")) || regex.is_match(&ap.text)
        });
    }
    script.probes.retain(|p| !p.attach_points.is_empty());
}

/// The script's configuration, then the environment's (unless the
/// program is sdt's own); its warnings are printed.
fn resolve_config(script: &Script, request: &Request) -> Result<Config, Failure> {
    let from_environment = |variable: &str| std::env::var(variable).ok();
    let nothing = |_: &str| None;
    let env: &dyn Fn(&str) -> Option<String> = if request.internal {
        &nothing
    } else {
        &from_environment
    };
    let source = &request.source;
    let resolved = match sdt_lang::config::resolve(&script.config, env) {
        Ok(resolved) => resolved,
        Err(ConfigError::Script(errors)) => {
            return Err(script_failure(Diagnostics(errors), source))
        }
        Err(ConfigError::Environment(why)) => return Err(Failure::Other(anyhow::anyhow!("{why}"))),
    };
    if request.warnings && !resolved.warnings.is_empty() {
        let warnings = Diagnostics(resolved.warnings);
        print_diagnostics(&warnings, request.voice, &source.name, &source.text);
    }
    Ok(resolved.config)
}

/// What the compiler is told.
fn compile_options(
    request: &Request,
    config: &Config,
    traced: &Traced,
    mechanism: Mechanism,
) -> sdt_script::Options {
    let map_entries = request
        .map_entries
        .unwrap_or_else(|| u32::try_from(config.max_map_keys.max(1)).unwrap_or(u32::MAX));
    sdt_script::Options {
        check: CheckOptions {
            params: request.params.clone(),
            strlen: request.strlen.unwrap_or_else(|| strlen(request, config)),
            allow_unsafe: request.allow_unsafe,
            named_params: request.named.clone(),
            internal: request.internal,
            stack_mode: config.stack_mode,
        },
        scope: sdt_trace::Scope {
            debug_dirs: request.debug_dirs.clone(),
            ..traced.scope(request.allow_unsafe)
        },
        mechanism,
        missing_probes: config.missing_probes,
        codegen: sdt_codegen::Options {
            wake_at: request.ring_size / 8,
            start_ns: monotonic_ns(),
            wall_offset_ns: wall_offset_ns(),
            cpid: traced.cpid(),
            map_entries,
            ring_size: request.ring_size,
            stamp_printf: request.stamp_printf,
            machine: if faulting_reads_wanted() {
                sdt_codegen::Machine::probed()
            } else {
                sdt_codegen::Machine::current()
            },
            // Set from `counted` by the compiler.
            hit_counters: 0,
            // Without processes named, nothing records their mappings:
            // their stacks are recorded by build ID and file offset.
            build_id_stacks: traced.pids.is_empty(),
        },
        counted: counted_probes(),
        // Decided by `Job::prepare`, which binds the socket.
        fastpath: false,
    }
}

/// The environment variable that, set to `0`, keeps every hit on the
/// kernel's path: probes of the `sdt` crate built with its `fastpath`
/// feature then trap into the kernel as every other probe does.
pub const FASTPATH_VARIABLE: &str = "SDT_FASTPATH";

fn fastpath_wanted() -> bool {
    std::env::var_os(FASTPATH_VARIABLE).is_none_or(|v| v != "0")
}

/// Whether every process the run rings can reach sdt's socket: the fast
/// path is taken only for named processes (`-p`, `-c`) in sdt's network
/// namespace, whose abstract sockets they share. A process that rings
/// and cannot register would lose its hits, since the probe's site has
/// no uprobe of sdt's: so a run over every process, or a cgroup's (a
/// container's, with a network of its own), keeps the kernel's path.
fn fastpath_reachable(traced: &Traced) -> bool {
    use std::os::unix::fs::MetadataExt;
    let net = |pid: &str| std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| m.ino());
    let Ok(own) = net("self") else {
        return false;
    };
    !traced.pids.is_empty()
        && traced.cgroup.is_none()
        && traced
            .pids
            .iter()
            .all(|pid| net(&pid.to_string()).is_ok_and(|ino| ino == own))
}

/// The probes whose hits tell whether a runtime's switch was on, counted
/// for the report at the end of the run (see `crate::hints`).
fn counted_probes() -> Vec<(String, String)> {
    sdt_languages::switch_probes()
        .into_iter()
        .map(|(provider, name)| (provider.to_string(), name.to_string()))
        .collect()
}

/// The environment variable that, set to `0`, keeps every program from
/// faulting the traced process's pages in: strings on pages it has not
/// touched then fail to read (and are counted), as in bpftrace, but the
/// traced threads never wait for a page on sdt's account.
pub const FAULTING_READS_VARIABLE: &str = "SDT_FAULTING_READS";

fn faulting_reads_wanted() -> bool {
    std::env::var_os(FAULTING_READS_VARIABLE).is_none_or(|v| v != "0")
}

/// `max_strlen`, kept within what sdt can hold, with a warning when it
/// is more.
fn strlen(request: &Request, config: &Config) -> u32 {
    let wanted = config.max_strlen;
    if wanted > u64::from(MAX_STRLEN) {
        request.warn(&format!(
            "max_strlen {wanted} is more than sdt's {MAX_STRLEN}: strings are cut at {MAX_STRLEN} bytes"
        ));
    }
    wanted.clamp(1, u64::from(MAX_STRLEN)) as u32
}

/// `CLOCK_REALTIME - CLOCK_MONOTONIC`, wrapping.
fn wall_offset_ns() -> u64 {
    let wall = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    let wall = (wall.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(wall.tv_nsec as u64);
    wall.wrapping_sub(monotonic_ns())
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}
