//! What is traced (`-p PID`, `-c CMD` or everything) and the loop that
//! runs a compilation until it ends, for every job.
//!
//! How a run ends: a stop signal, `exit()`, the end of the traced
//! process, or the caller's own reason, then END and the maps, then the
//! `-c` command's exit status. Starting and holding the command is
//! `sdt-proc`'s; reading which program the command runs
//! ([`sdt_proc::launch`]) gives the file that a probe without one means.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use sdt_proc::launch::Launch;
use sdt_proc::{HeldChild, Pidfd, RunningChild, Signals};
use sdt_trace::{Cgroup, Scope};

use sdt_runtime::run::{Runner, Summary};
use sdt_runtime::Runtime;

/// What can end a run before it starts, or break it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Process(#[from] sdt_proc::Error),
    #[error(transparent)]
    Trace(#[from] sdt_trace::Error),
    #[error("process {0} ended before sdt attached to it; nothing was traced")]
    EndedBeforeAttaching(i32),
}

/// Token of the signalfd in the wait set.
const SIGNAL: u64 = 1;
/// Token of the first traced process's pidfd; the others follow it.
const PROCESS_EXIT: u64 = 2;

/// How long a `-c` command that sdt asked to end (with SIGTERM) has from
/// that request until sdt kills it. bpftrace kills it at once once its
/// own output is done; half a second lets a server shut down cleanly.
const COMMAND_GRACE: Duration = Duration::from_millis(500);

/// The traced processes, if any, and the stop signals.
pub struct Traced {
    /// The `-p` processes, or the `-c` command's.
    pub pids: Vec<i32>,
    /// One for each of `pids` that has not ended yet.
    pidfds: Vec<Option<Pidfd>>,
    /// Only processes of this cgroup (and below) are traced.
    pub cgroup: Option<Cgroup>,
    child: Option<HeldChild>,
    /// What the `-c` command runs: the ELF program in the end (for a
    /// script, its interpreter), when it could be told, and the steps on
    /// the way.
    pub launch: Option<Launch>,
    /// Until the run stops; then a thread of its own waits on them.
    /// None inside a service, which handles the signals itself.
    signals: Option<Signals>,
    /// Inside a service: the probes are detached by a thread of this
    /// process rather than by another process.
    in_service: bool,
}

/// How a run ended.
pub struct Ended<'c> {
    pub summary: Summary,
    pub runtime: Runtime<'c>,
    /// The `-c` command's exit status, as a shell reports it.
    pub command_status: Option<u8>,
}

impl Traced {
    /// Blocks the stop signals (before any thread exists, so that every
    /// thread inherits the mask), starts the `-c` command held before it
    /// runs, and opens each traced process's pidfd, so that a process that
    /// exits while sdt starts up still counts and its PID cannot be taken
    /// over unseen. The run ends when every traced process has.
    ///
    /// The command's program is read as `execvp` and the kernel would run
    /// it ([`sdt_proc::launch`]): a script named by its path or found in
    /// `PATH` runs its `#!` interpreter, which is then the program.
    ///
    /// `in_service`: the run is one of a service's (`sdt serve`), which
    /// takes the stop signals itself and outlives the run.
    pub fn start(
        pids: &[i32],
        command: Option<&str>,
        cgroup: Option<Cgroup>,
        in_service: bool,
    ) -> Result<Traced, Error> {
        let signals = if in_service {
            None
        } else {
            Some(Signals::block()?)
        };
        let (child, launch) = match command {
            Some(command) => {
                let launch = sdt_proc::launch::read(command)?;
                (Some(HeldChild::spawn_command(command)?), Some(launch))
            }
            None => (None, None),
        };
        let mut pids = pids.to_vec();
        pids.extend(child.as_ref().map(HeldChild::pid));
        let pidfds = pids
            .iter()
            .map(|&pid| Pidfd::open(pid).map(Some))
            .collect::<Result<_, _>>()?;
        Ok(Traced {
            pids,
            pidfds,
            cgroup,
            child,
            launch,
            signals,
            in_service,
        })
    }

    /// Where probes are looked for: the traced process, and the `-c`
    /// command's program for probes that name no file; `allow_unsafe`
    /// lets uprobes go where sdt cannot check the code (`--unsafe`).
    pub fn scope(&self, allow_unsafe: bool) -> Scope {
        Scope {
            pids: self.pids.clone(),
            default_target: self.launch.as_ref().and_then(|l| l.program.clone()),
            allow_unsafe,
            debug_dirs: Vec::new(),
        }
    }

    /// What is traced, for the words of what is said about it.
    /// `command` is the `-c` command as given.
    pub(crate) fn view<'a>(&'a self, command: Option<&'a str>) -> crate::hints::Traced<'a> {
        match (&self.launch, command) {
            (Some(launch), Some(command)) => crate::hints::Traced::Command(launch, command),
            _ => crate::hints::Traced::Processes(&self.pids),
        }
    }

    /// The `-c` command's PID, or 0.
    pub fn cpid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.pid() as u32)
    }

    /// Fails if a `-p` process has ended: its PID may already be another
    /// program's.
    fn check_alive(&self) -> Result<(), Error> {
        if self.child.is_some() {
            return Ok(());
        }
        let ended = self
            .pidfds
            .iter()
            .zip(&self.pids)
            .find(|(fd, _)| fd.as_ref().is_some_and(Pidfd::ended));
        match ended {
            Some((_, &pid)) => Err(Error::EndedBeforeAttaching(pid)),
            None => Ok(()),
        }
    }

    /// Forgets the processes whose pidfds are ready: they have ended (and
    /// closing the pidfd takes it out of the wait set). Returns whether
    /// every traced process has.
    fn ended(&mut self, ready: &[u64]) -> bool {
        for token in ready.iter().filter(|&&t| t >= PROCESS_EXIT) {
            if let Some(fd) = self.pidfds.get_mut((token - PROCESS_EXIT) as usize) {
                *fd = None;
            }
        }
        !self.pidfds.is_empty() && self.pidfds.iter().all(Option::is_none)
    }

    /// Runs BEGIN, attaches, lets the command go, then handles records
    /// until a stop signal, `exit()`, the end of the traced process, or
    /// `stop_asked()` (output that can no longer be written), or at once
    /// when the script has only BEGIN and END and no `-c` command; then
    /// detaches, runs END and prints the maps. `started` is called once
    /// everything is attached.
    ///
    /// A `-c` command that still runs when the run stops for another
    /// reason is sent SIGTERM at once, as bpftrace does, and SIGKILL once
    /// END and the maps are printed if it has not ended within
    /// `COMMAND_GRACE`. From the stop on, another stop signal ends sdt at
    /// once (killing the command), whatever it is doing. `started` is
    /// told how many probes were attached, `None` when BEGIN called
    /// `exit()`, which attaches nothing.
    pub fn run<'c>(
        mut self,
        mut runner: Runner<'c>,
        print_maps: bool,
        stop_asked: &dyn Fn() -> bool,
        started: impl FnOnce(&mut Runner<'c>, Option<usize>),
    ) -> Result<Ended<'c>, Error> {
        // System-wide, what every process maps is recorded from before
        // the probes are attached, for the addresses of those that end.
        if self.pids.is_empty() && !runner.track_everything() {
            eprintln!(
                "sdt: warning: the kernel does not report what processes map; addresses of processes that have ended are shown as numbers"
            );
        }
        let exited_in_begin = runner.begin()?;
        let mut attached = 0;
        if !exited_in_begin {
            self.check_alive()?;
            attached = runner.attach()?;
            // Attached by PID: if the process ended meanwhile, a newcomer
            // may have been attached to. Detach at once and show nothing.
            self.check_alive()?;
        }
        if let Some(signals) = &self.signals {
            runner.watch(signals.as_fd(), SIGNAL)?;
        }
        for (i, fd) in self.pidfds.iter().enumerate() {
            if let Some(fd) = fd {
                runner.watch(fd.as_fd(), PROCESS_EXIT + i as u64)?;
            }
        }
        // Mappings are recorded before the command runs, so that its
        // addresses mean something after it ends; without the kernel's
        // records, /proc is read at each step instead.
        let mut poll_mappings = Vec::new();
        for &pid in &self.pids {
            if !runner.track(pid as u32) {
                poll_mappings.push(pid);
            }
        }
        let pids: Vec<u32> = self.pids.iter().map(|&pid| pid as u32).collect();
        if !exited_in_begin && !runner.attach_later_objects(&pids, self.child.is_none()) {
            eprintln!(
                "sdt: warning: the kernel does not report what the traced processes map; probes in objects they map from now on are not attached"
            );
        }
        started(&mut runner, (!exited_in_begin).then_some(attached));
        // What BEGIN printed comes before anything the command prints.
        runner.runtime().flush();
        let mut running = self.child.take().map(HeldChild::release);
        let mut stop = exited_in_begin || (running.is_none() && runner.only_begin_and_end());
        let mut process_ended = false;
        while !stop {
            let step = runner.step()?;
            for notice in &step.notices {
                eprintln!("sdt: {notice}");
            }
            for &pid in &poll_mappings {
                runner.runtime().refresh_mappings(pid as u32);
            }
            stop = step.exit || runner.runtime().error().is_some() || stop_asked();
            if step.ready.contains(&SIGNAL) {
                self.signals.as_ref().and_then(Signals::take);
                stop = true;
            }
            if self.ended(&step.ready) {
                process_ended = true;
                stop = true;
            }
        }
        let stopped_at = Instant::now();
        if let Some(child) = running.as_mut().filter(|_| !process_ended) {
            child.signal(Signal::TERM);
        }
        self.end_at_next_signal(running.as_ref());
        let finished = runner.finish(print_maps)?;
        let (summary, mut runtime) = (finished.summary, finished.runtime);
        // The output is complete: show it now, then let another process
        // wait for the kernel to detach the stopped probes.
        runtime.flush();
        if self.in_service {
            let attached = finished.attached;
            std::thread::spawn(move || drop(attached));
        } else {
            release(finished.attached);
        }
        let command_status = match running.take() {
            Some(child) => Some(end_command(child, stopped_at + COMMAND_GRACE)?),
            None => None,
        };
        Ok(Ended {
            summary,
            runtime,
            command_status,
        })
    }

    /// From now on, a stop signal ends sdt at once: the `-c` command is
    /// killed (through a pidfd, so never a later process with its PID) and
    /// sdt exits as a process killed by that signal would report it.
    fn end_at_next_signal(&mut self, command: Option<&RunningChild>) {
        let Some(signals) = self.signals.take() else {
            return;
        };
        let command = command.and_then(|c| Pidfd::open(c.pid()).ok());
        signals.on_next(move |signal| {
            if let Some(command) = &command {
                command.kill(Signal::KILL);
            }
            std::process::exit(128 + signal);
        });
    }
}

/// Waits for the `-c` command until `deadline`, kills it if it still
/// runs then, and returns its exit status as a shell reports it.
fn end_command(mut child: RunningChild, deadline: Instant) -> Result<u8, Error> {
    while child.try_wait().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if child.try_wait().is_none() {
        child.signal(Signal::KILL);
    }
    Ok(child.wait()?)
}

/// Closes what holds probes attached, in a process of its own where it
/// can (see `sdt_proc::release_elsewhere`), else here.
fn release(fds: Vec<std::os::fd::OwnedFd>) {
    if fds.is_empty() {
        return;
    }
    let program = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
    if let Err(fds) = sdt_proc::release_elsewhere(&program, fds) {
        close_all(fds);
    }
}

/// Closes descriptors, several at a time (each close may wait for the
/// kernel).
pub fn close_all(fds: Vec<std::os::fd::OwnedFd>) {
    const THREADS: usize = 8;
    let per_thread = fds.len().div_ceil(THREADS).max(1);
    let mut fds = fds;
    std::thread::scope(|scope| {
        while !fds.is_empty() {
            let batch: Vec<_> = fds.drain(..per_thread.min(fds.len())).collect();
            scope.spawn(move || drop(batch));
        }
    });
}

impl Drop for Traced {
    fn drop(&mut self) {
        // A command that never ran (tracing failed to start) is killed.
        if let Some(child) = self.child.take() {
            child.abandon();
        }
    }
}
