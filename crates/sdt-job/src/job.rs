//! A compiled job, and its run: load, attach, run until it ends, report
//! what was lost, finish the output, give the exit status.

use std::io::{self, Write};

use sdt_bpf::Mechanism;
use sdt_lang::config::Config;
use sdt_lang::diag::Diagnostics;
use sdt_output::{Event, Losses, Sink};
use sdt_runtime::run::{RunOptions, Runner, Summary};
use sdt_runtime::scrape::MapReader;
use sdt_runtime::Hits;
use sdt_script::Compilation;

use crate::diagnostics::print_diagnostics;
use crate::hints::Said;
use crate::target::Traced;
use crate::{Failure, Request, Voice};

/// The environment variable bpftrace's test engine sets to learn when
/// the probes are attached.
pub const NOTIFY: &str = "__BPFTRACE_NOTIFY_PROBES_ATTACHED";

/// A script compiled for its target, ready to run.
pub struct Job {
    pub(crate) request: Request,
    /// The text compiled: the script, and what a front end added to it.
    pub(crate) text: String,
    pub(crate) compilation: Compilation,
    /// The fast path's socket, when probes take it.
    pub(crate) listener: Option<sdt_fastpath::Listener>,
    pub(crate) traced: Traced,
    pub(crate) config: Config,
    pub(crate) mechanism: Mechanism,
    /// What to say before the run of attach points that match nothing
    /// yet (see [`crate::hints`]).
    pub(crate) start: Vec<Said>,
}

/// Where a front end joins a run: each has a default that does nothing.
pub struct Hooks<'h> {
    /// Once every probe is attached, before a `-c` command is let go.
    pub started: Box<dyn FnOnce(&mut Started<'_, '_>) + 'h>,
    /// Asked between steps (every few milliseconds): stop now.
    pub stop_asked: Box<dyn Fn() -> bool + 'h>,
    /// The run has ended and its losses are reported: the last records
    /// of the output, before it is finished.
    pub ending: Box<Ending<'h>>,
}

/// The last records of a run's output, given how it ended.
pub type Ending<'h> = dyn FnOnce(&mut dyn Sink, &Outcome) + 'h;

impl Default for Hooks<'_> {
    fn default() -> Self {
        Hooks {
            started: Box::new(|_| {}),
            stop_asked: Box::new(|| false),
            ending: Box::new(|_, _| {}),
        }
    }
}

/// A run whose probes are all attached.
pub struct Started<'r, 'c> {
    runner: &'r mut Runner<'c>,
    /// `None` when BEGIN called `exit()`: nothing was attached.
    attached: Option<usize>,
    /// The cgroup traced, as its hierarchy names it.
    cgroup: Option<&'r str>,
}

impl Started<'_, '_> {
    /// The labels the run's metrics carry besides their program's name:
    /// `cgroup`, when only a cgroup's processes are traced.
    pub fn labels(&self) -> Vec<(String, String)> {
        self.cgroup
            .map(|name| ("cgroup".to_string(), name.to_string()))
            .into_iter()
            .collect()
    }

    /// Sites and tracepoints attached.
    pub fn probes(&self) -> usize {
        self.attached.unwrap_or(0)
    }

    /// BEGIN called `exit()`: nothing was attached, and the run ends.
    pub fn exited_in_begin(&self) -> bool {
        self.attached.is_none()
    }

    /// A handle that reads the maps from another thread while the run goes on.
    pub fn map_reader(&self) -> io::Result<MapReader> {
        self.runner.map_reader()
    }

    /// The kernel mechanism the probes are attached with.
    pub fn mechanism(&self) -> Mechanism {
        self.runner.mechanism()
    }

    /// The output, for what a front end shows once tracing has started
    /// (a report's header).
    pub fn sink(&mut self) -> &mut dyn Sink {
        self.runner.runtime().sink()
    }

    /// Pushes what the output holds to its writer.
    pub fn flush(&mut self) {
        self.runner.runtime().flush();
    }
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// What was lost, and `exit()`'s code.
    pub summary: Summary,
    /// `sdt trace`'s hits.
    pub hits: Hits,
    /// USDT sites attached, for `sdt trace`'s summary.
    pub sites: usize,
    /// The `-c` command's exit status, as a shell reports it.
    pub command_status: Option<u8>,
    /// The exit status of sdt: in sdt's voice, the `-c` command's, else
    /// `exit(N)`'s; in bpftrace's, `exit(N)`'s whatever the command's.
    pub status: u8,
    /// What was said of why nothing may fire, at the start and at the
    /// end (see `crate::hints`), in order.
    pub hints: Vec<sdt_output::Hint>,
}

impl Job {
    /// Makes `request` a job: prepares the script, starts the target and
    /// compiles; see [`Job::prepare`] for a front end that compiles text
    /// of its own.
    pub fn compile(request: Request) -> Result<Job, Failure> {
        Job::prepare(request)?.compile()
    }

    /// The compiled program.
    pub fn compilation(&self) -> &Compilation {
        &self.compilation
    }

    /// The request it was made from.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The process traced: the (first) `-p` process, or the `-c`
    /// command's, started and held; `None` when every process is.
    pub fn pid(&self) -> Option<i32> {
        self.traced.pids.first().copied()
    }

    /// The text compiled, for messages about places in it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Prints what compiling left to say, in the request's voice:
    /// attach points skipped (`missing_probes = warn`), what the script
    /// may not mean (placed in it), sites left out;
    /// with `verbose`, where types came from.
    pub fn print_warnings(&self, verbose: bool) {
        let request = &self.request;
        let compilation = &self.compilation;
        if request.warnings {
            let located: Vec<_> = (compilation.skipped.iter())
                .chain(&compilation.program.warnings)
                .cloned()
                .collect();
            if !located.is_empty() {
                let located = Diagnostics(located);
                print_diagnostics(&located, request.voice, &request.source.name, &self.text);
            }
        }
        for warning in &compilation.warnings {
            request.warn(warning);
        }
        if request.warnings {
            for said in &self.start {
                eprintln!("{}", said.line(request.voice));
            }
        }
        if verbose {
            for note in &compilation.program.type_notes {
                eprintln!("sdt: {note}");
            }
            for line in crate::inspect::paths(compilation) {
                eprintln!("sdt: {line}");
            }
        }
    }

    /// `--dump`: the sites and every generated program.
    pub fn dump(&self, out: &mut dyn Write) -> io::Result<()> {
        crate::inspect::dump(&self.compilation, out)
    }

    /// Loads the programs, attaches them, runs until the run ends, then
    /// END and the maps; reports what was lost; finishes `sink`.
    pub fn run<'s>(self, sink: Box<dyn Sink + 's>, hooks: Hooks<'_>) -> Result<Outcome, Failure> {
        let Job {
            request,
            text,
            compilation,
            listener,
            traced,
            config,
            mechanism,
            start,
        } = self;
        let options = RunOptions {
            mechanism,
            pids: traced.pids.clone(),
            cgroup: traced.cgroup.clone(),
            follow: request.follow,
            allow_unsafe: request.allow_unsafe,
            filter_tracepoints: !request.pids().is_empty() || request.scope_tracepoints,
            max_cat_bytes: config.max_cat_bytes,
        };
        let mut runner = Runner::load(&compilation, &options, sink).map_err(|e| {
            Failure::Other(crate::inspect::load_error(
                e,
                &compilation,
                &request.source.name,
                &text,
            ))
        })?;
        if let Some(listener) = listener {
            runner
                .serve_fast(listener, &traced.pids, request.follow)
                .map_err(Failure::other)?;
        }
        if request.voice == Voice::Sdt && request.hint_records {
            for said in &start {
                runner.runtime().sink().event(Event::Hint(&said.hint));
            }
        }
        if request.announce {
            announce(&mut runner, request.voice, compilation.probe_count);
        }
        let (launch, pids) = (traced.launch.clone(), traced.pids.clone());
        let started = hooks.started;
        let cgroup = traced.cgroup.as_ref().map(|c| c.name.clone());
        let notify = std::env::var_os(NOTIFY).is_some();
        let confirm = request.confirm_attached.then_some(compilation.probe_count);
        let print_maps = request.print_maps && config.print_maps_on_exit;
        let mut ended = traced
            .run(
                runner,
                print_maps,
                &*hooks.stop_asked,
                |runner, attached| {
                    started(&mut Started {
                        runner,
                        attached,
                        cgroup: cgroup.as_deref(),
                    });
                    if let Some(probes) = confirm {
                        let plural = if probes == 1 { "" } else { "s" };
                        eprintln!("Attached {probes} probe{plural}");
                    }
                    if notify {
                        // Before what BEGIN printed, which is still buffered,
                        // and on standard output whatever -o says, as
                        // bpftrace prints it once it has attached.
                        let mut stdout = io::stdout().lock();
                        let _ = writeln!(stdout, "{NOTIFY}");
                        let _ = stdout.flush();
                    }
                },
            )
            .map_err(Failure::other)?;
        let exit_code = ended.summary.exit_code.map_or(0, |c| c as u8);
        let mut outcome = Outcome {
            hits: ended.runtime.hits(),
            sites: ended.runtime.sites(),
            status: match (request.voice, ended.command_status) {
                (Voice::Sdt, Some(status)) => status,
                _ => exit_code,
            },
            command_status: ended.command_status,
            summary: ended.summary,
            hints: start.iter().map(|s| s.hint.clone()).collect(),
        };
        report_losses(&outcome, &request, ended.runtime.sink());
        let traced = match (&launch, request.command()) {
            (Some(launch), Some(command)) => crate::hints::Traced::Command(launch, command),
            _ => crate::hints::Traced::Processes(&pids),
        };
        let mut said = crate::hints::at_end(&outcome.summary, &traced, request.internal);
        // What the start said (a runtime built without probes) is not
        // said again.
        said.retain(|s| !start.iter().any(|t| t.hint.text == s.hint.text));
        tell(&said, &request, ended.runtime.sink());
        outcome.hints.extend(said.into_iter().map(|s| s.hint));
        (hooks.ending)(ended.runtime.sink(), &outcome);
        let sink = ended.runtime.sink();
        sink.finish();
        match sink.error() {
            Some(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(Failure::Other(
                anyhow::anyhow!("cannot write the output: {e}"),
            )),
            _ => Ok(outcome),
        }
    }
}

/// `Attaching N probes...`: on standard output in bpftrace's voice (as
/// the output's own record, so JSON gets its object), on standard error
/// in sdt's.
fn announce(runner: &mut Runner<'_>, voice: Voice, probes: usize) {
    match voice {
        Voice::Bpftrace => runner.runtime().sink().event(Event::Attached(probes)),
        Voice::Sdt => eprintln!(
            "Attaching {probes} probe{}...",
            if probes == 1 { "" } else { "s" }
        ),
    }
    runner.runtime().flush();
}

/// Reports what was lost, to the output (which may record it) and on
/// standard error: nothing is ever short without a word.
fn report_losses(outcome: &Outcome, request: &Request, sink: &mut dyn Sink) {
    let summary = &outcome.summary;
    sink.event(Event::Lost(&Losses {
        events: summary.lost_events,
        stacks: summary.lost_stacks,
        full_maps: summary.full_maps.clone(),
        hits: summary.lost_hits + summary.fast_lost,
        failed_reads: summary.failed_reads.clone(),
    }));
    if summary.lost_events > 0 {
        let advice = if request.suggest_buffer_size {
            format!(
                "; try --buffer-size {} or -o FILE",
                size_text(u64::from(request.ring_size) * 4)
            )
        } else {
            String::new()
        };
        eprintln!(
            "sdt: {} records lost because the ring buffer was full{advice}",
            summary.lost_events
        );
    }
    if outcome.hits.undecodable > 0 {
        eprintln!(
            "sdt: {} records could not be decoded and were left out",
            outcome.hits.undecodable
        );
    }
    if summary.lost_stacks > 0 {
        eprintln!("sdt: {} stacks could not be recorded", summary.lost_stacks);
    }
    for (map, n) in &summary.full_maps {
        eprintln!("sdt: {n} updates of {map} were dropped because it was full; raise max_map_keys (BPFTRACE_MAX_MAP_KEYS)");
    }
    if summary.lost_hits > 0 {
        eprintln!(
            "sdt: {} hits were dropped because the kernel had no memory for a thread's scratch space",
            summary.lost_hits
        );
    }
    if summary.fast_lost > 0 {
        eprintln!(
            "sdt: {} hits of the fast path were dropped because their thread's ring was full (the program never waits for sdt)",
            summary.fast_lost
        );
    }
    if summary.fast_failed > 0 {
        eprintln!(
            "sdt: {} hits of the fast path could not be replayed: the kernel refused to run their program",
            summary.fast_failed
        );
    }
    for read in &summary.failed_reads {
        eprintln!("sdt: {}", read.sentence());
    }
}

/// Says each of `said` on standard error in the request's voice (unless
/// warnings are off), and, in sdt's, to the output too (JSON writes it).
fn tell(said: &[Said], request: &Request, sink: &mut dyn Sink) {
    for said in said {
        if request.warnings {
            eprintln!("{}", said.line(request.voice));
        }
        if request.voice == Voice::Sdt && request.hint_records {
            sink.event(Event::Hint(&said.hint));
        }
    }
}

/// A size as `--buffer-size` takes it: `16M`, `1G`, `64K`.
pub fn size_text(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}G", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b => format!("{}K", b >> 10),
    }
}
