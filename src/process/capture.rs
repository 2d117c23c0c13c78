//! Output capture: one reader thread per pipe drains a job's stdout or stderr concurrently,
//! keeping only the last [`OUTPUT_TAIL_BYTES`] (and counting the rest), so a chatty job can never
//! fill a pipe and block, nor fill the runner's memory.

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// How many bytes of each output stream are kept (the tail).
pub const OUTPUT_TAIL_BYTES: usize = 64 * 1024;

/// Size of one read from a pipe.
const READ_CHUNK: usize = 64 * 1024;

/// Keeps the last `cap` bytes written to it.
#[derive(Debug)]
pub(super) struct TailBuffer {
    cap: usize,
    buf: Vec<u8>,
    /// When `buf` is full: index of the oldest byte (= next write position).
    pos: usize,
}

impl TailBuffer {
    fn new(cap: usize) -> TailBuffer {
        TailBuffer {
            cap,
            buf: Vec::new(),
            pos: 0,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        if self.cap == 0 {
            return;
        }
        if data.len() >= self.cap {
            self.buf.clear();
            self.buf.extend_from_slice(&data[data.len() - self.cap..]);
            self.pos = 0;
            return;
        }
        if self.buf.len() < self.cap {
            let n = (self.cap - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        while !data.is_empty() {
            let n = (self.cap - self.pos).min(data.len());
            self.buf[self.pos..self.pos + n].copy_from_slice(&data[..n]);
            self.pos = (self.pos + n) % self.cap;
            data = &data[n..];
        }
    }

    fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.buf.len());
        out.extend_from_slice(&self.buf[self.pos..]);
        out.extend_from_slice(&self.buf[..self.pos]);
        out
    }
}

#[derive(Debug)]
struct Capture {
    tail: TailBuffer,
    total: u64,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum StreamTo {
    Stdout,
    Stderr,
}

fn stream_chunk(to: StreamTo, data: &[u8]) {
    // Errors (e.g. our stdout is a closed pipe) must not stop the capture.
    match to {
        StreamTo::Stdout => {
            let mut out = io::stdout().lock();
            let _ = out.write_all(data);
            let _ = out.flush();
        }
        StreamTo::Stderr => {
            let mut err = io::stderr().lock();
            let _ = err.write_all(data);
            let _ = err.flush();
        }
    }
}

fn lock(capture: &Mutex<Capture>) -> MutexGuard<'_, Capture> {
    capture
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn drain<R: Read>(mut src: R, capture: &Mutex<Capture>, stream: Option<StreamTo>) {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let chunk = &buf[..n];
                {
                    let mut c = lock(capture);
                    c.tail.push(chunk);
                    c.total += n as u64;
                }
                if let Some(to) = stream {
                    stream_chunk(to, chunk);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

/// One pipe's reader thread and what it has captured so far.
pub(super) struct Reader {
    capture: Arc<Mutex<Capture>>,
    handle: Option<JoinHandle<()>>,
    pub(super) abandoned: bool,
}

impl Reader {
    pub(super) fn spawn<R: Read + Send + 'static>(
        name: &str,
        src: R,
        stream: Option<StreamTo>,
    ) -> io::Result<Reader> {
        let capture = Arc::new(Mutex::new(Capture {
            tail: TailBuffer::new(OUTPUT_TAIL_BYTES),
            total: 0,
        }));
        let shared = Arc::clone(&capture);
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || drain(src, &shared, stream))?;
        Ok(Reader {
            capture,
            handle: Some(handle),
            abandoned: false,
        })
    }

    /// True once the reader reached EOF (joined) or was abandoned. Never blocks.
    pub(super) fn settled(&mut self) -> bool {
        if let Some(handle) = &self.handle {
            if handle.is_finished() {
                if let Some(handle) = self.handle.take() {
                    // Finished: join returns at once. A panic is ignored (the
                    // captured data so far is still in `capture`).
                    let _ = handle.join();
                }
            }
        }
        self.handle.is_none() || self.abandoned
    }

    pub(super) fn snapshot(&self) -> (Vec<u8>, u64) {
        let c = lock(&self.capture);
        (c.tail.to_vec(), c.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_buffer_keeps_last_bytes_in_order() {
        let mut t = TailBuffer::new(5);
        t.push(b"ab");
        assert_eq!(t.to_vec(), b"ab");
        t.push(b"cde");
        assert_eq!(t.to_vec(), b"abcde");
        t.push(b"fg");
        assert_eq!(t.to_vec(), b"cdefg");
        t.push(b"hijk");
        assert_eq!(t.to_vec(), b"ghijk");
        t.push(b"0123456789");
        assert_eq!(t.to_vec(), b"56789");
        t.push(b"x");
        assert_eq!(t.to_vec(), b"6789x");
        for b in b"abcdefghijklmnopq" {
            t.push(&[*b]);
        }
        assert_eq!(t.to_vec(), b"mnopq");
    }
}
