//! The pusher against collectors on loopback: one that answers, one that
//! refuses connections, one that accepts and never answers. Handing spans
//! over never waits, whatever the collector does, and nothing is lost
//! without being counted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use sdt_otlp::{PushOptions, Pusher, Span};

fn span(i: u64) -> Span {
    Span {
        name: format!("s{i}"),
        start_unix_ns: 1_000 + i,
        end_unix_ns: 2_000 + i,
        pid: 1,
        tid: 2,
        attributes: Vec::new(),
    }
}

fn options(endpoint: String) -> PushOptions {
    PushOptions {
        timeout: Duration::from_secs(3),
        ..PushOptions::new(&endpoint, Duration::from_secs(3600), "test")
    }
}

/// Reads one HTTP request; returns its path and body.
fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut length = 0;
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).ok()?;
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((path, body))
}

#[test]
fn spans_reach_a_collector_that_answers() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let (got, spans) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            while let Some((path, body)) = read_request(&mut stream) {
                if path == "/v1/traces" {
                    let request = ExportTraceServiceRequest::decode(&body[..]).unwrap();
                    for rs in request.resource_spans {
                        for ss in rs.scope_spans {
                            for s in ss.spans {
                                let _ = got.send(s.name);
                            }
                        }
                    }
                }
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            }
        }
    });
    let pusher = Pusher::start(options(endpoint), None).unwrap();
    let sender = pusher.spans();
    for i in 0..1000 {
        sender.send(span(i));
    }
    let stats = pusher.finish(Duration::from_secs(10));
    assert_eq!(
        (stats.spans_sent, stats.spans_dropped),
        (1000, 0),
        "{stats:?}"
    );
    let names: Vec<String> = spans.try_iter().collect();
    assert_eq!(names.len(), 1000);
    assert_eq!(names[999], "s999");
}

/// Sends 20,000 spans to a collector at `endpoint`, checking that handing
/// them over does not wait, and that every span is sent or counted.
fn never_waits(endpoint: String) {
    let pusher = Pusher::start(options(endpoint), None).unwrap();
    let sender = pusher.spans();
    let start = Instant::now();
    for i in 0..20_000 {
        sender.send(span(i));
    }
    let handing_over = start.elapsed();
    assert!(
        handing_over < Duration::from_millis(500),
        "handing 20,000 spans over took {handing_over:?}"
    );
    let start = Instant::now();
    let stats = pusher.finish(Duration::from_millis(500));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "the end waited {:?}",
        start.elapsed()
    );
    assert_eq!(stats.spans_sent, 0, "{stats:?}");
    assert_eq!(stats.spans_dropped, 20_000, "{stats:?}");
}

#[test]
fn a_collector_that_refuses_costs_nothing_and_loses_nothing_silently() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The listener is closed: connections are refused.
    never_waits(format!("http://127.0.0.1:{port}"));
}

#[test]
fn a_collector_that_never_answers_costs_nothing_and_loses_nothing_silently() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        // Accepts, reads nothing, answers nothing, keeps every connection.
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    never_waits(endpoint);
}
