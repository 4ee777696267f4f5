//! `sdt stat`'s full-screen view, drawn with `ratatui` (on its crossterm
//! backend): the alternate screen in raw mode, a status line, a table
//! sorted by a column the `s` key cycles, `p` to pause and `q`, Esc or
//! Ctrl-C to quit. It is a view, not an output format: it shows the last
//! report, redrawn, where a format writes each one.
//!
//! ratatui because a terminal UI is mostly what raw escapes get wrong:
//! resizing, column widths and truncation, redraws of what changed only,
//! and key input in raw mode; it is the maintained library for this in
//! Rust, and its crossterm backend also reads the keys. Only the
//! crossterm feature is on (no underline colours, no other backends). Its
//! crossterm 0.28 brings a second, older rustix; newer ratatui releases
//! need a newer Rust than sdt's minimum.
//!
//! The keys are read between the steps of the tracing loop (every 20 ms
//! at most, see `Reports::or_when`), on the loop's thread: quitting ends
//! the session as Ctrl-C does elsewhere, detaching the probes and
//! lowering their semaphores. In raw mode Ctrl-C is a key, not SIGINT;
//! SIGTERM still arrives through the loop's signalfd. The terminal is
//! restored when the view is dropped: at the end of the run, on an
//! error, and on a panic (before its message, by a panic hook).
//!
//! The view needs a terminal on standard output and standard input (the
//! keys); it ends when the terminal hangs up.

use std::io;
use std::time::Duration;

use anyhow::Context;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::crossterm::{self as crossterm, cursor};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Terminal;
use sdt_output::Format;

use super::{sort_by, table, Process, CALLS, KINDS};

/// The terminal, while `stat` shows it: the alternate screen in raw mode,
/// restored when dropped (at the end of the run, on an error, on a
/// panic's unwinding).
pub(super) struct Screen {
    terminal: Terminal<CrosstermBackend<io::Stdout>>,
    interval: u64,
    /// The report shown: kept while paused.
    processes: Vec<Process>,
    /// When it came, `HH:MM:SS` UTC.
    time: String,
    /// The sorting column, in [`KINDS`].
    sort: usize,
    paused: bool,
    quit: bool,
    /// Print the report shown on the normal screen when closing (the
    /// run ended after COUNT reports).
    pub(super) keep_last: bool,
}

impl Screen {
    pub(super) fn open(interval: u64) -> anyhow::Result<Screen> {
        terminal::enable_raw_mode().context("switching the terminal to raw mode")?;
        // From here on, errors restore the terminal as they drop `guard`.
        let guard = Restore;
        crossterm::execute!(io::stdout(), EnterAlternateScreen)
            .context("switching to the alternate screen")?;
        let terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
        std::mem::forget(guard);
        // A panic's message goes to the normal screen, not the alternate
        // one that unwinding then leaves.
        let report_panic = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            report_panic(info);
        }));
        let mut screen = Screen {
            terminal,
            interval,
            processes: Vec::new(),
            time: clock(),
            sort: CALLS,
            paused: false,
            quit: false,
            keep_last: false,
        };
        screen.terminal.hide_cursor()?;
        screen.draw();
        Ok(screen)
    }

    /// A new report.
    pub(super) fn show(&mut self, processes: Vec<Process>) {
        if self.paused {
            return;
        }
        self.processes = processes;
        sort_by(&mut self.processes, self.sort);
        self.time = clock();
        // All of it, once an interval: what was written to the terminal
        // meanwhile (sdt's notes on standard error) is wiped.
        let _ = self.terminal.clear();
        self.draw();
    }

    /// Reads the keys pressed since the last call; whether to quit.
    pub(super) fn quit_asked(&mut self) -> bool {
        loop {
            // Asked first: crossterm spins on a terminal that hung up.
            match keys_waiting() {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => return true,
            }
            match event::poll(Duration::ZERO) {
                Ok(true) => {}
                Ok(false) => break,
                // The terminal is gone: nothing to show any more.
                Err(_) => return true,
            }
            let Ok(event) = event::read() else {
                return true;
            };
            match event {
                Event::Key(key) if key.kind == KeyEventKind::Press => match key.code {
                    KeyCode::Char('q') | KeyCode::Esc => self.quit = true,
                    // Raw mode: Ctrl-C is a key, not SIGINT.
                    KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                        self.quit = true
                    }
                    KeyCode::Char('s') => {
                        self.sort = (self.sort + 1) % KINDS.len();
                        sort_by(&mut self.processes, self.sort);
                        self.draw();
                    }
                    KeyCode::Char('p') => {
                        self.paused = !self.paused;
                        self.draw();
                    }
                    _ => {}
                },
                Event::Resize(..) => self.draw(),
                _ => {}
            }
        }
        self.quit
    }

    fn draw(&mut self) {
        let Screen {
            interval,
            processes,
            time,
            sort,
            paused,
            ..
        } = self;
        let status = format!(
            " sdt stat  every {interval} s  {} process{}  {time} UTC  sorted by {}{}",
            processes.len(),
            if processes.len() == 1 { "" } else { "es" },
            KINDS[*sort].column.header.unwrap_or_default(),
            if *paused { "  PAUSED" } else { "" },
        );
        let header = Row::new(
            ["PID", "LANG"]
                .into_iter()
                .map(|t| Cell::from(t.to_string()))
                .chain(KINDS.iter().enumerate().map(|(i, kind)| {
                    let title = kind.column.header.unwrap_or_default();
                    let cell = Cell::from(Text::from(title).right_aligned());
                    if i == *sort {
                        cell.style(Style::new().add_modifier(Modifier::REVERSED))
                    } else {
                        cell
                    }
                }))
                .chain([Cell::from("COMMAND")]),
        )
        .style(Style::new().add_modifier(Modifier::BOLD));
        let rows = processes.iter().map(|p| {
            Row::new(
                [p.pid.to_string(), p.language.clone()]
                    .into_iter()
                    .map(Cell::from)
                    .chain(
                        p.rates
                            .iter()
                            .map(|r| Cell::from(Text::from(format!("{r:.1}")).right_aligned())),
                    )
                    .chain([Cell::from(p.cmdline.clone())]),
            )
        });
        let widths = [Constraint::Length(8), Constraint::Length(7)]
            .into_iter()
            .chain([Constraint::Length(9); 6])
            .chain([Constraint::Min(10)]);
        let table = Table::new(rows, widths).header(header);
        let keys = " q quit   s sort column   p pause";
        let _ = self.terminal.draw(|frame| {
            let [top, middle, bottom] = Layout::vertical([
                Constraint::Length(1),
                Constraint::Min(0),
                Constraint::Length(1),
            ])
            .areas(frame.area());
            frame.render_widget(Line::from(status).reversed(), top);
            frame.render_widget(table, middle);
            frame.render_widget(Line::from(keys), bottom);
        });
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
        if self.keep_last {
            let mut text = Format::TEXT.sink(Box::new(io::stdout()));
            text.event(sdt_output::Event::Table(&table(
                &self.processes,
                self.interval,
            )));
            text.flush();
        }
    }
}

/// Whether the terminal (standard input) has bytes to read; an error
/// once it hung up (its window closed, its connection dropped).
fn keys_waiting() -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags};
    let stdin = io::stdin();
    let mut fds = [PollFd::new(&stdin, PollFlags::IN)];
    poll(&mut fds, Some(&rustix::time::Timespec::default()))?;
    let ready = fds[0].revents();
    if ready.intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL) {
        return Err(io::ErrorKind::BrokenPipe.into());
    }
    Ok(ready.contains(PollFlags::IN))
}

/// Restores the terminal when dropped.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        restore();
    }
}

fn restore() {
    let _ = crossterm::execute!(io::stdout(), LeaveAlternateScreen, cursor::Show);
    let _ = terminal::disable_raw_mode();
}

/// The time of day, `HH:MM:SS`, UTC.
fn clock() -> String {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    let seconds = now.tv_sec.rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}
