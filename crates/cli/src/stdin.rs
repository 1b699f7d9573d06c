//! atoll's own standard input, read for a job: on a thread of its own, one
//! read per read of the job's processes, so that a read waiting for the
//! user never holds up the job's output, and nothing is read before a
//! process asks (a pipe's writer is held back by the program's pace).

use std::io::Read;
use std::sync::mpsc::{self, Sender};

/// What to do with the bytes one read got (none: end of file).
type Deliver = Box<dyn FnOnce(Vec<u8>) + Send>;

/// The reading thread, started by the first read.
#[derive(Default)]
pub struct StdinReader {
    requests: Option<Sender<(usize, Deliver)>>,
}

impl StdinReader {
    /// Reads at most `max` bytes of stdin, then hands them to `deliver`.
    pub fn read(&mut self, max: usize, deliver: impl FnOnce(Vec<u8>) + Send + 'static) {
        let requests = self.requests.get_or_insert_with(start);
        if let Err(mpsc::SendError((_, deliver))) = requests.send((max, Box::new(deliver))) {
            deliver(Vec::new());
        }
    }
}

fn start() -> Sender<(usize, Deliver)> {
    let (tx, rx) = mpsc::channel::<(usize, Deliver)>();
    let read = move || {
        let mut stdin = std::io::stdin().lock();
        for (max, deliver) in rx {
            let mut buf = vec![0; max];
            let n = loop {
                match stdin.read(&mut buf) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // An unreadable stdin is, to the program, one that ended.
                    result => break result.unwrap_or(0),
                }
            };
            buf.truncate(n);
            deliver(buf);
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("atoll-stdin".into())
        .spawn(read)
    {
        tracing::warn!("cannot read stdin for the job: {e}");
    }
    tx
}
