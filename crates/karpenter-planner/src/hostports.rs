//! Host ports a node's pods have taken. Two pods conflict on the same port
//! and protocol when their host IPs are equal or either is the wildcard.

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub ip: String,
    pub port: i32,
    pub protocol: String,
}

impl HostPort {
    fn is_wildcard(&self) -> bool {
        self.ip.is_empty() || self.ip == "0.0.0.0" || self.ip == "::"
    }

    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.is_wildcard() || other.is_wildcard())
    }
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ip = if self.ip.is_empty() {
            "0.0.0.0"
        } else {
            &self.ip
        };
        write!(f, "{ip}:{}/{}", self.port, self.protocol)
    }
}

#[derive(Clone, Debug, Default)]
pub struct HostPortUsage {
    used: Vec<HostPort>,
}

impl HostPortUsage {
    pub fn conflict<'a>(&self, ports: &'a [HostPort]) -> Option<&'a HostPort> {
        ports
            .iter()
            .find(|port| self.used.iter().any(|used| used.conflicts(port)))
    }

    pub fn add(&mut self, ports: &[HostPort]) {
        self.used.extend_from_slice(ports);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(ip: &str, port: i32, protocol: &str) -> HostPort {
        HostPort {
            ip: ip.into(),
            port,
            protocol: protocol.into(),
        }
    }

    #[test]
    fn wildcard_conflicts_with_every_ip_on_the_same_port_and_protocol() {
        let mut usage = HostPortUsage::default();
        usage.add(&[port("", 80, "TCP")]);
        assert!(usage.conflict(&[port("10.0.0.1", 80, "TCP")]).is_some());
        assert!(usage.conflict(&[port("", 80, "UDP")]).is_none());
        assert!(usage.conflict(&[port("", 81, "TCP")]).is_none());
        let mut specific = HostPortUsage::default();
        specific.add(&[port("10.0.0.1", 80, "TCP")]);
        assert!(specific.conflict(&[port("10.0.0.2", 80, "TCP")]).is_none());
    }
}
