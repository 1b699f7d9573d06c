//! Frames off a connection between nodes (what the links carry: kernel
//! messages, hellos, pings) and off the daemon's socket (requests).

use std::io::{self, Read};

use atoll_abi::{Errno, KernelId, Pid};
use atoll_kernel::{IpcMsg, NocMsg, Packet, ReplyTo};
use atoll_noc::net::frame::{self, Frames};
use atoll_noc::net::link::MAX_CONTROL;
use atoll_noc::net::{Lane, Member, Wire};
use atoll_node::daemon::{self, Request};
use atoll_node::JobSpec;

use crate::Outcome;

/// What a node's links carry.
type NodeWire = Wire<Packet>;

pub fn run(data: &[u8]) -> Outcome {
    let link = link(data);
    let read = whole_frame(data, |r| frame::read::<NodeWire>(r, MAX_CONTROL).is_ok());
    assert_eq!(
        link, read,
        "a link and a blocking read disagree on the first frame"
    );
    // A connection's first frame, read before the link knows the peer.
    let hello = whole_frame(data, |r| frame::read::<Wire<()>>(r, MAX_CONTROL).is_ok());
    let request = whole_frame(data, |r| {
        matches!(daemon::read_frame::<Request>(r), Ok(Some(_)))
    });
    if read || hello || request {
        Outcome::Accepted
    } else {
        Outcome::Refused
    }
}

/// A control lane's way: the bytes arrive in two parts, and frames are cut
/// from them as they come, until one does not decode. Says whether the
/// first frame was taken.
fn link(data: &[u8]) -> bool {
    let mut frames = Frames::new(MAX_CONTROL);
    let (first, second) = data.split_at(data.len() / 2);
    let mut taken = 0;
    for part in [first, second] {
        assert!(frames
            .fill(&mut Arrival(part))
            .expect("memory reads do not fail"));
        loop {
            match frames.take::<NodeWire>() {
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

/// What links carry (kernel messages, one with bulk bytes as its tail, two
/// frames in a row, the handshake and the rest of the link's own), and
/// requests as the daemon's clients send them.
pub fn seeds() -> Vec<Vec<u8>> {
    let pid = Pid::new(KernelId::new(0, 1), 5, 0);
    let peer = Pid::new(KernelId::new(1, 0), 2, 7);
    let kernel = |msg| {
        let wire = NodeWire::Kernel {
            from: peer.home,
            to: pid.home,
            msg: Packet::new(msg),
            bulk: false,
        };
        frame::encode(&wire).expect("messages encode")
    };
    let kernels = [
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
    .map(kernel);
    let mut seeds = kernels.to_vec();
    seeds.push([kernels[0].clone(), kernels[3].clone()].concat());
    let tail = b"\0\x01tail";
    let bulk = NodeWire::Kernel {
        from: peer.home,
        to: pid.home,
        msg: Packet::new(NocMsg::Ipc(IpcMsg::Watch {
            to: pid,
            watcher: peer,
        })),
        bulk: true,
    };
    let mut bulk = frame::encode_head(&bulk, tail.len()).expect("messages encode");
    bulk.extend_from_slice(tail);
    seeds.push(bulk);
    let member = Member {
        name: "n1".into(),
        node: 1,
        incarnation: 0x5eed,
        kernels: 2,
        addr: "127.0.0.1:7001".parse().expect("an address"),
    };
    let own = [
        NodeWire::Hello {
            member: member.clone(),
            lane: Lane::Control,
            assign: true,
        },
        NodeWire::Welcome {
            member: member.clone(),
            node: 2,
            members: vec![member.clone()],
        },
        NodeWire::Refused("not a member".into()),
        NodeWire::Ping,
        NodeWire::Joined(member),
        NodeWire::Leaving,
    ];
    seeds.extend(
        own.iter()
            .map(|w| frame::encode(w).expect("messages encode")),
    );
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
