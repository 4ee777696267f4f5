//! `sdt stat`: a top-like view of every Java, Python, Ruby and PHP
//! process on the machine, like BCC's `ustat`: method calls, collections,
//! allocations, class loads, exceptions and thread starts per second.
//!
//! On a terminal it is a full-screen view, drawn with `ratatui` (on its
//! crossterm backend): the alternate screen in raw mode, a status line,
//! a table sorted by a column the `s` key cycles, `p` to pause and `q`,
//! Esc or Ctrl-C to quit. ratatui because a terminal UI is mostly what
//! raw escapes get wrong: resizing, column widths and truncation, redraws
//! of what changed only, and key input in raw mode; it is the maintained
//! library for this in Rust, and its crossterm backend also reads the
//! keys. Only the crossterm feature is on (no underline colours, no
//! other backends). Its crossterm 0.28 brings a second, older rustix;
//! newer ratatui releases need a newer Rust than sdt's minimum.
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
//!
//! Otherwise (a pipe, a file, `--json`) one table or JSON object is
//! printed per interval, for logs and pipes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::terminal::{self, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::crossterm::{self as crossterm, cursor};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style, Stylize};
use ratatui::text::{Line, Text};
use ratatui::widgets::{Cell, Row, Table};
use ratatui::Terminal;
use sdt_runtime::{Datum, MapRow, Receiver};

use super::runtimes::{self, Needs, LANGUAGES};
use super::{execute, fill, Prepared, Reports, Target, NAME_LEN};

const STAT: &str = include_str!("stat.bt");

/// The kinds of event, as map names and column titles, in column order.
/// `@calls` is printed last in each report: it closes it.
const KINDS: &[(&str, &str)] = &[
    ("@gc", "GC/s"),
    ("@objects", "OBJNEW/s"),
    ("@classes", "CLOAD/s"),
    ("@exceptions", "EXC/s"),
    ("@threads", "THR/s"),
    ("@calls", "METHOD/s"),
];

/// Watch every process of the language runtimes: method calls, garbage
/// collections, allocations, class loads, exceptions and threads per
/// second.
#[derive(Args, Debug)]
#[command(after_help = "EXAMPLES:\n  \
    sdt stat                  every Java, Python, Ruby and PHP process, every second\n  \
    sdt stat -l python 5 3    Python processes: three 5-second reports\n\n\
    Method and allocation rates are 0 for processes whose probes are off (see\n\
    the README: Java needs -XX:+ExtendedDTraceProbes, PHP USE_ZEND_DTRACE=1,\n\
    CPython 3.11 a profile function, Ruby a TracePoint).")]
pub struct StatArgs {
    #[command(flatten)]
    target: Target,

    /// Only this language: java, python, ruby or php (default: every one
    /// installed with probes).
    #[arg(short = 'l', value_name = "LANG")]
    lang: Option<String>,

    /// Seconds between reports.
    #[arg(value_name = "INTERVAL", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,

    /// Stop after COUNT reports.
    #[arg(value_name = "COUNT")]
    count: Option<u64>,
}

pub fn run(args: StatArgs) -> anyhow::Result<ExitCode> {
    let (pid, command) = (args.target.pid, args.target.command.as_deref());
    let runtimes: Vec<runtimes::Detected> = match &args.lang {
        Some(lang) => vec![runtimes::detect(Some(lang), pid, command)?],
        // The one runtime of the process or the command.
        None if pid.is_some() || command.is_some() => vec![runtimes::detect(None, pid, command)?],
        // Every runtime installed with probes.
        None => LANGUAGES
            .iter()
            .filter_map(|l| runtimes::detect(Some(l.name), None, None).ok())
            .collect(),
    };
    let mut probes = String::new();
    let mut objects = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    for detected in runtimes {
        if let Some(advice) =
            runtimes::advice(detected.language, Needs::MethodProbes, args.target.pid)
        {
            eprintln!("sdt: note: {advice}");
        }
        let language = detected.language;
        let mut add = |kind: &'static str, probe: Option<&str>| {
            if let Some(probe) = probe {
                probes.push_str(&format!(
                    "{} {{\n  {kind}[pid, \"{}\"] = count();\n}}\n",
                    super::attach_points(&detected, probe),
                    language.name
                ));
                used.insert(kind);
            }
        };
        add("@calls", language.calls.as_ref().map(|c| c.entry));
        add("@gc", language.gc.as_ref().map(|g| g.begin));
        add("@objects", language.alloc.as_ref().map(|a| a.probe));
        add("@threads", language.threads.as_ref().map(|t| t.start));
        add("@classes", language.class_load);
        add("@exceptions", language.exception);
        objects.extend(detected.objects);
    }
    if objects.is_empty() {
        anyhow::bail!("no Java, Python, Ruby or PHP with probes found: name one with -l LANG");
    }
    let mut report = String::new();
    for (kind, _) in KINDS.iter().filter(|(k, _)| used.contains(k)) {
        report.push_str(&format!("  print({kind});\n  clear({kind});\n"));
    }
    let program = fill(
        STAT,
        &[
            ("INTERVAL", args.interval.to_string()),
            ("PROBES", probes.trim_end().to_string()),
            ("REPORT", report),
        ],
    );
    let reports = Reports::new(args.count);
    let (output, reports) = if args.target.json {
        (Output::Json, reports)
    } else if io::stdout().is_terminal() && io::stdin().is_terminal() && !args.target.print_program
    {
        let screen = Rc::new(RefCell::new(Screen::open(args.interval)?));
        let keys = Rc::clone(&screen);
        (
            Output::Screen(screen),
            reports.or_when(move || keys.borrow_mut().quit_asked()),
        )
    } else {
        (Output::Text, reports)
    };
    let view = View {
        interval: args.interval,
        output,
        rows: BTreeMap::new(),
        reports: reports.clone(),
    };
    let stop = Some(reports);
    execute(
        &args.target,
        Prepared::Programs(objects),
        &program,
        Box::new(view),
        stop,
        NAME_LEN,
    )
}

/// Counts of the report being built, by `(pid, language)`, one per kind.
type Counts = BTreeMap<(i128, String), [i128; 6]>;

/// Where the reports go.
enum Output {
    /// One JSON object a line.
    Json,
    /// One table per interval, for logs and pipes.
    Text,
    /// The terminal's screen, redrawn.
    Screen(Rc<RefCell<Screen>>),
}

struct View {
    interval: u64,
    output: Output,
    rows: Counts,
    reports: Reports,
}

impl Receiver for View {
    fn printf(&mut self, _: u32, _: Vec<Datum>) {}

    fn map(&mut self, name: &str, rows: Vec<MapRow>) {
        if self.reports.full() {
            return;
        }
        let Some(column) = KINDS.iter().position(|(k, _)| *k == name) else {
            return;
        };
        for row in rows {
            let mut keys = row.keys.into_iter();
            let (pid, language) = (
                keys.next().map_or(0, |k| k.int()),
                keys.next().map(|k| k.text()).unwrap_or_default(),
            );
            self.rows.entry((pid, language)).or_default()[column] = row.value.int();
        }
        if name == "@calls" {
            let rows = std::mem::take(&mut self.rows);
            let processes = processes(&rows, self.interval, CALLS);
            self.reports.add();
            match &self.output {
                Output::Json => print_json(&processes, self.interval),
                Output::Text => print_table(&mut io::stdout().lock(), &processes),
                Output::Screen(screen) => {
                    let mut screen = screen.borrow_mut();
                    screen.show(processes);
                    // The last report stays on the terminal after the
                    // screen closes.
                    screen.keep_last = self.reports.full();
                }
            }
        }
    }
}

/// The column of method calls, in [`KINDS`]: the default order.
const CALLS: usize = 5;

/// One process's row: its rates per second.
struct Process {
    pid: i128,
    language: String,
    cmdline: String,
    rates: [f64; 6],
}

/// The processes of a report, the busiest (by `KINDS[sort]`) first, as
/// top; equal ones by PID.
fn processes(rows: &Counts, interval: u64, sort: usize) -> Vec<Process> {
    let seconds = interval as f64;
    let mut processes: Vec<Process> = rows
        .iter()
        .map(|((pid, language), counts)| Process {
            pid: *pid,
            language: language.clone(),
            cmdline: cmdline(*pid, 200),
            rates: counts.map(|count| count as f64 / seconds),
        })
        .collect();
    sort_by(&mut processes, sort);
    processes
}

fn sort_by(processes: &mut [Process], column: usize) {
    processes.sort_by(|a, b| {
        b.rates[column]
            .total_cmp(&a.rates[column])
            .then(a.pid.cmp(&b.pid))
    });
}

/// A process's command line, as `ps` shows it.
fn cmdline(pid: i128, width: usize) -> String {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text: String = String::from_utf8_lossy(&bytes)
        .trim_end_matches('\0')
        .replace('\0', " ");
    text.chars().take(width).collect()
}

fn print_json(processes: &[Process], interval: u64) {
    let processes: Vec<_> = processes
        .iter()
        .map(|p| {
            let mut row = serde_json::json!({
                "pid": p.pid as u64, "language": p.language, "cmdline": p.cmdline,
            });
            for ((kind, _), rate) in KINDS.iter().zip(p.rates) {
                row[format!("{}_per_s", &kind[1..])] = serde_json::json!(rate);
            }
            row
        })
        .collect();
    let mut out = io::stdout().lock();
    let _ = writeln!(
        out,
        "{}",
        serde_json::json!({ "interval_s": interval, "processes": processes })
    );
    let _ = out.flush();
}

/// One table and a blank line.
fn print_table(out: &mut impl Write, processes: &[Process]) {
    let _ = write!(out, "{:<8} {:<7}", "PID", "LANG");
    for (_, title) in KINDS {
        let _ = write!(out, " {title:>9}");
    }
    let _ = writeln!(out, " CMDLINE");
    for p in processes {
        let _ = write!(out, "{:<8} {:<7}", p.pid, p.language);
        for rate in p.rates {
            let _ = write!(out, " {rate:>9.1}");
        }
        let command: String = p.cmdline.chars().take(40).collect();
        let _ = writeln!(out, " {command}");
    }
    let _ = writeln!(out);
    let _ = out.flush();
}

/// The terminal, while `stat` shows it: the alternate screen in raw mode,
/// restored when dropped (at the end of the run, on an error, on a
/// panic's unwinding).
struct Screen {
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
    keep_last: bool,
}

impl Screen {
    fn open(interval: u64) -> anyhow::Result<Screen> {
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
    fn show(&mut self, processes: Vec<Process>) {
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
    fn quit_asked(&mut self) -> bool {
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
            KINDS[*sort].1,
            if *paused { "  PAUSED" } else { "" },
        );
        let header = Row::new(
            ["PID", "LANG"]
                .into_iter()
                .map(|t| Cell::from(t.to_string()))
                .chain(KINDS.iter().enumerate().map(|(i, (_, title))| {
                    let cell = Cell::from(Text::from(*title).right_aligned());
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
            print_table(&mut io::stdout().lock(), &self.processes);
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
