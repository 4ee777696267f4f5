use super::*;
use crate::model::{Frame, Layout, MapRow, Note, Stack, StackStyle};
use crate::Sink;

fn escaped(bytes: &[u8]) -> String {
    let mut line = Vec::new();
    escape_text(&mut line, bytes, true);
    String::from_utf8(line).unwrap()
}

#[test]
fn control_characters_never_reach_the_terminal() {
    assert_eq!(escaped(b"fib"), "fib");
    assert_eq!(escaped(b"a\nb\x1b[31m"), "a\\nb\\u{1b}[31m");
    assert_eq!(escaped(b"q\"uote\\"), "q\\\"uote\\\\");
    assert_eq!(escaped("héllo".as_bytes()), "héllo");
    assert_eq!(escaped(b"\xff\xfe"), "\\xff\\xfe");
    assert_eq!(escaped("\u{85}".as_bytes()), "\\u{85}");
}

#[test]
fn buffers_and_strings_print_as_in_bpftrace() {
    assert_eq!(escape_buffer(b"ab\x01"), "ab\\x01");
    assert_eq!(hex_buffer(b"Hi\0", "\\x", ""), "\\x48\\x69\\x00");
    assert_eq!(hex_buffer(b"Hi\0", "", " "), "48 69 00");
    assert_eq!(raw_text(b"a\nb\tc \xe2\x9c\x93"), "a\nb\tc \u{2713}");
    assert_eq!(raw_text(b"bad\xff"), "bad\\xff");
}

fn histogram_of(kind: MapKind, buckets: &[(Option<i128>, Option<i128>, u64)], div: u64) -> String {
    map(&MapPrint {
        name: "@h".into(),
        kind,
        keyed: false,
        rows: vec![MapRow {
            key: Vec::new(),
            value: MapValue::Buckets(
                buckets
                    .iter()
                    .map(|&(low, high, count)| Bucket { low, high, count })
                    .collect(),
            ),
        }],
        div,
    })
}

#[test]
fn histogram_labels_and_bars() {
    let text = histogram_of(
        MapKind::Hist,
        &[
            (None, Some(0), 1),
            (Some(0), Some(1), 0),
            (Some(1024), Some(2048), 4),
        ],
        1,
    );
    assert_eq!(
        text,
        "@h:\n\
         (..., 0)               1 |@@@@@@@@@@@@@                                       |\n\
         [0]                    0 |                                                    |\n\
         [1K, 2K)               4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\n"
    );
    // A divisor shrinks the counts, not the bars' proportions.
    let divided = histogram_of(
        MapKind::Lhist,
        &[(Some(0), Some(1), 3), (Some(1), None, 2)],
        2,
    );
    assert_eq!(
        divided,
        "@h:\n\
         [0, 1)                 1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n\
         [1, ...)               1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |\n\n"
    );
}

#[test]
fn empty_maps_print_nothing() {
    let empty = |kind, keyed| {
        map(&MapPrint {
            name: "@m".into(),
            kind,
            keyed,
            rows: Vec::new(),
            div: 1,
        })
    };
    // bpftrace 0.26 prints no line for a map without entries, not even
    // for a cleared scalar `count()` (0.17 printed `@m: 0`).
    for kind in [
        MapKind::Count,
        MapKind::Stats,
        MapKind::Plain,
        MapKind::Hist,
    ] {
        assert_eq!(empty(kind, false), "");
        assert_eq!(empty(kind, true), "");
    }
}

#[test]
fn stacks_indent_by_where_they_are() {
    let stack = Datum::Stack(Stack {
        frames: vec![
            Frame {
                addr: 0x1000,
                symbol: Some(("main".into(), 4)),
                module: Some("/bin/x".into()),
                build_id: Some((vec![0xab, 0x01], 0x234)),
            },
            Frame {
                addr: 0x2000,
                ..Frame::default()
            },
        ],
        style: StackStyle::Bpftrace,
        kernel: false,
    });
    assert_eq!(datum(&stack, Context::Key), "\n    main+4\n    0x2000\n");
    assert_eq!(
        datum(&stack, Context::Value),
        "\n        main+4\n        0x2000\n"
    );
    let styled = |style| {
        let Datum::Stack(s) = &stack else {
            unreachable!()
        };
        Datum::Stack(Stack { style, ..s.clone() })
    };
    let perf = styled(StackStyle::Perf);
    assert_eq!(
        datum(&perf, Context::Value),
        "\n\t1000 main+4 (/bin/x)\n\t2000 0x2000 ([unknown])\n"
    );
    // `raw` and `build_id` (bpftrace 0.18, 0.25), in keys and values
    // alike: an address alone, or a build id and the file offset.
    for context in [Context::Key, Context::Value] {
        assert_eq!(datum(&styled(StackStyle::Raw), context), "\n1000\n2000\n");
        assert_eq!(
            datum(&styled(StackStyle::BuildId), context),
            "\nab01 0x234\n2000\n"
        );
    }
    // A kernel stack in perf mode names no object, as bpftrace prints it.
    let kernel = Datum::Stack(Stack {
        kernel: true,
        ..match &perf {
            Datum::Stack(s) => s.clone(),
            _ => unreachable!(),
        }
    });
    assert_eq!(
        datum(&kernel, Context::Value),
        "\n\t1000 main+4\n\t2000 0x2000\n"
    );
}

#[test]
fn keys_and_values_print_as_their_type() {
    let big = Datum::Int {
        value: u64::MAX,
        signed: false,
    };
    assert_eq!(datum(&big, Context::Key), u64::MAX.to_string());
    assert_eq!(datum(&Datum::int(-1), Context::Key), "-1");
    assert_eq!(datum(&big, Context::Value), u64::MAX.to_string());
    assert_eq!(divided(&Datum::int(-9), 2).as_deref(), Some("-4"));
    assert_eq!(divided(&big, 1), None);
}

#[test]
fn stats_and_pointers_print_as_bpftrace_0_26() {
    let stats = map(&MapPrint {
        name: "@s".into(),
        kind: MapKind::Stats,
        keyed: true,
        rows: vec![MapRow {
            key: vec![Datum::int(1)],
            value: MapValue::Stats {
                count: 3,
                average: -3,
                total: -10,
            },
        }],
        div: 1,
    });
    // No blank line after an average or stats map any more.
    assert_eq!(
        stats,
        "@s[1]: { .count = 3, .average = -3, .total = -10 }\n"
    );
    let pointer = Datum::Symbolic {
        text: "0x33".into(),
        number: 0x33,
    };
    assert_eq!(datum(&pointer, Context::Value), "0x33");
    assert_eq!(datum(&pointer, Context::Key), "0x33");
}

/// A PID, a time only JSON has, the same time in text's unit, a name.
fn columns() -> Vec<Column> {
    vec![
        Column::both("pid", "PID").width(7),
        Column::json("time_ns"),
        Column::text("TIME(us)").width(10).right().decimals(2),
        Column::both("name", "NAME"),
    ]
}

fn cells(pid: i128, ns: i128, name: &str) -> Vec<Cell> {
    vec![
        Cell::Int(pid),
        Cell::Int(ns),
        Cell::Float(ns as f64 / 1e3),
        Cell::Text(name.into()),
    ]
}

#[test]
fn a_stream_is_aligned_text_columns_under_one_header() {
    let mut out = Vec::new();
    let mut text = Text::new(Box::new(&mut out));
    let stream = Stream {
        name: "test",
        columns: columns(),
        layout: Layout::default(),
    };
    text.event(Event::Row(&stream, &cells(42, 1500, "first")));
    text.event(Event::Row(
        &stream,
        &cells(1234567890, 25, "a name wider than none"),
    ));
    // Told on standard error by the tool, not here.
    text.event(Event::Note(&Note {
        key: "unpaired",
        heading: "Not paired:",
        lines: vec!["1 return without an entry".into()],
        value: Cell::Int(1),
    }));
    drop(text);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "PID       TIME(us) NAME\n\
         42            1.50 first\n\
         1234567890       0.03 a name wider than none\n"
    );
}

#[test]
fn a_table_shows_the_sentences_of_its_notes_under_its_rows() {
    let mut out = Vec::new();
    let mut text = Text::new(Box::new(&mut out));
    let note = |lines: Vec<String>| Note {
        key: "unpaired",
        heading: "Not paired, so not in the table:",
        lines,
        value: Cell::Fields(Vec::new()),
    };
    let mut table = Table {
        key: "rows",
        columns: columns(),
        rows: vec![cells(7, 2000, "x")],
        fields: vec![("interval_s", Cell::Int(1))],
        notes: vec![note(Vec::new())],
        layout: Layout::sdt(),
    };
    text.event(Event::Table(&table));
    table.notes = vec![note(vec!["one".into(), "two".into()])];
    table.rows.clear();
    text.event(Event::Table(&table));
    drop(text);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "PID       TIME(us) NAME\n\
         7             2.00 x\n\
         \n\
         PID       TIME(us) NAME\n\
         \n\
         Not paired, so not in the table:\n  one\n  two\n\
         \n"
    );
}

/// A time series drawn as bpftrace draws it: the least and greatest
/// values above and below, a `*` scaled between them, `.` at 0 when the
/// values straddle it, `-` for an interval without a value, and times
/// with as many digits of a second as the interval needs (here 100 ms).
#[test]
fn time_series_are_drawn_between_their_least_and_greatest_values() {
    let ms = 1_000_000i128;
    let points = vec![
        (500 * ms, Some(-5)),
        (600 * ms, Some(0)),
        (700 * ms, None),
        (800 * ms, Some(5)),
    ];
    let map = MapPrint {
        name: "@a".into(),
        kind: MapKind::TSeries,
        keyed: false,
        rows: vec![MapRow {
            key: Vec::new(),
            value: MapValue::Series {
                interval_ns: 100 * ms as u64,
                points,
            },
        }],
        div: 1,
    };
    let text = super::map(&map);
    let lines: Vec<&str> = text.lines().collect();
    let bounds = format!("{:13}{:<21}{:>32}", "", -5, 5);
    let rule = "_".repeat(51);
    assert_eq!(lines[0], "@a:");
    assert_eq!(lines[1], bounds);
    assert_eq!(lines[2], format!("hh:mm:ss.ms  |{rule}|"));
    // The time of day, then the strip.
    let strips: Vec<&str> = lines[3..7].iter().map(|l| &l[12..]).collect();
    assert!(lines[3][..12].ends_with(":00.500"), "{}", lines[3]);
    assert_eq!(
        strips,
        [
            format!(" *{}.{}| -5", " ".repeat(25), " ".repeat(25)),
            format!(" |{}*{}| 0", " ".repeat(25), " ".repeat(25)),
            format!(" |{}.{}| -", " ".repeat(25), " ".repeat(25)),
            format!(" |{}.{}* 5", " ".repeat(25), " ".repeat(25)),
        ]
    );
    assert_eq!(lines[7], format!("{:12} v{rule}v", ""));
    assert_eq!(lines[8], bounds);
    assert_eq!(lines[9], "");
    // JSON: each interval that has a value, by its start in UTC.
    assert_eq!(
        crate::json::map(&map).unwrap(),
        r#"{"type": "tseries", "data": {"@a": [{"interval_start": "1970-01-01 00:00:00.500000000", "value": -5}, {"interval_start": "1970-01-01 00:00:00.600000000", "value": 0}, {"interval_start": "1970-01-01 00:00:00.800000000", "value": 5}]}}"#
    );
}

#[test]
fn bcc_layouts_indent_put_lines_above_and_cells_below() {
    let mut out = Vec::new();
    let mut text = Text::new(Box::new(&mut out));
    // argdist -C: a label above, a tab before the header and each row.
    let counts = Table {
        key: "counts",
        columns: vec![
            Column::both("count", "COUNT").width(10),
            Column::both("event", "EVENT"),
        ],
        rows: vec![vec![Cell::Int(3), Cell::Text("size = 16".into())]],
        fields: Vec::new(),
        notes: Vec::new(),
        layout: Layout {
            above: vec!["p:c:malloc(size_t size):size_t:size".into()],
            indent: "\t",
            ..Layout::default()
        },
    };
    text.event(Event::Table(&counts));
    // stackcount: no header, every cell under its row, a blank line after
    // each; an empty text shows nothing.
    let stacks = Table {
        key: "stacks",
        columns: vec![
            Column::text("").below("  "),
            Column::text("").below("    "),
            Column::both("count", "").below("    "),
        ],
        rows: vec![vec![
            Cell::List(vec![Cell::Text("leaf".into()), Cell::Text("main".into())]),
            Cell::Text(String::new()),
            Cell::Int(20),
        ]],
        fields: Vec::new(),
        notes: Vec::new(),
        layout: Layout {
            above: vec!["06:05:13".into()],
            blank_before: true,
            blank_between: true,
            ..Layout::default()
        },
    };
    text.event(Event::Table(&stacks));
    // trace: the header alone when tracing starts, then rows with their
    // stacks under them.
    let stream = Stream {
        name: "trace",
        columns: vec![
            Column::both("pid", "PID").width(7),
            Column::both("message", "-"),
            Column::text("").below("        "),
        ],
        layout: Layout {
            blank_between: true,
            ..Layout::default()
        },
    };
    text.event(Event::Row(&stream, &[]));
    text.event(Event::Heading("Detaching..."));
    let frames = Cell::List(vec![Cell::Text("work+0x4 [app]".into())]);
    text.event(Event::Row(
        &stream,
        &[Cell::Int(42), Cell::Text("7".into()), frames],
    ));
    drop(text);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "p:c:malloc(size_t size):size_t:size\n\
         \tCOUNT      EVENT\n\
         \t3          size = 16\n\
         \n\
         06:05:13\n\
         \x20 leaf\n\
         \x20 main\n\
         \x20   20\n\
         \n\
         PID     -\n\
         Detaching...\n\
         42      7\n\
         \x20       work+0x4 [app]\n\
         \n"
    );
}

fn log2(slots: &[u64]) -> String {
    histogram_lines(&Histogram {
        key: "buckets",
        label: "msecs".into(),
        slots: slots.to_vec(),
        fields: Vec::new(),
        above: vec![String::new(), "Function = slow [42]".into()],
    })
}

#[test]
fn log2_histograms_are_laid_out_as_bcc_lays_them_out() {
    // 3 values of 16 to 31 ms, 1 of 2 or 3.
    let mut slots = vec![0; 6];
    slots[5] = 3;
    slots[2] = 1;
    assert_eq!(
        log2(&slots),
        "\nFunction = slow [42]\n\
         \x20    msecs               : count     distribution\n\
         \x20        0 -> 1          : 0        |                                        |\n\
         \x20        2 -> 3          : 1        |*************                           |\n\
         \x20        4 -> 7          : 0        |                                        |\n\
         \x20        8 -> 15         : 0        |                                        |\n\
         \x20       16 -> 31         : 3        |****************************************|\n"
    );
    // Nothing at all without counts, or with counts only in slot 0.
    assert_eq!(log2(&[]), "");
    assert_eq!(log2(&[5, 0, 0]), "");
    // Past 2^32: the wide form, 20 stars.
    let mut slots = vec![0; 41];
    slots[40] = 3;
    slots[2] = 5;
    let text = log2(&slots);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[2],
        "               msecs                         : count     distribution"
    );
    assert_eq!(
        lines[4],
        "                   2 -> 3                    : 5        |********************|"
    );
    assert_eq!(
        lines[42],
        "        549755813888 -> 1099511627775        : 3        |************        |"
    );
}
