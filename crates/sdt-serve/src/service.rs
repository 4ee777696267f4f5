//! `sdt serve DIR`: every program of a directory, running at once, their
//! metrics on one endpoint, for as long as the service runs.
//!
//! Each `*.bt` file (with its `*.conf`) runs in a thread of its own, with
//! its own maps, ring buffer and probes, attached system-wide by path: a
//! target started later, or restarted, is traced as it runs, without sdt
//! doing anything. A program that cannot be read, compiled, loaded or
//! attached is reported on `/metrics` as `sdt_up{program="NAME"} 0`, with
//! the reason in one log line on standard error, and the others run on.
//!
//! **Reloading.** On [`Service::reload`] (SIGHUP, or a change to the
//! directory: see [`crate::watch`]), a program whose script or config
//! changed is stopped and started again (its counters start over), a new
//! file is started, a removed one stopped; every other program is left
//! exactly as it is, so its counters go on. SIGHUP also tries again the
//! programs that are down; a change to the directory tries again only
//! those whose files changed, so that a node without PostgreSQL does not
//! log a failed start at every update of the programs.
//!
//! **Safety.** Served programs never run commands: `system()` is refused
//! when they are compiled, whatever the command line says. Nothing is
//! ever loaded through the endpoint.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use rustix::event::{PollFd, PollFlags};
use sdt_job::{Failure, Hooks, Job, Request, Signals, Source};

use sdt_otlp::{SpanRule, SpanSender, SpanSink};
use sdt_output::Sink;

use crate::exporter::{Exporter, Running};
use crate::naming::Naming;
use crate::program::ProgramFiles;
use crate::spans::compile_with_spans;
use crate::watch::{Fingerprint, Watch};

/// How served programs are compiled and named.
#[derive(Clone)]
pub struct ServiceOptions {
    /// Prefix of metric names, unless a program gives its own.
    pub prefix: String,
    /// Bytes of each program's ring buffer.
    pub ring_size: u32,
    /// How programs attach ([`sdt_job::mechanism`]).
    pub mechanism: sdt_job::Mechanism,
    /// Where spans go, when they are pushed: the programs' span pragmas
    /// are compiled in only then.
    pub spans: Option<SpanSender>,
}

/// The programs of a directory, each in its thread.
pub struct Service {
    dir: PathBuf,
    options: ServiceOptions,
    exporter: Arc<Exporter>,
    running: BTreeMap<String, Slot>,
}

/// One program's thread, and what it was started from.
struct Slot {
    files: ProgramFiles,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Service {
    /// No program runs until the first [`reload`](Self::reload).
    pub fn new(dir: &Path, options: ServiceOptions, exporter: Arc<Exporter>) -> Service {
        Service {
            dir: dir.to_path_buf(),
            options,
            exporter,
            running: BTreeMap::new(),
        }
    }

    /// Brings the running programs in line with the directory; see the
    /// module doc. `retry` starts again the programs that are down though
    /// their files did not change. Fails only when the directory cannot
    /// be read.
    pub fn reload(&mut self, retry: bool) -> io::Result<()> {
        let mut found = BTreeMap::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "bt") && path.is_file() {
                let files = match ProgramFiles::read(&path) {
                    Ok(files) => files,
                    Err(e) => {
                        let name = ProgramFiles::new(&path, String::new()).name;
                        log(&name, &format!("cannot read {}: {e}", path.display()));
                        self.exporter.down(&name);
                        continue;
                    }
                };
                found.insert(files.name.clone(), files);
            }
        }
        let gone: Vec<String> = self
            .running
            .keys()
            .filter(|name| !found.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            self.stop(&name);
            self.exporter.remove(&name);
            log(&name, "removed");
        }
        for (name, files) in found {
            if let Some(slot) = self.running.get(&name) {
                if slot.files == files && !(retry && slot.thread.is_finished()) {
                    continue;
                }
                self.stop(&name);
            }
            self.start(files);
        }
        Ok(())
    }

    /// Stops every program and waits for each to end.
    pub fn stop_all(mut self) {
        let names: Vec<String> = self.running.keys().cloned().collect();
        for slot in self.running.values() {
            slot.stop.store(true, Ordering::Relaxed);
        }
        for name in names {
            self.stop(&name);
        }
    }

    /// Runs until SIGINT or SIGTERM, reloading on SIGHUP and, with
    /// `watch`, when the directory changes; then stops every program.
    /// `signals` must have been blocked before any thread was started, so
    /// that every thread leaves them to it.
    pub fn run_until_stopped(mut self, signals: &Signals, watch: bool) -> io::Result<()> {
        let seen = Fingerprint::of(&self.dir)?;
        self.reload(true)?;
        let mut watch = watch.then(|| Watch::new(&self.dir, seen));
        loop {
            let mut fds = vec![PollFd::new(signals, PollFlags::IN)];
            let events = watch.as_ref().and_then(Watch::fd);
            fds.extend(events.map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN)));
            let timeout = watch.as_ref().map(|w| w.timeout(Instant::now()));
            let timeout = timeout.map(|t| rustix::event::Timespec::try_from(t).unwrap_or_default());
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            let has_events = fds.get(1).is_some_and(|fd| !fd.revents().is_empty());
            drop(fds);
            match signals.take() {
                Some(SIGHUP) => {
                    eprintln!("sdt serve: SIGHUP: reloading {}", self.dir.display());
                    self.reload_or_log(true);
                }
                Some(_) => break,
                None => {}
            }
            if let Some(watch) = &mut watch {
                if has_events {
                    watch.events();
                }
                if watch.due(Instant::now()) {
                    eprintln!("sdt serve: {} changed: reloading", self.dir.display());
                    self.reload_or_log(false);
                }
            }
        }
        self.stop_all();
        Ok(())
    }

    fn reload_or_log(&mut self, retry: bool) {
        if let Err(e) = self.reload(retry) {
            eprintln!("sdt serve: cannot read {}: {e}", self.dir.display());
        }
    }

    fn stop(&mut self, name: &str) {
        if let Some(slot) = self.running.remove(name) {
            slot.stop.store(true, Ordering::Relaxed);
            let _ = slot.thread.join();
        }
    }

    fn start(&mut self, files: ProgramFiles) {
        let stop = Arc::new(AtomicBool::new(false));
        let name = files.name.clone();
        let (exporter, options) = (Arc::clone(&self.exporter), self.options.clone());
        let (thread_files, thread_stop) = (files.clone(), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name(format!("sdt-{name}"))
            .spawn(move || serve_program(&thread_files, &options, &exporter, &thread_stop));
        match thread {
            Ok(thread) => {
                self.running.insert(
                    name,
                    Slot {
                        files,
                        stop,
                        thread,
                    },
                );
            }
            Err(e) => {
                log(&name, &format!("cannot start a thread: {e}"));
                self.exporter.down(&name);
            }
        }
    }
}

/// The signal that reloads.
const SIGHUP: i32 = 1;

/// One log line about a program.
fn log(program: &str, message: &str) {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "sdt serve: {program}: {message}");
}

/// Compiles, loads, attaches and runs one program until `stop`; reports
/// it up once attached, or down with the reason.
fn serve_program(
    files: &ProgramFiles,
    options: &ServiceOptions,
    exporter: &Exporter,
    stop: &AtomicBool,
) {
    let name = &files.name;
    if let Err(message) = run(files, options, exporter, stop) {
        log(name, &message);
        exporter.down(name);
    }
}

/// Runs one program until `stop` or `exit()`; an error in one line.
fn run(
    files: &ProgramFiles,
    options: &ServiceOptions,
    exporter: &Exporter,
    stop: &AtomicBool,
) -> Result<(), String> {
    let name = &files.name;
    let started = Instant::now();
    let (job, naming, rules) = compile(files, options)?;
    let sink = sdt_output::Format::TEXT.sink(Box::new(io::LineWriter::new(io::stdout())));
    let sink: Box<dyn Sink> = match &options.spans {
        Some(spans) => Box::new(SpanSink::new(sink, rules, spans.clone())),
        None => sink,
    };
    let probe_count = job.compilation().probe_count;
    let hooks = Hooks {
        started: Box::new(|run| {
            let probes = if run.exited_in_begin() {
                0
            } else {
                probe_count
            };
            match run.map_reader() {
                Ok(reader) => {
                    let load = started.elapsed();
                    exporter.up(
                        name,
                        Running {
                            reader,
                            labels: run.labels(),
                            naming,
                            probes,
                            load,
                        },
                    );
                    log(
                        name,
                        &format!(
                            "up: {probes} probe{} attached in {:.0} ms",
                            if probes == 1 { "" } else { "s" },
                            load.as_secs_f64() * 1e3
                        ),
                    );
                }
                Err(e) => log(name, &format!("cannot read the maps: {e}")),
            }
        }),
        stop_asked: Box::new(|| stop.load(Ordering::Relaxed)),
        ..Hooks::default()
    };
    let outcome = job.run(sink, hooks).map_err(|f| f.one_line())?;
    if outcome.summary.exited {
        log(
            name,
            "the program called exit(); it is served no more until it changes or sdt reloads",
        );
        exporter.down(name);
    }
    Ok(())
}

/// The program compiled (with its span blocks when spans are pushed),
/// its maps named, and the rules that find its spans; errors in one line
/// each, pointing at the file, line and column.
fn compile(
    files: &ProgramFiles,
    options: &ServiceOptions,
) -> Result<(Job, Naming, Vec<SpanRule>), String> {
    let mut config = files.config().map_err(|e| e.one_line())?;
    let (script_name, source) = (&files.script.0, &files.script.1);
    let cgroup = config.cgroup.as_ref().map(|c| PathBuf::from(&c.value));
    let request = Request {
        cgroup,
        ring_size: options.ring_size,
        mechanism: Some(options.mechanism),
        // Served programs never run commands.
        allow_unsafe: false,
        // Told below, in the service's log.
        warnings: false,
        print_maps: false,
        in_service: true,
        ..Request::new(Source::named(script_name, source.clone()))
    };
    let prepared = Job::prepare(request).map_err(|f| served_error(&f))?;
    if options.spans.is_none() {
        config.spans.clear();
    }
    let compile = |text: &str| prepared.compile_text(text);
    let (text, compilation, rules) = compile_with_spans(source, &config, &compile)
        .map_err(|(text, diagnostics)| served_error(&prepared.failure(diagnostics, text)))?;
    for w in &compilation.program.warnings {
        let (line, column) = w.line_column(&text);
        log(
            &files.name,
            &format!("warning: line {line}, column {column}: {}", w.message),
        );
    }
    for warning in &compilation.warnings {
        log(&files.name, &format!("warning: {warning}"));
    }
    let naming = files
        .naming(
            &config,
            &compilation.script,
            &compilation.program.maps,
            &options.prefix,
        )
        .map_err(|e| e.one_line())?;
    Ok((prepared.into_job(text, compilation), naming, rules))
}

/// A failure in one line; `system()` is refused for a reason of the
/// service's own, which it says.
fn served_error(failure: &Failure) -> String {
    let line = failure.one_line();
    if line.contains("system()") {
        format!("{line} (served programs never run commands)")
    } else {
        line
    }
}
