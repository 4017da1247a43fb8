//! A Kubernetes Service on loopback: a TCP balancer that spreads new
//! connections over replicas in turn, skipping those that are down. Taking a
//! replica down cuts its established connections at once, as a process
//! killed with SIGKILL does to its peers; it comes back with `revive`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

#[derive(Default)]
struct Replicas {
    addrs: Vec<SocketAddr>,
    down: Vec<bool>,
    /// Established connections, by replica.
    connections: Vec<Vec<AbortHandle>>,
    next: usize,
}

pub struct Balancer {
    pub addr: SocketAddr,
    replicas: Arc<Mutex<Replicas>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
        for handles in &self.lock().connections {
            handles.iter().for_each(AbortHandle::abort);
        }
    }
}

impl Balancer {
    pub async fn start(addrs: Vec<SocketAddr>) -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let replicas = Arc::new(Mutex::new(Replicas {
            down: vec![false; addrs.len()],
            connections: vec![Vec::new(); addrs.len()],
            addrs,
            next: 0,
        }));
        let serving = replicas.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let replicas = serving.clone();
                tokio::spawn(async move { route(replicas, client).await });
            }
        });
        Balancer {
            addr,
            replicas,
            task,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Replicas> {
        self.replicas.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The replica is gone: its connections are cut, none are made to it.
    pub fn kill(&self, replica: usize) {
        let mut replicas = self.lock();
        if let Some(down) = replicas.down.get_mut(replica) {
            *down = true;
        }
        if let Some(handles) = replicas.connections.get_mut(replica) {
            handles.drain(..).for_each(|h| h.abort());
        }
    }

    pub fn revive(&self, replica: usize) {
        if let Some(down) = self.lock().down.get_mut(replica) {
            *down = false;
        }
    }

    pub fn replicas(&self) -> usize {
        self.lock().addrs.len()
    }
}

/// Connects the client to the next replica that is up (none: the client's
/// connection is closed, as a Service without endpoints refuses it).
async fn route(replicas: Arc<Mutex<Replicas>>, mut client: TcpStream) {
    let candidates: Vec<(usize, SocketAddr)> = {
        let mut r = replicas.lock().unwrap_or_else(|p| p.into_inner());
        let n = r.addrs.len();
        let start = r.next;
        r.next = (start + 1) % n.max(1);
        (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| !r.down[i])
            .map(|i| (i, r.addrs[i]))
            .collect()
    };
    for (replica, addr) in candidates {
        let Ok(mut server) = TcpStream::connect(addr).await else {
            continue;
        };
        let pipe = tokio::spawn(async move {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        });
        let mut r = replicas.lock().unwrap_or_else(|p| p.into_inner());
        if r.down[replica] {
            pipe.abort();
        } else {
            r.connections[replica].retain(|h| !h.is_finished());
            r.connections[replica].push(pipe.abort_handle());
        }
        return;
    }
}
