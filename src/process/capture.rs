//! Output capture: one reader thread per pipe drains a job's stdout or stderr concurrently,
//! keeping only the last [`OUTPUT_TAIL_BYTES`] (and counting the rest), so a chatty job can never
//! fill a pipe and block, nor fill the runner's memory.
//!
//! The reader threads are kept for the next job's pipes once theirs reach EOF: a tick draining
//! short jobs would otherwise create and reap two threads per job on the supervisor's thread.

use std::io::{self, Read, Write};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// The pipe reached EOF (or failed): nothing more will be added.
    finished: bool,
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

/// Marks a capture finished when dropped: at EOF, and should the reading panic, so its job is
/// never left waiting for a reader that is gone.
struct FinishOnDrop<'a>(&'a Mutex<Capture>);

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        lock(self.0).finished = true;
    }
}

fn drain(src: &mut dyn Read, buf: &mut [u8], capture: &Mutex<Capture>, stream: Option<StreamTo>) {
    let _finish = FinishOnDrop(capture);
    loop {
        match src.read(buf) {
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

/// A pipe to drain into its capture.
struct Work {
    src: Box<dyn Read + Send>,
    capture: Arc<Mutex<Capture>>,
    stream: Option<StreamTo>,
}

/// Reader threads waiting for a pipe, each reached through its own channel. A thread whose pipe
/// a leftover process holds open stays away until that pipe closes; the pool grows instead.
static IDLE_READERS: Mutex<Vec<Sender<Work>>> = Mutex::new(Vec::new());

/// Hand `work` to an idle reader thread, or to a new one.
fn dispatch(work: Work) -> io::Result<()> {
    let idle = IDLE_READERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .pop();
    let work = match idle {
        // A thread waiting on its channel always receives (it never exits while idle).
        Some(reader) => match reader.send(work) {
            Ok(()) => return Ok(()),
            Err(mpsc::SendError(work)) => work,
        },
        None => work,
    };
    let (tx, rx) = mpsc::channel::<Work>();
    tx.send(work)
        .map_err(|_| io::Error::other("reader channel closed"))?;
    std::thread::Builder::new()
        .name("job-output".to_string())
        .spawn(move || {
            let mut buf = vec![0u8; READ_CHUNK];
            while let Ok(mut work) = rx.recv() {
                drain(&mut *work.src, &mut buf, &work.capture, work.stream);
                // The pipe's end is closed here, before the thread offers itself again.
                drop(work);
                IDLE_READERS
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .push(tx.clone());
            }
        })?;
    Ok(())
}

/// One pipe's reader and what it has captured so far.
pub(super) struct Reader {
    capture: Arc<Mutex<Capture>>,
    pub(super) abandoned: bool,
}

impl Reader {
    pub(super) fn spawn<R: Read + Send + 'static>(
        src: R,
        stream: Option<StreamTo>,
    ) -> io::Result<Reader> {
        let capture = Arc::new(Mutex::new(Capture {
            tail: TailBuffer::new(OUTPUT_TAIL_BYTES),
            total: 0,
            finished: false,
        }));
        dispatch(Work {
            src: Box::new(src),
            capture: Arc::clone(&capture),
            stream,
        })?;
        Ok(Reader {
            capture,
            abandoned: false,
        })
    }

    /// True once the reader reached EOF or was abandoned. Never blocks.
    pub(super) fn settled(&mut self) -> bool {
        self.abandoned || lock(&self.capture).finished
    }

    pub(super) fn snapshot(&self) -> (Vec<u8>, u64) {
        let c = lock(&self.capture);
        (c.tail.to_vec(), c.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settle(reader: &mut Reader) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !reader.settled() {
            assert!(std::time::Instant::now() < deadline, "reader never settled");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Readers reuse threads: each pipe's capture is its own, complete, whichever thread read it,
    /// and a pipe held open by someone else keeps only its own reader waiting.
    #[test]
    fn each_reader_captures_its_own_pipe_while_another_stays_open() {
        let (held_read, held_write) = std::io::pipe().expect("pipe");
        let mut held = Reader::spawn(held_read, None).expect("reader");
        for round in 0..50u64 {
            let mut readers: Vec<(Vec<u8>, Reader)> = (0..4)
                .map(|i| {
                    let data = format!("round {round} pipe {i}\n")
                        .repeat(1 + i * 1000)
                        .into_bytes();
                    let reader =
                        Reader::spawn(io::Cursor::new(data.clone()), None).expect("reader");
                    (data, reader)
                })
                .collect();
            for (data, reader) in &mut readers {
                settle(reader);
                let (tail, total) = reader.snapshot();
                assert_eq!(total, data.len() as u64);
                assert_eq!(tail, data[data.len().saturating_sub(OUTPUT_TAIL_BYTES)..]);
            }
        }
        assert!(!held.settled(), "its pipe is still open");
        (&held_write).write_all(b"late").expect("write");
        drop(held_write);
        settle(&mut held);
        assert_eq!(held.snapshot(), (b"late".to_vec(), 4));
    }

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
