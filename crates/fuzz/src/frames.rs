//! Frames off a link between nodes (kernel messages) and off the daemon's
//! socket (requests).

use std::io::{self, Read};

use atoll_abi::{Errno, KernelId, Pid};
use atoll_kernel::{IpcMsg, NocMsg, Packet, ReplyTo};
use atoll_noc::net::frame::{self, Frames};
use atoll_node::daemon::{self, Request};
use atoll_node::JobSpec;

use crate::Outcome;

/// The largest frame a link takes here (a control link's order of size).
const MAX: u32 = 1 << 20;

pub fn run(data: &[u8]) -> Outcome {
    let link = link(data);
    let read = whole_frame(data, |r| frame::read::<Packet>(r, MAX).is_ok());
    assert_eq!(
        link, read,
        "a link and a blocking read disagree on the first frame"
    );
    let request = whole_frame(data, |r| {
        matches!(daemon::read_frame::<Request>(r), Ok(Some(_)))
    });
    if read || request {
        Outcome::Accepted
    } else {
        Outcome::Refused
    }
}

/// A link's way: the bytes arrive in two parts, and frames are cut from
/// them as they come, until one does not decode. Says whether the first
/// frame was taken.
fn link(data: &[u8]) -> bool {
    let mut frames = Frames::new(MAX);
    let (first, second) = data.split_at(data.len() / 2);
    let mut taken = 0;
    for part in [first, second] {
        assert!(frames
            .fill(&mut Arrival(part))
            .expect("memory reads do not fail"));
        loop {
            match frames.take::<Packet>() {
                Ok(Some(_)) => taken += 1,
                Ok(None) => break,
                Err(_) => return taken > 0,
            }
        }
    }
    taken > 0
}

/// Reads one frame off `data` with `read`. When it is taken, the same
/// frame one byte short must not be: a cut frame is never taken whole.
fn whole_frame(data: &[u8], read: impl Fn(&mut &[u8]) -> bool) -> bool {
    let mut rest = data;
    if !read(&mut rest) {
        return false;
    }
    let used = data.len() - rest.len();
    assert!(
        !read(&mut &data[..used - 1]),
        "a frame of {used} bytes was taken cut short"
    );
    true
}

/// Bytes that have arrived on a non-blocking connection: then it would
/// block.
struct Arrival<'a>(&'a [u8]);

impl Read for Arrival<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.0.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.0.read(buf)
    }
}

/// Kernel messages as a link frames them (one with a tail, two in a row),
/// and requests as the daemon's clients send them.
pub fn seeds() -> Vec<Vec<u8>> {
    let pid = Pid::new(KernelId::new(0, 1), 5, 0);
    let peer = Pid::new(KernelId::new(1, 0), 2, 7);
    let packets = [
        NocMsg::Input {
            pid,
            bytes: b"input".to_vec(),
        },
        NocMsg::ChildExited {
            parent: peer,
            child: pid,
            status: 3,
        },
        NocMsg::Kill {
            target: pid,
            signal: 9,
            reply_to: ReplyTo::Process(peer),
            domain: None,
        },
        NocMsg::Ipc(IpcMsg::Notify {
            to: pid,
            from: peer,
            domain: None,
            seq: 11,
        }),
        NocMsg::Ipc(IpcMsg::Done {
            to: peer,
            seq: 12,
            result: Err(Errno::Again),
        }),
    ]
    .map(|msg| frame::encode(&Packet::new(msg)).expect("messages encode"));
    let mut seeds = packets.to_vec();
    let mut with_tail = frame::encode_head(
        &Packet::new(NocMsg::Ipc(IpcMsg::Watch {
            to: pid,
            watcher: peer,
        })),
        6,
    )
    .expect("messages encode");
    with_tail.extend_from_slice(b"\0\x01tail");
    seeds.push(with_tail);
    seeds.push([packets[0].clone(), packets[3].clone()].concat());
    let job = JobSpec {
        program: "/bin/prog.wasm".into(),
        args: vec!["prog".into(), "-x".into()],
        env: vec!["A=1".into()],
        preopens: vec![],
        kernel: Some(KernelId::new(0, 1)),
        prepare: true,
        domain: Some("d".into()),
        wander: false,
        ranks: None,
        limits: Default::default(),
        pin: false,
    };
    let requests = [
        Request::Run(job),
        Request::Ps,
        Request::Migrate {
            pid,
            to: KernelId::new(1, 0),
            mode: None,
        },
        Request::Input(b"stdin".to_vec()),
    ];
    for request in &requests {
        let mut frame = Vec::new();
        daemon::write_frame(&mut frame, request).expect("requests encode");
        seeds.push(frame);
    }
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_seed_is_a_frame_taken_whole() {
        for seed in seeds() {
            assert_eq!(run(&seed), Outcome::Accepted);
        }
    }
}
