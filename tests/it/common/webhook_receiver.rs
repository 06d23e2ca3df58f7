//! A webhook receiver on loopback for the end-to-end tests: it records every request (head and
//! body) and answers each with the next status of its script (then 200), or, `hang`, never
//! answers at all (a dead receiver).

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request received.
#[derive(Clone, Debug)]
pub struct Received {
    /// Method and path.
    pub line: String,
    /// Headers, names lower-cased.
    pub headers: BTreeMap<String, String>,
    /// The body.
    pub body: Vec<u8>,
}

/// A running receiver.
pub struct Receiver {
    /// Its port on 127.0.0.1.
    pub port: u16,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// A receiver answering the statuses of `script` in turn, then 200.
    pub fn start(script: &[u16]) -> Receiver {
        Self::start_with(script.iter().copied().collect(), false)
    }

    /// A receiver that accepts connections and never answers.
    pub fn hanging() -> Receiver {
        Self::start_with(VecDeque::new(), true)
    }

    fn start_with(script: VecDeque<u16>, hang: bool) -> Receiver {
        let (listener, port) = loop {
            let port = super::listen_port();
            if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
                break (l, port);
            }
        };
        let got = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script));
        let (g, s) = (got.clone(), script.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let (g, s) = (g.clone(), s.clone());
                std::thread::spawn(move || serve(conn, &g, &s, hang));
            }
        });
        Receiver { port, got }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// Waits until `n` requests came (panics at `limit`).
    pub fn wait_for(&self, n: usize, limit: Duration) -> Vec<Received> {
        let start = Instant::now();
        loop {
            let got = self.received();
            if got.len() >= n {
                return got;
            }
            assert!(
                start.elapsed() < limit,
                "the receiver got {} request(s) of {n} in {limit:?}",
                got.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn serve(conn: TcpStream, got: &Mutex<Vec<Received>>, script: &Mutex<VecDeque<u16>>, hang: bool) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = BTreeMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        got.lock().unwrap().push(Received {
            line: line.trim_end().to_owned(),
            headers,
            body,
        });
        if hang {
            // Hold the connection open, answering nothing.
            std::thread::sleep(Duration::from_secs(3600));
            return;
        }
        let status = script.lock().unwrap().pop_front().unwrap_or(200);
        let reply =
            format!("HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\nok");
        if (&conn).write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
