use std::path::Path;

use serde_json::Value;

use super::*;
use crate::model::{Datum, Stamp};

fn hit<'a>(time_ns: u64, tid: u32, name: &'a str, args: &[Arg<'a>]) -> Hit<'a> {
    let mut all = [Arg::Unreadable; 12];
    all[..args.len()].copy_from_slice(args);
    Hit {
        time_ns,
        pid: 10,
        tid,
        comm: if tid == 10 { b"app" } else { b"worker" },
        provider: "p",
        name,
        path: Path::new("/bin/app"),
        address: 0x1000,
        args: all,
        count: args.len(),
    }
}

/// Runs `feed` on a timeline (pairing the probes `pairs`) and returns
/// its events, parsed, and its notes.
fn timeline(
    pairs: &[&str],
    limit: u64,
    feed: impl FnOnce(&mut Timeline<'_>),
) -> (Vec<Value>, String) {
    let (mut out, mut notes) = (Vec::new(), Vec::new());
    {
        let mut sink = Timeline::new(Box::new(&mut out), "t.json", Box::new(&mut notes))
            .limit(limit)
            .pairing(pairs.iter().map(|n| ("p", *n)));
        feed(&mut sink);
        sink.finish();
        assert!(sink.error().is_none());
    }
    let json: Value = serde_json::from_slice(&out).expect("the timeline is JSON");
    assert_eq!(json["displayTimeUnit"], "ns");
    let events = json["traceEvents"].as_array().unwrap().clone();
    // What every viewer requires of every event.
    for e in &events {
        for field in ["ph", "name", "pid", "tid"] {
            assert!(e.get(field).is_some(), "{field} missing in {e}");
        }
        if e["ph"] != "M" {
            assert!(e["ts"].is_number(), "{e}");
        }
    }
    (events, String::from_utf8(notes).unwrap())
}

fn of_phase<'a>(events: &'a [Value], ph: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["ph"] == ph).collect()
}

#[test]
fn names_pair_by_stem_separator_and_word() {
    assert_eq!(split("function__entry"), Some(("function", "__", "entry")));
    assert_eq!(split("query-done"), Some(("query", "-", "done")));
    assert_eq!(split("gc_begin"), Some(("gc", "_", "begin")));
    assert_eq!(split("Xstart"), Some(("X", "", "start")));
    assert_eq!(split("gc__mark__END"), Some(("gc__mark", "__", "end")));
    assert_eq!(split("start"), None);
    assert_eq!(split("hit"), None);

    let t = Timeline::new(Box::new(Vec::new()), "t", Box::new(Vec::new())).pairing([
        ("p", "function__entry"),
        ("p", "function__return"),
        ("p", "query-start"),
        ("p", "query-done"),
        ("p", "gc__begin"),
        // Not the same separator: no pair.
        ("p", "lock_start"),
        ("p", "lock__done"),
        // Another provider: no pair.
        ("q", "x__end"),
        ("p", "x__begin"),
    ]);
    let p = &t.pairs["p"];
    let mut names: Vec<&str> = p.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "function__entry",
            "function__return",
            "query-done",
            "query-start"
        ]
    );
    assert!(p["function__entry"].opens && !p["function__return"].opens);
    assert_eq!(p["function__entry"].pair, p["function__return"].pair);
    assert_ne!(p["function__entry"].pair, p["query-start"].pair);
    assert_eq!(p["query-done"].slice, "p:query");
}

#[test]
fn nested_calls_pair_on_each_thread_with_exact_durations() {
    let pairs = ["call__entry", "call__return"];
    let (events, notes) = timeline(&pairs, DEFAULT_LIMIT, |t| {
        let s = |s: &'static str| Arg::Str(Ok(s.as_bytes()));
        t.event(Event::Hit(&hit(1_000, 10, "call__entry", &[s("outer")])));
        t.event(Event::Hit(&hit(1_500, 11, "call__entry", &[s("other")])));
        t.event(Event::Hit(&hit(2_000, 10, "call__entry", &[s("inner")])));
        t.event(Event::Hit(&hit(
            2_250,
            10,
            "tick",
            &[Arg::Signed(-3), Arg::Unsigned(7)],
        )));
        t.event(Event::Hit(&hit(3_001, 10, "call__return", &[s("inner")])));
        t.event(Event::Hit(&hit(4_000, 11, "call__return", &[s("other")])));
        t.event(Event::Hit(&hit(9_999, 10, "call__return", &[s("outer")])));
    });
    assert_eq!(notes, "");
    let slices: Vec<(String, f64, f64, u64)> = of_phase(&events, "X")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["ts"].as_f64().unwrap(),
                e["dur"].as_f64().unwrap(),
                e["tid"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        slices,
        [
            ("p:call(inner)".to_string(), 2.0, 1.001, 10),
            ("p:call(other)".to_string(), 1.5, 2.5, 11),
            ("p:call(outer)".to_string(), 1.0, 8.999, 10),
        ]
    );
    let inner = of_phase(&events, "X")[0];
    assert_eq!(inner["args"]["entry"]["arg0"], "inner");
    assert_eq!(inner["args"]["return"]["arg0"], "inner");
    let tick = of_phase(&events, "i")[0];
    assert_eq!(tick["name"], "p:tick");
    assert_eq!(tick["ts"].as_f64(), Some(2.25));
    assert_eq!(tick["args"]["arg0"], -3);
    assert_eq!(tick["args"]["arg1"], 7);
    // Each thread and process named once.
    let names: Vec<(String, String)> = of_phase(&events, "M")
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("thread_name".to_string(), "app (10)".to_string()),
            ("thread_name".to_string(), "worker (11)".to_string()),
            ("process_name".to_string(), "app (10)".to_string()),
        ]
    );
}

#[test]
fn what_does_not_pair_stays_an_instant_and_is_reported() {
    let pairs = ["f__entry", "f__return"];
    let s = |s: &'static str| Arg::Str(Ok(s.as_bytes()));
    let (events, notes) = timeline(&pairs, DEFAULT_LIMIT, |t| {
        // A return whose entry was before tracing.
        t.event(Event::Hit(&hit(100, 10, "f__return", &[s("early")])));
        t.event(Event::Hit(&hit(200, 10, "f__entry", &[s("a")])));
        // An entry whose return never comes (a longjmp).
        t.event(Event::Hit(&hit(300, 10, "f__entry", &[s("lost")])));
        t.event(Event::Hit(&hit(400, 10, "f__return", &[s("a")])));
        // Still open at the end.
        t.event(Event::Hit(&hit(500, 10, "f__entry", &[s("open")])));
    });
    let slices = of_phase(&events, "X");
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0]["name"], "p:f(a)");
    assert_eq!(slices[0]["dur"].as_f64(), Some(0.2));
    let unpaired: Vec<(&str, &str)> = of_phase(&events, "i")
        .iter()
        .map(|e| {
            (
                e["args"]["arg0"].as_str().unwrap(),
                e["args"]["unpaired"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        unpaired,
        [
            ("early", "closing without an opening"),
            ("lost", "opening never closed"),
            ("open", "still open at the end"),
        ]
    );
    assert_eq!(
        notes,
        "sdt: the timeline t.json shows as instants what it could not pair: \
         1 p:f__entry opening never closed, 1 p:f__entry still open at the end, \
         1 p:f__return closing without an opening\n"
    );
}

#[test]
fn printf_lines_are_instants_on_their_thread_and_spans_are_slices() {
    struct Line;
    impl Printed for Line {
        fn format(&self) -> u32 {
            0
        }
        fn text(&mut self) -> &[u8] {
            b"order 7 \"paid\"\n"
        }
        fn args(&mut self) -> Vec<Datum> {
            Vec::new()
        }
        fn stamp(&self) -> Option<Stamp<'_>> {
            Some(Stamp {
                time_ns: 123_456_789,
                thread: Thread {
                    pid: 5,
                    tid: 6,
                    comm: b"shop",
                },
            })
        }
    }
    let (events, _) = timeline(&[], DEFAULT_LIMIT, |t| {
        t.event(Event::Printf(&mut Line));
        t.event(Event::Span(&Span {
            thread: Thread {
                pid: 5,
                tid: 6,
                comm: b"shop",
            },
            start_ns: 1_000_000,
            end_ns: 3_000_500,
            name: "gc",
            args: &[("collected", Datum::int(12))],
        }));
    });
    let line = of_phase(&events, "i")[0];
    assert_eq!(line["name"], "order 7 \"paid\"");
    assert_eq!(line["ts"].as_f64(), Some(123_456.789));
    assert_eq!(
        (line["pid"].as_u64(), line["tid"].as_u64()),
        (Some(5), Some(6))
    );
    let gc = of_phase(&events, "X")[0];
    assert_eq!(gc["dur"].as_f64(), Some(2000.5));
    assert_eq!(gc["args"]["collected"], 12);
}

#[test]
fn the_limit_stops_the_file_and_says_so_once() {
    let (events, notes) = timeline(&[], 10, |t| {
        for i in 0..100 {
            t.event(Event::Hit(&hit(i, 10, "tick", &[])));
        }
    });
    // A thread's name, 9 hits, and the process's name at the end.
    assert_eq!(events.len(), 11);
    assert_eq!(of_phase(&events, "M").len(), 2);
    assert_eq!(
        notes,
        "sdt: the timeline t.json has reached its limit of 10 events: later events are left out\n\
         sdt: the timeline t.json holds 10 events; 91 more were left out (--timeline-limit raises the limit)\n"
    );
}

#[test]
fn a_process_is_named_after_its_main_thread_once_seen() {
    let (events, _) = timeline(&[], DEFAULT_LIMIT, |t| {
        // tid 11 ("worker") first, then the main thread, tid 10 ("app").
        t.event(Event::Hit(&hit(1, 11, "tick", &[])));
        t.event(Event::Hit(&hit(2, 10, "tick", &[])));
    });
    let process: Vec<&Value> = of_phase(&events, "M")
        .into_iter()
        .filter(|e| e["name"] == "process_name")
        .collect();
    assert_eq!(process.len(), 1);
    assert_eq!(process[0]["args"]["name"], "app (10)");
    assert_eq!(process[0]["pid"], 10);
}

#[test]
fn a_full_disk_is_an_error_that_names_the_file() {
    struct Full;
    impl Write for Full {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("no space left"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut notes = Vec::new();
    {
        let mut sink = Timeline::new(Box::new(Full), "t.json", Box::new(&mut notes))
            .pairing([("p", "f__entry"), ("p", "f__return")]);
        sink.event(Event::Hit(&hit(1, 10, "f__entry", &[])));
        sink.finish();
        assert_eq!(sink.error().unwrap().to_string(), "t.json: no space left");
    }
    assert_eq!(notes, b"");
}

#[test]
fn probes_attached_during_the_run_pair_from_then_on() {
    let (events, notes) = timeline(&[], DEFAULT_LIMIT, |t| {
        let s = |s: &'static str| Arg::Str(Ok(s.as_bytes()));
        // Not known to pair yet: an instant.
        t.event(Event::Hit(&hit(1_000, 10, "call__entry", &[s("early")])));
        t.event(Event::ProbesAdded(&[
            ("p", "call__entry"),
            ("p", "call__return"),
        ]));
        // Known twice: pairs are added once.
        t.event(Event::ProbesAdded(&[
            ("p", "call__entry"),
            ("p", "call__return"),
        ]));
        t.event(Event::Hit(&hit(2_000, 10, "call__entry", &[s("late")])));
        t.event(Event::Hit(&hit(5_000, 10, "call__return", &[s("late")])));
    });
    let slices: Vec<(&str, f64)> = of_phase(&events, "X")
        .iter()
        .map(|e| (e["name"].as_str().unwrap(), e["dur"].as_f64().unwrap()))
        .collect();
    assert_eq!(slices, [("p:call(late)", 3.0)]);
    let instants: Vec<&str> = of_phase(&events, "i")
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(instants, ["p:call__entry"], "{notes}");
}
