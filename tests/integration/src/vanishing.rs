//! A client that vanishes as a killed process does: it speaks just enough of the wire protocol
//! to log in and start a statement, and then its socket closes without a Terminate message,
//! while the server still runs the statement (a waiting claim, say).
//!
//! `postgres::Client` cannot do this: dropping it sends Terminate, which the server reads as a
//! clean goodbye once the statement is done, and a killed client never says goodbye.

use std::io::{self, Read, Write};
use std::net::TcpStream;

use crate::Cluster;

/// A raw protocol connection whose socket can be closed abruptly (see the module
/// documentation).
pub struct VanishingClient {
    stream: TcpStream,
    pid: i32,
}

impl VanishingClient {
    /// Connects to `cluster` as `postgres` with `application_name` (trust authentication, as
    /// the test clusters use) and waits until the server is ready for a query; panics when the
    /// server refuses.
    pub fn connect(cluster: &Cluster, application_name: &str) -> VanishingClient {
        VanishingClient::connect_as(cluster.port, "postgres", application_name)
            .unwrap_or_else(|e| panic!("connect a vanishing client: {e}"))
    }

    /// Connects to database `postgres` on localhost's `port` as `user` with
    /// `application_name`, and waits until the server is ready for a query. An error is a
    /// refusal (the server's message) or a connection that failed (a server restarting).
    pub fn connect_as(
        port: u16,
        user: &str,
        application_name: &str,
    ) -> io::Result<VanishingClient> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        let mut body = Vec::new();
        // Protocol 3.0.
        body.extend_from_slice(&196_608_i32.to_be_bytes());
        for (key, value) in [
            ("user", user),
            ("database", "postgres"),
            ("application_name", application_name),
        ] {
            body.extend_from_slice(key.as_bytes());
            body.push(0);
            body.extend_from_slice(value.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        startup.extend_from_slice(&body);
        stream.write_all(&startup)?;
        let mut client = VanishingClient { stream, pid: 0 };
        client.read_until(b'Z')?;
        Ok(client)
    }

    /// The pid of the backend serving this connection (from its BackendKeyData message).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Reads messages until one of type `wanted`; an ErrorResponse is an error.
    fn read_until(&mut self, wanted: u8) -> io::Result<()> {
        loop {
            let mut header = [0u8; 5];
            self.stream.read_exact(&mut header)?;
            let len = i32::from_be_bytes(header[1..5].try_into().expect("4 bytes")) as usize;
            let mut body = vec![0u8; len.saturating_sub(4)];
            self.stream.read_exact(&mut body)?;
            match header[0] {
                b'E' => {
                    return Err(io::Error::other(format!(
                        "the server refused: {}",
                        String::from_utf8_lossy(&body)
                    )))
                }
                b'K' if body.len() >= 4 => {
                    self.pid = i32::from_be_bytes(body[0..4].try_into().expect("4 bytes"));
                }
                _ => {}
            }
            if header[0] == wanted {
                return Ok(());
            }
        }
    }

    /// Sends `sql` as a simple query and does not wait for its answer.
    pub fn send(&mut self, sql: &str) -> io::Result<()> {
        let mut message = vec![b'Q'];
        message.extend_from_slice(&((sql.len() + 5) as i32).to_be_bytes());
        message.extend_from_slice(sql.as_bytes());
        message.push(0);
        self.stream.write_all(&message)
    }

    /// Closes the socket without a word, as the kernel does for a killed process.
    pub fn vanish(self) {
        drop(self);
    }
}
