//! Two hosts on one machine: network namespaces joined by a veth pair, for
//! measuring (and testing) a link between nodes that is a real network
//! interface rather than loopback. Made for a run (root only) and removed
//! after it.

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::process::Command;

use anyhow::{bail, Context as _};

/// Two namespaces, `a` and `b`, with one end of a veth pair each and an
/// address in 198.18.0.0/15 (the range set aside for benchmarking
/// networks); removed on drop.
pub struct Veth {
    names: [String; 2],
    addrs: [Ipv4Addr; 2],
    devices: [String; 2],
}

impl Veth {
    /// Makes the namespaces and the pair.
    ///
    /// # Errors
    /// Not root, no `ip`, or the kernel refuses (in a container without
    /// the capability).
    pub fn make() -> anyhow::Result<Veth> {
        // SAFETY: getuid has no preconditions.
        if unsafe { libc::getuid() } != 0 {
            bail!("network namespaces need root");
        }
        let tag = std::process::id() % 60_000;
        let veth = Veth {
            names: ["a", "b"].map(|h| format!("atoll-{tag}-{h}")),
            addrs: [1, 2].map(|i| Ipv4Addr::new(198, 19, (tag % 250) as u8, i)),
            devices: ["a", "b"].map(|h| format!("v{h}{tag}")),
        };
        let devices = &veth.devices;
        for n in &veth.names {
            ip(&["netns", "add", n])?;
        }
        ip(&[
            "link",
            "add",
            &devices[0],
            "type",
            "veth",
            "peer",
            "name",
            &devices[1],
        ])?;
        for (i, dev) in devices.iter().enumerate() {
            let ns = veth.names[i].as_str();
            let addr = format!("{}/24", veth.addrs[i]);
            ip(&["link", "set", dev, "netns", ns])?;
            ip(&["-n", ns, "addr", "add", &addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(veth)
    }

    /// Limits both ends of the pair to `mbit` Mbit/s (a token bucket,
    /// `tc ... tbf`): a link slower than the machine's memory, as a real
    /// network between hosts is, where loopback and a bare pair move bytes
    /// as fast as the two cores can copy them.
    ///
    /// # Errors
    /// No `tc` (iproute2), or a kernel without the `tbf` queue discipline.
    pub fn shape(&self, mbit: u32) -> anyhow::Result<()> {
        let rate = format!("{mbit}mbit");
        // The bucket holds what the link sends in one 4 ms timer tick (at
        // HZ=250), so that the rate is reached between ticks.
        let burst = (u64::from(mbit) * 1_000_000 / 8 / 250)
            .max(64 << 10)
            .to_string();
        for (ns, dev) in self.names.iter().zip(&self.devices) {
            run(
                "tc",
                &[
                    "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", &rate, "burst",
                    &burst, "latency", "5ms",
                ],
            )?;
        }
        Ok(())
    }

    /// Host `i`'s address.
    pub fn addr(&self, i: usize) -> IpAddr {
        self.addrs[i].into()
    }

    /// Host `i`'s namespace, for `ip netns exec NAME`.
    pub fn namespace(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Cuts host `i`'s end of the pair (`up`: false), or restores it.
    pub fn link(&self, i: usize, up: bool) -> anyhow::Result<()> {
        let state = if up { "up" } else { "down" };
        ip(&["-n", &self.names[i], "link", "set", &self.devices[i], state])
    }

    /// Runs `f` on a thread inside host `i`'s namespace: the sockets it
    /// makes, and the threads it starts, belong to that host.
    pub fn within<T: Send>(
        &self,
        i: usize,
        f: impl FnOnce() -> anyhow::Result<T> + Send,
    ) -> anyhow::Result<T> {
        let path = format!("/run/netns/{}", self.names[i]);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
                // SAFETY: `ns` is an open namespace file for the whole call;
                // setns moves the calling thread alone.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    bail!("entering {path}: {}", std::io::Error::last_os_error());
                }
                f()
            })
            .join()
            .expect("a thread in a namespace")
        })
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the pair, and the pair.
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    run("ip", args)
}

/// Runs an iproute2 command.
fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running `{program}` (iproute2)"))?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
