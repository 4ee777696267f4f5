//! What is traced (`-p PID`, `-c CMD` or everything) and the loop that
//! runs until it ends: shared by `sdt run` and `sdt trace`.

use std::os::fd::AsFd;
use std::path::PathBuf;

use anyhow::Context;
use sdt_proc::{HeldChild, Pidfd, Signals};
use sdt_script::run::{Runner, Summary};
use sdt_script::runtime::Runtime;

/// Token of the signalfd in the wait set.
const SIGNAL: u64 = 1;
/// Token of the traced process's pidfd.
const PROCESS_EXIT: u64 = 2;

/// The traced process, if there is one, and the stop signals.
pub struct Traced {
    pub pid: Option<i32>,
    pidfd: Option<Pidfd>,
    child: Option<HeldChild>,
    /// The `-c` command's executable.
    pub program: Option<PathBuf>,
    signals: Signals,
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
    /// runs, and opens the traced process's pidfd, so that a process that
    /// exits while sdt starts up still ends the run and its PID cannot be
    /// taken over unseen.
    pub fn start(pid: Option<i32>, command: Option<&str>) -> anyhow::Result<Traced> {
        let signals = Signals::block()?;
        let (child, program) = match command {
            Some(command) => {
                let argv = shlex::split(command).unwrap_or_default();
                let program = sdt_elf::resolve(argv.first().map_or("", String::as_str))
                    .map_err(anyhow::Error::from)?;
                (Some(HeldChild::spawn_command(command)?), Some(program))
            }
            None => (None, None),
        };
        let pid = pid.or(child.as_ref().map(HeldChild::pid));
        let pidfd = pid.map(Pidfd::open).transpose()?;
        Ok(Traced {
            pid,
            pidfd,
            child,
            program,
            signals,
        })
    }

    /// The `-c` command's PID, or 0.
    pub fn cpid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.pid() as u32)
    }

    /// Fails if the `-p` process has ended: its PID may already be
    /// another program's.
    fn check_alive(&self) -> anyhow::Result<()> {
        if self.child.is_none() && self.pidfd.as_ref().is_some_and(Pidfd::ended) {
            anyhow::bail!(
                "process {} ended before sdt attached to it; nothing was traced",
                self.pid.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// Runs BEGIN, attaches, lets the command go, then handles records
    /// until a stop signal, `exit()`, the end of the traced process, or
    /// `stop_asked()` (output that can no longer be written); then
    /// detaches, runs END and prints the maps. `started` is called once
    /// everything is attached.
    pub fn run<'c>(
        mut self,
        mut runner: Runner<'c>,
        print_maps: bool,
        on_event: &mut dyn FnMut(&[u8]),
        stop_asked: &dyn Fn() -> bool,
        started: impl FnOnce(&mut Runner<'c>, usize),
    ) -> anyhow::Result<Ended<'c>> {
        let exited_in_begin = runner.begin(on_event)?;
        let mut attached = 0;
        if !exited_in_begin {
            self.check_alive()?;
            attached = runner.attach()?;
            // Attached by PID: if the process ended meanwhile, a newcomer
            // may have been attached to. Detach at once and show nothing.
            self.check_alive()?;
        }
        runner.watch(self.signals.as_fd(), SIGNAL)?;
        if let Some(p) = &self.pidfd {
            runner.watch(p.as_fd(), PROCESS_EXIT)?;
        }
        // Mappings are recorded before the command runs, so that its
        // addresses mean something after it ends; without the kernel's
        // records, /proc is read at each step instead.
        let poll_mappings = self.pid.is_some_and(|pid| !runner.track(pid as u32));
        let mut running = self.child.take().map(HeldChild::release);
        started(&mut runner, attached);
        let mut stop_signal = None;
        let mut stop = exited_in_begin;
        while !stop {
            let step = runner.step(on_event)?;
            if let (true, Some(pid)) = (poll_mappings, self.pid) {
                runner.runtime().refresh_mappings(pid as u32);
            }
            stop = step.exit || runner.runtime().error().is_some() || stop_asked();
            if step.ready.contains(&SIGNAL) {
                stop_signal = self.signals.take();
                stop = true;
            }
            if step.ready.contains(&PROCESS_EXIT) {
                stop = true;
            }
        }
        let finished = runner.finish(print_maps, on_event)?;
        let (summary, mut runtime) = (finished.summary, finished.runtime);
        // The output is complete: show it now, then let another process
        // wait for the kernel to detach the stopped probes.
        runtime.flush();
        release(finished.attached);
        let command_status = match running.take() {
            Some(mut child) => {
                if let Some(signal) = stop_signal {
                    let signal = rustix::process::Signal::from_named_raw(signal)
                        .unwrap_or(rustix::process::Signal::TERM);
                    let _ = rustix::process::kill_process(
                        rustix::process::Pid::from_child(&child),
                        signal,
                    );
                }
                let status = child.wait().context("waiting for the -c command")?;
                Some(sdt_proc::exit_code(status))
            }
            None => None,
        };
        Ok(Ended {
            summary,
            runtime,
            command_status,
        })
    }
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
