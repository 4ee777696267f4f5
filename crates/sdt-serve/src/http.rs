//! The `/metrics` endpoint.
//!
//! It serves metrics and nothing else: `GET` and `HEAD` of `/metrics`.
//! No request can load, change or stop a program. Addresses given as a
//! port alone (`9436`, `:9436`) bind to loopback; anything reachable from
//! another machine must be named (`0.0.0.0:9436`).
//!
//! The server is `tiny_http`: small, synchronous, no async runtime, and
//! used for exactly this by Rust's Prometheus exporters. A scrape is
//! rendered on the thread that answers it; two threads answer, so that one
//! slow client does not hold up Prometheus.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;

use sdt_output::metrics::Source;
use sdt_output::prometheus::{render, CONTENT_TYPE};
use tiny_http::{Header, Method, Response, Server};

/// Threads that answer requests.
const THREADS: usize = 2;

/// The port `sdt serve` listens on when not told.
pub const DEFAULT_PORT: u16 = 9436;

/// A running `/metrics` endpoint; stopped when dropped.
pub struct MetricsServer {
    server: Arc<Server>,
    address: SocketAddr,
    threads: Vec<JoinHandle<()>>,
}

/// Where to listen: `PORT` and `:PORT` on loopback, else `HOST:PORT`.
pub fn parse_address(text: &str) -> Result<SocketAddr, String> {
    let port_only = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    text.to_socket_addrs()
        .map_err(|e| format!("`{text}` is not an address to listen on (PORT, or HOST:PORT): {e}"))?
        .next()
        .ok_or_else(|| format!("`{text}` names no address"))
}

impl MetricsServer {
    /// Listens on `address` and answers scrapes with what `source` has.
    pub fn start(address: SocketAddr, source: Arc<dyn Source>) -> io::Result<MetricsServer> {
        let server = Server::http(address).map_err(|e| {
            io::Error::other(format!("cannot listen on {address} for /metrics: {e}"))
        })?;
        let address = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| io::Error::other("the server listens on no IP address"))?;
        let server = Arc::new(server);
        let threads = (0..THREADS)
            .map(|_| {
                let (server, source) = (Arc::clone(&server), Arc::clone(&source));
                std::thread::Builder::new()
                    .name("sdt-metrics".into())
                    .spawn(move || answer(&server, &*source))
            })
            .collect::<io::Result<_>>()?;
        Ok(MetricsServer {
            server,
            address,
            threads,
        })
    }

    /// The address it listens on (with the port chosen, for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        for _ in &self.threads {
            self.server.unblock();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn answer(server: &Server, source: &dyn Source) {
    while let Ok(request) = server.recv() {
        let path = request.url().split('?').next().unwrap_or("");
        let method = request.method().clone();
        let response = match (path, &method) {
            ("/metrics", Method::Get | Method::Head) => {
                let mut text = String::new();
                render(&source.families(), &mut text);
                with_header(Response::from_string(text), "Content-Type", CONTENT_TYPE)
            }
            ("/metrics", _) => with_header(
                Response::from_string("only GET and HEAD\n").with_status_code(405),
                "Allow",
                "GET, HEAD",
            ),
            _ => {
                Response::from_string("sdt serves its metrics at /metrics\n").with_status_code(404)
            }
        };
        // A client that went away is no concern of the next one.
        let _ = request.respond(response);
    }
}

fn with_header<R: io::Read>(response: Response<R>, name: &str, value: &str) -> Response<R> {
    match Header::from_bytes(name.as_bytes(), value.as_bytes()) {
        Ok(header) => response.with_header(header),
        Err(()) => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sdt_output::metrics::{Family, Kind, Series, Value};
    use std::io::{Read, Write};

    struct One;

    impl Source for One {
        fn families(&self) -> Vec<Family> {
            vec![Family::new(
                "x",
                "h",
                Kind::Gauge,
                vec![Series {
                    labels: Vec::new(),
                    value: Value::Number(7),
                }],
            )]
        }
    }

    fn get(address: SocketAddr, request: &str) -> String {
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        reply
    }

    #[test]
    fn addresses_default_to_loopback() {
        assert_eq!(parse_address("9436").unwrap().to_string(), "127.0.0.1:9436");
        assert_eq!(parse_address(":80").unwrap().to_string(), "127.0.0.1:80");
        assert_eq!(
            parse_address("0.0.0.0:80").unwrap().to_string(),
            "0.0.0.0:80"
        );
        assert_eq!(parse_address("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert!(parse_address("nowhere").is_err());
    }

    #[test]
    fn serves_metrics_and_nothing_else() {
        let address = parse_address("127.0.0.1:0").unwrap();
        let server = MetricsServer::start(address, Arc::new(One)).unwrap();
        let at = server.address();
        let ok = get(at, "GET /metrics HTTP/1.0\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.0 200"), "{ok}");
        assert!(ok.contains("text/plain; version=0.0.4"), "{ok}");
        assert!(ok.ends_with("# HELP x h\n# TYPE x gauge\nx 7\n"), "{ok}");
        let post = get(at, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
        assert!(post.starts_with("HTTP/1.0 405"), "{post}");
        let other = get(at, "GET /load?program=x HTTP/1.0\r\n\r\n");
        assert!(other.starts_with("HTTP/1.0 404"), "{other}");
        // Dropping it returns: its threads have ended.
        drop(server);
    }
}
